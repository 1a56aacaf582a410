"""A study lead's whole journey on an empty instance, in Chromium at 360 and 1280 px: import
conversations, invite two clinicians, give them practice and real work, both rate, a top-up,
add an endpoint, launch and finish a judge run, open its results from the run page, release the
study. Every click and keystroke is counted, the lead's and the clinicians' apart; the counts are
printed and written to the scratch directory (docs/lead-journey.md holds them).

The journey moves as a person does: through links, buttons and forms, never by typing a URL
(except the set-password link a clinician receives, which counts as one click)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from judging.models import Run
from tests.conftest import SCREENSHOTS
from tests.fakes.llm_server import FakeLLMServer
from tests.second_factor import totp_code, totp_enrol

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PASSWORD = "lead-password-1234"
KEY = "sk-journey-0123456789abcdefghijklmnop"
ATTRIBUTES = ["Guidance", "Informativeness", "Relevance", "Safety", "Empathy", "Helpfulness",
              "Understanding"]  # fmt: skip
CONVERSATIONS = (
    "id,context,response,gpt4o,claude\n"
    'p1,"I cannot sleep before exams.","That sounds stressful; try a wind-down routine.",'
    '"Try a routine and talk to someone.","Sleep is important."\n'
    'c1,"I feel alone since moving.","Moving is hard; reach out to one new person a week.",'
    '"It is normal; join a club and call old friends.","Just wait."\n'
    'c2,"My boss shouts at me.","That is not okay; note dates and talk to HR.",'
    '"Consider HR and a counsellor.","Ignore it."\n'
)
TOPUP = (
    "id,context,response,llama_3\n"
    'c1,"I feel alone since moving.","Moving is hard; reach out to one new person a week.",'
    '"Try volunteering nearby."\n'
    'c2,"My boss shouts at me.","That is not okay; note dates and talk to HR.",'
    '"Write it down and seek advice."\n'
)
#: The practice conversation's reference: every attribute of every response scores 4.
REFERENCES = "conversation,responder,attribute,score\n" + "".join(
    f"p1,{responder},{attribute},4\n"
    for responder in ("original", "gpt4o", "claude")
    for attribute in ATTRIBUTES
)


class Journey:
    """Counts what each actor does. A select is two clicks (open, choose), an upload two (open
    the file chooser, pick), a link someone receives one."""

    def __init__(self) -> None:
        self.clicks: Counter[str] = Counter()
        self.keys: Counter[str] = Counter()

    def click(self, page, target, who: str, **kwargs) -> None:
        (page.locator(target) if isinstance(target, str) else target).first.click(**kwargs)
        self.clicks[who] += 1

    def fill(self, page, selector: str, text: str, who: str) -> None:
        page.fill(selector, text)
        self.keys[who] += len(text)

    def press(self, page, key: str, who: str) -> None:
        page.keyboard.press(key)
        self.keys[who] += 1

    def select(self, page, selector: str, who: str, **option) -> None:
        page.select_option(selector, **option)
        self.clicks[who] += 2

    def check(self, page, selector: str, who: str) -> None:
        page.check(selector)
        self.clicks[who] += 1

    def upload(self, page, selector: str, path: Path, who: str) -> None:
        page.set_input_files(selector, str(path))
        self.clicks[who] += 2

    def receive(self, page, url: str, who: str) -> None:
        page.goto(url)
        self.clicks[who] += 1

    def nav(self, page, label: str, who: str) -> None:
        """A section of the top bar (on a phone as on a laptop)."""
        self.click(page, page.locator("header.topbar nav a", has_text=label), who)


DOC = Path(__file__).resolve().parents[2] / "docs" / "lead-journey.md"


def _documented_counts() -> dict[str, tuple[int, int]]:
    """The counts docs/lead-journey.md gives: the lead before the study page, the lead now, and
    the clinicians (clicks, keystrokes)."""
    text = DOC.read_text()

    def row(label: str) -> tuple[int, int]:
        found = re.search(
            rf"^\| \**{re.escape(label)}[^|]*\| \**(\d+)\** \| \**(\d+)\** \|$", text, re.M
        )
        assert found, f"docs/lead-journey.md has no row for {label!r}"
        return int(found.group(1)), int(found.group(2))

    return {
        "before": row("the lead, before"),
        "now": row("the lead, now"),
        "clinicians": row("both clinicians together"),
    }


def _shot(page, name: str, width: int) -> None:
    """A picture of the page for docs/lead-journey.md (bin/screenshots puts it there)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"lead-journey-{name}-{width}.png"), full_page=True)


def _study_pk() -> int:
    from annotation.models import Study

    return Study.objects.get(name="Journey study").pk


@pytest.fixture
def provider():
    with FakeLLMServer(api_key=KEY, models={"gpt-4o": "gpt-4o-2024-08-06"}) as server:
        yield server


def _sign_in(journey: Journey, page, username: str, password: str, who: str, *, code: bool) -> None:
    page.goto("/accounts/login/")
    journey.fill(page, "#id_login", username, who)
    journey.fill(page, "#id_password", password, who)
    with page.expect_navigation():
        journey.press(page, "Enter", who)
    if code:
        page.wait_for_url("**/accounts/2fa/authenticate/**")
        journey.fill(page, "input[name=code]", totp_code(), who)
        with page.expect_navigation():
            journey.press(page, "Enter", who)


def _work_through(journey: Journey, page, who: str, tasks: int) -> None:
    """Rate ``tasks`` tasks from wherever the clinician is: the queue's Continue when the page
    is not a task already (after a submit the next task may open by itself)."""
    for _ in range(tasks):
        if not page.locator("#submit-conversation").count():
            if not page.locator("#continue").count():
                journey.nav(page, "My queue", who)
            with page.expect_navigation():
                journey.click(page, "#continue", who)
        _rate_open_conversation(journey, page, who)


def _rate_open_conversation(journey: Journey, page, who: str, score: str = "4") -> None:
    """One keystroke per score from where the page puts the focus, then Enter on Submit."""
    page.locator("#submit-conversation").wait_for()
    fields = page.locator("fieldset.attribute:not([disabled])").count()
    for _ in range(fields):
        journey.press(page, score, who)
    with page.expect_navigation():
        journey.press(page, "Enter", who)


@pytest.mark.parametrize("width", [1280, 360])
def test_a_study_lead_runs_a_study_from_an_empty_instance(
    django_db_setup, chromium, live_server, provider, eager_celery, tmp_path, width
):
    user = get_user_model().objects.create_superuser("lead", "lead@example.org", PASSWORD)
    totp_enrol(user)
    (tmp_path / "conversations.csv").write_text(CONVERSATIONS)
    (tmp_path / "topup.csv").write_text(TOPUP)
    (tmp_path / "references.csv").write_text(REFERENCES)
    journey = Journey()
    contexts = []

    def browser(who: str):
        context = chromium.new_context(
            base_url=live_server.url, viewport={"width": width, "height": 800}
        )
        contexts.append(context)
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(f"{who}: {exc}"))
        return page, errors

    lead, lead_errors = browser("lead")
    try:
        _sign_in(journey, lead, "lead", PASSWORD, "lead", code=True)

        # 1. Import the conversations into a new study, then on to its page.
        journey.nav(lead, "Imports", "lead")
        journey.fill(lead, "#id_new_study", "Journey study", "lead")
        journey.select(lead, "#id_kind", "lead", value="conversations")
        journey.upload(lead, "#id_file", tmp_path / "conversations.csv", "lead")
        with lead.expect_navigation():
            journey.click(lead, "main form button[type=submit]", "lead")
        assert "Journey study" in lead.inner_text("main")
        with lead.expect_navigation():
            journey.click(lead, "#study-page", "lead")

        # 2. Invite two clinicians from the study's page; each gets a one-time set-password
        # link, and the page stays the study's.
        links = {}
        for name in ("dr-ames", "dr-bell"):
            journey.fill(lead, "#id_username", name, "lead")
            journey.fill(lead, "#id_email", f"{name}@example.org", "lead")
            with lead.expect_navigation():
                journey.click(
                    lead, lead.get_by_role("button", name=re.compile("invite", re.I)), "lead"
                )
            links[name] = lead.inner_text("#password-link").strip()
            assert lead.inner_text("h1") == "Journey study"

        # 3. Practice: mark the practice conversation, import its references, give it to both.
        with lead.expect_navigation():
            journey.click(lead, lead.get_by_role("link", name="Training and repeats"), "lead")
        lead.wait_for_selector("textarea[name=conversations]")
        journey.fill(lead, "textarea[name=conversations]", "p1", "lead")
        with lead.expect_navigation():
            journey.click(lead, lead.get_by_role("button", name="Mark as practice"), "lead")
        journey.upload(lead, "input[type=file][name=file]", tmp_path / "references.csv", "lead")
        with lead.expect_navigation():
            journey.click(lead, lead.get_by_role("button", name="Import reference scores"), "lead")
        for name in ("dr-ames", "dr-bell"):
            journey.click(lead, lead.locator("label", has_text=name).locator("input"), "lead")
        with lead.expect_navigation():
            journey.click(lead, lead.get_by_role("button", name="Assign practice"), "lead")

        # 4. Real work: the form's defaults give both clinicians every conversation (agreement
        # needs overlap); only the clinicians are ticked.
        with lead.expect_navigation():
            journey.click(lead, lead.get_by_role("link", name="← Journey study"), "lead")
        assert lead.locator("#id_overlap").input_value() == "2"
        assert lead.locator("#id_overlap_percent").input_value() == "100"
        for name in ("dr-ames", "dr-bell"):
            journey.click(
                lead, lead.locator("form[action$='assign'] label", has_text=name).locator("input"),
                "lead",
            )  # fmt: skip
        with lead.expect_navigation():
            journey.click(lead, lead.get_by_role("button", name="Assign", exact=True), "lead")

        # 5. Both clinicians set a password, practise, then rate their conversations.
        for name in ("dr-ames", "dr-bell"):
            page, errors = browser(name)
            journey.receive(page, links[name], name)
            journey.fill(page, "#id_new_password1", "clinic-pass-9876", name)
            journey.fill(page, "#id_new_password2", "clinic-pass-9876", name)
            with page.expect_navigation():
                journey.press(page, "Enter", name)
            _sign_in(journey, page, name, "clinic-pass-9876", name, code=False)
            _work_through(journey, page, name, 3)  # the practice, then the two conversations
            assert not errors, errors

        # 6. A top-up: a new model's responses to the same conversations, imported from the
        # study's page, then just those given to the clinicians who hold the conversations.
        with lead.expect_navigation():
            journey.click(lead, lead.get_by_role("link", name="Import conversations or ratings"),
                          "lead")  # fmt: skip
        journey.select(lead, "#id_kind", "lead", value="conversations")
        journey.upload(lead, "#id_file", tmp_path / "topup.csv", "lead")
        with lead.expect_navigation():
            journey.click(lead, "main form button[type=submit]", "lead")
        with lead.expect_navigation():
            journey.click(lead, "#study-page", "lead")
        lead.wait_for_selector("#topup-notice")
        with lead.expect_navigation():
            journey.click(lead, "#topup-notice button", "lead")
        for name in ("dr-ames", "dr-bell"):
            page = contexts[1 if name == "dr-ames" else 2].pages[0]
            journey.nav(page, "My queue", name)
            _work_through(journey, page, name, 2)

        # 7. An endpoint for the judge, from the study page's Judges step.
        lead.wait_for_selector("#judges a:has-text('Model endpoints')")
        with lead.expect_navigation():
            journey.click(lead, lead.locator("#judges").get_by_role("link", name="Model endpoints"),
                          "lead")  # fmt: skip
        journey.click(lead, lead.get_by_role("link", name="Add an endpoint"), "lead")
        journey.fill(lead, "#id_name", "GPT-4o judge", "lead")
        journey.select(lead, "#id_provider", "lead", value="openai")
        journey.fill(lead, "#id_model", "gpt-4o", "lead")
        journey.fill(lead, "#id_family", "openai", "lead")
        journey.fill(lead, "#id_base_url", provider.openai_base_url, "lead")
        journey.fill(lead, "#id_api_key", KEY, "lead")
        with lead.expect_navigation():
            journey.click(lead, "#endpoint-form button[type=submit]", "lead")

        # 8. Launch the judge run from the study's page and see it finish.
        journey.nav(lead, "Manage", "lead")
        with lead.expect_navigation():
            journey.click(lead, lead.get_by_role("link", name="Journey study"), "lead")
        lead.wait_for_selector("#launch-judge-run")
        _shot(lead, "study-page", width)
        with lead.expect_navigation():
            journey.click(lead, "#launch-judge-run", "lead")
        assert lead.locator("#id_study option:checked").inner_text() == "Journey study"
        assert lead.locator("#id_endpoint option:checked").inner_text() == "GPT-4o judge"
        lead.wait_for_selector("#estimate-immediate")
        _shot(lead, "run-form", width)
        # Celery runs eagerly here: the launch's answer comes once the run has been worked,
        # which on a loaded two-core machine can outlast Playwright's 30 s for a click.
        with lead.expect_navigation(url="**/judging/runs/*/", timeout=180_000):
            journey.click(lead, "#launch", "lead", no_wait_after=True)
        lead.wait_for_selector(".status-done", timeout=60_000)
        run = Run.objects.get()
        _shot(lead, "run-page", width)

        # 9. Its results, from the run page: the dashboard with this judge.
        with lead.expect_navigation():
            journey.click(lead, lead.get_by_role("link", name=re.compile("dashboard", re.I)),
                          "lead")  # fmt: skip
        lead.wait_for_selector("#coverage")
        assert run.rater.name in lead.inner_text("main")

        # 10. Release the study: a job builds the zip (eagerly here), its page offers it.
        journey.click(
            lead, lead.get_by_role("link", name=re.compile("Publish as a dataset")), "lead"
        )
        with lead.expect_navigation(url="**/analysis/jobs/**", timeout=120_000):
            journey.click(lead, "text=Prepare the release (zip)", "lead", no_wait_after=True)
        with lead.expect_download() as download:
            journey.click(lead, lead.get_by_role("link", name=re.compile(r"Download .*\.zip")),
                          "lead")  # fmt: skip
        assert download.value.suggested_filename.endswith(".zip")
        assert not lead_errors, lead_errors
    except Exception:
        # Where each browser stood when the journey broke: the one clue a CI log can carry.
        for context in contexts:
            for open_page in context.pages:
                print(f"page at failure: {open_page.url}\n{open_page.inner_text('main')[:1500]}")
        raise
    finally:
        for context in contexts:
            context.close()

    counts = {
        "width": width,
        "lead": {"clicks": journey.clicks["lead"], "keys": journey.keys["lead"]},
        "clinicians": {
            "clicks": journey.clicks["dr-ames"] + journey.clicks["dr-bell"],
            "keys": journey.keys["dr-ames"] + journey.keys["dr-bell"],
        },
    }
    print(json.dumps(counts))
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    (SCREENSHOTS / f"lead-journey-{width}.json").write_text(json.dumps(counts))
    # The counts docs/lead-journey.md gives are the ones measured, and fewer than before.
    documented = _documented_counts()
    lead_counts = (counts["lead"]["clicks"], counts["lead"]["keys"])
    assert lead_counts == documented["now"], (lead_counts, documented)
    assert lead_counts[0] < documented["before"][0] and lead_counts[1] < documented["before"][1]
    clinicians = (counts["clinicians"]["clicks"], counts["clinicians"]["keys"])
    assert clinicians == documented["clinicians"], (clinicians, documented)
