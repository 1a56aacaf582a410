"""Reads for escalation (docs/adjudication.md, *Escalation*): the escalations heading a study's
adjudication queue, those of one response for its adjudication page, the open count the lead's
pages show, and a clinician's own marks on their rating page.

What an adjudicator's or a lead's template is given is built here from plain values: the
clinician who escalated appears only as "Clinician A", "Clinician B", … (the letters of the
response's adjudication page), never by name, and nothing names the response's system.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Case, IntegerField, Value, When

from .adjudication_selectors import clinician_labels
from .models import Assignment, Escalation, Study


def _letter(n: int) -> str:
    # As the adjudication page letters its clinicians.
    return chr(ord("A") + n) if n < 26 else f"#{n + 1}"


@dataclass(frozen=True)
class EscalationRow:
    escalation_id: int
    response_id: int
    conversation: str  # the conversation's id in the study
    clinician: str  # "Clinician A"
    reason: str
    is_open: bool
    decision: str  # "" while open, else the Decision value
    decision_label: str
    decision_note: str
    created_at: datetime
    decided_at: datetime | None


def _rows(study: Study, escalations) -> list[EscalationRow]:
    values = list(
        escalations.order_by(
            Case(When(status=Escalation.Status.OPEN, then=Value(0)), default=Value(1),
                 output_field=IntegerField()),
            "-created_at",
            "-id",
        ).values(
            "pk",
            "response_id",
            "rater_id",
            "assignment__conversation__external_id",
            "reason",
            "status",
            "decision",
            "decision_note",
            "created_at",
            "decided_at",
        )
    )  # fmt: skip
    labels = clinician_labels(study=study, response_ids={v["response_id"] for v in values})
    # A clinician who escalated before their rating counts (their task still open) gets the next
    # letter after those whose ratings count, in the order they escalated.
    for v in sorted(values, key=lambda v: v["pk"]):
        mine = labels[v["response_id"]]
        mine.setdefault(v["rater_id"], f"Clinician {_letter(len(mine))}")
    decisions = dict(Escalation.Decision.choices)
    return [
        EscalationRow(
            escalation_id=v["pk"],
            response_id=v["response_id"],
            conversation=v["assignment__conversation__external_id"],
            clinician=labels[v["response_id"]][v["rater_id"]],
            reason=v["reason"],
            is_open=v["status"] == Escalation.Status.OPEN,
            decision=v["decision"],
            decision_label=decisions.get(v["decision"], ""),
            decision_note=v["decision_note"],
            created_at=v["created_at"],
            decided_at=v["decided_at"],
        )
        for v in values
    ]


def escalations_for_queue(*, study: Study) -> list[EscalationRow]:
    """The study's escalations an adjudicator sees: open ones first, then decided ones, newest
    first within each; withdrawn ones are left out. Two queries."""
    return _rows(study, Escalation.objects.filter(study=study).exclude(status="withdrawn"))


def escalations_for_response(*, study: Study, response_id: int) -> list[EscalationRow]:
    """One response's escalations (not withdrawn), as `escalations_for_queue`."""
    return _rows(
        study,
        Escalation.objects.filter(study=study, response_id=response_id).exclude(status="withdrawn"),
    )


def escalations_open_count(*, study: Study) -> int:
    return Escalation.objects.filter(study=study, status=Escalation.Status.OPEN).count()


def escalation_next_open(*, study: Study, after_response_id: int) -> int | None:
    """The response of the oldest open escalation other than `after_response_id`: where an
    adjudicator goes next, before any disagreement."""
    return (
        Escalation.objects.filter(study=study, status=Escalation.Status.OPEN)
        .exclude(response_id=after_response_id)
        .order_by("created_at", "id")
        .values_list("response_id", flat=True)
        .first()
    )


def unsafe_marks(*, assignment: Assignment) -> dict[int, str]:
    """response → the reason of the clinician's open escalation of it, for their rating page:
    only their own marks, never another clinician's."""
    return dict(
        Escalation.objects.filter(
            assignment__conversation_id=assignment.conversation_id,
            rater_id=assignment.rater_id,
            status=Escalation.Status.OPEN,
        ).values_list("response_id", "reason")
    )
