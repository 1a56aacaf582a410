"""The judge-assisted page: forest plot, ranking with separations, planner (researchers)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
from django import forms
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from analysis.judge_assisted_charts import forest_means, ranking_chart
from analysis.judge_assisted_selectors import (
    JudgeAssistedInputError,
    conversation_external_ids,
    judge_assisted_report,
    judge_names,
)
from analysis.selectors import attribute_names
from annotation.models import Study
from annotation.roles import RESEARCHER, role_required

if TYPE_CHECKING:
    import pandas as pd
    from numpy.typing import ArrayLike

SHARES = [(100, "the study's design"), (50, "a random 50%"), (20, "a random 20%"),
          (10, "a random 10%"), (5, "a random 5%")]  # fmt: skip


class JudgeAssistedForm(forms.Form):
    judge = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)
    share = forms.TypedChoiceField(
        label="Use clinician ratings of", choices=SHARES, coerce=int, initial=100, required=False
    )
    target = forms.FloatField(
        label="Target CI half-width", min_value=0.001, max_value=4, initial=0.10, required=False
    )
    lever = forms.BooleanField(
        label="Which lever narrows the ICC interval (a bootstrap: about a second)",
        required=False,
    )

    def __init__(self, *args: Any, judges: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["judge"]).choices = [(j, j) for j in judges]


def _labelled(study: Study, share: int) -> set[str] | None:
    """A seeded random share of the conversations, to show what a smaller clinician budget
    would give; None means the study's design (its clinician sample, else every
    clinician-rated conversation)."""
    if share >= 100:
        return None
    ids = sorted(conversation_external_ids(study=study))
    k = max(2, round(len(ids) * share / 100))
    return set(np.random.default_rng(0).choice(ids, size=k, replace=False).tolist())


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[list[object]]:
    return [
        ["" if v is None or (isinstance(v, float) and np.isnan(v)) else v for v in row]
        for row in frame[columns].round(3).itertuples(index=False)
    ]


def _median(values: ArrayLike) -> float | None:
    """Median over the cells that have an interval; None when none has (e.g. one labelled
    conversation per cell), shown as a dash rather than NaN."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    return float(np.median(finite)) if finite.size else None


@require_GET
@role_required(RESEARCHER)
def judge_assisted_dashboard(request: HttpRequest, study_id: int) -> HttpResponse:
    study = get_object_or_404(Study.objects.select_related("rubric"), pk=study_id)
    judges = judge_names(study=study)
    form = JudgeAssistedForm(request.GET or None, judges=judges)
    context: dict[str, Any] = {"study": study, "form": form, "error": None, "chart_specs": []}
    if form.is_bound and not form.is_valid():
        context["error"] = "; ".join(
            f"{field}: {' '.join(map(str, errors))}" for field, errors in form.errors.items()
        )
        return render(request, "analysis/judge_assisted.html", context, status=400)
    data = form.cleaned_data if form.is_bound else {}
    chosen = data.get("judge") or judges
    share = data.get("share") or 100
    target = data.get("target") or 0.10
    if not chosen:
        context["error"] = "This study has no judge scores."
        return render(request, "analysis/judge_assisted.html", context)
    try:
        report = judge_assisted_report(
            study=study,
            judges=chosen,
            labelled=_labelled(study, share),
            target_half_width=target,
            icc_lever=bool(data.get("lever")),
        )
    except JudgeAssistedInputError as exc:
        context["error"] = str(exc)
        return render(request, "analysis/judge_assisted.html", context)
    means = report.means
    context |= {
        "chosen": chosen,
        "share": share,
        "design": report.design,
        "warnings": [
            f"{row.responder} × {row.attribute}: {row.warning}"
            for row in means[means["warning"] != ""].itertuples(index=False)
        ],
        "median_saved": _median(means["ratings_saved"]),
        "median_ratio": _median(means["width_ratio"]),
        "chart_specs": [
            {"id": "spec-ppi_forest", "spec": forest_means(means, attribute_names(study=study))},
            {
                "id": "spec-ppi_ranking",
                "spec": ranking_chart(report.ranking, attribute_names(study=study)),
            },
        ],
        "means": _rows(
            means,
            [
                "responder",
                "attribute",
                "n_labelled",
                "n_unlabelled",
                "n_nonresponse",
                "estimate",
                "ci_low",
                "ci_high",
                "clinician_only_ci_low",
                "clinician_only_ci_high",
                "lambda",
                "judge_only_mean",
                "ratings_saved",
                "interval",
            ],
        ),  # fmt: skip
        "ranking": _rows(
            report.ranking.assign(
                separated=report.ranking["separated_from_next"].map(
                    {True: "yes", False: "no", None: ""}
                )
            ),
            ["attribute", "place", "responder", "estimate", "ci_low", "ci_high", "separated"],
        ),
        "planner": _rows(
            report.planner,
            [
                "responder",
                "attribute",
                "n_labelled",
                "half_width_clinician_only",
                "half_width_judge_assisted",
                "more_clinician_only",
                "more_judge_assisted",
                "ratings_saved",
            ],
        ),  # fmt: skip
        "adjacent": _rows(
            report.adjacent.assign(
                separated=report.adjacent["separated"].map({True: "yes", False: "no", None: ""}),
                pair=report.adjacent["responder"] + " vs " + report.adjacent["next_responder"],
            ),
            [
                "attribute",
                "place",
                "pair",
                "difference",
                "ci_low",
                "ci_high",
                "separated",
                "n_labelled",
                "more_clinician_only",
                "more_judge_assisted",
            ],
        ),  # fmt: skip
        "levers": None
        if report.icc_levers is None
        else {
            "verdicts": report.icc_levers["verdict"].tolist(),
            "rows": _rows(
                report.icc_levers,
                [
                    "attribute",
                    "icc_c1",
                    "n_responders",
                    "width_now",
                    "width_more_conversations",
                    "width_more_responders",
                ],
            ),
        },
    }
    return render(request, "analysis/judge_assisted.html", context)
