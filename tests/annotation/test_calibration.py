"""Rater training, test-retest repeats and time on task (top-ups: test_topup.py)."""

import csv
import io
import random
import re
from datetime import timedelta

import numpy as np
import pytest
from django.urls import reverse
from sklearn.metrics import cohen_kappa_score

from analysis import export
from analysis.retest import consensus_drift, retest_agreement
from analysis.retest_selectors import study_calibration
from analysis.selectors import Filters, coverage, scores_frame
from annotation.models import (
    Assignment,
    Conversation,
    Rating,
    RatingChange,
    ReferenceScore,
    Response,
)
from annotation.retest import retest_schedule
from annotation.selectors import assignments_for_user, next_assignment_for_user
from annotation.services import assignment_submit, assignments_create, rating_save
from annotation.time_on_task import edit_time_shares, response_active_seconds
from annotation.training import (
    ReferenceProblems,
    calibration_settings_set,
    practice_assign,
    practice_conversations_mark,
    reference_csv_rows,
    reference_scores_set,
    training_compare,
    training_outcome_record,
)
from tests.factories import clinician_make, study_make


def _rate_all(assignment, user, score=lambda item, attribute: 3):
    attributes = list(assignment.conversation.study.rubric.attributes.order_by("position"))
    for item in assignment.items.order_by("position"):
        for attribute in attributes:
            rating_save(
                assignment=assignment,
                item_token=item.token,
                user=user,
                attribute_id=attribute.pk,
                score=score(item, attribute),
            )


def _references_csv(study, value=lambda response, attribute: 3) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["conversation", "responder", "attribute", "score"])
    attributes = list(study.rubric.attributes.order_by("position"))
    for response in Response.objects.filter(
        conversation__study=study, conversation__practice=True
    ).select_related("conversation", "responder"):
        for attribute in attributes:
            writer.writerow(
                [
                    response.conversation.external_id,
                    response.responder.key,
                    attribute.name,
                    value(response, attribute),
                ]
            )
    return out.getvalue()


# --- The pass rule --------------------------------------------------------------------------------


def test_training_passes_at_the_mean_limit_and_fails_on_one_score_two_off():
    rule = {"max_mean_abs_diff": 0.75, "max_diff": 2}
    # Mean difference exactly 0.75, none off by 2: passes.
    assert training_compare(np.array([3, 3, 4, 4]), np.array([4, 2, 4, 3]), **rule).passed
    exact = training_compare(np.array([4, 4, 4, 3]), np.array([3, 3, 3, 3]), **rule)
    assert exact.mean_abs_diff == pytest.approx(0.75) and exact.passed
    # One score two points away fails even with a small mean.
    off = training_compare(np.array([5] + [3] * 9), np.array([3] * 10), **rule)
    assert off.mean_abs_diff == pytest.approx(0.2) and off.max_diff == 2 and not off.passed
    # A mean above the limit fails with no large single difference.
    assert not training_compare(np.array([4, 4, 4, 4]), np.array([3, 3, 3, 3]), **rule).passed
    # Nothing compared is never a pass.
    assert not training_compare(np.array([]), np.array([]), **rule).passed


# --- Training end to end --------------------------------------------------------------------------


@pytest.fixture
def training_study(db):
    study = study_make(name="Training study", conversations=4)
    practice_conversations_mark(study=study, external_ids=["c0"])
    return study


def test_reference_csv_problems_name_row_and_column_and_write_nothing(training_study, admin_member):
    text = _references_csv(training_study)
    lines = text.splitlines()
    lines[2] = lines[2].rsplit(",", 1)[0] + ",9"  # off the scale
    lines[3] = "c1," + lines[3].split(",", 1)[1]  # not a practice conversation
    rows = reference_csv_rows(text="\n".join(lines), file="refs.csv")
    with pytest.raises(ReferenceProblems) as caught:
        reference_scores_set(study=training_study, rows=rows, user=admin_member, file="refs.csv")
    problems = caught.value.problems
    assert any("refs.csv, row 3, score: 9 is not on the" in p for p in problems)
    assert any("refs.csv, row 4, conversation: 'c1' is not a practice conversation" in p
               for p in problems)  # fmt: skip
    assert not ReferenceScore.objects.exists()
    with pytest.raises(ReferenceProblems, match="row 1: the header lacks score"):
        reference_csv_rows(text="conversation,responder,attribute\n", file="refs.csv")


def test_a_rated_conversation_cannot_become_practice(study, assignment):
    with pytest.raises(ValueError, match="already assigned or rated as real work.*c0"):
        practice_conversations_mark(study=study, external_ids=[assignment.conversation.external_id])
    assert not Conversation.objects.filter(practice=True).exists()


def test_practice_conversations_are_never_assigned_as_real_work(training_study, clinician):
    created = assignments_create(study=training_study, clinicians=[clinician])
    assert {a.conversation.external_id for a in created} == {"c1", "c2", "c3"}


def test_clinician_trains_first_sees_the_reference_then_gets_real_work(
    training_study, clinician, client, admin_member
):
    rows = reference_csv_rows(text=_references_csv(training_study), file="refs.csv")
    reference_scores_set(study=training_study, rows=rows, user=admin_member)
    assignments_create(study=training_study, clinicians=[clinician])
    (practice,) = practice_assign(study=training_study, clinicians=[clinician])
    user = clinician.user
    # Real work waits: the queue holds the practice conversation only, and it comes first.
    assert list(assignments_for_user(user=user)) == [practice]
    assert next_assignment_for_user(user=user) == practice

    client.force_login(user)
    queue = client.get(reverse("annotation:queue")).content.decode()
    assert "practice" in queue
    _rate_all(practice, user, score=lambda item, attribute: 4)  # every score 1 off the reference
    response = client.post(reverse("annotation:submit", args=[practice.token]))
    assert response["Location"] == reverse("annotation:practice_feedback", args=[practice.token])
    page = client.get(response["Location"]).content.decode()
    anchor = training_study.rubric.attributes.first().levels.get(value=3).anchor
    assert "your scores beside the reference" in page and anchor in page
    assert "Training not passed yet" in page
    assert "Leaky" not in page and "zz-" not in page  # blinding holds in training too
    # Mean difference 1.0 > 0.75: not passed, real work still held back.
    practice.refresh_from_db()
    outcome = clinician.training_outcomes.get()
    assert not outcome.passed and outcome.mean_abs_diff == pytest.approx(1.0)
    assert list(assignments_for_user(user=user)) == [practice]

    # A looser rule and the outcome recorded again: passed, real work appears.
    calibration_settings_set(
        study=training_study, pass_mean_abs_diff=1.0, pass_max_diff=2, retest_count=0, retest_gap=3
    )
    assert training_outcome_record(study=training_study, rater=clinician).passed
    assert len(assignments_for_user(user=user)) == 4

    admin = client
    admin.force_login(admin_member)
    results = admin.get(reverse("annotation:manage_training") + f"?study={training_study.pk}")
    assert results.status_code == 200 and "alice" in results.content.decode()


def test_admin_lets_a_clinician_through(training_study, clinician, client, admin_member):
    reference_scores_set(
        study=training_study,
        rows=reference_csv_rows(text=_references_csv(training_study)),
        user=admin_member,
    )
    assignments_create(study=training_study, clinicians=[clinician])
    practice_assign(study=training_study, clinicians=[clinician])
    client.force_login(admin_member)
    response = client.post(
        reverse("annotation:manage_training"),
        {"study": training_study.pk, "action": "let_through", "rater": clinician.pk},
    )
    assert response.status_code == 302
    outcome = clinician.training_outcomes.get()
    assert outcome.passed and outcome.decided_by == admin_member
    assert len(assignments_for_user(user=clinician.user)) == 4


def test_reference_csv_upload_errors_are_shown_and_nothing_is_saved(
    training_study, client, admin_member
):
    client.force_login(admin_member)
    upload = io.BytesIO(b"conversation,responder,attribute,score\nc0,zz-gpt4o,Nonsense,3\n")
    upload.name = "refs.csv"
    response = client.post(
        reverse("annotation:manage_training"),
        {"study": training_study.pk, "action": "csv", "file": upload},
    )
    assert response.status_code == 422
    assert "refs.csv, row 2, attribute: &#x27;Nonsense&#x27; is not an attribute" in (
        response.content.decode()
    )
    assert not ReferenceScore.objects.exists()


# --- Practice and repeat ratings never enter study data -------------------------------------------


@pytest.fixture
def mixed_study(training_study, clinician, admin_member):
    """One real conversation submitted (all 3s) and one practice conversation submitted (all 5s,
    rationale PRACTICE-ONLY) by the same clinician."""
    reference_scores_set(
        study=training_study,
        rows=reference_csv_rows(text=_references_csv(training_study)),
        user=admin_member,
    )
    (practice,) = practice_assign(study=training_study, clinicians=[clinician])
    _rate_all(practice, clinician.user, score=lambda item, attribute: 5)
    item = practice.items.first()
    rating_save(assignment=practice, item_token=item.token, user=clinician.user,
                rationale="PRACTICE-ONLY")  # fmt: skip
    assignment_submit(assignment=practice, user=clinician.user)
    real = assignments_create(study=training_study, clinicians=[clinician])[0]
    _rate_all(real, clinician.user)
    assignment_submit(assignment=real, user=clinician.user)
    return training_study


def test_practice_ratings_are_absent_from_every_report_and_export(mixed_study, client, researcher):
    study = mixed_study
    frame = scores_frame(study=study)
    assert set(frame["score"]) == {3.0} and set(frame["conversation"]) == {"c1"}
    assert coverage(study=study)["conversations"] == 3  # c1–c3; the practice c0 is not data
    for identified in (False, True):
        long = "".join(export.long_csv(study=study, identified=identified))
        wide = "".join(export.wide_csv(study=study, identified=identified))
        for text in (long, wide):
            assert "PRACTICE-ONLY" not in text
            assert "c0," not in text and "c1," in text
        assert {r["score"] for r in csv.DictReader(io.StringIO(long))} == {"3"}
        wide_rows = list(csv.DictReader(io.StringIO(wide)))
        assert len(wide_rows) == 1 and wide_rows[0]["conversation"] == "c1"
    client.force_login(researcher)
    api = client.get("/api/ratings/?identified=0").json()
    listed = api["results"] if isinstance(api, dict) else api
    assert listed and all(r["conversation"] == "c1" for r in listed)
    practice_rating = Rating.objects.get(response__conversation__practice=True, rationale__gt="")
    assert client.get(f"/api/ratings/{practice_rating.pk}/").status_code == 404
    csv_download = client.get(reverse("analysis:ratings_csv", args=[study.pk]))
    body = b"".join(csv_download.streaming_content).decode()
    assert "PRACTICE-ONLY" not in body and "c1," in body
    dashboard = client.get(reverse("analysis:dashboard", args=[study.pk]))
    assert dashboard.status_code == 200 and "PRACTICE-ONLY" not in dashboard.content.decode()
    api_export = client.get(f"/api/studies/{study.pk}/export/")
    body = (
        b"".join(api_export.streaming_content).decode()
        if api_export.streaming
        else (api_export.content.decode())
    )
    assert "PRACTICE-ONLY" not in body


def test_judge_runs_skip_practice_conversations(mixed_study):
    from annotation.services import judge_rater_get_or_create
    from judging.models import Run
    from judging.services import judge_targets

    judge = judge_rater_get_or_create(name="a-judge", excluded=[])
    targets = judge_targets(
        study_id=mixed_study.pk, rater=judge, subset=Run.Subset.ALL, sample_size=None,
        sample_seed=1,
    )  # fmt: skip
    assert targets and not Response.objects.filter(pk__in=targets, conversation__practice=True)


# --- Test-retest ----------------------------------------------------------------------------------


@pytest.fixture
def retest_study(db):
    study = study_make(name="Calibrated study", conversations=8)
    calibration_settings_set(
        study=study, pass_mean_abs_diff=0.75, pass_max_diff=2, retest_count=2, retest_gap=2
    )
    return study


def _work_through(user, *, score=lambda item, attribute: 3) -> list[Assignment]:
    """Rate and submit the queue in order, as the clinician would; the order of submission."""
    from annotation.calibration import calibration_after_submit

    done = []
    while (following := next_assignment_for_user(user=user)) is not None:
        _rate_all(following, user, score=score)
        submitted = assignment_submit(assignment=following, user=user)
        calibration_after_submit(assignment=submitted)
        done.append(submitted)
    return done


@pytest.mark.slow  # rates a whole calibration study, some of it several times
def test_repeats_come_back_reshuffled_never_adjacent_and_counted_apart(retest_study, clinician):
    assignments_create(study=retest_study, clinicians=[clinician], seed_rng=random.Random(3))
    done = _work_through(clinician.user)
    repeats = [a for a in done if a.kind == Assignment.Kind.RETEST]
    assert len(repeats) == 2 and len(done) == 10
    sequence = [a.conversation_id for a in done]
    for repeat in repeats:
        where = done.index(repeat)
        original = sequence.index(repeat.conversation_id)
        assert where - original >= 3, "at least retest_gap other conversations in between"
        first = Assignment.objects.get(
            rater=clinician, conversation_id=repeat.conversation_id, kind=Assignment.Kind.RATING
        )
        order = lambda a: list(a.items.order_by("position").values_list("response_id", flat=True))  # noqa: E731
        assert order(repeat) != order(first) and sorted(order(repeat)) == sorted(order(first))
    # Stored beside the first ratings, never over them.
    assert Rating.objects.filter(rater=clinician, repeat=1, status="complete").count() == 8
    frame = scores_frame(study=retest_study)
    per_cell = frame.groupby(["conversation", "responder", "rater", "attribute"]).size()
    assert per_cell.max() == 1 and len(frame) == 8 * 4 * retest_study.rubric.attributes.count()
    # Analysed as the latest rating only on request.
    latest = scores_frame(study=retest_study, filters=Filters(clinician_ratings="latest"))
    assert len(latest) == len(frame)
    text = "".join(export.long_csv(study=retest_study, identified=True))
    assert all(row["repeat"] == "0" for row in csv.DictReader(io.StringIO(text)))


def test_a_repeat_looks_like_any_other_conversation(retest_study, clinician, client):
    from annotation.calibration import calibration_after_submit

    assignments_create(study=retest_study, clinicians=[clinician], seed_rng=random.Random(3))
    user = clinician.user
    while (following := next_assignment_for_user(user=user)).kind != Assignment.Kind.RETEST:
        _rate_all(following, user)
        calibration_after_submit(assignment=assignment_submit(assignment=following, user=user))
    client.force_login(user)
    page = client.get(reverse("annotation:rate", args=[following.token])).content.decode()
    queue = client.get(reverse("annotation:queue")).content.decode().lower()
    # A fresh page: the first scores are not shown (nor is anything else about the first time).
    assert not re.search(r"<input[^>]*\schecked", page)
    for text in (page.lower(), queue):
        for hint in ("retest", "repeat", "again", "test-retest", "seen before"):
            assert hint not in text


def test_no_repeats_unless_the_study_asks(study, clinician):
    assignments_create(study=study, clinicians=[clinician])
    done = _work_through(clinician.user)
    assert all(a.kind == Assignment.Kind.RATING for a in done)
    assert retest_schedule(assignment=done[-1]) is None


@pytest.mark.slow  # rates a whole calibration study, some of it several times
def test_retest_agreement_is_sklearns_quadratic_kappa(retest_study, clinician):
    assignments_create(study=retest_study, clinicians=[clinician], seed_rng=random.Random(3))
    rng = random.Random(7)
    _work_through(clinician.user, score=lambda item, attribute: rng.randint(1, 5))
    (row,) = study_calibration(study=retest_study)
    pairs = Rating.objects.filter(rater=clinician, repeat=1)
    first, again = [], []
    for rating in pairs:
        mine = dict(rating.scores.values_list("attribute_id", "value"))
        before = dict(
            Rating.objects.get(
                rater=clinician, response=rating.response, repeat=0
            ).scores.values_list("attribute_id", "value")
        )
        for attribute_id, value in mine.items():
            first.append(before[attribute_id])
            again.append(value)
    expected = cohen_kappa_score(first, again, weights="quadratic", labels=[1, 2, 3, 4, 5])
    assert row.repeats_done == 2 and row.retest.pairs == len(first)
    assert row.retest.kappa.value == pytest.approx(expected)


def test_drift_blocks_and_retest_agreement_pure():
    perfect = retest_agreement([1, 2, 3, 4, 5], [1, 2, 3, 4, 5], labels=range(1, 6))
    assert perfect.kappa.value == pytest.approx(1.0) and perfect.exact == 1.0
    assert retest_agreement([], [], labels=range(1, 6)).pairs == 0
    blocks = consensus_drift([0, 1, 10, 11], [3, 3, 5, 5], [3, 3, 3, 4], block=10)
    assert [(b.first, b.last, b.scores) for b in blocks] == [(1, 10, 2), (11, 20, 2)]
    assert [b.mean_abs_diff for b in blocks] == [0.0, 1.5]


@pytest.mark.slow  # rates a whole calibration study, some of it several times
def test_drift_compares_with_the_other_clinicians(retest_study, clinician, other_clinician):
    assignments_create(
        study=retest_study, clinicians=[clinician, other_clinician], overlap=2, overlap_fraction=1.0
    )
    _work_through(clinician.user, score=lambda item, attribute: 4)
    _work_through(other_clinician.user, score=lambda item, attribute: 3)
    rows = {r.rater.name: r for r in study_calibration(study=retest_study, block=4)}
    assert [b.mean_abs_diff for b in rows["alice"].drift] == [1.0, 1.0]
    assert (
        sum(b.scores for b in rows["alice"].drift) == 8 * 4 * retest_study.rubric.attributes.count()
    )


# --- Time on task ---------------------------------------------------------------------------------


def test_edit_time_is_shared_by_the_gaps_before_each_edit():
    # Assignment 1: A at 0 s, B at 10 s, A at 40 s, B at 1000 s (capped at 120 s).
    shares = edit_time_shares([1, 1, 1, 1, 2], [7, 8, 7, 8, 9], [0, 10, 40, 1000, 5])
    assert shares[(1, 7)] == pytest.approx(30 / 160) and shares[(1, 8)] == pytest.approx(130 / 160)
    assert shares[(2, 9)] == 1.0  # a single edit: all of it
    assert edit_time_shares([], [], []) == {}


def test_time_per_response_adds_up_to_the_conversation_and_reaches_the_export(
    study, assignment, clinician, client, admin_member
):
    _rate_all(assignment, clinician.user)
    assignment_submit(assignment=assignment, user=clinician.user)
    # Spread the audit trail over time, as real edits are, and record the active time.
    changes = list(RatingChange.objects.filter(rating__assignment=assignment, field="score"))
    start = changes[0].changed_at
    for n, change in enumerate(changes):
        RatingChange.objects.filter(pk=change.pk).update(
            changed_at=start + timedelta(seconds=2 * n)
        )
    Assignment.objects.filter(pk=assignment.pk).update(active_seconds=300)
    from django.db.models import Q

    seconds = response_active_seconds(assignments=Q(pk=assignment.pk))
    assert len(seconds) == 4 and sum(seconds.values()) == pytest.approx(300, abs=0.5)
    text = "".join(export.long_csv(study=study, identified=True))
    rows = list(csv.DictReader(io.StringIO(text)))
    # active_seconds after the earlier columns, then the appended final score columns.
    assert list(rows[0]) == list(export.LONG_COLUMNS)
    assert export.LONG_COLUMNS.index("active_seconds") == len(export.LONG_COLUMNS) - 3
    assert all(float(r["active_seconds"]) > 0 for r in rows)
    pseudonymous = list(csv.DictReader(io.StringIO("".join(export.long_csv(study=study)))))
    assert {r["active_seconds"] for r in pseudonymous} == {""}
    client.force_login(admin_member)
    page = client.get(reverse("annotation:manage_time_on_task") + f"?study={study.pk}")
    assert "300 s" in page.content.decode()


def test_admin_types_reference_scores_on_the_training_page(training_study, client, admin_member):
    client.force_login(admin_member)
    url = reverse("annotation:manage_training")
    page = client.get(f"{url}?study={training_study.pk}").content.decode()
    response = Response.objects.filter(conversation__external_id="c0").order_by("id").first()
    attribute = training_study.rubric.attributes.order_by("position").first()
    field = f"ref-{response.pk}-{attribute.pk}"
    assert f'name="{field}"' in page
    saved = client.post(url, {"study": training_study.pk, "action": "references", field: "4"})
    assert saved.status_code == 302
    assert ReferenceScore.objects.get(response=response, attribute=attribute).value == 4
    # Off the scale: the page again naming the cell, the stored value unchanged.
    refused = client.post(url, {"study": training_study.pk, "action": "references", field: "7"})
    assert refused.status_code == 422 and "7 is not on the" in refused.content.decode()
    assert ReferenceScore.objects.get(response=response, attribute=attribute).value == 4


def test_reference_grid_refuses_a_field_that_is_no_practice_cell(
    training_study, client, admin_member
):
    client.force_login(admin_member)
    url = reverse("annotation:manage_training")
    attribute = training_study.rubric.attributes.order_by("position").first()
    practice = Response.objects.filter(conversation__external_id="c0").order_by("id").first()
    real = Response.objects.filter(conversation__external_id="c1").order_by("id").first()
    assert practice.conversation.practice and not real.conversation.practice
    refused = client.post(
        url,
        {
            "study": training_study.pk,
            "action": "references",
            f"ref-{practice.pk}-{attribute.pk}": "4",
            f"ref-{real.pk}-{attribute.pk}": "4",
            "ref-x-1": "4",
        },
    )
    page = refused.content.decode()
    assert refused.status_code == 422
    assert f"ref-{real.pk}-{attribute.pk}" in page and "ref-x-1" in page
    assert not ReferenceScore.objects.filter(attribute=attribute).exists()


@pytest.mark.slow  # rates a whole calibration study, some of it several times
def test_researcher_may_analyse_the_latest_ratings_instead(
    retest_study, clinician, client, researcher
):
    assignments_create(study=retest_study, clinicians=[clinician], seed_rng=random.Random(3))
    from annotation.calibration import calibration_after_submit

    # First ratings all 2, repeats all 4: the dashboard's mean tells which were analysed.
    user = clinician.user
    while (following := next_assignment_for_user(user=user)) is not None:
        value = 4 if following.kind == Assignment.Kind.RETEST else 2
        _rate_all(following, user, score=lambda item, attribute, v=value: v)
        calibration_after_submit(assignment=assignment_submit(assignment=following, user=user))
    first = scores_frame(study=retest_study)
    latest = scores_frame(study=retest_study, filters=Filters(clinician_ratings="latest"))
    n_cells = 2 * 4 * retest_study.rubric.attributes.count()  # two repeated conversations
    assert set(first["score"]) == {2.0}
    assert (latest["score"] == 4.0).sum() == n_cells and len(latest) == len(first)
    client.force_login(researcher)
    url = reverse("analysis:dashboard", args=[retest_study.pk])
    assert client.get(url, {"clinician_ratings": "latest"}).status_code == 200
    assert client.get(url, {"clinician_ratings": "newest"}).status_code == 400


def test_practice_and_repeats_stay_with_their_clinician(
    training_study, clinician, other_clinician, admin_member
):
    from annotation.services import assignment_reassign, assignment_reclaim

    reference_scores_set(
        study=training_study,
        rows=reference_csv_rows(text=_references_csv(training_study)),
        user=admin_member,
    )
    (practice,) = practice_assign(study=training_study, clinicians=[clinician])
    for move in (assignment_reassign, assignment_reclaim):
        with pytest.raises(ValueError, match="stay with their clinician"):
            move(assignment=practice, rater=other_clinician)
    practice.refresh_from_db()
    assert practice.rater == clinician and practice.status == Assignment.Status.PENDING


def test_practice_sits_beside_real_work_in_the_queue_and_says_what_happens_next(db, client):
    """A clinician who submitted real work is then given practice: the queue keeps every task of
    the study (the submitted one viewable, the open ones waiting for the practice result), each
    kind with its own count, and after a failed practice it says what comes next. Before, every
    row of the study vanished while the header still counted them."""
    from annotation.models import TrainingOutcome

    study = study_make(name="Beside", conversations=3)
    practice_conversations_mark(study=study, external_ids=["c0"])
    ReferenceScore.objects.bulk_create(
        ReferenceScore(response=response, attribute=attribute, value=3)
        for response in Response.objects.filter(
            conversation__study=study, conversation__practice=True
        )
        for attribute in study.rubric.attributes.all()
    )
    rater = clinician_make(username="bea")
    real = assignments_create(study=study, clinicians=[rater])
    _rate_all(real[0], rater.user)
    assignment_submit(assignment=real[0], user=rater.user)
    (practice,) = practice_assign(study=study, clinicians=[rater])
    client.force_login(rater.user)
    html = client.get(reverse("annotation:queue")).content.decode()
    assert html.count('class="task-rating"') == 2 and html.count('class="task-practice"') == 1
    assert html.count("after your practice") == 1  # the open one; the submitted one is viewable
    assert f'href="/rate/{real[0].token}/">View' in html
    assert "1 / 2 conversations" in html and "0 / 1 practice conversation" in html
    assert "once you pass its practice" in html
    # The waiting task does not open by its URL either: the queue says why.
    response = client.get(reverse("annotation:rate", args=[real[1].token]))
    assert response.status_code == 302 and response.url == reverse("annotation:queue")
    # A failed practice: the queue says the study lead decides next.
    TrainingOutcome.objects.create(study=study, rater=rater, passed=False, scores=21)
    Assignment.objects.filter(pk=practice.pk).update(status=Assignment.Status.SUBMITTED)
    html = client.get(reverse("annotation:queue")).content.decode()
    assert "did not meet the study's rule yet" in html and "either let you through" in html
