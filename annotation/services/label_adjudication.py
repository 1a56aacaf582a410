"""Writes for adjudicating distortion labels: an adjudicator's label(s) for a user message
whose clinicians disagree (docs/adjudication.md, "Distortion labels")."""

from __future__ import annotations

from django.db import transaction

from ..label_adjudication_selectors import is_disputed
from ..models import Adjudication, Conversation, LabelAdjudication, Study
from ..selectors import study_label_names
from .labelling import labels_check


class LabelAdjudicationRefused(ValueError):
    """The save names something that cannot be adjudicated; nothing was written."""


def label_adjudication_save(
    *,
    study: Study,
    conversation_id: int,
    labels: list[str],
    reason: str = "",
    reason_text: str = "",
    user,
) -> LabelAdjudication:
    """Create or update the adjudicated label(s) of one user message.

    The labels follow the clinicians' rules (annotation.services.labelling.labels_check): the
    study's label set, ranked = a dominant label and at most one distinct secondary one, multi
    = any number, "No Distortion" alone; at least one label. Idempotent: saving the same values
    again changes nothing but ``updated_at``. The message's row is locked first, so two saves
    of the same message are serialised and the second updates the first's row. Raises
    LabelAdjudicationRefused, writing nothing, for a message that is not this study's, one the
    clinicians do not disagree on, labels that break the rules or an unknown reason."""
    if reason and reason not in Adjudication.Reason.values:
        raise LabelAdjudicationRefused(
            f"unknown reason {reason!r}; choose one of {', '.join(Adjudication.Reason.values)}"
        )
    if not labels:
        what = "a dominant label" if study.label_scheme == Study.LabelScheme.RANKED else "a label"
        raise LabelAdjudicationRefused(f"choose {what}")
    try:
        labels = labels_check(
            labels=list(labels),
            names=study_label_names(study_id=study.pk),
            scheme=study.label_scheme,
        )
    except ValueError as exc:
        raise LabelAdjudicationRefused(str(exc)) from None
    with transaction.atomic():
        conversation = (
            Conversation.objects.select_for_update()
            .filter(
                pk=conversation_id,
                study=study,
                practice=False,
                study__kind=Study.Kind.DISTORTION_LABELLING,
            )
            .first()
        )
        if conversation is None:
            raise LabelAdjudicationRefused("no such message in this study")
        if not is_disputed(study=study, conversation_id=conversation.pk):
            raise LabelAdjudicationRefused(
                "the clinicians do not disagree on this message (fewer than two labelled it, "
                "or they agree), so there is nothing to adjudicate"
            )
        adjudication, _ = LabelAdjudication.objects.update_or_create(
            conversation=conversation,
            defaults={
                "study": study,
                "labels": labels,
                "reason": reason,
                "reason_text": reason_text.strip(),
                "adjudicator": user,
            },
        )
    return adjudication
