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

from .models import (
    Assignment,
    LabelChange,
    Rater,
    RatingChange,
    Study,
    Webhook,
    WebhookDelivery,
)
from .roles import manageable_users
from .selectors import label_changes, rating_changes


def study_get(pk: str | int | None) -> Study | None:
    """The study with primary key `pk` (a request's ?study= or posted field), if it exists."""
    return Study.objects.filter(pk=pk).first() if pk and str(pk).isdigit() else None


def studies_all() -> list[Study]:
    return list(Study.objects.all())


def assignment_get(pk: int) -> Assignment | None:
    return Assignment.objects.select_related("conversation").filter(pk=pk).first()


def active_user_get(pk: int) -> User | None:
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


def label_change_rows(changes: QuerySet[LabelChange]) -> Iterator[list[object]]:
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


def rating_change_rows(changes: QuerySet[RatingChange]) -> Iterator[list[object]]:
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
