"""Writes for adjudication: an adjudicator's final score of a disputed response and attribute
(docs/adjudication.md)."""

from __future__ import annotations

from django.db import transaction

from ..adjudication_selectors import attribute_thresholds, disputed_attribute_ids
from ..models import Adjudication, AttributeLevel, Response, Study


class AdjudicationRefused(ValueError):
    """The save names something that cannot be adjudicated; nothing was written."""


def _threshold(study: Study, attribute_id: int) -> int:
    return attribute_thresholds(study=study).get(attribute_id, study.adjudication_threshold)


def adjudication_save(
    *,
    study: Study,
    response_id: int,
    attribute_id: int,
    score: int,
    reason: str = "",
    reason_text: str = "",
    rubric_needs_change: bool = False,
    user,
) -> Adjudication:
    """Create or update the adjudication of one response on one attribute.

    Idempotent: saving the same values again changes nothing but ``updated_at``. The response's
    row is locked first, so two tabs (or two adjudicators) saving the same pair at once are
    serialised and the second updates the first's row instead of colliding on the unique
    constraint. Raises AdjudicationRefused, writing nothing, for a response that is not this
    study's, an attribute that is not disputed, a score off the attribute's scale or an unknown
    reason."""
    if reason and reason not in Adjudication.Reason.values:
        raise AdjudicationRefused(
            f"unknown reason {reason!r}; choose one of {', '.join(Adjudication.Reason.values)}"
        )
    with transaction.atomic():
        response = (
            Response.objects.select_for_update()
            .filter(pk=response_id, conversation__study=study, conversation__practice=False)
            .first()
        )
        if response is None:
            raise AdjudicationRefused("no such response in this study")
        if attribute_id not in disputed_attribute_ids(study=study, response_id=response.pk):
            raise AdjudicationRefused(
                "this attribute is not disputed for this response: its clinicians agree within "
                f"its threshold ({_threshold(study, attribute_id)} points) and no clinician "
                "flagged the conversation"
            )
        scale = sorted(
            AttributeLevel.objects.filter(attribute_id=attribute_id).values_list("value", flat=True)
        )
        if score not in scale:
            raise AdjudicationRefused(
                f"score {score} is not on this attribute's scale ({scale[0]}–{scale[-1]})"
                if scale
                else f"score {score}: this attribute has no scale"
            )
        values = {
            "study": study,
            "final_score": score,
            "reason": reason,
            "reason_text": reason_text.strip(),
            "rubric_needs_change": rubric_needs_change,
            "adjudicator": user,
        }
        adjudication, _ = Adjudication.objects.update_or_create(
            response=response, attribute_id=attribute_id, defaults=values
        )
    return adjudication
