"""The presentation order of a conversation's responses, as a function of a recorded seed.

The same rule as the assignment services' (responses sorted by id, then shuffled with
`random.Random(seed)`), so an order can always be re-derived from the seed stored on the
assignment and checked.
"""

import random

from .models import Assignment, AssignmentItem


def presentation_order(response_ids: list[int], seed: int) -> list[int]:
    ordered = sorted(response_ids)
    random.Random(seed).shuffle(ordered)
    return ordered


def presentation_items(
    assignment: Assignment, response_ids: list[int], *, earlier: frozenset[int] = frozenset()
) -> list[AssignmentItem]:
    """Unsaved items for `assignment` in the order its seed gives; the responses in `earlier`
    (rated in an earlier part of the conversation) are marked read-only."""
    return [
        AssignmentItem(
            assignment=assignment,
            response_id=response_id,
            position=position,
            earlier=response_id in earlier,
        )
        for position, response_id in enumerate(presentation_order(response_ids, assignment.seed))
    ]


def queue_place_at_random(assignment: Assignment, *, rng: random.Random) -> None:
    """Move new work (a repeat, a top-up part) to a random place among the clinician's unstarted
    work in the study: the queue is ordered by creation time, and work gathered at its end would
    stand out."""
    pending = list(
        Assignment.objects.filter(
            rater_id=assignment.rater_id,
            conversation__study_id=assignment.conversation.study_id,
            status=Assignment.Status.PENDING,
        )
        .exclude(pk=assignment.pk)
        .values_list("created_at", flat=True)
    )
    if pending:
        Assignment.objects.filter(pk=assignment.pk).update(created_at=rng.choice(pending))
        assignment.refresh_from_db(fields=["created_at"])
