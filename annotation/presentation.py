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


def presentation_items(assignment: Assignment, response_ids: list[int]) -> list[AssignmentItem]:
    """Unsaved items for `assignment` in the order its seed gives."""
    return [
        AssignmentItem(assignment=assignment, response_id=response_id, position=position)
        for position, response_id in enumerate(presentation_order(response_ids, assignment.seed))
    ]
