"""A researcher opens the MentalAlign-70k dashboard in chromium; charts draw from static/."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import RESEARCHER, role_add
from tests.conftest import MENTALALIGN_STUDY, SCREENSHOTS, mentalalign_get_or_import, require_shared

pytestmark = [pytest.mark.browser, pytest.mark.shared_data, pytest.mark.django_db(transaction=True)]

CHARTS = ("icc_heatmap", "width_heatmap", "forest", "bias", "figure4")


def _drawn(chart: str) -> str:
    return f"#chart-{chart}[data-drawn='1'] canvas, #chart-{chart}[data-drawn='1'] svg"


def test_researcher_opens_the_mentalalign_dashboard_and_charts_draw(
    django_db_setup, live_server, page
):
    # django_db_setup first: the database must exist before Playwright's event loop starts,
    # or Django refuses to create it from "an async context".
    require_shared()
    study = mentalalign_get_or_import()
    user = get_user_model().objects.create_user("researcher1", password="pw-12345678")
    role_add(user=user, role=RESEARCHER)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))

    page.goto("/accounts/login/?next=/analysis/")
    page.fill("#id_login", "researcher1")
    page.fill("#id_password", "pw-12345678")
    page.click("button[type=submit]")
    page.click(f"text={MENTALALIGN_STUDY}")
    page.wait_for_url(f"**/analysis/studies/{study.pk}/")
    for chart in CHARTS:
        page.wait_for_selector(_drawn(chart), timeout=30_000)
    assert page.locator("text=Verdict per attribute").count() == 1
    assert page.locator("text=Not available: this study has no response texts.").count() == 1
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "dashboard-overview.png"), full_page=False)
    page.locator("#chart-icc_heatmap").locator("xpath=../..").screenshot(
        path=str(SCREENSHOTS / "dashboard-figure2-heatmaps.png")
    )
    page.click("#verdicts > summary")
    page.locator("#verdicts").screenshot(path=str(SCREENSHOTS / "dashboard-verdicts.png"))
    page.locator("#chart-forest").screenshot(path=str(SCREENSHOTS / "dashboard-forest.png"))
    page.locator("#chart-figure4").screenshot(path=str(SCREENSHOTS / "dashboard-figure4.png"))

    # The answer and its charts make the page; the detail tables wait, folded, under their
    # titles, and the contents open the one they name.
    page.click("#verdicts > summary")  # closed again, as a reader finds it
    height = page.evaluate("document.documentElement.scrollHeight")
    print(f"dashboard height at 1280 px: {height} px")
    assert height < 6000, height  # 8,215 px with every table open
    assert not page.locator("#table-calibration").evaluate("d => d.open")
    page.click("nav.toc >> text=Calibration")
    page.wait_for_function("document.getElementById('table-calibration').open")
    assert page.locator("#table-calibration table").is_visible()
    # Every method named on the page is explained on it, and its link opens the explanation.
    page.locator("#chart-forest ~ p a[href='#term-icc']").click()
    page.wait_for_function("document.getElementById('terms').open")
    assert page.locator("#term-icc").is_visible()

    # The as-published switch re-renders the report through htmx and says what it counted.
    page.check("#id_as_published")
    page.wait_for_selector("text=as published: 43 invalid imported clinician cells", timeout=30_000)
    # Redrawn after the swap, off screen (the reader is at the glossary): on a loaded machine
    # the five charts queue behind the report's layout.
    page.wait_for_selector(_drawn("icc_heatmap"), timeout=90_000)
    assert "as_published=on" in page.url
    assert not errors, errors
    # No CDN: every script, style and chart asset came from the platform itself.
    assert all(url.startswith(live_server.url) for url in requested), requested
