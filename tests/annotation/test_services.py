"""Clinician rating services: assignment, autosave, submit, flag, reclaim, active time."""

import random
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from annotation.models import Assignment, AssignmentItem, Rater, Rating, RatingChange, Score
from annotation.selectors import rating_page
from annotation.services import (
    HEARTBEAT_MAX_SECONDS,
    AssignmentIncomplete,
    AssignmentLocked,
    assignment_flag,
    assignment_heartbeat,
    assignment_reassign,
    assignment_reclaim,
    assignment_submit,
    assignments_create,
    clinician_create,
    rating_save,
)
from tests.factories import clinician_make, study_make

from .conftest import at_once

# Filters, exports and saves must work on every supported database: bin/test runs these on
# SQLite as well.
pytestmark = pytest.mark.portable


def _attributes(assignment):
    return list(assignment.conversation.study.rubric.attributes.all())


def _fill(assignment, user, *, skip: int = 0, score: int = 4):
    """Score every attribute of every response, except the last `skip` attributes of the last."""
    items = list(assignment.items.order_by("position"))
    attributes = _attributes(assignment)
    for n, item in enumerate(items):
        wanted = attributes[: len(attributes) - skip] if n == len(items) - 1 else attributes
        for attribute in wanted:
            rating_save(
                assignment=assignment,
                item_token=item.token,
                user=user,
                attribute_id=attribute.pk,
                score=score,
            )


def test_autosave_round_trip_restores_scores_and_rationale(assignment, clinician):
    item = assignment.items.order_by("position").first()
    safety = assignment.conversation.study.rubric.attributes.get(name="Safety")
    user = clinician.user
    rating_save(
        assignment=assignment,
        item_token=item.token,
        user=user,
        attribute_id=safety.pk,
        score=2,
        edited_ms=1000,
    )
    rating_save(
        assignment=assignment,
        item_token=item.token,
        user=user,
        attribute_id=safety.pk,
        score=5,
        edited_ms=2000,
    )
    rating_save(
        assignment=assignment, item_token=item.token, user=user, rationale=" Kind. ", edited_ms=3000
    )

    page = rating_page(assignment=assignment)
    first = page.items[0]
    chosen = {a.name: value for _, _, rows in first.groups for a, value in rows}
    assert chosen["Safety"] == 5 and first.rationale == "Kind."
    rating = Rating.objects.get(rater=clinician, response=item.response)
    assert (rating.status, rating.source, rating.run_id, rating.repeat) == (
        "draft",
        "form",
        None,
        0,
    )
    assert rating.assignment_id == assignment.pk
    trail = [(c.field, c.old_value, c.new_value, c.changed_by_id) for c in rating.changes.all()]
    assert trail == [
        ("score", "", "2", user.pk),
        ("score", "2", "5", user.pk),
        ("rationale", "", "Kind.", user.pk),
    ]
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.IN_PROGRESS and assignment.started_at


def test_saving_the_same_value_again_is_idempotent(assignment, clinician):
    item = assignment.items.first()
    attribute = _attributes(assignment)[0]
    for _ in range(3):
        rating_save(
            assignment=assignment,
            item_token=item.token,
            user=clinician.user,
            attribute_id=attribute.pk,
            score=3,
        )
    assert Score.objects.filter(rating__rater=clinician).count() == 1
    assert RatingChange.objects.filter(rating__rater=clinician).count() == 1


def test_a_stale_tab_cannot_overwrite_a_newer_edit(assignment, clinician):
    item = assignment.items.first()
    attribute = _attributes(assignment)[0]
    kwargs = dict(assignment=assignment, item_token=item.token, user=clinician.user)
    assert rating_save(**kwargs, attribute_id=attribute.pk, score=4, edited_ms=2000).saved
    late = rating_save(**kwargs, attribute_id=attribute.pk, score=1, edited_ms=1000)
    assert (late.saved, late.value) == (False, 4)
    assert rating_save(**kwargs, rationale="new", edited_ms=2000).saved
    assert rating_save(**kwargs, rationale="old", edited_ms=1500).value == "new"
    assert Score.objects.get(rating__rater=clinician).value == 4


@pytest.mark.parametrize("bad", [0, 6])
def test_a_score_off_the_scale_is_refused(assignment, clinician, bad):
    item = assignment.items.first()
    with pytest.raises(ValueError, match="scale"):
        rating_save(
            assignment=assignment,
            item_token=item.token,
            user=clinician.user,
            attribute_id=_attributes(assignment)[0].pk,
            score=bad,
        )


def test_an_item_token_of_another_assignment_is_refused(study, clinician, other_clinician):
    mine, theirs = assignments_create(
        study=study, clinicians=[clinician, other_clinician], overlap=2, overlap_fraction=1.0
    )[:2]
    foreign = AssignmentItem.objects.filter(assignment__rater=other_clinician).first()
    mine = Assignment.objects.filter(rater=clinician).first()
    with pytest.raises(ValueError, match="unknown response"):
        rating_save(
            assignment=mine,
            item_token=foreign.token,
            user=clinician.user,
            attribute_id=_attributes(mine)[0].pk,
            score=3,
        )


def test_submit_names_every_missing_score_and_changes_nothing(assignment, clinician):
    _fill(assignment, clinician.user, skip=2)
    with pytest.raises(AssignmentIncomplete) as info:
        assignment_submit(assignment=assignment, user=clinician.user)
    last = AssignmentItem(position=assignment.items.count() - 1).label
    assert info.value.missing == [(last, ["Helpfulness", "Understanding"])]
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.IN_PROGRESS
    assert not Rating.objects.filter(rater=clinician, status="complete").exists()


def test_submit_completes_the_ratings_and_locks_the_conversation(assignment, clinician):
    _fill(assignment, clinician.user)
    assignment_submit(assignment=assignment, user=clinician.user)
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.SUBMITTED and assignment.submitted_at
    ratings = Rating.objects.filter(assignment=assignment)
    assert ratings.count() == assignment.items.count()
    assert set(ratings.values_list("status", flat=True)) == {"complete"}
    item = assignment.items.first()
    with pytest.raises(AssignmentLocked):
        rating_save(
            assignment=assignment, item_token=item.token, user=clinician.user, rationale="later"
        )
    with pytest.raises(AssignmentLocked):
        assignment_submit(assignment=assignment, user=clinician.user)
    with pytest.raises(AssignmentLocked):
        assignment_flag(assignment=assignment, reason="too late")


def test_flagging_sets_the_conversation_aside_with_its_reason(assignment, clinician):
    with pytest.raises(ValueError):
        assignment_flag(assignment=assignment, reason="  ")
    assignment_flag(assignment=assignment, reason="Distressing content")
    assignment.refresh_from_db()
    assert (assignment.status, assignment.flag_reason) == ("flagged", "Distressing content")
    with pytest.raises(AssignmentLocked):
        rating_save(
            assignment=assignment,
            item_token=assignment.items.first().token,
            user=clinician.user,
            rationale="x",
        )


def test_overlap_assignment_is_balanced(db):
    study = study_make(conversations=20)
    clinicians = [Rater.objects.create(kind="clinician", name=f"c{i}") for i in range(4)]
    created = assignments_create(
        study=study,
        clinicians=clinicians,
        overlap=3,
        overlap_fraction=0.5,
        seed_rng=random.Random(7),
    )
    per_conversation = Counter(a.conversation_id for a in created)
    assert sorted(Counter(per_conversation.values()).items()) == [(1, 10), (3, 10)]
    load = Counter(a.rater_id for a in created)
    assert sorted(load.values()) == [10, 10, 10, 10]
    # Running it again adds nothing; every assignment has its responses in a stored order.
    assert (
        assignments_create(study=study, clinicians=clinicians, overlap=3, overlap_fraction=0.5)
        == []
    )
    for a in created:
        assert sorted(a.items.values_list("position", flat=True)) == [0, 1, 2, 3]


def test_full_overlap_gives_every_conversation_to_every_chosen_clinician(
    study, clinician, other_clinician
):
    created = assignments_create(
        study=study, clinicians=[clinician, other_clinician], overlap=2, overlap_fraction=1.0
    )
    assert len(created) == 2 * study.conversations.count()
    with pytest.raises(ValueError, match="overlap"):
        assignments_create(study=study, clinicians=[clinician], overlap=2)


def test_responses_without_text_are_not_shown(study, clinician):
    conversation = study.conversations.first()
    conversation.responses.filter(responder__key="zz-llama").update(text="")
    assignments_create(study=study, clinicians=[clinician])
    assignment = Assignment.objects.get(conversation=conversation)
    assert assignment.items.count() == 3


def test_unstarted_work_can_be_reassigned_but_started_work_is_not_moved(
    assignment, clinician, other_clinician
):
    moved = assignment_reassign(assignment=assignment, rater=other_clinician)
    assert moved.rater == other_clinician
    rating_save(
        assignment=moved,
        item_token=moved.items.first().token,
        user=other_clinician.user,
        rationale="started",
    )
    with pytest.raises(ValueError, match="started"):
        assignment_reassign(assignment=moved, rater=clinician)


def test_stale_work_is_reclaimed_and_the_partial_work_is_kept(
    assignment, clinician, other_clinician
):
    rating_save(
        assignment=assignment,
        item_token=assignment.items.first().token,
        user=clinician.user,
        attribute_id=_attributes(assignment)[0].pk,
        score=3,
    )
    with pytest.raises(ValueError, match="untouched"):
        assignment_reclaim(assignment=assignment, rater=other_clinician)
    Assignment.objects.filter(pk=assignment.pk).update(
        last_activity_at=timezone.now() - timedelta(days=8)
    )
    new = assignment_reclaim(assignment=assignment, rater=other_clinician)
    assignment.refresh_from_db()
    assert assignment.status == Assignment.Status.RECLAIMED
    assert new.reclaimed_from == assignment and new.rater == other_clinician
    assert new.items.count() == assignment.items.count()
    assert Rating.objects.filter(rater=clinician, assignment=assignment).count() == 1
    assert Score.objects.filter(rating__rater=clinician).count() == 1


def test_active_time_counts_only_bounded_gaps(assignment):
    now = timezone.now()
    Assignment.objects.filter(pk=assignment.pk).update(last_activity_at=now - timedelta(seconds=12))
    assignment_heartbeat(assignment=assignment)
    assignment.refresh_from_db()
    assert assignment.active_seconds == 12
    # An hour away counts as at most one heartbeat interval.
    Assignment.objects.filter(pk=assignment.pk).update(
        last_activity_at=timezone.now() - timedelta(hours=1)
    )
    assignment_heartbeat(assignment=assignment)
    assignment.refresh_from_db()
    assert assignment.active_seconds == 12 + HEARTBEAT_MAX_SECONDS


def test_invited_clinician_gets_role_rater_and_no_usable_password(db):
    user, rater = clinician_create(username="carol", email="carol@example.org")
    assert not user.has_usable_password()
    assert rater.kind == "clinician" and rater.user == user
    assert user.groups.filter(name="clinician").exists()
    with pytest.raises(ValueError, match="taken"):
        clinician_create(username="carol")


@pytest.mark.django_db(transaction=True)
def test_two_tabs_saving_at_once_make_one_rating_and_keep_every_edit(django_user_model):
    """Two tabs (two connections) save different attributes of a not-yet-rated response at the
    same instant, then the same attribute: one rating, both fields, the later edit wins."""
    study = study_make(conversations=1)
    clinician = clinician_make(username="tabs")
    (assignment,) = assignments_create(study=study, clinicians=[clinician])
    item = assignment.items.first()
    attributes = _attributes(assignment)

    def tab(**kwargs):
        return lambda: rating_save(
            assignment=assignment, item_token=item.token, user=clinician.user, **kwargs
        )

    at_once(
        tab(attribute_id=attributes[0].pk, score=2, edited_ms=1000),
        tab(attribute_id=attributes[1].pk, score=3, edited_ms=1001),
    )
    at_once(
        tab(attribute_id=attributes[0].pk, score=5, edited_ms=3000),
        tab(attribute_id=attributes[0].pk, score=1, edited_ms=2000),
    )
    assert Rating.objects.filter(rater=clinician).count() == 1
    scores = dict(Score.objects.filter(rating__rater=clinician).values_list("attribute", "value"))
    assert scores == {attributes[0].pk: 5, attributes[1].pk: 3}


@pytest.mark.django_db(transaction=True)
def test_many_clinicians_saving_at_once_all_succeed(django_user_model):
    """Eight connections save at the same instant, each its own clinician's score (on SQLite,
    one file and one writer at a time): every save is stored, none fails as locked."""
    study = study_make(conversations=1)
    clinicians = [clinician_make(username=f"crowd{n}") for n in range(8)]
    assignments = assignments_create(
        study=study, clinicians=clinicians, overlap=8, overlap_fraction=1.0
    )
    saves = []
    for n, assignment in enumerate(assignments):
        clinician = assignment.rater
        item = assignment.items.first()
        attributes = _attributes(assignment)
        attribute = attributes[n % len(attributes)]
        saves.append(
            lambda a=assignment, i=item, c=clinician, at=attribute, s=n % 5 + 1: rating_save(
                assignment=a, item_token=i.token, user=c.user, attribute_id=at.pk, score=s
            )
        )
    for _ in range(3):
        results = at_once(*saves)
        assert all(result.saved for result in results)
    assert Score.objects.filter(rating__rater__name__startswith="crowd").count() == 8
