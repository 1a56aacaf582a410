"""REST endpoint for the judge-assisted report (docs/judge-assisted.md): researchers and admins.

``GET /api/studies/<id>/judge-assisted/?judge=NAME[&judge=NAME...][&alpha=0.05][&target=0.10]
[&lever=1]`` returns the means, paired differences, ranking, planner, the separations of
adjacent places and the separation planner as lists of rows; with ``lever=1`` also which lever
narrows each attribute's ICC interval (a bootstrap: seconds). The labelled conversations
are the study's design (its clinician sample, else every clinician-rated one), named in
``design``; a listed subset is a command-line option. A judge the study does not have, or
judges that share no conversation with the clinicians, answer 404: there is no such report.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response as ApiResponse
from rest_framework.views import APIView

from analysis.api import MAX_JUDGES, IsResearcher
from analysis.api_contract import ContractMixin
from analysis.api_params import FlagParam, NameParam, NumberParam, QuerySerializer
from analysis.judge_assisted.selectors import JudgeAssistedInputError, judge_assisted_report
from annotation.membership import studies_for


def _json_value(value: object) -> object:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None  # JSON has no NaN
    return value


def _records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    return [{k: _json_value(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


class JudgeAssistedQuery(QuerySerializer):
    judge = serializers.ListField(
        child=NameParam(),
        min_length=1,
        max_length=MAX_JUDGES,
        error_messages={"required": "give at least one judge (?judge=NAME)"},
        help_text="the judges whose scores stand in for clinicians (repeat for several)",
    )
    # Bounded where the statistics stay finite: a z quantile for alpha, a sample size for target.
    alpha = NumberParam(
        min_value=0.001, max_value=0.5, default=0.05, help_text="1 − confidence level"
    )
    target = NumberParam(
        min_value=0.001,
        max_value=4.0,
        default=0.10,
        help_text="target CI half-width on the 1–5 scale (the planner)",
    )
    lever = FlagParam(default=False, help_text="add the ICC lever (a bootstrap: about a second)")


_ROWS = serializers.ListField(child=serializers.DictField())
JUDGE_ASSISTED_REPORT = inline_serializer(
    "JudgeAssistedReport",
    fields={
        "study": serializers.IntegerField(),
        "judges": serializers.ListField(child=serializers.CharField()),
        "design": serializers.CharField(help_text="which conversations are labelled"),
        "means": _ROWS,
        "differences": _ROWS,
        "ranking": _ROWS,
        "planner": _ROWS,
        "adjacent_separations": _ROWS,
        "separation_planner": _ROWS,
        "icc_levers": serializers.ListField(
            child=serializers.DictField(), allow_null=True, help_text="null unless lever=true"
        ),
    },
)


class JudgeAssistedView(ContractMixin, APIView):
    permission_classes = [IsResearcher]
    query_serializers = {"get": JudgeAssistedQuery}

    @extend_schema(responses=JUDGE_ASSISTED_REPORT)
    def get(self, request: Request, pk: int) -> ApiResponse:
        study = get_object_or_404(studies_for(user=request.user), pk=pk)
        judges: list[str] = self.query["judge"]
        try:
            report = judge_assisted_report(
                study=study,
                judges=judges,
                alpha=self.query["alpha"],
                target_half_width=self.query["target"],
                icc_lever=self.query["lever"],
            )
        except JudgeAssistedInputError as exc:
            # The parameters are in bounds: what is left is a judge the study does not have, or
            # judges sharing no conversation with the clinicians. No such report.
            raise NotFound(str(exc)) from exc
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
