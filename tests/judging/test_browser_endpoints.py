"""An admin, in chromium, adds a model endpoint in /judging/, tests its connection against the
fake OpenAI server (latency and the model the server named are shown), and launches a judge run
whose cost estimate shows a price; the endpoint pages pass axe and fit a 360 px screen.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth import get_user_model

from annotation.models import Rating
from judging.models import ModelEndpoint, Run
from tests.axe import serious_axe_violations
from tests.conftest import SCREENSHOTS
from tests.factories import case_context, case_reply, study_make
from tests.fakes.llm_server import FakeLLMServer
from tests.second_factor import browser_sign_in, totp_enrol

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

KEY = "sk-proj-browser-test-key-0123456789abcdef"
PASSWORD = "root-pw-long-enough-1"


@pytest.fixture
def provider():
    with FakeLLMServer(api_key=KEY, models={"gpt-4o": "gpt-4o-2024-08-06"}) as server:
        yield server


def sign_in(page) -> None:
    user = get_user_model().objects.create_superuser("root", "root@example.org", PASSWORD)
    totp_enrol(user)
    browser_sign_in(page, "root", PASSWORD, second_factor=True)


def test_admin_adds_tests_and_launches_on_an_endpoint(
    django_db_setup, chromium, live_server, provider, eager_celery
):
    study_make(
        name="Endpoint study", conversations=2, responders=("llama_3",), context=case_context,
        text=case_reply,
    )  # fmt: skip
    # The admin's own browser enforces the Content-Security-Policy (htmx included).
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}
    )
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
    )

    def axe(url: str, *, width: int, test_button: bool = False) -> list:
        """Serious axe violations of `url` at `width`, in a second context of the same session
        that bypasses the policy only so that axe can be injected."""
        checker = chromium.new_context(
            base_url=live_server.url,
            viewport={"width": width, "height": 800},
            bypass_csp=True,
            storage_state=context.storage_state(),
        )
        try:
            other = checker.new_page()
            other.goto(url)
            if test_button:
                other.get_by_role("button", name=re.compile("Test connection")).first.click()
                other.locator(".test-result p").first.wait_for()
            assert other.evaluate("document.documentElement.scrollWidth") <= width, url
            return serious_axe_violations(other)
        finally:
            checker.close()

    try:
        sign_in(page)
        page.goto("/judging/")
        page.click("text=Model endpoints")
        page.click("text=Add an endpoint")
        page.fill("#id_name", "GPT-4o judge")
        page.select_option("#id_provider", "openai")
        page.fill("#id_model", "gpt-4o")
        page.fill("#id_family", "openai")
        page.fill("#id_base_url", provider.openai_base_url)
        page.fill("#id_api_key", KEY)
        # Prices left blank: gpt-4o is in the list-price table.
        with page.expect_navigation():
            page.click("#endpoint-form button[type=submit]")
        endpoint = ModelEndpoint.objects.get(name="GPT-4o judge")
        assert KEY not in page.content()
        row = page.locator(f"#endpoint-{endpoint.pk}")
        assert "list price" in row.inner_text()

        row.get_by_role("button", name=re.compile("Test connection")).click()
        result = page.locator(f"#test-{endpoint.pk}")
        result.locator("text=answered in").wait_for()
        text = result.inner_text()
        assert re.search(r"Model gpt-4o-2024-08-06 answered in \d+ ms", text), text
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "endpoints.png"), full_page=True)

        # Nothing wider than the screen at 360 px, and no serious axe violation, at both widths.
        for width in (360, 1280):
            assert axe("/judging/endpoints/", width=width, test_button=True) == []
            assert axe(f"/judging/endpoints/{endpoint.pk}/", width=width) == []
            assert axe("/judging/endpoints/new/", width=width) == []

        page.goto("/judging/runs/new/judge/")
        assert "GPT-4o judge" in page.inner_text("#usable-endpoints")
        page.select_option("#id_study", label="Endpoint study")
        # The only endpoint is chosen already; the estimate follows the form as it is filled.
        assert page.locator("#id_endpoint option:checked").inner_text() == "GPT-4o judge"
        page.select_option("#id_subset", "all")
        page.locator("#estimate-immediate").wait_for()
        immediate = page.inner_text("#estimate-immediate")
        batch = page.inner_text("#estimate-batch")
        assert re.fullmatch(r"0\.\d{4} USD", immediate), immediate
        assert re.fullmatch(r"0\.\d{4} USD", batch), batch
        assert "list prices as of" in page.inner_text("section.estimate")
        page.click("details.advanced summary")
        page.fill("#id_concurrency", "2")
        page.fill("#id_parallel_tasks", "1")
        page.click("#launch")
        page.wait_for_url("**/judging/runs/*/")
        run = Run.objects.get()
        assert run.endpoint_id == endpoint.pk
        assert f"estimated {immediate} immediate, {batch} batch" in page.inner_text("main")
        page.wait_for_selector(".status-done", timeout=60_000)
        assert Rating.objects.filter(run=run, status=Rating.Status.COMPLETE).count() == 2
        assert re.search(r"cost so far 0\.\d{4} USD", page.inner_text("main"))
        page.goto("/judging/")
        assert "Done" in page.inner_text("main") and "failed" not in page.inner_text("main")
        assert not errors
    finally:
        context.close()
