"""Reads for the admins' clinician pages (/manage/: overview, reassign, audit trail): the views in
admin_views.py render what these return and run no query of their own (docs/architecture.md)."""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db.models import Count, Q, QuerySet
from django.utils import timezone

from accounts.roles import manageable_users

from .models import (
    Assignment,
    LabelChange,
    Rater,
    RatingChange,
    Response,
    Study,
    Webhook,
    WebhookDelivery,
)
from .selectors import NOT_COUNTED, label_changes, rating_changes
from .topup import TopUpSummary, topup_summary


def study_get(*, pk: str | int | None) -> Study | None:
    """The study with primary key `pk` (a request's ?study= or posted field), if it exists."""
    return Study.objects.filter(pk=pk).first() if pk and str(pk).isdigit() else None


def studies_all() -> list[Study]:
    return list(Study.objects.all())


def assignment_get(*, pk: int) -> Assignment | None:
    return Assignment.objects.select_related("conversation").filter(pk=pk).first()


def active_user_get(*, pk: int) -> User | None:
    return get_user_model().objects.filter(pk=pk, is_active=True).first()


def manageable_user_ids(*, actor, user_ids: Iterable[int]) -> set[int]:
    """Which of `user_ids` the signed-in admin may issue a password link for (one query)."""
    return set(
        manageable_users(actor=actor).filter(pk__in=list(user_ids)).values_list("pk", flat=True)
    )


def clinicians_with_accounts() -> list[Rater]:
    return list(
        Rater.objects.filter(kind=Rater.Kind.CLINICIAN, user__isnull=False).order_by("name")
    )


def move_candidates(
    *, assignments: list[Assignment], clinicians: list[Rater], load: dict[int, int]
) -> dict[int, list[Rater]]:
    """Per assignment, the clinicians it can be moved to (reassign or reclaim): every clinician
    with an account who holds no assignment of that conversation in any state — the services
    refuse the others — least loaded first, so the menu's default is someone who can take it.
    One query for all rows."""
    conversation_ids = {a.conversation_id for a in assignments}
    holders: dict[int, set[int]] = {}
    for conversation_id, rater_id in Assignment.objects.filter(
        conversation_id__in=conversation_ids
    ).values_list("conversation_id", "rater_id"):
        holders.setdefault(conversation_id, set()).add(rater_id)
    ordered = sorted(clinicians, key=lambda r: (load.get(r.pk, 0), r.name))
    return {
        a.pk: [r for r in ordered if r.pk not in holders.get(a.conversation_id, set())]
        for a in assignments
    }


# --- Audit trail -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditFilter:
    """What the audit trail (page and CSV downloads) is narrowed to; None: no condition."""

    study: Study | None = None
    clinician: Rater | None = None
    conversation: str = ""  # the conversation's id in its study (external id), exact
    date_from: datetime.date | None = None  # inclusive, in the site's time zone
    date_to: datetime.date | None = None  # inclusive


def _day_bounds(where: AuditFilter) -> tuple[datetime.datetime | None, datetime.datetime | None]:
    """The date range as instants (from midnight of the first day to midnight after the last, in
    the site's time zone), so the database compares the indexed column itself."""

    def midnight(day: datetime.date) -> datetime.datetime:
        return timezone.make_aware(datetime.datetime.combine(day, datetime.time.min))

    start = midnight(where.date_from) if where.date_from else None
    end = midnight(where.date_to + datetime.timedelta(days=1)) if where.date_to else None
    return start, end


def audit_rating_changes(*, where: AuditFilter, newest_first: bool) -> QuerySet[RatingChange]:
    rows = rating_changes(study=where.study)
    return _filtered(rows, where, "rating__rater", "rating__response__conversation", newest_first)


def audit_label_changes(*, where: AuditFilter, newest_first: bool) -> QuerySet[LabelChange]:
    rows = label_changes(study=where.study)
    return _filtered(rows, where, "annotation__rater", "annotation__conversation", newest_first)


def _filtered(rows, where: AuditFilter, rater: str, conversation: str, newest_first: bool):
    """The audit filters on a change queryset, whose rater and conversation lie at those paths."""
    if where.clinician is not None:
        rows = rows.filter(**{rater: where.clinician})
    if where.conversation:
        rows = rows.filter(**{f"{conversation}__external_id": where.conversation})
    start, end = _day_bounds(where)
    if start is not None:
        rows = rows.filter(changed_at__gte=start)
    if end is not None:
        rows = rows.filter(changed_at__lt=end)
    return rows.order_by("-changed_at", "-id") if newest_first else rows


LABEL_CHANGE_HEADER = (
    "changed_at", "changed_by", "study", "conversation", "rater", "field", "old", "new",
)  # fmt: skip
RATING_CHANGE_HEADER = (
    "changed_at", "changed_by", "study", "conversation", "rater", "responder", "response_id",
    "attribute", "field", "old_value", "new_value",
)  # fmt: skip


def label_change_rows(*, changes: QuerySet[LabelChange]) -> Iterator[list[object]]:
    for c in changes.iterator(chunk_size=2000):
        conversation = c.annotation.conversation
        yield [
            c.changed_at.isoformat(),
            c.changed_by.get_username() if c.changed_by else "",
            conversation.study.name,
            conversation.external_id,
            c.annotation.rater.name,
            c.field,
            c.old_value,
            c.new_value,
        ]


def rating_change_rows(*, changes: QuerySet[RatingChange]) -> Iterator[list[object]]:
    for c in changes.iterator(chunk_size=2000):
        response = c.rating.response
        yield [
            c.changed_at.isoformat(),
            c.changed_by.get_username() if c.changed_by else "",
            response.conversation.study.name,
            response.conversation.external_id,
            c.rating.rater.name,
            response.responder.key,
            response.pk,
            c.attribute.name if c.attribute else "",
            c.field,
            c.old_value,
            c.new_value,
        ]


# --- The study page: the study's life, step by step -------------------------------------------

#: Conversations rated by two or more clinicians that agreement (ICC) needs at the least; the
#: assignment form's default overlap aims at OVERLAP_TARGET of them (all, in a smaller study).
OVERLAP_MINIMUM = 2
OVERLAP_TARGET = 30


@dataclass
class StudyStep:
    """One step of a study's life on its page: what is done, or what to do next."""

    key: str  # the section's anchor on the page
    title: str
    state: str  # "done", "todo", "optional" or "waiting"; the first "todo" is shown as next
    summary: str
    next: bool = False


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def study_steps(*, study: Study, topup: TopUpSummary | None = None) -> list[StudyStep]:
    """The study page's steps in the order a lead works: conversations, clinicians, practice,
    assignment, progress, top-up (judges, results and release come from their own apps). Each
    says what is done and what comes next; the first step still to do is marked `next`."""

    counted = study.conversations.aggregate(
        real=Count("id", filter=Q(practice=False)), practice=Count("id", filter=Q(practice=True))
    )
    n_conversations, practice = counted["real"], counted["practice"]
    n_responses = Response.objects.filter(
        conversation__study=study, conversation__practice=False
    ).count()
    clinicians = Rater.objects.filter(kind=Rater.Kind.CLINICIAN, user__isnull=False).count()
    passed = study.training_outcomes.filter(passed=True).count()
    is_practice = Q(kind=Assignment.Kind.PRACTICE)
    counted_real = ~is_practice & ~Q(status__in=NOT_COUNTED)
    work = Assignment.objects.filter(conversation__study=study).aggregate(
        practice_given=Count("id", filter=is_practice),
        real=Count("id", filter=counted_real),
        submitted=Count("id", filter=counted_real & Q(status=Assignment.Status.SUBMITTED)),
    )
    practice_given, n_real, submitted = work["practice_given"], work["real"], work["submitted"]
    overlapping = (
        Assignment.objects.filter(conversation__study=study, part=0)
        .filter(counted_real)
        .values("conversation")
        .annotate(raters=Count("rater", distinct=True))
        .filter(raters__gte=2)
        .count()
    )
    topup = topup if topup is not None else topup_summary(study=study)
    labelling = study.kind == Study.Kind.DISTORTION_LABELLING
    items = "messages" if labelling else "conversations"

    steps = [
        StudyStep(
            "conversations",
            "Rubric and conversations",
            "done" if n_conversations else "todo",
            (
                f"{_plural(n_conversations, 'conversation', 'conversations')} with "
                f"{_plural(n_responses, 'response', 'responses')}, rated on "
                f"{study.rubric.name}."
                if n_conversations
                else "Import the study's conversations."
            ),
        ),
        StudyStep(
            "clinicians",
            "Clinicians",
            "done" if clinicians >= 2 else "todo",
            (
                f"{_plural(clinicians, 'clinician has', 'clinicians have')} an account."
                + ("" if clinicians >= 2 else " Invite at least two: agreement needs two.")
            ),
        ),
        StudyStep(
            "practice",
            "Practice and calibration",
            "done" if practice and practice_given else ("todo" if practice else "optional"),
            (
                f"{_plural(practice, 'practice conversation', 'practice conversations')}; "
                f"{_plural(passed, 'clinician', 'clinicians')} passed."
                if practice_given
                else (
                    f"{_plural(practice, 'practice conversation is', 'practice conversations are')}"
                    " marked: give them to the clinicians on the training page."
                    if practice
                    else "Optional: mark practice conversations with reference scores to "
                    "calibrate clinicians before their real work."
                )
            ),
        ),
        StudyStep(
            "assign",
            "Assignment",
            ("todo" if not n_real or (overlapping < OVERLAP_MINIMUM and not labelling) else "done"),
            (
                f"{_plural(n_real, 'task', 'tasks')} assigned; "
                f"{_plural(overlapping, 'conversation has', 'conversations have')} two or more "
                "clinicians"
                + (
                    "."
                    if overlapping >= OVERLAP_MINIMUM or labelling
                    else f": agreement needs at least {OVERLAP_MINIMUM}, assign with overlap."
                )
                if n_real
                else f"Give the {items} to the clinicians."
            ),
        ),
        StudyStep(
            "progress",
            "Progress",
            "done" if n_real and submitted == n_real else "waiting",
            f"{submitted} of {n_real} tasks submitted." if n_real else "Nothing assigned yet.",
        ),
        StudyStep(
            "topup",
            "Added responses",
            "todo" if topup.items else "done",
            (
                f"{_plural(topup.items, 'response', 'responses')} added to conversations "
                f"{_plural(topup.clinicians, 'clinician', 'clinicians')} already hold: "
                "assign just those."
                if topup.items
                else "Every clinician holding a conversation has all its responses."
            ),
        ),
    ]
    for step in steps:
        if step.state == "todo":
            step.next = True
            break
    return steps


def assign_defaults(*, study: Study) -> dict:
    """The assignment form's starting values, chosen so that agreement can be measured: two
    clinicians on OVERLAP_TARGET conversations (every one, in a smaller study), at least 20 %.
    One clinician per conversation (the old default) leaves ICC, α and κ nothing to compare."""
    import math

    n = study.conversations.filter(practice=False).count()
    percent = 100 if n <= OVERLAP_TARGET else max(20, math.ceil(100 * OVERLAP_TARGET / n))
    return {"study": study.pk, "overlap": 2, "overlap_percent": percent}


@dataclass
class StudyRow:
    study: Study
    conversations: int
    next: StudyStep | None


def studies_overview() -> list[StudyRow]:
    """Each study with its size and the step it is at, for the page that lists them."""
    rows = []
    for study in Study.objects.select_related("rubric").annotate(
        n=Count("conversations", filter=Q(conversations__practice=False))
    ):
        steps = study_steps(study=study)
        rows.append(StudyRow(study, study.n, next((s for s in steps if s.next), None)))
    return rows


def webhooks_listed() -> QuerySet[Webhook]:
    """Every webhook with its deliveries counted by status, for the webhooks page."""
    return Webhook.objects.select_related("study").annotate(
        n_delivered=Count("deliveries", filter=Q(deliveries__status="delivered")),
        n_waiting=Count("deliveries", filter=Q(deliveries__status__in=["pending", "sending"])),
        n_failed=Count("deliveries", filter=Q(deliveries__status="failed")),
    )


def webhook_deliveries(*, webhook: Webhook, limit: int = 100) -> list[WebhookDelivery]:
    """The hook's latest deliveries, newest first: its log."""
    return list(webhook.deliveries.order_by("-created_at")[:limit])
