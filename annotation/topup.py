"""Top-up: responses added to conversations that clinicians already hold.

A generation run (or a later import) can add a response to a conversation after it was
assigned; the clinicians holding it never see the new response, and assigning again creates
nothing (the conversation is already theirs). `topup_summary` counts what is missing and
`topup_assign` gives it to them, audited in AssignmentChange:

- Work nobody has started gets its whole order drawn again from its seed, as if the new
  responses had been there from the start.
- Work in progress (started, not submitted) gets the new responses in place too, each at a
  random position among the responses already shown (which keep their order, tokens and
  scores): nothing of it was submitted, so nothing of it is shown read-only.
- Submitted work stays submitted, its scores locked and counted. The new responses come as a
  task of their own for the same clinician (the next `Assignment.part`): the conversation with
  all its responses in a fresh random order with fresh letters, those rated and submitted
  before shown read-only with their scores (`AssignmentItem.earlier`) and the new ones to rate.
  So the new responses sit at random places and letters, never "the last letter", and no letter
  or position names a system across conversations or clinicians.
- Repeats (test-retest) are topped up by the same rule as real work, so a repeat shows the same
  responses as its original and cannot be told from it by a missing response.
- Flagged work was set aside on purpose and is left alone; reclaimed work lives on in another
  assignment, which is topped up instead.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction

from .models import (
    Assignment,
    AssignmentChange,
    AssignmentItem,
    Rating,
    Response,
    Study,
)
from .presentation import presentation_items, queue_place_at_random

# Practice conversations train against fixed references and never change.
TOPPED_UP_KINDS = (Assignment.Kind.RATING, Assignment.Kind.RETEST)

Group = tuple[int, int, str]  # (rater, conversation, kind): one conversation's parts


@dataclass
class TopUpSummary:
    assignments: int  # conversations × clinicians (× repeat) missing at least one response
    clinicians: int
    conversations: int
    items: int  # responses a top-up adds, over all of them


def _missing(study: Study) -> dict[Group, tuple[list[Assignment], list[int]]]:
    """Each clinician's conversation (its parts) → the ids of its responses they were not given."""
    responses: dict[int, set[int]] = {}
    for pk, conversation_id in (
        Response.objects.filter(conversation__study=study, conversation__practice=False)
        .exclude(text="")
        .values_list("id", "conversation_id")
    ):
        responses.setdefault(conversation_id, set()).add(pk)
    parts: dict[Group, list[Assignment]] = {}
    for assignment in (
        Assignment.objects.filter(conversation__study=study, kind__in=TOPPED_UP_KINDS)
        .exclude(status=Assignment.Status.RECLAIMED)
        .order_by("part")
    ):
        key = (assignment.rater_id, assignment.conversation_id, assignment.kind)
        parts.setdefault(key, []).append(assignment)
    shown: dict[int, set[int]] = {}
    for assignment_id, response_id in AssignmentItem.objects.filter(
        assignment__conversation__study=study, assignment__kind__in=TOPPED_UP_KINDS
    ).values_list("assignment_id", "response_id"):
        shown.setdefault(assignment_id, set()).add(response_id)
    missing = {}
    for key, group in parts.items():
        if any(a.status == Assignment.Status.FLAGGED for a in group):
            continue
        given = set().union(*(shown.get(a.pk, set()) for a in group))
        new = sorted(responses.get(key[1], set()) - given)
        if new:
            missing[key] = (group, new)
    return missing


def topup_summary(*, study: Study) -> TopUpSummary:
    return _summary(_missing(study))


def _summary(missing: dict[Group, tuple[list[Assignment], list[int]]]) -> TopUpSummary:
    return TopUpSummary(
        assignments=len(missing),
        clinicians=len({rater for rater, _, _ in missing}),
        conversations=len({conversation for _, conversation, _ in missing}),
        items=sum(len(new) for _, new in missing.values()),
    )


def _insert_at_random(
    assignment: Assignment, new: list[int], *, rng: random.Random, user: User | None
) -> None:
    """Add ``new`` responses to an open, started assignment, each at a random position among
    those already shown; those keep their relative order, tokens and scores. Before, such work
    got a part of its own in which every response of the unfinished one was "rated before,
    read-only", even with no score at all. The caller holds the assignment's lock."""
    shown = list(assignment.items.order_by("position"))
    order: list[AssignmentItem | int] = list(shown)
    for response_id in new:
        order.insert(rng.randint(0, len(order)), response_id)
    # Positions are unique per assignment: move the kept items out of the way first.
    offset = len(order) + 1000
    for item in shown:
        item.position += offset
    AssignmentItem.objects.bulk_update(shown, ["position"])
    created = []
    for position, entry in enumerate(order):
        if isinstance(entry, AssignmentItem):
            entry.position = position
        else:
            created.append(
                AssignmentItem(assignment=assignment, response_id=entry, position=position)
            )
    AssignmentItem.objects.bulk_update(shown, ["position"])
    AssignmentItem.objects.bulk_create(created)
    AssignmentChange.objects.create(
        assignment=assignment,
        field="items",
        old_value=f"{len(shown)} responses (in progress)",
        new_value=f"{len(order)} responses (added response ids {', '.join(map(str, new))}, "
        "at random places among those shown)",
        changed_by=user,
    )


@transaction.atomic
def topup_assign(
    *, study: Study, user: User | None, rng: random.Random | None = None
) -> TopUpSummary:
    """Give every clinician's conversation the responses it lacks (see the module docstring).
    Idempotent: a second run finds nothing missing and creates nothing. Holds the study's lock,
    so two admins topping up at once cannot both add a part."""
    Study.objects.select_for_update().filter(pk=study.pk).first()
    missing = _missing(study)
    rng = rng or random.SystemRandom()
    for key in sorted(missing):
        group, new = missing[key]
        locked = list(
            Assignment.objects.select_for_update()
            .filter(pk__in=[a.pk for a in group])
            .order_by("part")
        )
        unstarted = [
            a
            for a in locked
            if a.status == Assignment.Status.PENDING
            and not Rating.objects.filter(assignment=a).exists()
        ]
        if unstarted:
            # Nothing of it seen yet: its whole order again from its recorded seed.
            target = unstarted[-1]
            items = list(target.items.all())
            before = len(items)
            target.items.all().delete()
            AssignmentItem.objects.bulk_create(
                presentation_items(
                    target,
                    [i.response_id for i in items] + new,
                    earlier=frozenset(i.response_id for i in items if i.earlier),
                )
            )
            AssignmentChange.objects.create(
                assignment=target,
                field="items",
                old_value=f"{before} responses",
                new_value=f"{before + len(new)} responses (added response ids "
                f"{', '.join(map(str, new))})",
                changed_by=user,
            )
            continue
        last = locked[-1]
        if last.is_open:
            _insert_at_random(last, new, rng=rng, user=user)
            continue
        given = sorted(
            AssignmentItem.objects.filter(assignment__in=locked)
            .order_by()
            .values_list("response_id", flat=True)
            .distinct()
        )
        part = Assignment.objects.create(
            rater_id=last.rater_id,
            conversation_id=last.conversation_id,
            kind=last.kind,
            part=last.part + 1,
            seed=rng.getrandbits(63),
        )
        AssignmentItem.objects.bulk_create(
            presentation_items(part, given + new, earlier=frozenset(given))
        )
        queue_place_at_random(part, rng=rng)
        AssignmentChange.objects.create(
            assignment=part,
            field="items",
            old_value=f"{len(given)} responses rated in part {last.part}",
            new_value=f"part {part.part}: {len(new)} added responses to rate (response ids "
            f"{', '.join(map(str, new))}) among the {len(given)} rated before",
            changed_by=user,
        )
    return _summary(missing)
