"""Clinician distortion labelling: saving and submitting a conversation's labels."""

from django.contrib.auth.models import User
from django.db import transaction
from django.utils import timezone

from scoring.distortions import NO_DISTORTION

from ..models import (
    Assignment,
    LabelAnnotation,
    LabelChange,
    Study,
)
from ..selectors import study_label_names
from .rating import (
    AssignmentIncomplete,
    SaveResult,
    assignment_lock_open,
    assignment_mark_submitted,
    assignment_touch,
    edit_clock_ms,
    form_row_get_or_create,
)


def labels_check(*, labels: list[str], names: list[str], scheme: str) -> list[str]:
    """A clinician's selection in canonical order, or ValueError saying what is wrong.

    Ranked: [dominant] or [dominant, secondary] (distinct). Multi: any number, in the label
    set's order. Either way "No Distortion" stands alone: it says there is no distortion.
    """
    unknown = [label for label in labels if label not in names]
    if unknown:
        raise ValueError(f"not a label of this study: {', '.join(unknown)}")
    if len(set(labels)) != len(labels):
        raise ValueError("the secondary label must differ from the dominant one")
    if NO_DISTORTION in labels and len(labels) > 1:
        raise ValueError(f"“{NO_DISTORTION}” cannot be combined with a distortion")
    if scheme == Study.LabelScheme.RANKED:
        if len(labels) > 2:
            raise ValueError("choose one dominant label and at most one secondary label")
        return labels
    return sorted(labels, key=names.index)


@transaction.atomic
def label_annotation_save(
    *,
    assignment: Assignment,
    user: User,
    labels: list[str],
    edited_ms: int | None = None,
) -> SaveResult:
    """Autosave a clinician's whole selection for the assignment's user message.

    Last edit wins by the browser's edit clock, as for ratings: an older save (a stale tab)
    changes nothing and reports the stored selection. Audited in LabelChange. Safe to retry.
    """
    now = timezone.now()
    clock = edit_clock_ms(edited_ms=edited_ms, now=now)
    assignment = assignment_lock_open(assignment=assignment)
    study = assignment.conversation.study
    if study.kind != Study.Kind.DISTORTION_LABELLING:
        raise ValueError("this conversation belongs to a response-rating study")
    labels = labels_check(
        labels=labels, names=study_label_names(study_id=study.pk), scheme=study.label_scheme
    )
    annotation = form_row_get_or_create(
        model=LabelAnnotation, assignment=assignment, conversation_id=assignment.conversation_id
    )
    assignment_touch(assignment=assignment, now=now)
    if annotation.edited_ms is not None and annotation.edited_ms > clock:
        return SaveResult(saved=False, value=", ".join(annotation.labels))
    old = list(annotation.labels)
    annotation.labels, annotation.edited_ms = labels, clock
    annotation.save(update_fields=["labels", "edited_ms", "updated_at"])
    if old != labels:
        LabelChange.objects.create(
            annotation=annotation,
            field="labels",
            old_value=", ".join(old),
            new_value=", ".join(labels),
            changed_by=user,
        )
    return SaveResult(saved=True, value=", ".join(labels))


@transaction.atomic
def label_assignment_submit(*, assignment: Assignment, user: User) -> Assignment:
    """Lock a labelled user message: needs a dominant label (ranked) or at least one label
    (multi). Raises AssignmentIncomplete saying what is missing."""
    assignment = assignment_lock_open(assignment=assignment)
    annotation = LabelAnnotation.objects.filter(
        rater_id=assignment.rater_id,
        conversation_id=assignment.conversation_id,
        run=None,
        repeat=0,
    ).first()
    if annotation is None or not annotation.labels:
        scheme = assignment.conversation.study.label_scheme
        what = "a dominant label" if scheme == Study.LabelScheme.RANKED else "at least one label"
        raise AssignmentIncomplete([("", [f"choose {what}"])])
    now = timezone.now()
    old_status = annotation.status
    annotation.status, annotation.assignment = LabelAnnotation.Status.COMPLETE, assignment
    annotation.save(update_fields=["status", "assignment", "updated_at"])
    LabelChange.objects.create(
        annotation=annotation,
        field="status",
        old_value=old_status,
        new_value="complete",
        changed_by=user,
    )
    return assignment_mark_submitted(assignment=assignment, now=now)
