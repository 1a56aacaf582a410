"""Consent: a study's versioned consent text, clinicians' acceptance before their first rating,
and withdrawal, handled as the text they agreed to says (keep or remove their ratings).

The gate is `consent_refusal`, asked by `assignment_lock_open` (every write of a rating, label,
submission or flag) and by the rating page, so no tab from before a new version or a withdrawal
can save.
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from ..models import (
    Assignment,
    AssignmentChange,
    ConsentRecord,
    ConsentText,
    LabelAnnotation,
    Rater,
    Rating,
    Study,
)


class ConsentError(ValueError):
    """A consent action that cannot be done (nothing to consent to, withdrawn before, …)."""


def consent_current(*, study_id: int) -> ConsentText | None:
    """The latest version of the study's consent text; None when the study asks for none."""
    return ConsentText.objects.filter(study_id=study_id).order_by("-version").first()


def consent_refusal(*, study_id: int, rater: Rater | int) -> str:
    """Why `rater` may not work in the study now ("" when they may): a consent text they have
    not accepted (in its latest version), or a consent they withdrew."""
    current = consent_current(study_id=study_id)
    if current is None:
        return ""
    if ConsentRecord.objects.filter(
        consent_text__study_id=study_id, rater=rater, withdrawn_at__isnull=False
    ).exists():
        return "you withdrew your consent to this study: it takes no more work from you"
    if not ConsentRecord.objects.filter(consent_text=current, rater=rater).exists():
        return (
            f"this study asks for your consent (version {current.version}) before you rate: "
            "read and accept it first"
        )
    return ""


@transaction.atomic
def consent_text_publish(
    *, study: Study, text: str, on_withdrawal: str = ConsentText.OnWithdrawal.KEEP, actor=None
) -> ConsentText:
    """A new version of the study's consent text: every clinician accepts it before their next
    save (the earlier version's records stay as they were)."""
    if not text.strip():
        raise ConsentError("a consent text cannot be empty")
    if on_withdrawal not in ConsentText.OnWithdrawal.values:
        raise ConsentError(f"unknown rule for withdrawal: {on_withdrawal!r}")
    Study.objects.select_for_update().get(pk=study.pk)  # versions are numbered one at a time
    latest = ConsentText.objects.filter(study=study).aggregate(v=Max("version"))["v"] or 0
    return ConsentText.objects.create(
        study=study,
        version=latest + 1,
        text=text.strip(),
        on_withdrawal=on_withdrawal,
        created_by=actor,
    )


@transaction.atomic
def consent_accept(*, study_id: int, rater: Rater) -> ConsentRecord:
    current = consent_current(study_id=study_id)
    if current is None:
        raise ConsentError("this study asks for no consent")
    if ConsentRecord.objects.filter(
        consent_text__study_id=study_id, rater=rater, withdrawn_at__isnull=False
    ).exists():
        raise ConsentError(
            "you withdrew your consent to this study; the study's lead can tell you whether "
            "you may join again"
        )
    record, _ = ConsentRecord.objects.get_or_create(consent_text=current, rater=rater)
    return record


@transaction.atomic
def consent_withdraw(*, study_id: int, rater: Rater, actor=None) -> ConsentRecord:
    """Withdraw: no new work (open assignments are reclaimed, each change audited), and the
    ratings given so far kept or removed as the accepted text says."""
    record = (
        ConsentRecord.objects.select_for_update()
        .select_related("consent_text")
        .filter(consent_text__study_id=study_id, rater=rater, withdrawn_at__isnull=True)
        .order_by("-consent_text__version")
        .first()
    )
    if record is None:
        raise ConsentError("there is no consent of yours to this study to withdraw")
    now = timezone.now()
    ConsentRecord.objects.filter(
        consent_text__study_id=study_id, rater=rater, withdrawn_at__isnull=True
    ).update(withdrawn_at=now)
    for assignment in Assignment.objects.select_for_update().filter(
        rater=rater, conversation__study_id=study_id, status__in=Assignment.OPEN_STATUSES
    ):
        AssignmentChange.objects.create(
            assignment=assignment,
            field="status",
            old_value=assignment.status,
            new_value=f"{Assignment.Status.RECLAIMED} (consent withdrawn)",
            changed_by=actor,
        )
        assignment.status = Assignment.Status.RECLAIMED
        assignment.save(update_fields=["status"])
    removed = 0
    if record.consent_text.on_withdrawal == ConsentText.OnWithdrawal.REMOVE:
        removed += (
            Rating.objects.filter(rater=rater, response__conversation__study_id=study_id)
            .delete()[1]
            .get("annotation.Rating", 0)
        )
        removed += (
            LabelAnnotation.objects.filter(rater=rater, conversation__study_id=study_id)
            .delete()[1]
            .get("annotation.LabelAnnotation", 0)
        )
    record.refresh_from_db()
    record.ratings_removed = removed
    record.save(update_fields=["ratings_removed"])
    return record
