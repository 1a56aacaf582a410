"""Reads for feedback to raters after adjudication (docs/adjudication.md, *Feedback to
clinicians*): where a clinician's score differed from the adjudicated final score, with the
adjudicator's reason, shown with the training round's feedback table (annotation.training's
FeedbackCell, FeedbackItem); and, per clinician of a study, how many of their scores an
adjudication overruled (the drift page's count).

Only the clinician's own ratings that count (complete, first rating, not practice: the rule of
annotation.analysed) take part, so feedback comes once their conversation is submitted and
adjudicated. A clinician sees responses by their own letters only, never who wrote them, and
neither the other clinicians' scores nor the adjudicator's name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import QuerySet

from .analysed import analysed_ratings_q
from .models import (
    Adjudication,
    Assignment,
    AssignmentItem,
    AttributeLevel,
    Rater,
    Rating,
    Score,
    Study,
)
from .training import FeedbackCell, FeedbackItem


@dataclass
class AdjudicatedCell(FeedbackCell):
    """A training feedback cell whose reference is the adjudicated final score, with why."""

    reason: str = ""  # the reason's label ("Rater error")
    reason_text: str = ""


@dataclass
class AdjudicatedConversation:
    study: str
    context: str
    submitted_at: datetime | None
    items: list[FeedbackItem] = field(default_factory=list)


def _counted_scores(**where) -> QuerySet[Score]:
    return Score.objects.filter(
        analysed_ratings_q("rating__"),
        rating__status=Rating.Status.COMPLETE,
        rating__run__isnull=True,
        rating__rater__kind=Rater.Kind.CLINICIAN,
        **where,
    )


def _differences(scores: QuerySet[Score], adjudications: QuerySet[Adjudication]):
    """(rater, response, attribute, their score, the adjudication) for each counted score on an
    adjudicated pair, and whether it differs."""
    final = {(a.response_id, a.attribute_id): a for a in adjudications}
    if not final:
        return []
    rows = scores.filter(rating__response_id__in={r for r, _ in final}).values_list(
        "rating__rater_id", "rating__response_id", "attribute_id", "value"
    )
    return [
        (rater, response, attribute, value, final[(response, attribute)])
        for rater, response, attribute, value in rows
        if (response, attribute) in final
    ]


def adjudication_feedback(*, rater: Rater) -> list[AdjudicatedConversation]:
    """The clinician's conversations with a score an adjudicator set otherwise: per response
    (their letter, its text) the attributes whose final score differs from theirs, with both
    anchors and the adjudicator's reason. Newest submission first; five queries."""
    mine = _counted_scores(rating__rater=rater)
    adjudications = Adjudication.objects.filter(
        response_id__in=mine.values("rating__response_id")
    ).select_related("attribute")
    differing = [d for d in _differences(mine, adjudications) if d[3] != d[4].final_score]
    if not differing:
        return []
    response_ids = {response for _, response, _, _, _ in differing}
    anchors = {
        (attribute, value): anchor
        for attribute, value, anchor in AttributeLevel.objects.filter(
            attribute_id__in={attribute for _, _, attribute, _, _ in differing}
        ).values_list("attribute_id", "value", "anchor")
    }
    # The response as the clinician saw it: its letter in their (submitted) task, where it was
    # rated (not a later part's read-only copy).
    items = {
        item.response_id: item
        for item in AssignmentItem.objects.filter(
            assignment__rater=rater,
            assignment__kind=Assignment.Kind.RATING,
            assignment__status=Assignment.Status.SUBMITTED,
            response_id__in=response_ids,
            earlier=False,
        ).select_related("assignment__conversation__study", "response")
    }
    reasons = dict(Adjudication.Reason.choices)
    cells: dict[int, list[FeedbackCell]] = {}
    for _, response, attribute, value, made in sorted(
        differing, key=lambda d: (d[1], d[4].attribute.position)
    ):
        cells.setdefault(response, []).append(
            AdjudicatedCell(
                attribute=made.attribute.name,
                yours=value,
                reference=made.final_score,
                your_anchor=anchors.get((attribute, value), ""),
                reference_anchor=anchors.get((attribute, made.final_score), ""),
                reason=reasons.get(made.reason, ""),
                reason_text=made.reason_text,
            )
        )
    conversations: dict[int, AdjudicatedConversation] = {}
    for response, item in sorted(items.items(), key=lambda pair: pair[1].position):
        assignment = item.assignment
        entry = conversations.setdefault(
            assignment.pk,
            AdjudicatedConversation(
                study=assignment.conversation.study.name,
                context=assignment.conversation.context,
                submitted_at=assignment.submitted_at,
            ),
        )
        entry.items.append(
            FeedbackItem(label=item.label, text=item.response.text, cells=cells[response])
        )
    return sorted(
        conversations.values(),
        key=lambda c: c.submitted_at.timestamp() if c.submitted_at else 0,
        reverse=True,
    )


def adjudication_feedback_any(*, rater: Rater) -> bool:
    """Whether anything of the clinician's was adjudicated (the queue's link to the feedback)."""
    return Adjudication.objects.filter(
        response_id__in=_counted_scores(rating__rater=rater).values("rating__response_id")
    ).exists()


def overruled_by_rater(*, study: Study) -> dict[int, tuple[int, int]]:
    """rater → (their scores an adjudication set otherwise, their scores on adjudicated
    pairs), over the study's counted clinician ratings. Two queries."""
    counts: dict[int, list[int]] = {}
    for rater, _, _, value, made in _differences(
        _counted_scores(rating__response__conversation__study=study),
        Adjudication.objects.filter(study=study),
    ):
        entry = counts.setdefault(rater, [0, 0])
        entry[0] += value != made.final_score
        entry[1] += 1
    return {rater: (overruled, total) for rater, (overruled, total) in counts.items()}
