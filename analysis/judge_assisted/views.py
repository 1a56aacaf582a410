"""The judge-assisted page: forest plot, ranking with separations, planner (researchers).

One view serves the full page or, for an htmx *Apply*, the results partial. What an Apply
computes is cached under the study's ratings version: the report per choice of judges and
share (a new target only replans from its means), the ICC lever (which depends on the judges
only) per choice of judges. A new or edited rating changes the version, so the next Apply
recomputes.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from django import forms
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from accounts.roles import RESEARCHER, role_required
from analysis import planner
from analysis.judge_assisted.charts import forest_means, ranking_chart
from analysis.judge_assisted.estimator import ADJACENT_COLUMNS, savings_summary
from analysis.judge_assisted.selectors import (
    JudgeAssistedInputError,
    JudgeAssistedReport,
    judge_assisted_arrays,
    judge_assisted_report,
    judge_names,
    labelled_share,
)
from analysis.selectors import attribute_names, study_version
from annotation.membership import study_for
from annotation.models import Study
from annotation.selectors import clinician_sample_current

if TYPE_CHECKING:
    import pandas as pd
    from django_htmx.middleware import HtmxDetails
    from numpy.typing import ArrayLike

    class HtmxHttpRequest(HttpRequest):
        """A request through django_htmx's middleware (settings.MIDDLEWARE)."""

        htmx: HtmxDetails


CACHE_SECONDS = 24 * 3600
#: The page's intervals are 95 %; the report's alpha, which its cached planner must match.
ALPHA = 0.05

SHARES = [(100, "the study's design"), (50, "a random 50% of the design"),
          (20, "a random 20% of the design"), (10, "a random 10% of the design"),
          (5, "a random 5% of the design")]  # fmt: skip


class JudgeAssistedForm(forms.Form):
    judge = forms.MultipleChoiceField(widget=forms.CheckboxSelectMultiple, required=False)
    share = forms.TypedChoiceField(
        label="Use clinician ratings of", choices=SHARES, coerce=int, initial=100, required=False
    )
    target = forms.FloatField(
        label="Target CI half-width", min_value=0.001, max_value=4, initial=0.10, required=False
    )
    lever = forms.BooleanField(
        label=(
            "Which lever narrows the ICC interval (a bootstrap: several seconds the first time "
            "for a choice of judges, then kept until the ratings change)"
        ),
        required=False,
    )

    def __init__(self, *args: Any, judges: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cast(forms.ChoiceField, self.fields["judge"]).choices = [(j, j) for j in judges]


#: Columns that count something: shown as integers ("1018", never "1018.0").
COUNTS = frozenset({
    "n_labelled", "n_unlabelled", "n_nonresponse", "n_judge_missing", "place", "n_responders",
    "needed_clinician_only", "needed_judge_assisted", "more_clinician_only",
    "more_judge_assisted",
})  # fmt: skip


def _rows(frame: pd.DataFrame, columns: list[str]) -> list[list[object]]:
    counts = [column in COUNTS for column in columns]
    return [
        [
            "" if v is None or (isinstance(v, float) and np.isnan(v))
            else int(v) if count else v
            for v, count in zip(row, counts, strict=True)
        ]
        for row in frame[columns].round(3).itertuples(index=False)
    ]  # fmt: skip


def _cache_key(kind: str, study: Study, version: str, *parts: object) -> str:
    # The parts hold judges' names, which may hold spaces (memcached refuses such keys, and
    # Django warns about them on every cache): hashed, they are a safe key on every backend.
    digest = hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()
    return f"analysis:judge-assisted:{kind}:{study.pk}:{version}:{digest}"


def _judges(study: Study, version: str) -> list[str]:
    """The study's judges, by name; a distinct over every rating, so kept with the version."""
    key = _cache_key("judges", study, version)
    judges: list[str] | None = cache.get(key)
    if judges is None:
        judges = judge_names(study=study)
        cache.set(key, judges, timeout=CACHE_SECONDS)
    return judges


def _report(
    study: Study, *, judges: list[str], share: int, target: float, version: str
) -> JudgeAssistedReport:
    """The report for one Apply. Cached per judges and share; the target half-width changes
    only the planner table, recomputed here from the cached means (milliseconds)."""
    # The design is part of the key: drawing a new clinician sample changes no rating, and
    # every share is drawn from the design.
    sample = clinician_sample_current(study=study)
    design = f"sample-{sample.pk}" if sample else "rated"
    key = _cache_key("report", study, version, "|".join(judges), share, design)
    report: JudgeAssistedReport | None = cache.get(key)
    if report is None:
        labelled, described = labelled_share(study=study, share=share)
        report = judge_assisted_report(
            study=study, judges=judges, labelled=labelled, alpha=ALPHA, target_half_width=target,
            described=described,
        )  # fmt: skip
        cache.set(key, report, timeout=CACHE_SECONDS)
        return report
    return replace(
        report, planner=planner.planner_table(report.means, target_half_width=target, alpha=ALPHA)
    )


def _levers(study: Study, *, judges: list[str], version: str) -> pd.DataFrame:
    """The ICC lever per attribute (a bootstrap, the slow part of an Apply): it uses every
    conversation with clinician and judge scores, so share and target do not change it."""
    key = _cache_key("levers", study, version, "|".join(judges))
    levers: pd.DataFrame | None = cache.get(key)
    if levers is None:
        arrays = judge_assisted_arrays(study=study, judges=judges)
        levers = planner.icc_lever_table(
            arrays.y, arrays.f, attributes=attribute_names(study=study),
            judges_label=" + ".join(judges),
        )  # fmt: skip
        cache.set(key, levers, timeout=CACHE_SECONDS)
    return levers


def _lever_rows(levers: pd.DataFrame) -> list[list[object]]:
    """The lever table, the responder scenario as "width (low–high)" or why it is absent."""
    scenario = [
        f"{r.width_more_responders:.2f} ({r.width_more_responders_low:.2f}–"
        f"{r.width_more_responders_high:.2f})"
        if np.isfinite(r.width_more_responders)
        else f"not projected (fewer than {planner.MIN_RESPONDERS_PROJECTED} responders)"
        for r in levers.itertuples(index=False)
    ]
    rows = _rows(
        levers,
        ["attribute", "icc_c1", "n_responders", "width_now", "width_more_conversations",
         "conversation_share"],
    )  # fmt: skip
    return [[*row[:5], text, row[5]] for row, text in zip(rows, scenario, strict=True)]


def _median(values: ArrayLike) -> float | None:
    """Median over the cells that have an interval; None when none has (e.g. one labelled
    conversation per cell), shown as a dash rather than NaN."""
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    return float(np.median(finite)) if finite.size else None


@require_GET
@role_required(RESEARCHER)
def judge_assisted_dashboard(request: HtmxHttpRequest, study_id: int) -> HttpResponse:
    study = study_for(
        user=request.user, study_id=study_id, queryset=Study.objects.select_related("rubric")
    )
    version = study_version(study=study)
    judges = _judges(study, version)
    form = JudgeAssistedForm(request.GET or None, judges=judges)
    context: dict[str, Any] = {"study": study, "form": form, "error": None, "chart_specs": []}
    # An htmx Apply replaces the results only; the form stays as the researcher set it.
    template = (
        "analysis/_judge_assisted_results.html" if request.htmx else "analysis/judge_assisted.html"
    )
    if form.is_bound and not form.is_valid():
        context["error"] = "; ".join(
            f"{field}: {' '.join(map(str, errors))}" for field, errors in form.errors.items()
        )
        return render(request, template, context, status=400)
    data = form.cleaned_data if form.is_bound else {}
    chosen = data.get("judge") or judges
    share = data.get("share") or 100
    target = data.get("target") or 0.10
    if not chosen:
        context["error"] = "This study has no judge scores."
        return render(request, template, context)
    try:
        report = _report(study, judges=chosen, share=share, target=target, version=version)
        levers = _levers(study, judges=chosen, version=version) if data.get("lever") else None
    except JudgeAssistedInputError as exc:
        context["error"] = str(exc)
        return render(request, template, context)
    means = report.means
    context |= {
        "chosen": chosen,
        "share": share,
        "design": report.design,
        "estimable": bool(np.isfinite(means["estimate"].to_numpy(dtype=float)).any()),
        "savings": savings_summary(means),
        "warnings": [
            f"{row.responder} × {row.attribute}: {row.warning}"
            for row in means[means["warning"] != ""].itertuples(index=False)
        ],
        "notes": [
            f"{row.responder} × {row.attribute}: {row.note}"
            for row in means[means["note"] != ""].itertuples(index=False)
        ],
        "target": target,
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
                "n_judge_missing",
                "estimate",
                "ci_low",
                "ci_high",
                "clinician_only_ci_low",
                "clinician_only_ci_high",
                "lambda",
                "judge_only_mean",
                "ratings_saved",
                "interval",
                "warning",
            ],
        ),  # fmt: skip
        "ranking": _rows(
            report.ranking.assign(
                separated=report.ranking["separated_from_next"].map(
                    {True: "yes", False: "no", None: ""}
                )
            ),
            [
                "attribute",
                "place",
                "responder",
                "estimate",
                "ci_low",
                "ci_high",
                "separated",
                "reason",
            ],
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
                "reason",
            ],
        ),  # fmt: skip
        "adjacent": _rows(
            report.adjacent.assign(
                separated=report.adjacent["separated"].map({True: "yes", False: "no", None: ""}),
                pair=report.adjacent["responder"] + " vs " + report.adjacent["next_responder"],
            ),
            # The estimator's columns, the two responders shown as one pair.
            ["attribute", "place", "pair", *ADJACENT_COLUMNS[4:]],
        ),  # fmt: skip
        "levers": None
        if levers is None
        else {"verdicts": levers["verdict"].tolist(), "rows": _lever_rows(levers)},
    }
    return render(request, template, context)
