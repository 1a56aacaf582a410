"""Test-retest repeats: a few conversations a clinician already rated come back, unmarked.

Where a study asks for repeats (`CalibrationSettings.retest_count`), each time a clinician
submits a real conversation one of their earlier ones may be scheduled again: it must have been
submitted at least `retest_gap` conversations ago (so the repeat is never next to the original),
and it gets a fresh presentation order that differs from the first one. The repeat enters the
queue at a random place among the clinician's unstarted work, looks like any other conversation
(no label, no count, same page) and its ratings are stored as `repeat=1`, beside the first
rating, which analysis uses unless a researcher asks for the latest (annotation/analysed.py).
"""

from __future__ import annotations

import random

from django.db import transaction

from .models import Assignment, AssignmentItem, Study
from .presentation import presentation_order, queue_place_at_random
from .training import calibration_settings_get

# Re-drawing a seed until the order differs: with two or more responses a different permutation
# turns up with probability ≥ 1/2 per draw, so this bound is never reached in practice.
MAX_DRAWS = 64


@transaction.atomic
def retest_schedule(
    *, assignment: Assignment, rng: random.Random | None = None
) -> Assignment | None:
    """After `assignment` (a real conversation) was submitted, maybe schedule one of the same
    clinician's earlier conversations of the study again. Returns the new repeat or None.

    Holds a lock on the study row, so two submits at once cannot schedule past the plan.
    """
    if assignment.kind != Assignment.Kind.RATING or assignment.part:
        return None  # a top-up part is no new conversation
    study = Study.objects.select_for_update().get(pk=assignment.conversation.study_id)
    if study.kind != Study.Kind.RESPONSE_RATING:
        return None
    plan = calibration_settings_get(study=study)
    if plan.retest_count <= 0:
        return None
    mine = Assignment.objects.filter(rater_id=assignment.rater_id, conversation__study=study)
    repeated = set(
        mine.filter(kind=Assignment.Kind.RETEST).values_list("conversation_id", flat=True)
    )
    if len(repeated) >= plan.retest_count:
        return None
    submitted = list(
        # Part 0 only: a top-up part is the same conversation again, not another submission.
        mine.filter(kind=Assignment.Kind.RATING, part=0, status=Assignment.Status.SUBMITTED)
        .order_by("submitted_at", "id")
        .values_list("conversation_id", flat=True)
    )
    # Only conversations with at least `retest_gap` other submissions after them.
    candidates = [c for c in submitted[: max(0, len(submitted) - plan.retest_gap)]
                  if c not in repeated]  # fmt: skip
    if not candidates:
        return None
    rng = rng or random.SystemRandom()
    conversation_id = rng.choice(candidates)
    original = mine.get(kind=Assignment.Kind.RATING, conversation_id=conversation_id, part=0)
    # Every response the clinician was given in the conversation, top-up parts included, so the
    # repeat shows the same responses as its original.
    responses = list(
        AssignmentItem.objects.filter(
            assignment__in=mine.filter(
                kind=Assignment.Kind.RATING, conversation_id=conversation_id
            ).exclude(status=Assignment.Status.RECLAIMED)
        )
        .order_by()
        .values_list("response_id", flat=True)
        .distinct()
    )
    first = list(original.items.order_by("position").values_list("response_id", flat=True))
    seed = rng.getrandbits(63)
    for _ in range(MAX_DRAWS):
        if len(responses) < 2 or presentation_order(responses, seed) != first:
            break
        seed = rng.getrandbits(63)
    repeat = Assignment(
        rater_id=assignment.rater_id,
        conversation_id=conversation_id,
        kind=Assignment.Kind.RETEST,
        seed=seed,
    )
    repeat.save()
    AssignmentItem.objects.bulk_create(
        AssignmentItem(assignment=repeat, response_id=response_id, position=position)
        for position, response_id in enumerate(presentation_order(responses, seed))
    )
    queue_place_at_random(repeat, rng=rng)
    return repeat
