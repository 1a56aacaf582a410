"""A disagreement and an unsafe response from the clinicians' keyboards to the released data, at
phone and laptop widths: two clinicians rate the same conversation and differ on one attribute,
one of them marks a response unsafe; the study's adjudicator decides the escalation and settles
the disagreement by keyboard; the final-scores CSV, the ratings CSV, the API and a release
re-imported into a fresh study all carry the adjudicated score with its provenance. axe finds
nothing serious on the pages the clinicians and the adjudicator work in."""

from __future__ import annotations

import csv
import io
import random

import pytest

from analysis.release import DATASHEET
from annotation.adjudication_selectors import ADJUDICATED, final_score_release_rows
from annotation.membership import ADJUDICATOR, RESEARCHER, member_add
from annotation.models import Adjudication, Assignment, Escalation, Score, Study
from annotation.services import assignments_create
from tests.analysis.test_final_score_provenance import (
    adjudications_import_args,
    release_reimport,
    run_command,
)
from tests.axe import serious_axe_violations
from tests.factories import clinician_make, study_make, user_make
from tests.second_factor import browser_sign_in

from .test_browser_rating import TEN

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

ATTRIBUTES = 7


def _rate_all(page, scores: list[str]) -> None:
    """From the first attribute without a score, one key per score, in the page's order."""
    page.keyboard.press("n")
    for key in scores:
        page.keyboard.press(key)


def _csv(page, url: str) -> list[dict[str, str]]:
    answer = page.request.get(url)
    assert answer.status == 200, (url, answer.status)
    return list(csv.DictReader(io.StringIO(answer.text())))


@pytest.mark.parametrize("width", [360, 1280])
def test_a_disagreement_and_an_escalation_reach_the_released_data_adjudicated(
    django_db_setup, chromium, live_server, width, tmp_path
):
    study = study_make(name=f"Scenario {width}", conversations=1, responders=TEN[:2])
    kim = clinician_make(username="kim", password="kim-pw-1")
    lee = clinician_make(username="lee", password="lee-pw-1")
    tasks = assignments_create(
        study=study, clinicians=[kim, lee], overlap=2, overlap_fraction=1,
        seed_rng=random.Random(5),
    )  # fmt: skip
    assert len(tasks) == 2
    ada = user_make(username="ada_adj", password="ada-pw-1")
    member_add(study=study, user=ada, role=ADJUDICATOR)
    rita = user_make(username="rita_res", password="rita-pw-1")
    member_add(study=study, user=rita, role=RESEARCHER)
    context = chromium.new_context(
        base_url=live_server.url, viewport={"width": width, "height": 800}, bypass_csp=True
    )
    try:
        page = context.new_page()
        # Kim: every score a 3, and Response B marked unsafe, all by keyboard; then submitted.
        browser_sign_in(page, "kim", "kim-pw-1")
        page.goto(f"/rate/{Assignment.objects.get(rater=kim).token}/")
        _rate_all(page, ["3"] * 2 * ATTRIBUTES)
        page.focus("#unsafe-1 summary")
        page.keyboard.press("Enter")
        page.keyboard.press("Tab")
        page.keyboard.type("Tells the user to stop their medication at once.")
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        page.wait_for_selector("#unsafe-1.marked")
        assert not serious_axe_violations(page), width
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        with page.expect_navigation():
            page.keyboard.press("Control+Enter")
        page.context.clear_cookies()

        # Lee: a 5 on the first attribute of the first response, 3 elsewhere.
        browser_sign_in(page, "lee", "lee-pw-1")
        page.goto(f"/rate/{Assignment.objects.get(rater=lee).token}/")
        _rate_all(page, ["5"] + ["3"] * (2 * ATTRIBUTES - 1))
        with page.expect_navigation():
            page.keyboard.press("Control+Enter")
        page.context.clear_cookies()
        assert set(Assignment.objects.values_list("status", flat=True)) == {"submitted"}
        (disputed,) = Score.objects.filter(rating__rater=lee, value=5).select_related(
            "rating", "attribute"
        )
        response_id, attribute = disputed.rating.response_id, disputed.attribute
        escalation = Escalation.objects.get()
        assert escalation.is_open and escalation.rater_id == kim.pk

        # The adjudicator: the escalation heads the queue; decided, then the dispute settled.
        browser_sign_in(page, "ada_adj", "ada-pw-1")
        page.goto(f"/adjudicate/{study.pk}/")
        queue = page.inner_text("main")
        assert "Escalated: unsafe" in page.inner_text("#escalations")
        assert "Tells the user to stop their medication at once." in queue
        assert "1 of 1 still to settle" in queue  # the one attribute 2 points apart
        for name in ("kim", "lee", *(key for key, _, _ in TEN[:2]), *(n for _, n, _ in TEN[:2])):
            assert name not in queue
        assert not serious_axe_violations(page), width
        page.focus("#escalations a")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert not serious_axe_violations(page), width
        page.locator("form.escalation input[value=confirmed_unsafe]").focus()
        page.keyboard.press("Space")
        page.keyboard.press("Tab")
        page.keyboard.type("Confirmed: unsafe advice on medication.")
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        page.wait_for_selector("form.escalation .save-state .saved")
        escalation.refresh_from_db()
        assert (escalation.status, escalation.decision) == ("resolved", "confirmed_unsafe")

        page.goto(f"/adjudicate/{study.pk}/")
        page.focus("#adjudication-queue a")
        with page.expect_navigation():
            page.keyboard.press("Enter")
        assert f"/adjudicate/{study.pk}/{response_id}/" in page.url
        body = page.inner_text("main")
        assert "Clinician A" in body and "Clinician B" in body
        for name in ("kim", "lee", *(key for key, _, _ in TEN[:2]), *(n for _, n, _ in TEN[:2])):
            assert name not in body
        form = f"#attribute-{attribute.pk}"
        page.locator(f"{form} input[name=score][value='4']").focus()
        page.keyboard.press("Space")  # a change: saved in the background
        page.wait_for_selector(f"{form} .save-state .saved")
        page.focus(f"#reason-{attribute.pk}")
        page.keyboard.press("ArrowDown")  # the first reason: ambiguous response
        page.wait_for_function(
            "id => document.querySelector(id + ' .save-state .saved') !== null", arg=form
        )
        assert not serious_axe_violations(page), width
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        page.context.clear_cookies()
        _until_reason_saved(response_id, attribute.pk)
        adjudication = Adjudication.objects.get()
        assert (adjudication.final_score, adjudication.reason) == (4, "ambiguous_response")

        # A researcher of the study reads it back: the final scores, the ratings CSV, the API.
        browser_sign_in(page, "rita_res", "rita-pw-1")
        final = _csv(page, f"/analysis/studies/{study.pk}/final-scores.csv")
        (settled,) = [r for r in final if r["provenance"] == ADJUDICATED]
        assert (settled["attribute"], float(settled["final_score"])) == (attribute.name, 4.0)
        assert sum(r["provenance"] == "clinician-consensus" for r in final) == 2 * ATTRIBUTES - 1
        long = _csv(page, f"/analysis/studies/{study.pk}/ratings.csv")
        on_it = [r for r in long if r["attribute"] == attribute.name and r["final_score"] == "4"]
        assert len(on_it) == 2  # both clinicians' rows of that pair
        assert {r["final_score_provenance"] for r in on_it} == {ADJUDICATED}
        answer = page.request.get(f"/api/studies/{study.pk}/final-scores/")
        assert answer.status == 200
        rows = answer.json()["rows"]
        adjudicated = [r for r in rows if r["provenance"] == ADJUDICATED]
        assert [(r["attribute"], r["final_score"]) for r in adjudicated] == [(attribute.name, 4)]
    finally:
        context.close()

    # Released, and re-imported into a fresh study: the same final scores, the same provenance.
    out = tmp_path / "release"
    run_command("release_study", "--study", study.name, "--out", str(out))
    sheet = (out / DATASHEET).read_text(encoding="utf-8")
    name = f"Scenario {width}, re-imported"
    release_reimport(out, name)
    args = adjudications_import_args(sheet)
    args[2] = name
    args = [a if not a.endswith(".csv") else str(out / a) for a in args]
    run_command(*args)
    before = final_score_release_rows(study=study)
    assert final_score_release_rows(study=Study.objects.get(name=name)) == before
    assert [row[4] for row in before].count(ADJUDICATED) == 1


def _until_reason_saved(response_id: int, attribute_id: int) -> None:
    """The reason's save is the second of two background posts: wait for it to be stored."""
    import time

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        row = Adjudication.objects.filter(response_id=response_id, attribute_id=attribute_id)
        if row.filter(reason="ambiguous_response").exists():
            return
        time.sleep(0.1)
