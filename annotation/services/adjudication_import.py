"""Writing a released study's adjudications and adjudication thresholds back into a study
(`manage.py import_adjudications`, docs/release.md), so that its final scores and their
provenance are the released ones.

Everything is checked before anything is written, and written in one transaction; importing the
same file again changes nothing (an adjudication is one per response and attribute, updated in
place). The adjudicators of a release are codes, so an imported adjudication has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from django.db import transaction

from ..adjudication_selectors import final_score_release_rows
from ..importers.adjudications import AdjudicationRecord
from ..importers.base import ImportProblem
from ..models import Adjudication, Attribute, AttributeLevel, AttributeThreshold, Response, Study


def _check_points(points: int, *, study: Study, what: str, file: str) -> None:
    widest = study.rubric.scale_max - study.rubric.scale_min
    if not 1 <= points <= widest:
        raise ImportProblem(
            f"{what}: {points} points; a threshold is 1 to {widest} on the rubric's "
            f"{study.rubric.scale_min}–{study.rubric.scale_max} scale",
            file=file,
        )


def adjudications_import(
    *,
    study: Study,
    records: Sequence[AdjudicationRecord],
    file_name: str,
    threshold: int | None = None,
    attribute_thresholds: Mapping[str, int] | None = None,
    expected: Sequence[tuple[str, ...]] | None = None,
) -> dict[str, int]:
    """Set the study's threshold (``threshold``) and per-attribute thresholds (attribute name →
    points; an attribute not named keeps or gets the study's), then store each record as the
    adjudication of its response and attribute. With ``expected`` (the rows of a release's
    final_scores.csv), the study's final scores afterwards must be exactly those, or nothing is
    written. Raises ImportProblem naming the file and row."""
    attributes = {a.name: a for a in Attribute.objects.filter(rubric_id=study.rubric_id)}
    levels: dict[int, set[int]] = {}
    for attribute_id, value in AttributeLevel.objects.filter(
        attribute__rubric_id=study.rubric_id
    ).values_list("attribute_id", "value"):
        levels.setdefault(attribute_id, set()).add(value)
    if threshold is not None:
        _check_points(threshold, study=study, what="--threshold", file=file_name)
    own: dict[int, int] = {}
    for name, points in (attribute_thresholds or {}).items():
        if name not in attributes:
            raise ImportProblem(
                f"--threshold {name}={points}: the study's rubric has no attribute {name!r} "
                f"(it has {', '.join(sorted(attributes))})",
                file=file_name,
            )
        _check_points(points, study=study, what=f"--threshold {name}", file=file_name)
        own[attributes[name].pk] = points
    responses = {
        (conversation, responder): pk
        for pk, conversation, responder in Response.objects.filter(
            conversation__study=study, conversation__practice=False
        ).values_list("pk", "conversation__external_id", "responder__key")
    }
    rows = []
    for record in records:
        response_id = responses.get((record.conversation, record.responder))
        if response_id is None:
            raise ImportProblem(
                f"the study has no response by {record.responder!r} in conversation "
                f"{record.conversation!r} (import the release's conversations and ratings first)",
                file=file_name,
                row=record.row,
            )
        attribute = attributes.get(record.attribute)
        if attribute is None:
            raise ImportProblem(
                f"the study's rubric has no attribute {record.attribute!r}",
                file=file_name,
                row=record.row,
                column="attribute",
            )
        scale = sorted(levels.get(attribute.pk, ()))
        if record.final_score not in scale:
            raise ImportProblem(
                f"score {record.final_score} is not on {attribute.name}'s scale "
                f"({scale[0]}–{scale[-1]})"
                if scale
                else f"{attribute.name} has no scale",
                file=file_name,
                row=record.row,
                column="final_score",
            )
        if record.reason and record.reason not in Adjudication.Reason.values:
            raise ImportProblem(
                f"unknown reason {record.reason!r}; one of "
                f"{', '.join(Adjudication.Reason.values)} or empty",
                file=file_name,
                row=record.row,
                column="reason",
            )
        rows.append((response_id, attribute.pk, record))
    with transaction.atomic():
        if threshold is not None and threshold != study.adjudication_threshold:
            study.adjudication_threshold = threshold
            study.save(update_fields=["adjudication_threshold"])
        for attribute_id, points in own.items():
            AttributeThreshold.objects.update_or_create(
                study=study, attribute_id=attribute_id, defaults={"points": points}
            )
        created = updated = 0
        for response_id, attribute_id, record in rows:
            _, made = Adjudication.objects.update_or_create(
                response_id=response_id,
                attribute_id=attribute_id,
                defaults={
                    "study": study,
                    "final_score": record.final_score,
                    "reason": record.reason,
                    "reason_text": record.reason_text,
                    "rubric_needs_change": record.rubric_needs_change,
                },
            )
            created += made
            updated += not made
        if expected is not None:
            found = final_score_release_rows(study=study)
            if found != list(expected):
                raise ImportProblem(
                    _difference(found, list(expected)) + "; nothing was imported",
                    file=file_name,
                )
    return {"rows": len(rows), "created": created, "updated": updated}


def _difference(found: list[tuple[str, ...]], expected: list[tuple[str, ...]]) -> str:
    """The first final score that differs, in words."""
    for n, (got, want) in enumerate(zip(found, expected, strict=False)):
        if got != want:
            return (
                f"the study's final scores differ from the expected ones at row {n + 2}: "
                f"{', '.join(got)} instead of {', '.join(want)}"
            )
    return (
        f"the study has {len(found)} final scores, the expected file {len(expected)} "
        "(were the release's ratings imported first, into an empty study?)"
    )
