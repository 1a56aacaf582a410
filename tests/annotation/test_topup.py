"""Top-up: responses added after assignment come as new work beside submitted work, blinded."""

import random
from collections import Counter

import pytest
from django.urls import reverse

from analysis.retest_selectors import study_calibration
from annotation.calibration import calibration_after_submit
from annotation.models import (
    Assignment,
    AssignmentChange,
    AssignmentItem,
    Rating,
    Responder,
    Response,
    Score,
)
from annotation.selectors import next_assignment_for_user, progress_for_user, rating_page
from annotation.services import (
    AssignmentLocked,
    assignment_flag,
    assignment_reassign,
    assignment_submit,
    assignments_create,
    rating_save,
)
from annotation.topup import topup_assign, topup_summary
from annotation.training import calibration_settings_set
from tests.factories import clinician_make, study_make


def _rate_all(assignment, user, score=3):
    attributes = list(assignment.conversation.study.rubric.attributes.order_by("position"))
    for item in assignment.items.filter(earlier=False).order_by("position"):
        for attribute in attributes:
            rating_save(
                assignment=assignment,
                item_token=item.token,
                user=user,
                attribute_id=attribute.pk,
                score=score,
            )


def _submit(assignment, user):
    _rate_all(assignment, user)
    submitted = assignment_submit(assignment=assignment, user=user)
    calibration_after_submit(assignment=submitted)
    return submitted


def _add_responder(study, key="zz-new", name="Leaky New"):
    newcomer = Responder.objects.create(key=key, name=name, family=f"{key}-family")
    return [
        Response.objects.create(conversation=c, responder=newcomer, text=f"A new reply to {c.pk}.")
        for c in study.conversations.filter(practice=False)
    ]


def _order(assignment) -> list[int]:
    return list(assignment.items.order_by("position").values_list("response_id", flat=True))


def test_submitted_work_stays_submitted_and_the_added_response_is_its_own_task(
    study, clinician, other_clinician, client, admin_member
):
    created = assignments_create(study=study, clinicians=[clinician, other_clinician], overlap=2,
                                 overlap_fraction=1.0, seed_rng=random.Random(1))  # fmt: skip
    mine = [a for a in created if a.rater == clinician]
    for assignment in mine:
        _submit(assignment, clinician.user)
    scores_before = Score.objects.filter(rating__rater=clinician).count()
    before = {a.pk: list(a.items.order_by("position").values_list("response_id", "token"))
              for a in created}  # fmt: skip
    assert (progress_for_user(user=clinician.user).done, len(mine)) == (3, 3)
    added = _add_responder(study)
    assert topup_summary(study=study).items == 6 and topup_summary(study=study).clinicians == 2
    # Assigning again creates nothing: the conversations are already theirs.
    assert assignments_create(study=study, clinicians=[clinician, other_clinician], overlap=2,
                              overlap_fraction=1.0) == []  # fmt: skip

    client.force_login(admin_member)
    manage = client.get(reverse("annotation:manage") + f"?study={study.pk}").content.decode()
    assert "2 clinicians have not seen 6 responses" in manage
    assert client.post(reverse("annotation:manage_topup"), {"study": study.pk}).status_code == 302

    # Submitted work is untouched: same status, same items with the same letters, scores locked.
    for assignment in mine:
        assignment.refresh_from_db()
        assert assignment.status == Assignment.Status.SUBMITTED
        assert (
            list(assignment.items.order_by("position").values_list("response_id", "token"))
            == (before[assignment.pk])
        )
        with pytest.raises(AssignmentLocked):
            _rate_all(assignment, clinician.user, score=1)
    assert Score.objects.filter(rating__rater=clinician).count() == scores_before
    assert set(Score.objects.filter(rating__rater=clinician).values_list("value", flat=True)) == {3}

    # Each conversation has a new part: all five responses, the four rated before read-only.
    progress = progress_for_user(user=clinician.user)
    assert (progress.done, progress.total) == (3, 6), "done never goes backwards"
    parts = list(Assignment.objects.filter(rater=clinician, part=1))
    assert len(parts) == 3 and {p.status for p in parts} == {Assignment.Status.PENDING}
    for part in parts:
        items = list(part.items.all())
        assert len(items) == 5
        assert {i.response_id for i in items if not i.earlier} <= {r.pk for r in added}
        assert sum(not i.earlier for i in items) == 1
        page = rating_page(assignment=part)
        assert page.has_earlier and page.total == 7 and page.scored == 0
        earlier = next(i for i in items if i.earlier)
        with pytest.raises(AssignmentLocked, match="rated and submitted before"):
            rating_save(assignment=part, item_token=earlier.token, user=clinician.user,
                        attribute_id=study.rubric.attributes.first().pk, score=1)  # fmt: skip
        # The part is not movable: it shows this clinician's own earlier scores.
        with pytest.raises(ValueError, match="stay with the clinician"):
            assignment_reassign(assignment=part, rater=other_clinician)

    # Rating the part completes just the added responses.
    following = next_assignment_for_user(user=clinician.user)
    assert following is not None and following.part == 1
    _submit(following, clinician.user)
    new_rating = Rating.objects.get(rater=clinician, assignment=following)
    assert new_rating.status == "complete" and new_rating.response_id in {r.pk for r in added}
    assert progress_for_user(user=clinician.user).done == 4
    # The admin's list names the part and offers no move for it.
    listing = client.get(reverse("annotation:manage") + f"?study={study.pk}").content.decode()
    assert listing.count("added responses (part 1)") == 3  # the other clinician had not started
    # The other clinician's unstarted rows: nobody else can take them (both clinicians hold
    # every conversation), so they offer no move, said once; the parts never move.
    assert listing.count("Reassign</button>") == 0
    assert listing.count("cannot move: every other clinician already holds") == 1
    assert listing.count('<span class="sr-only"> cannot move</span>') == 3
    changes = AssignmentChange.objects.filter(assignment__in=parts)
    assert changes.count() == 3 and {c.changed_by for c in changes} == {admin_member}
    # Idempotent.
    assert topup_summary(study=study).items == 0
    assert topup_assign(study=study, user=admin_member).items == 0


def test_unstarted_work_gets_the_added_response_in_place_from_its_seed(study, clinician):
    (assignment, *_) = assignments_create(study=study, clinicians=[clinician])
    newcomer = Responder.objects.create(key="zz-new", name="Leaky New", family="leaky-new")
    Response.objects.create(conversation=assignment.conversation, responder=newcomer, text="New.")
    topup_assign(study=study, user=None)
    responses = sorted(assignment.conversation.responses.values_list("id", flat=True))
    random.Random(assignment.seed).shuffle(responses)
    assert _order(assignment) == responses
    assert not Assignment.objects.filter(part__gt=0).exists()


def test_work_in_progress_gets_the_added_response_in_place_and_nothing_read_only(study, clinician):
    """Started, not submitted: the added response joins the open task at a random place; the
    responses already shown keep their order, tokens and scores, and none is "rated before":
    a part of its own once marked every response of the unfinished task read-only, even with no
    score, and a save to one answered 409 "submitted before"."""
    (assignment, *_) = assignments_create(study=study, clinicians=[clinician])
    first = assignment.items.order_by("position").first()
    attribute = study.rubric.attributes.first()
    rating_save(assignment=assignment, item_token=first.token, user=clinician.user,
                attribute_id=attribute.pk, score=2)  # fmt: skip
    before = _order(assignment)
    tokens = set(assignment.items.values_list("token", flat=True))
    added = _add_responder(study)
    topup_assign(study=study, user=None, rng=random.Random(5))
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.IN_PROGRESS
    after = _order(assignment)
    new_id = next(r.pk for r in added if r.conversation_id == assignment.conversation_id)
    assert [r for r in after if r != new_id] == before and new_id in after
    assert tokens <= set(assignment.items.values_list("token", flat=True))
    assert not assignment.items.filter(earlier=True).exists()
    assert not Assignment.objects.filter(conversation=assignment.conversation, part=1).exists()
    page = rating_page(assignment=assignment)
    assert not page.has_earlier and page.scored == 1
    # Every response can be rated, the added one and those not scored yet, and then submitted.
    _submit(assignment, clinician.user)
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.SUBMITTED


def test_flagged_work_is_left_alone_and_counts_neither_done_nor_assigned(study, clinician):
    first, second, third = assignments_create(study=study, clinicians=[clinician])
    assignment_flag(assignment=first, reason="Broken text")
    _submit(second, clinician.user)
    progress = progress_for_user(user=clinician.user)
    assert (progress.done, progress.total) == (1, 2)
    _add_responder(study)
    summary = topup_assign(study=study, user=None, rng=random.Random(2))
    assert summary.assignments == 2  # the submitted one (a part) and the unstarted one (in place)
    assert not Assignment.objects.filter(conversation=first.conversation, part=1).exists()
    progress = progress_for_user(user=clinician.user)
    assert (progress.done, progress.total) == (1, 3)


@pytest.mark.slow  # a statistical check over many conversations and clinicians
def test_added_system_has_no_fixed_letter_or_position_across_conversations_and_clinicians(
    db, django_user_model
):
    study = study_make(name="Many conversations", conversations=30)
    clinicians = [clinician_make(username=name) for name in ("ana", "ben")]
    created = assignments_create(study=study, clinicians=clinicians, overlap=2,
                                 overlap_fraction=1.0, seed_rng=random.Random(5))  # fmt: skip
    for assignment in created:
        _submit(assignment, assignment.rater.user)
    added = {r.pk for r in _add_responder(study)}
    topup_assign(study=study, user=None, rng=random.Random(11))

    parts = list(Assignment.objects.filter(part=1).select_related("rater"))
    assert len(parts) == 60
    positions: Counter = Counter()
    per_clinician: dict[str, set[int]] = {}
    for part in parts:
        items = list(part.items.order_by("position"))
        (new,) = [i for i in items if i.response_id in added]
        assert not new.earlier and all(i.earlier for i in items if i is not new)
        positions[new.position] += 1
        per_clinician.setdefault(part.rater.name, set()).add(new.position)
    # Five responses, 60 parts: the added one at every position, none of them far more often
    # than the others (12 expected at each; 24 or more would be p < 0.001 for any position).
    assert sorted(positions) == [0, 1, 2, 3, 4] and max(positions.values()) < 24
    assert all(len(seen) >= 3 for seen in per_clinician.values())
    # In the same conversation the two clinicians do not share one letter for it every time.
    same = sum(
        a.items.get(response_id__in=added).position == b.items.get(response_id__in=added).position
        for a in parts
        for b in parts
        if a.conversation_id == b.conversation_id and a.rater_id < b.rater_id
    )
    assert same < 30


@pytest.fixture
def retest_study(db):
    study = study_make(name="Calibrated study", conversations=6)
    calibration_settings_set(
        study=study, pass_mean_abs_diff=0.75, pass_max_diff=2, retest_count=1, retest_gap=2
    )
    return study


def _responses_given(rater, conversation_id, kind) -> set[int]:
    return set(
        AssignmentItem.objects.filter(
            assignment__rater=rater, assignment__conversation_id=conversation_id,
            assignment__kind=kind,
        ).values_list("response_id", flat=True)
    )  # fmt: skip


@pytest.mark.parametrize("repeat_started", [False, True])
def test_repeats_are_topped_up_like_their_originals(retest_study, clinician, repeat_started):
    assignments_create(study=retest_study, clinicians=[clinician], seed_rng=random.Random(3))
    while not Assignment.objects.filter(kind=Assignment.Kind.RETEST).exists():
        _submit(next_assignment_for_user(user=clinician.user), clinician.user)
    repeat = Assignment.objects.get(rater=clinician, kind=Assignment.Kind.RETEST)
    if repeat_started:
        _submit(repeat, clinician.user)
    _add_responder(retest_study)
    topup_assign(study=retest_study, user=None, rng=random.Random(4))
    conversation = repeat.conversation_id
    original = _responses_given(clinician, conversation, Assignment.Kind.RATING)
    assert len(original) == 5
    assert _responses_given(clinician, conversation, Assignment.Kind.RETEST) == original
    repeat.refresh_from_db()
    # An unstarted repeat gets it in place, like an unstarted original; a submitted one a part.
    parts = Assignment.objects.filter(conversation_id=conversation, kind=Assignment.Kind.RETEST)
    assert parts.count() == (2 if repeat_started else 1)
    # Rating the whole queue stores each added response once per kind, beside the originals.
    while (following := next_assignment_for_user(user=clinician.user)) is not None:
        _submit(following, clinician.user)
    repeats = Rating.objects.filter(rater=clinician, repeat=1, status="complete")
    assert set(repeats.values_list("response_id", flat=True)) == original
    # A top-up part of a repeat is no second repeat in the calibration report.
    (row,) = study_calibration(study=retest_study, block=4)
    assert (row.repeats_assigned, row.repeats_done) == (1, 1)


def test_a_repeat_scheduled_after_a_top_up_shows_every_response_of_its_original(
    retest_study, clinician
):
    first, *_ = assignments_create(study=retest_study, clinicians=[clinician],
                                   seed_rng=random.Random(8))  # fmt: skip
    _submit(first, clinician.user)
    _add_responder(retest_study)
    topup_assign(study=retest_study, user=None, rng=random.Random(9))
    while not Assignment.objects.filter(kind=Assignment.Kind.RETEST).exists():
        _submit(next_assignment_for_user(user=clinician.user), clinician.user)
    repeat = Assignment.objects.get(kind=Assignment.Kind.RETEST)
    given = _responses_given(clinician, repeat.conversation_id, Assignment.Kind.RATING)
    assert set(_order(repeat)) == given and len(given) == 5
    assert not repeat.items.filter(earlier=True).exists()
