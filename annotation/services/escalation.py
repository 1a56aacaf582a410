"""Writes for escalation (docs/adjudication.md, *Escalation*): a clinician marks one response of
their task unsafe, or withdraws the mark while the task is open; an adjudicator decides it.

The clinician's writes go through the rating workflow's lock (`assignment_lock_open`), so they
are refused exactly when a score would be: a task submitted, flagged or reclaimed, a consent
not given. Every change is audited in `RatingChange` (field ``unsafe``) on the clinician's own
rating of the response, beside their scores, so the audit trail shows it with them. Opening an
escalation tells the study's leads at once: an `escalation.opened` webhook event (ids only) and
an e-mail, both sent once the transaction commits.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from ..models import (
    Assignment,
    AssignmentItem,
    Escalation,
    Rating,
    RatingChange,
    Study,
    Webhook,
)
from .rating import AssignmentLocked, assignment_lock_open, assignment_touch, form_row_get_or_create
from .webhooks import webhook_emit

#: A reason is kept whole up to this many characters (as a flag's reason).
REASON_MAX_CHARS = 2000


class EscalationRefused(ValueError):
    """The decision names something that cannot be decided; nothing was written."""


@dataclass(frozen=True)
class MarkResult:
    escalation: Escalation | None  # the open escalation after the call; None once withdrawn
    changed: bool  # False: the same mark again (or nothing to withdraw): nothing was written


def _item_for(assignment: Assignment, item_token: str) -> tuple[int, bool]:
    item = (
        AssignmentItem.objects.filter(assignment=assignment, token=item_token)
        .order_by()
        .values_list("response_id", "earlier")
        .first()
    )
    if item is None:
        raise ValueError("unknown response")
    return item


def _audit(*, assignment: Assignment, response_id: int, old: str, new: str, user: User) -> None:
    rating = form_row_get_or_create(model=Rating, assignment=assignment, response_id=response_id)
    RatingChange.objects.create(
        rating=rating, field="unsafe", old_value=old, new_value=new, changed_by=user
    )


def _opened_tell(escalation: Escalation) -> None:
    """The webhook event (ids and counts only: no clinician, no responder, no reason text) and
    the leads' e-mail, both once the transaction commits."""
    study_id = escalation.study_id
    data = {
        "study": study_id,
        "escalation": escalation.pk,
        "conversation": escalation.assignment.conversation_id,
        "response": escalation.response_id,
        "open_escalations": Escalation.objects.filter(
            study_id=study_id, status=Escalation.Status.OPEN
        ).count(),
    }
    webhook_emit(event=Webhook.Event.ESCALATION_OPENED, study_id=study_id, data=data)
    escalation_id = escalation.pk

    def mail() -> None:
        from annotation.tasks import escalation_mail_send

        escalation_mail_send.delay(escalation_id)

    transaction.on_commit(mail)


@transaction.atomic
def escalation_mark(
    *, assignment: Assignment, item_token: str, reason: str, user: User
) -> MarkResult:
    """Mark the response `item_token` of the clinician's task unsafe, saying why.

    Idempotent: the same reason again writes nothing; a new reason replaces the open
    escalation's (audited). Refused, writing nothing, with ValueError for an empty reason or a
    response not in the task, and AssignmentLocked for a task that takes no more edits (as a
    score), a practice conversation or a response shown read-only from an earlier part."""
    reason = reason.strip()[:REASON_MAX_CHARS]
    if not reason:
        raise ValueError("say why this response is unsafe")
    assignment = assignment_lock_open(assignment=assignment)
    if assignment.kind == Assignment.Kind.PRACTICE:
        raise AssignmentLocked(
            "a practice conversation is training material: it cannot be escalated"
        )
    response_id, earlier = _item_for(assignment, item_token)
    if earlier:
        raise AssignmentLocked(
            "this response was rated and submitted before; it is shown read-only"
        )
    assignment_touch(assignment=assignment, now=timezone.now())
    current = (
        Escalation.objects.select_for_update()
        .filter(rater_id=assignment.rater_id, response_id=response_id, status="open")
        .first()
    )
    if current is not None:
        if current.reason == reason:
            return MarkResult(escalation=current, changed=False)
        old, current.reason = current.reason, reason
        current.save(update_fields=["reason", "updated_at"])
        _audit(assignment=assignment, response_id=response_id, old=old, new=reason, user=user)
        return MarkResult(escalation=current, changed=True)
    escalation = Escalation.objects.create(
        study_id=assignment.conversation.study_id,
        response_id=response_id,
        assignment=assignment,
        rater_id=assignment.rater_id,
        reason=reason,
    )
    _audit(assignment=assignment, response_id=response_id, old="", new=reason, user=user)
    _opened_tell(escalation)
    return MarkResult(escalation=escalation, changed=True)


@transaction.atomic
def escalation_withdraw(*, assignment: Assignment, item_token: str, user: User) -> MarkResult:
    """Withdraw the clinician's open escalation of the response `item_token`, while their task
    is open (refused as `escalation_mark` is otherwise). Nothing open: nothing to do (a second
    tab's withdraw), unless an adjudicator already decided it, which ValueError says."""
    assignment = assignment_lock_open(assignment=assignment)
    response_id, _ = _item_for(assignment, item_token)
    mine = Escalation.objects.select_for_update().filter(
        rater_id=assignment.rater_id, response_id=response_id
    )
    current = mine.filter(status=Escalation.Status.OPEN).first()
    if current is None:
        latest = mine.order_by("-created_at", "-id").first()
        if latest is not None and latest.status == Escalation.Status.RESOLVED:
            raise ValueError(
                "an adjudicator has already decided this escalation; it can no longer be withdrawn"
            )
        return MarkResult(escalation=None, changed=False)
    current.status, current.withdrawn_at = Escalation.Status.WITHDRAWN, timezone.now()
    current.save(update_fields=["status", "withdrawn_at", "updated_at"])
    assignment_touch(assignment=assignment, now=timezone.now())
    _audit(assignment=assignment, response_id=response_id, old=current.reason, new="", user=user)
    return MarkResult(escalation=None, changed=True)


@transaction.atomic
def escalation_decide(
    *, study: Study, escalation_id: int, decision: str, note: str, user: User
) -> Escalation:
    """An adjudicator's decision on an escalation of `study`: confirmed unsafe or not unsafe,
    with a note saying why. Closes it; saving again changes the decision (audited each time).
    Raises EscalationRefused, writing nothing, for an escalation of another study, one the
    clinician withdrew, an unknown decision or an empty note."""
    if decision not in Escalation.Decision.values:
        raise EscalationRefused(
            f"unknown decision {decision!r}; choose one of {', '.join(Escalation.Decision.values)}"
        )
    note = note.strip()[:REASON_MAX_CHARS]
    if not note:
        raise EscalationRefused("say why, in the note")
    escalation = (
        Escalation.objects.select_for_update(of=("self",))
        .select_related("assignment")
        .filter(pk=escalation_id, study=study)
        .first()
    )
    if escalation is None:
        raise EscalationRefused("no such escalation in this study")
    if escalation.status == Escalation.Status.WITHDRAWN:
        raise EscalationRefused(
            "the clinician withdrew this escalation: there is nothing to decide"
        )
    if (
        escalation.status == Escalation.Status.RESOLVED
        and escalation.decision == decision
        and escalation.decision_note == note
    ):
        return escalation
    old = (
        f"{escalation.decision}: {escalation.decision_note}"
        if escalation.decision
        else Escalation.Status.OPEN
    )
    escalation.status = Escalation.Status.RESOLVED
    escalation.decision, escalation.decision_note = decision, note
    escalation.decided_by, escalation.decided_at = user, timezone.now()
    escalation.save(
        update_fields=[
            "status",
            "decision",
            "decision_note",
            "decided_by",
            "decided_at",
            "updated_at",
        ]
    )
    rating = Rating.objects.filter(
        rater_id=escalation.rater_id,
        response_id=escalation.response_id,
        run=None,
        repeat=escalation.assignment.rating_repeat,
    ).first()
    if rating is not None:
        RatingChange.objects.create(
            rating=rating,
            field="unsafe",
            old_value=old,
            new_value=f"{decision}: {note}",
            changed_by=user,
        )
    return escalation
