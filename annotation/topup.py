"""Top-up assignments: responses added to conversations that clinicians already hold.

A generation run (or a later import) can add a response to a conversation after it was
assigned; the clinicians holding it never see the new response, and assigning again creates
nothing (the conversation is already theirs). `topup_missing` counts what is missing and
`topup_assign` adds one AssignmentItem per missing response to each live assignment, audited in
AssignmentChange. A submitted conversation reopens (the new responses need scores; the scores
given before stay). An unstarted one gets its whole order drawn again from its seed, as if the
response had been there from the start; a started one gets the new responses after the ones
already shown, in random order, so that the labels the clinician has seen do not change.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction

from .models import Assignment, AssignmentChange, AssignmentItem, Rating, Response, Study
from .presentation import presentation_items

# Flagged work was set aside on purpose and reclaimed work lives on in another assignment.
TOPPED_UP = (
    Assignment.Status.PENDING,
    Assignment.Status.IN_PROGRESS,
    Assignment.Status.SUBMITTED,
)


@dataclass
class TopUpSummary:
    assignments: int  # live assignments missing at least one response
    clinicians: int
    conversations: int
    items: int  # AssignmentItems a top-up would create


def _missing(study: Study) -> dict[int, list[int]]:
    """Assignment id → ids of the conversation's responses it does not show."""
    responses: dict[int, set[int]] = {}
    for pk, conversation_id in (
        Response.objects.filter(conversation__study=study, conversation__practice=False)
        .exclude(text="")
        .values_list("id", "conversation_id")
    ):
        responses.setdefault(conversation_id, set()).add(pk)
    assignments = Assignment.objects.filter(
        conversation__study=study,
        # A repeat compares a clinician with their own first ratings: a response they never
        # rated first has nothing to be compared with (the real assignment gets it instead).
        kind=Assignment.Kind.RATING,
        status__in=TOPPED_UP,
    )
    shown: dict[int, set[int]] = {}
    conversation_of: dict[int, int] = {}
    for pk, conversation_id in assignments.values_list("id", "conversation_id"):
        shown[pk] = set()
        conversation_of[pk] = conversation_id
    for assignment_id, response_id in AssignmentItem.objects.filter(
        assignment__in=assignments
    ).values_list("assignment_id", "response_id"):
        shown[assignment_id].add(response_id)
    return {
        pk: sorted(responses.get(conversation_of[pk], set()) - items)
        for pk, items in shown.items()
        if responses.get(conversation_of[pk], set()) - items
    }


def topup_summary(*, study: Study) -> TopUpSummary:
    missing = _missing(study)
    rows = list(
        Assignment.objects.filter(pk__in=list(missing)).values_list("rater_id", "conversation_id")
    )
    return TopUpSummary(
        assignments=len(missing),
        clinicians=len({r for r, _ in rows}),
        conversations=len({c for _, c in rows}),
        items=sum(len(v) for v in missing.values()),
    )


@transaction.atomic
def topup_assign(
    *, study: Study, user: User | None, rng: random.Random | None = None
) -> TopUpSummary:
    """Give every live assignment of the study the responses it lacks. Idempotent: a second
    run finds nothing missing and creates nothing."""
    Study.objects.select_for_update().filter(pk=study.pk).first()
    missing = _missing(study)
    rng = rng or random.SystemRandom()
    done = TopUpSummary(assignments=0, clinicians=0, conversations=0, items=0)
    raters, conversations = set(), set()
    for assignment in (
        Assignment.objects.select_for_update().filter(pk__in=list(missing)).order_by("id")
    ):
        new = missing[assignment.pk]
        items = list(assignment.items.order_by("position"))
        started = (
            assignment.status != Assignment.Status.PENDING
            or Rating.objects.filter(assignment=assignment).exists()
        )
        if not started:
            # Nothing seen yet: the full order again from the recorded seed, as at creation.
            assignment.items.all().delete()
            AssignmentItem.objects.bulk_create(
                presentation_items(assignment, [i.response_id for i in items] + new)
            )
        else:
            order = list(new)
            rng.shuffle(order)
            start = max((i.position for i in items), default=-1) + 1
            AssignmentItem.objects.bulk_create(
                AssignmentItem(assignment=assignment, response_id=r, position=start + n)
                for n, r in enumerate(order)
            )
        AssignmentChange.objects.create(
            assignment=assignment,
            field="items",
            old_value=f"{len(items)} responses",
            new_value=f"{len(items) + len(new)} responses (added response ids "
            f"{', '.join(map(str, new))})",
            changed_by=user,
        )
        if assignment.status == Assignment.Status.SUBMITTED:
            assignment.status = Assignment.Status.IN_PROGRESS
            assignment.save(update_fields=["status"])
            AssignmentChange.objects.create(
                assignment=assignment,
                field="status",
                old_value=Assignment.Status.SUBMITTED,
                new_value=Assignment.Status.IN_PROGRESS,
                changed_by=user,
            )
        done.assignments += 1
        done.items += len(new)
        raters.add(assignment.rater_id)
        conversations.add(assignment.conversation_id)
    done.clinicians, done.conversations = len(raters), len(conversations)
    return done
