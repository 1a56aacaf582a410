"""REST endpoint for the judge-assisted report (docs/judge-assisted.md): researchers and admins.

``GET /api/studies/<id>/judge-assisted/?judge=NAME[&judge=NAME...][&alpha=0.05][&target=0.10]
[&lever=1]`` returns the means, paired differences, ranking, planner, the separations of
adjacent places and the separation planner as lists of rows; with ``lever=1`` also which lever
narrows each attribute's ICC interval (a bootstrap: seconds). The labelled conversations
are the study's design (its clinician sample, else every clinician-rated one), named in
``design``; a listed subset is a command-line option.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response as ApiResponse
from rest_framework.views import APIView

from analysis.api import IsResearcher
from analysis.judge_assisted_selectors import JudgeAssistedInputError, judge_assisted_report
from annotation.models import Study


def _json_value(value: object) -> object:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None  # JSON has no NaN
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _json_value(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def _number(request: Request, name: str, default: float) -> float:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValidationError({name: f"must be a number, got {raw!r}"}) from None


def _flag(request: Request, name: str) -> bool:
    raw = request.query_params.get(name, "0").strip().lower()
    if raw in ("1", "true", "yes"):
        return True
    if raw in ("0", "false", "no", ""):
        return False
    raise ValidationError({name: f"must be 1 or 0, got {raw!r}"})


class JudgeAssistedView(APIView):
    permission_classes = [IsResearcher]

    @extend_schema(
        parameters=[
            OpenApiParameter("judge", OpenApiTypes.STR, many=True, required=True),
            OpenApiParameter("alpha", OpenApiTypes.FLOAT),
            OpenApiParameter("target", OpenApiTypes.FLOAT, description="target CI half-width"),
            OpenApiParameter("lever", OpenApiTypes.BOOL, description="add the ICC lever"),
        ],
        responses=OpenApiTypes.OBJECT,
    )
    def get(self, request: Request, pk: int) -> ApiResponse:
        study = get_object_or_404(Study, pk=pk)
        judges = request.query_params.getlist("judge")
        if not judges:
            raise ValidationError({"judge": "give at least one judge (?judge=NAME)"})
        try:
            report = judge_assisted_report(
                study=study,
                judges=judges,
                alpha=_number(request, "alpha", 0.05),
                target_half_width=_number(request, "target", 0.10),
                icc_lever=_flag(request, "lever"),
            )
        except JudgeAssistedInputError as exc:
            raise ValidationError({"detail": str(exc)}) from exc
        return ApiResponse(
            {
                "study": study.pk,
                "judges": list(dict.fromkeys(judges)),
                "design": report.design,
                "means": _records(report.means),
                "differences": _records(report.differences),
                "ranking": _records(report.ranking),
                "planner": _records(report.planner),
                "adjacent_separations": _records(report.adjacent),
                "separation_planner": _records(report.separations),
                "icc_levers": None if report.icc_levers is None else _records(report.icc_levers),
            }
        )
