"""Reads for the REST API (analysis/api.py): the lists it pages through and the rows of a page.

The viewsets validate the query and check who may see what; these functions only read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from django.db.models import Count, Exists, OuterRef, Q, QuerySet

from annotation.analysed import analysed_ratings_q
from annotation.models import LabelAnnotation, Rater, RaterCode, Rating, Score, Study

# The models whose lists show raters pseudonymously.
_Rated = TypeVar("_Rated", Rating, LabelAnnotation)

# A rating as the API serves it, read with values(): at 1,000 ratings a page, building the
# model instances (19,000 with the scores and their attributes) was most of the answer's time.
RATING_COLUMNS = (
    "id", "response__conversation__study_id", "response__conversation__external_id",
    "response_id", "response__responder__key", "rater_id", "rater__name", "rater__kind",
    "run_id", "repeat", "status", "source", "rationale", "created_at", "updated_at",
)  # fmt: skip


def studies_listed(*, studies: QuerySet[Study]) -> QuerySet[Study]:
    """The ``studies`` (those the caller may see) by name, with their number of conversations
    and their rubric's attributes."""
    return (
        Study.objects.filter(pk__in=studies.values("pk"))
        .annotate(n_conversations=Count("conversations"))
        .select_related("rubric")
        .prefetch_related("rubric__attributes")
        .order_by("name")
    )


def study_or_none(*, study_id: int | None, studies: QuerySet[Study]) -> Study | None:
    """The study ``study_id`` names among ``studies``, or None (no id, or none such)."""
    return studies.filter(pk=study_id).first() if study_id is not None else None


def _rated_filtered(
    queryset: QuerySet[_Rated],
    *,
    study_field: str,
    studies: QuerySet[Study],
    study: int | None,
    rater: str | None,
    status: str | None,
    identified: bool,
) -> QuerySet[_Rated]:
    """The list filters ratings and label annotations share: the studies the caller may see,
    study, rater and status."""
    queryset = queryset.filter(**{f"{study_field}__in": studies.values("pk")})
    if study is not None:
        queryset = queryset.filter(**{study_field: study})
    if rater:
        if identified:
            queryset = queryset.filter(rater__name=rater)
        else:
            # Judges by name, clinicians only by their code in the rating's own study: a name
            # must not be usable to probe whether a person rated.
            code = RaterCode.objects.filter(
                rater_id=OuterRef("rater_id"), study_id=OuterRef(study_field), code=rater
            )
            queryset = queryset.filter(
                Q(rater__kind=Rater.Kind.JUDGE, rater__name=rater) | Exists(code)
            )
    if status:
        return queryset.filter(status=status)
    # A draft is a clinician's unfinished work: only on explicit request.
    return queryset.exclude(status=Rating.Status.DRAFT)


def ratings_listed(
    *, studies: QuerySet[Study], study: int | None = None, rater: str | None = None,
    status: str | None = None, identified: bool = False,
) -> QuerySet[Rating]:  # fmt: skip
    """The ratings the API lists, oldest first: study data only (practice and test-retest
    repeat ratings are not listed), no drafts unless ``status`` asks for them. ``rater`` is a
    judge's name, or a clinician's study code (their name only when ``identified``). Whether
    the caller may see drafts or identities is the view's to check."""
    ratings = Rating.objects.filter(analysed_ratings_q()).order_by("id")
    return _rated_filtered(
        ratings, study_field="response__conversation__study_id", studies=studies, study=study,
        rater=rater,
        status=status, identified=identified,
    )  # fmt: skip


def label_annotations_listed(
    *, studies: QuerySet[Study], study: int | None = None, rater: str | None = None,
    status: str | None = None, identified: bool = False,
) -> QuerySet[LabelAnnotation]:  # fmt: skip
    """The label annotations the API lists, oldest first, filtered as :func:`ratings_listed`."""
    annotations = LabelAnnotation.objects.select_related("conversation", "rater").order_by("id")
    return _rated_filtered(
        annotations, study_field="conversation__study_id", studies=studies, study=study,
        rater=rater,
        status=status, identified=identified,
    )  # fmt: skip


def rating_rows(*, ids: Sequence[int]) -> list[dict[str, Any]]:
    """The ratings `ids`, in that order, as dicts of RATING_COLUMNS plus "scores" (attribute
    name → value, in rubric order): two queries whatever the page's size."""
    rows = {row["id"]: row for row in Rating.objects.filter(pk__in=ids).values(*RATING_COLUMNS)}
    scores: dict[int, dict[str, int]] = {pk: {} for pk in rows}
    for rating_id, attribute, value in (
        Score.objects.filter(rating_id__in=ids)
        .order_by("rating_id", "attribute__position")
        .values_list("rating_id", "attribute__name", "value")
    ):
        scores[rating_id][attribute] = value
    return [{**rows[pk], "scores": scores[pk]} for pk in ids if pk in rows]
