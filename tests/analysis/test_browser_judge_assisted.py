"""A researcher opens the judge-assisted page on MentalAlign-70k in chromium; the forest plot and
the ranking chart draw from static/ with no page error; the ICC lever shows when asked."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from accounts.roles import RESEARCHER, role_add
from tests.conftest import SCREENSHOTS, mentalalign_get_or_import, require_shared

pytestmark = [pytest.mark.browser, pytest.mark.shared_data, pytest.mark.django_db(transaction=True)]


def test_researcher_opens_the_judge_assisted_page(django_db_setup, live_server, page):
    require_shared()
    study = mentalalign_get_or_import()
    user = get_user_model().objects.create_user("researcher2", password="pw-12345678")
    role_add(user=user, role=RESEARCHER)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    page.goto(f"/accounts/login/?next=/analysis/studies/{study.pk}/")
    page.fill("#id_login", "researcher2")
    page.fill("#id_password", "pw-12345678")
    page.click("button[type=submit]")
    page.wait_for_url(f"**/analysis/studies/{study.pk}/")
    page.click("text=Judge-assisted clinician means and ratings planner")
    page.wait_for_url(f"**/analysis/studies/{study.pk}/judge-assisted/", timeout=120_000)
    page.select_option("#id_share", "10")
    page.click("#ja-apply")
    page.wait_for_url("**share=10**", timeout=120_000)
    drawn = "#chart-ppi_forest[data-drawn='1'] svg, #chart-ppi_forest[data-drawn='1'] canvas"
    page.wait_for_selector(drawn, timeout=60_000)
    design = page.locator("#ja-design").inner_text()
    assert design.startswith("a seeded random 10 % (100) of every conversation with a clinician")
    assert page.locator("#ja-ranking tbody tr").count() == 70
    assert errors == []
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "judge-assisted.png"), full_page=False)
    page.locator("#chart-ppi_forest").screenshot(
        path=str(SCREENSHOTS / "judge-assisted-forest.png")
    )

    ranking = "#chart-ppi_ranking[data-drawn='1'] svg, #chart-ppi_ranking[data-drawn='1'] canvas"
    page.wait_for_selector(ranking, timeout=60_000)
    assert page.locator("#ja-separations tbody tr").count() == 7 * 9  # adjacent places
    page.locator("#chart-ppi_ranking").screenshot(
        path=str(SCREENSHOTS / "judge-assisted-ranking.png")
    )

    page.check("#id_lever")
    page.click("#ja-apply")
    page.wait_for_url("**lever=on**", timeout=120_000)
    page.wait_for_selector("#ja-levers li", timeout=120_000)
    assert page.locator("#ja-levers li").count() == 7
    assert page.locator("#ja-levers li", has_text="Safety for claude-3.7-sonnet + gpt-4o").count()
    assert errors == []
    page.locator("#ja-levers").screenshot(path=str(SCREENSHOTS / "judge-assisted-lever.png"))
