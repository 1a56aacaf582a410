"""Researcher dashboards: reliability of each judge, rankings, agreement, coverage, exports.

One view serves the full page or, for htmx filter changes, the report partial (STYLE.md 6).
Reports come from analysis.selectors.study_report, cached until the study's ratings change;
templates get precomputed rows and Vega-Lite specs and run no queries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils.text import slugify
from django.views.decorators.http import require_GET

from analysis import charts
from analysis.export import ExportCount, long_csv, wide_csv
from analysis.forms import ReportFilterForm
from analysis.models import ExportLog
from analysis.selectors import StudyReport, filter_choices, study_report
from analysis.services import export_log_create, export_log_finish, export_logged
from annotation.models import Study
from annotation.roles import RESEARCHER, role_required


@dataclass(frozen=True)
class TableSpec:
    title: str
    columns: tuple[str, ...]
    note: str = ""


TABLES: dict[str, TableSpec] = {
    "reliability": TableSpec(
        "Judge reliability (ICC, bootstrap CI, bias)",
        (
            "judge",
            "attribute",
            "n_models",
            "n_pairs",
            "icc_c1",
            "ci_low",
            "ci_high",
            "ci_width",
            "status",
            "icc_a1",
            "human_mean",
            "judge_mean",
            "bias",
            "mse",
            "mae",
            "verdict",
            "reason",
        ),
        "ICC on responder-level means, human reference = mean of the clinicians per cell; "
        "each judge is not scored on its own family's responses.",
    ),  # fmt: skip
    "human_means": TableSpec("Human expert means per responder (paper Table 2)", ()),
    "ranking": TableSpec(
        "Responder ranking by rater (paper Tables 2, 9–13)",
        ("rater", "responder", "Avg", "rank", "mean_rank"),
    ),
    "interrater": TableSpec(
        "Agreement among clinicians",
        (
            "attribute",
            "n_items",
            "n_raters",
            "icc_c1",
            "icc_a1",
            "alpha_ordinal",
            "alpha_interval",
            "kappa_linear",
            "kappa_quadratic",
            "n_rater_pairs",
            "reason",
        ),
        "Items (conversation × response) rated by two or more clinicians.",
    ),  # fmt: skip
    "calibration": TableSpec(
        "Affine calibration on held-out pairs",
        (
            "judge",
            "attribute",
            "a",
            "b",
            "n_test",
            "bias_before",
            "bias_after",
            "rmse_before",
            "rmse_after",
            "mae_before",
            "mae_after",
            "reason",
        ),
        "human ≈ a + b·judge fitted on 70% of pairs. It removes bias and lowers RMSE, but on "
        "skewed 1–5 scores it can raise the MAE: check both before relying on it.",
    ),  # fmt: skip
    "rouge": TableSpec(
        "ROUGE-L against the human reference, beside clinician scores",
        ("responder", "rouge_l", "clinician_avg"),
    ),
    "rouge_correlation": TableSpec(
        "Correlation of ROUGE-L with clinician scores (per response)",
        ("attribute", "n", "pearson_r", "pearson_p", "spearman_rho", "spearman_p", "reason"),
    ),
}


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _present(name: str, df: pd.DataFrame | None) -> dict:
    spec = TABLES[name]
    if df is None:
        return {"name": name, "title": spec.title, "note": spec.note, "columns": [], "rows": []}
    columns = [c for c in spec.columns if c in df.columns] if spec.columns else list(df.columns)
    rows = [[_cell(v) for v in row] for row in df[columns].itertuples(index=False)]
    return {"name": name, "title": spec.title, "note": spec.note, "columns": columns, "rows": rows}


def _verdicts(report: StudyReport) -> list[dict]:
    """Per attribute (Figure 2 order), each judge's plain-language verdict."""
    out = []
    table = report.reliability
    for attribute in charts.figure2_order(report.attributes):
        rows = table[table["attribute"] == attribute]
        out.append(
            {
                "attribute": attribute,
                "judges": [
                    {
                        "judge": r.judge,
                        "verdict": r.verdict or "not enough data",
                        "text": r.verdict_text,
                        "icc": _cell(r.icc_c1),
                        "width": _cell(r.ci_width),
                    }
                    for r in rows.itertuples(index=False)
                ],
            }
        )
    return out


def _charts(report: StudyReport) -> dict[str, dict]:
    if report.reliability.empty:
        return {}
    rel, attrs = report.reliability, report.attributes
    out = {
        "icc_heatmap": charts.heatmap(rel, attrs, field="icc_c1", title="ICC(C,1)"),
        "width_heatmap": charts.heatmap(
            rel, attrs, field="ci_width", title="Width of the 95% bootstrap CI"
        ),
        "forest": charts.forest(rel, attrs),
        "bias": charts.bias_bars(rel, attrs),
    }
    if not report.ranking.empty:
        out["figure4"] = charts.human_vs_judges(report.ranking)
    return out


def _study(study_id: int) -> Study:
    # Researchers and admins see every study; there is no per-study access list yet.
    return get_object_or_404(Study.objects.select_related("rubric"), pk=study_id)


def _form_and_report(request: HttpRequest, study: Study) -> tuple[ReportFilterForm, StudyReport]:
    form = ReportFilterForm(request.GET or None, choices=filter_choices(study=study))
    return form, study_report(study=study, filters=form.filters(), params=form.params())


@require_GET
@role_required(RESEARCHER)
def study_list(request: HttpRequest) -> HttpResponse:
    studies = Study.objects.annotate(n_conversations=Count("conversations")).order_by("name")
    return render(request, "analysis/study_list.html", {"studies": studies})


@require_GET
@role_required(RESEARCHER)
def dashboard(request: HttpRequest, study_id: int) -> HttpResponse:
    study = _study(study_id)
    form, report = _form_and_report(request, study)
    names = [
        "reliability", "human_means", "ranking", "interrater", "calibration", "rouge",
        "rouge_correlation",
    ]  # fmt: skip
    chart_specs = _charts(report)
    context = {
        "study": study,
        "form": form,
        "report": report,
        "tables": {name: _present(name, report.table(name)) for name in names},
        "verdicts": _verdicts(report),
        "charts": chart_specs,
        "chart_specs": [{"id": f"spec-{k}", "spec": v} for k, v in chart_specs.items()],
        "thresholds": charts.status_thresholds(),
        "query": request.GET.urlencode(),
    }
    template = "analysis/_report.html" if request.htmx else "analysis/dashboard.html"
    return render(request, template, context)


@require_GET
@role_required(RESEARCHER)
def table_csv(request: HttpRequest, study_id: int, name: str) -> HttpResponse:
    study = _study(study_id)
    if name not in TABLES:
        return HttpResponse(status=404)
    form, report = _form_and_report(request, study)
    table = report.table(name)
    if table is None:
        table = pd.DataFrame(columns=list(TABLES[name].columns))
    log = export_log_create(
        user=request.user,
        study=study,
        channel=ExportLog.Channel.WEB,
        what=f"table:{name}",
        params=dict(request.GET.lists()),
    )
    export_log_finish(log=log, rows=len(table))
    response = HttpResponse(table.to_csv(index=False), content_type="text/csv; charset=utf-8")
    filename = f"{slugify(study.name)}-{name}.csv"
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


@require_GET
@role_required(RESEARCHER)
def ratings_csv(request: HttpRequest, study_id: int) -> StreamingHttpResponse:
    """Every score of the study, streamed (long by default, ?layout=wide for one column per
    responder × attribute); logged in the export audit log."""
    study = _study(study_id)
    wide = request.GET.get("layout") == "wide"
    what = "ratings-wide" if wide else "ratings-long"
    count = ExportCount()
    log = export_log_create(
        user=request.user, study=study, channel=ExportLog.Channel.WEB, what=what
    )
    chunks = (wide_csv if wide else long_csv)(study=study, count=count)
    response = StreamingHttpResponse(
        export_logged(chunks=chunks, count=count, log=log), content_type="text/csv; charset=utf-8"
    )
    response["Content-Disposition"] = f'attachment; filename="{slugify(study.name)}-{what}.csv"'
    return response
