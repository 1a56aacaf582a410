"""Reads for the admins' calibration pages (training, top-up, time on task): the views render
what these return and run no query of their own (docs/architecture.md)."""

from __future__ import annotations

from typing import Any

from django.db.models import Q

from .models import Assignment, AssignmentItem, Attribute, ReferenceScore, Response, Study
from .time_on_task import response_active_seconds


def study_choices(*, kind: str | None = None) -> list[Study]:
    """The studies a page's study picker offers (only those of ``kind`` when given)."""
    studies = Study.objects.all()
    if kind is not None:
        studies = studies.filter(kind=kind)
    return list(studies)


def reference_cell_name(*, response_id: int, attribute_id: int) -> str:
    """The form field of one reference score in the training page's grid."""
    return f"ref-{response_id}-{attribute_id}"


def reference_grid(*, study: Study) -> list[dict[str, Any]]:
    """Per practice conversation, its responses with one input per attribute: (field name,
    attribute, stored reference score or None)."""
    attributes = list(Attribute.objects.filter(rubric_id=study.rubric_id).order_by("position"))
    stored = {
        (r, a): v
        for r, a, v in ReferenceScore.objects.filter(
            response__conversation__study=study
        ).values_list("response_id", "attribute_id", "value")
    }
    grid: dict[int, dict[str, Any]] = {}
    for response in (
        Response.objects.filter(conversation__study=study, conversation__practice=True)
        .exclude(text="")
        .select_related("conversation", "responder")
        .order_by("conversation_id", "responder__key")
    ):
        entry = grid.setdefault(
            response.conversation_id, {"conversation": response.conversation, "responses": []}
        )
        entry["responses"].append(
            {
                "response": response,
                "cells": [
                    (
                        reference_cell_name(response_id=response.pk, attribute_id=a.pk),
                        a,
                        stored.get((response.pk, a.pk)),
                    )
                    for a in attributes
                ],
            }
        )
    return list(grid.values())


def reference_grid_cells(*, study: Study) -> dict[str, tuple[str, str, str]]:
    """Every field the reference grid may post, by name: (conversation external id, responder
    key, attribute name) — the columns of a reference row. A posted name missing here is not a
    practice response's attribute of this study."""
    responses = Response.objects.filter(
        conversation__study=study, conversation__practice=True
    ).values_list("pk", "conversation__external_id", "responder__key")
    attributes = list(Attribute.objects.filter(rubric_id=study.rubric_id).values_list("id", "name"))
    return {
        reference_cell_name(response_id=pk, attribute_id=attribute_id): (
            external_id,
            responder,
            attribute,
        )
        for pk, external_id, responder in responses
        for attribute_id, attribute in attributes
    }


def time_on_task_rows(*, study: Study, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` assignments of the study with measured active time (by clinician,
    conversation, kind), each with its responses' estimated seconds by responder name, sorted by
    name. Admins only: they are not blinded, and a clinician's letters (A–J, a new order in every
    assignment) would not tell them which system took the time."""
    assignments = {
        a.pk: a
        for a in Assignment.objects.filter(conversation__study=study)
        .exclude(active_seconds=0)
        .select_related("rater", "conversation")
        .order_by("rater__name", "conversation_id", "kind")[:limit]
    }
    per_response = response_active_seconds(assignments=Q(pk__in=list(assignments)))
    labels = {
        (assignment_id, response_id): name
        for assignment_id, response_id, name in AssignmentItem.objects.filter(
            assignment_id__in=list(assignments)
        ).values_list("assignment_id", "response_id", "response__responder__name")
    }
    rows = []
    for pk, a in assignments.items():
        parts = sorted(
            (labels.get(key, "?"), seconds) for key, seconds in per_response.items() if key[0] == pk
        )
        rows.append({"assignment": a, "responses": parts})
    return rows
