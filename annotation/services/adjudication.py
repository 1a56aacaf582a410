"""Writes for adjudication: an adjudicator's final score of a disputed response and attribute
(docs/adjudication.md)."""

from __future__ import annotations

from django.db import transaction

from ..adjudication_selectors import attribute_thresholds, disputed_attribute_ids
from ..models import Adjudication, Attribute, AttributeLevel, AttributeThreshold, Response, Study


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


def adjudication_thresholds_set(
    *, study: Study, study_threshold: int, per_attribute: dict[int, int | None]
) -> None:
    """Set the study's adjudication threshold and each attribute's own (None: the study's), as
    the lead's team page asks. Every value is checked first: a whole number from 1 to the width
    of the rubric's scale (a larger one would send nothing to adjudication), for an attribute of
    the study's rubric. AdjudicationRefused names the first bad value, and nothing is written;
    otherwise all of it is written in one transaction."""
    rubric = study.rubric
    widest = rubric.scale_max - rubric.scale_min
    names = dict(Attribute.objects.filter(rubric_id=study.rubric_id).values_list("pk", "name"))
    checked = [("the study's threshold", study_threshold)]
    for attribute_id, points in per_attribute.items():
        if attribute_id not in names:
            raise AdjudicationRefused(f"attribute {attribute_id} is not of the study's rubric")
        if points is not None:
            checked.append((names[attribute_id], points))
    for what, points in checked:
        if not 1 <= points <= widest:
            raise AdjudicationRefused(
                f"{what}: {points} is not from 1 to {widest} (the scale is "
                f"{rubric.scale_min}–{rubric.scale_max})"
            )
    with transaction.atomic():
        Study.objects.filter(pk=study.pk).update(adjudication_threshold=study_threshold)
        study.adjudication_threshold = study_threshold
        unset = [pk for pk, points in per_attribute.items() if points is None]
        AttributeThreshold.objects.filter(study=study, attribute_id__in=unset).delete()
        for attribute_id, points in per_attribute.items():
            if points is not None:
                AttributeThreshold.objects.update_or_create(
                    study=study, attribute_id=attribute_id, defaults={"points": points}
                )
