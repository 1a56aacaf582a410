"""Edits survive a reload mid-save in real chromium: the page keeps unsent edits in localStorage
and sends them on the next load, where the server's edit clock keeps the newest value."""

import json
import re

import pytest
from playwright.sync_api import expect

from annotation.models import (
    Conversation,
    LabelAnnotation,
    Rating,
    RatingChange,
    Score,
    Study,
)
from annotation.services import assignments_create, study_get_or_create
from tests.factories import RESPONDERS, clinician_make, study_make
from tests.second_factor import browser_sign_in

from .conftest import tab_to, wait_saved

# Also run on SQLite by bin/test (marker portable): the embedded default must keep edits too.
pytestmark = [
    pytest.mark.browser,
    pytest.mark.portable,
    pytest.mark.django_db(transaction=True),
]

ATTRIBUTES = 7
SAVES = re.compile(r"/rate/[^/]+/(save|labels)$")  # the score/rationale and label autosaves


def _login(page, name: str) -> None:
    browser_sign_in(page, name, f"{name}-password-1")


def _unsent(page) -> str:
    return page.evaluate(
        "Object.keys(localStorage).filter(k => k.startsWith('mentalbench.unsent:'))"
        ".map(k => localStorage.getItem(k)).join('')"
    )


def _until(page, ready, timeout_ms: int = 15000) -> None:
    """Lets the page run until ready() holds: a fixed pause is too short on a loaded machine,
    where the page's timers and requests come late."""
    for _ in range(timeout_ms // 50):
        if ready():
            return
        page.wait_for_timeout(50)
    assert ready()


class SaveJam:
    """Jams the page's save requests until it is reloaded, which then still says "Saving…":
    with `deliver`, every other request goes through; the others, or all without `deliver`, stay
    in flight, never answered, until the reload cancels them."""

    def __init__(self, page, *, deliver: bool) -> None:
        self.page, self.deliver, self.seen, self.held = page, deliver, 0, []

    def __enter__(self) -> "SaveJam":
        self.page.route(SAVES, self._handle)
        return self

    def _handle(self, route) -> None:
        self.seen += 1
        if self.deliver and self.seen % 2:
            route.continue_()
        else:
            self.held.append(route)  # never answered: still in flight at the reload

    def __exit__(self, *exc) -> None:
        self.page.unroute(SAVES, self._handle)


def test_reload_mid_save_keeps_every_score_and_rationale(django_db_setup, page, live_server):
    study = study_make(name="Unsent study", conversations=1, responders=RESPONDERS[:2])
    rater = clinician_make(username="ida", password="ida-password-1")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    _login(page, "ida")
    page.goto(f"/rate/{assignment.token}/")
    page.on("dialog", lambda dialog: dialog.accept())  # "leave the page?" while saves pend

    wanted = {card: [(card + a) % 5 + 1 for a in range(ATTRIBUTES)] for card in (0, 1)}
    with SaveJam(page, deliver=True) as jam:
        for card, scores in wanted.items():
            tab_to(page, f"#response-{card} input[type=radio]")
            for score in scores:
                page.keyboard.press(str(score))  # picks and moves to the next attribute
            page.focus(f"#rationale-{card}")
            page.keyboard.type(f"Why card {card}.")
        # Every score, and each rationale (on leaving it, or after the 700 ms pause), goes out
        # into the jam.
        _until(page, lambda: jam.seen >= 2 * ATTRIBUTES + 2)
        assert jam.held
        assert "All changes saved" not in page.inner_text("#save-state")
        unsent = _unsent(page)
        # Blinded tokens and values only: nothing says who wrote a response.
        for key, name, family in RESPONDERS:
            assert key not in unsent and name not in unsent and family not in unsent
        stored_before = Score.objects.filter(rating__assignment=assignment).count()
        assert stored_before < 2 * ATTRIBUTES  # the jam really kept edits from the server
        page.reload()
    wait_saved(page)

    assert _unsent(page) == ""
    for card, scores in wanted.items():
        checked = page.locator(f"#response-{card} input:checked").evaluate_all(
            "els => els.map(e => Number(e.value))"
        )
        assert checked == scores
    items = list(assignment.items.order_by("position"))  # the page's order
    for card, scores in wanted.items():
        rating = Rating.objects.get(assignment=assignment, response=items[card].response)
        stored = dict(rating.scores.values_list("attribute__position", "value"))
        assert [stored[p] for p in sorted(stored)] == scores
        assert rating.rationale == f"Why card {card}."
    # Sent again after the reload, each edit was still stored and audited once.
    changes = RatingChange.objects.filter(rating__assignment=assignment, field="score")
    assert changes.count() == 2 * ATTRIBUTES


def test_a_newer_value_from_another_tab_wins_over_an_unsent_older_edit(
    django_db_setup, page, live_server
):
    study = study_make(name="Unsent two tabs", conversations=1, responders=RESPONDERS[:1])
    rater = clinician_make(username="joe", password="joe-password-1")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    _login(page, "joe")
    page.goto(f"/rate/{assignment.token}/")
    page.on("dialog", lambda dialog: dialog.accept())
    with SaveJam(page, deliver=False) as jam:
        tab_to(page, "#response-0 input[type=radio]")
        page.keyboard.press("2")
        _until(page, lambda: jam.held)
        assert not Score.objects.exists()
        # Meanwhile another tab saves 5 for the same field, later.
        other = page.context.new_page()
        other.goto(f"/rate/{assignment.token}/")
        other.locator('#response-0 input[type=radio][value="5"]').first.check()
        wait_saved(other)
    other.close()
    page.reload()
    expect(page.locator("#save-state .saving")).to_have_count(0, timeout=15000)
    assert Score.objects.get().value == 5  # the older unsent edit did not overwrite it
    assert _unsent(page) == ""


def test_reload_mid_save_keeps_the_distortion_labels(django_db_setup, page, live_server):
    study, _ = study_get_or_create(
        name="Unsent labels", kind=Study.Kind.DISTORTION_LABELLING, label_scheme="ranked"
    )
    Conversation.objects.create(study=study, external_id="u0", context="Nobody ever calls me.")
    rater = clinician_make(username="ana", password="ana-password-1")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    _login(page, "ana")
    page.goto(f"/rate/{assignment.token}/")
    page.on("dialog", lambda dialog: dialog.accept())
    with SaveJam(page, deliver=False) as jam:
        tab_to(page, "#dominant-group input[type=radio]")
        page.keyboard.press("Space")
        page.keyboard.press("ArrowDown")  # Overgeneralization
        tab_to(page, "#secondary-group input[type=radio]")
        for _ in range(10):
            page.keyboard.press("ArrowDown")  # Labeling
        _until(page, lambda: jam.held)  # one in flight; the form queues the newer ones behind it
        stored = LabelAnnotation.objects.filter(rater=rater).values_list("labels", flat=True)
        assert ["Overgeneralization", "Labeling"] not in list(stored)
        assert json.loads(_unsent(page))
        page.reload()
    wait_saved(page)
    annotation = LabelAnnotation.objects.get(rater=rater, conversation__study=study)
    assert annotation.labels == ["Overgeneralization", "Labeling"]
    assert page.is_checked('#secondary-group input[value="Labeling"]')
    assert _unsent(page) == ""


def test_edits_made_after_an_idle_sign_out_are_sent_after_signing_in_again(
    django_db_setup, page, live_server, settings
):
    import time

    from django.contrib.sessions.backends.cached_db import KEY_PREFIX
    from django.contrib.sessions.models import Session
    from django.core.cache import cache

    from accounts.middleware import LAST_SEEN

    study = study_make(name="Idle study", conversations=1, responders=RESPONDERS[:2])
    rater = clinician_make(username="ivo", password="ivo-password-1")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    _login(page, "ivo")
    page.goto(f"/rate/{assignment.token}/")
    tab_to(page, "#response-0 input[type=radio]")
    page.keyboard.press("4")
    wait_saved(page)
    # The ward computer stands idle past SESSION_IDLE_HOURS.
    (session,) = Session.objects.all()
    store = session.get_decoded()
    store[LAST_SEEN] = int(time.time()) - settings.SESSION_IDLE_HOURS * 3600 - 60
    Session.objects.filter(pk=session.pk).update(session_data=Session.objects.encode(store))
    cache.delete(KEY_PREFIX + session.pk)  # sessions are read from the cache first
    page.keyboard.press("2")  # the next attribute: its autosave meets the ended session
    page.wait_for_url("**/accounts/login/**")
    assert "2" in _unsent(page)  # kept in the journal
    page.fill("#id_login", "ivo")
    page.fill("#id_password", "ivo-password-1")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    page.wait_for_url(f"**/rate/{assignment.token}/")
    wait_saved(page)
    assert _unsent(page) == ""
    values = sorted(
        Score.objects.filter(rating__assignment=assignment).values_list("value", flat=True)
    )
    assert values == [2, 4]


def test_saves_while_the_database_restarts_say_retrying_and_are_stored_once_it_is_back(
    django_db_setup, page, live_server, monkeypatch
):
    """The server's side is real (a database error → handler500 → 503 "retrying"), only the
    outage is made here: the save service raises what psycopg raises while PostgreSQL restarts."""
    from django.db import OperationalError

    from annotation import views

    study = study_make(name="Outage study", conversations=1, responders=RESPONDERS[:2])
    rater = clinician_make(username="ola", password="ola-password-1")
    (assignment,) = assignments_create(study=study, clinicians=[rater])
    _login(page, "ola")
    page.goto(f"/rate/{assignment.token}/")

    real_save = views.rating_save
    outage = {"on": True, "refused": 0}

    def save_during_outage(**kwargs):
        if outage["on"]:
            outage["refused"] += 1
            raise OperationalError("terminating connection due to administrator command")
        return real_save(**kwargs)

    monkeypatch.setattr(views, "rating_save", save_during_outage)
    statuses: list[int] = []
    page.on("response", lambda r: SAVES.search(r.url) and statuses.append(r.status))
    wanted = [(a % 5) + 1 for a in range(ATTRIBUTES)]
    tab_to(page, "#response-0 input[type=radio]")
    for score in wanted:
        page.keyboard.press(str(score))
    expect(page.locator("#save-state")).to_contain_text("retrying", timeout=10000)
    for _ in range(100):  # the first refusal shows "retrying"; the others may still be on their way
        if outage["refused"] >= ATTRIBUTES:
            break
        page.wait_for_timeout(100)
    assert outage["refused"] >= ATTRIBUTES
    assert _unsent(page)  # the journal holds every edit the server has not acknowledged
    assert not Score.objects.filter(rating__assignment=assignment).exists()

    outage["on"] = False  # the database is back: the page's own retries go through
    wait_saved(page, timeout=20000)
    assert _unsent(page) == ""
    first = assignment.items.order_by("position").first()
    rating = Rating.objects.get(assignment=assignment, response=first.response)
    stored = dict(rating.scores.values_list("attribute__position", "value"))
    assert [stored[p] for p in sorted(stored)] == wanted
    assert RatingChange.objects.filter(rating=rating, field="score").count() == ATTRIBUTES
    assert 503 in statuses and 500 not in statuses  # "retrying", never an error page
