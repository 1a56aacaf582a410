"""Researcher dashboards: reliability of each judge, rankings, agreement, coverage, exports.

One view serves the full page or, for htmx filter changes, the report partial
(docs/architecture.md).
Reports come from analysis.selectors.study_report, cached until the study's ratings change;
templates get precomputed rows and Vega-Lite specs and run no queries. A report with more
bootstrap resamples than the default that is not cached is computed by a background job
(analysis.jobs), never in the request: the page says so and follows the job's progress.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
from django.http import HttpRequest, HttpResponse, QueryDict, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.text import slugify
from django.views.decorators.http import require_GET

from accounts.roles import ADMIN, RESEARCHER, holds_study_role, role_required
from analysis import charts
from analysis.distortion_selectors import consensus_export_rows, distortion_report
from analysis.downloads import rows_download, table_download
from analysis.forms import ConsensusForm, KappaF1Form, ReportFilterForm
from analysis.jobs.selectors import job_get_for_user
from analysis.jobs.services import (
    INLINE_BOOTSTRAP,
    JobRefused,
    kappa_f1_job_start,
    report_job_start,
    report_needs_job,
)
from analysis.models import ExportLog, Job
from analysis.pseudonyms import identified_check, identified_requested
from analysis.selectors import (
    StudyReport,
    against_adjudicated,
    filter_choices,
    final_scores_frame,
    has_published_reading,
    studies_with_sizes,
    study_report,
    study_report_cached,
)
from analysis.services import ratings_export_start
from annotation.csvsafe import csv_attachment
from annotation.escalation_selectors import escalations_open_count
from annotation.membership import led_study_ids, studies_for, study_for
from annotation.models import Study

if TYPE_CHECKING:
    from django_htmx.middleware import HtmxDetails

    class HtmxHttpRequest(HttpRequest):
        """A request through django_htmx's middleware (settings.MIDDLEWARE)."""

        htmx: HtmxDetails


@dataclass(frozen=True)
class TableSpec:
    title: str
    columns: tuple[str, ...]
    note: str = ""
    term: str = ""  # the TERMS entry that explains the table's method


@dataclass(frozen=True)
class Term:
    slug: str
    name: str
    text: str


# The methods the dashboard names, in words a clinician-researcher reads without the papers:
# shown as the page's glossary, and linked from each table that uses one.
TERMS: tuple[Term, ...] = (
    Term(
        "icc",
        "ICC(C,1) and ICC(A,1)",
        "Intraclass correlation, computed on each responder's mean score. ICC(C,1), "
        "consistency, is 1 when the judge ranks and spaces the responders exactly as the "
        "clinicians do and 0 when its scores are unrelated to theirs; a judge one point kinder "
        "throughout is not penalised (the bias column shows that). ICC(A,1), absolute "
        "agreement, counts such an offset against the judge.",
    ),
    Term(
        "ci",
        "95 % bootstrap interval and its width",
        "The range an ICC would take over repeated studies like this one, estimated by "
        "redrawing responders and conversations many times. Its width says how precise the "
        "number is: wider than 0.355 means the data cannot yet tell a good judge from a poor "
        "one. From fewer than 4 responders no interval is given (not estimable). Checked by "
        "simulation, a nominal 95 % interval over 4 to 30 responders holds about 9 times in "
        "10 (0.85 to 0.94): read a status as that, not as 19 in 20.",
    ),
    Term(
        "alt-test",
        "Alternative annotator test",
        "Leaves each clinician out in turn and asks whether the judge agrees with the "
        "remaining clinicians at least as well as the left-out clinician does, allowing a "
        "small margin ε for the judge's lower cost. The judge passes when it wins at least "
        "half of the clinicians. Needs responses scored by two or more clinicians.",
    ),
    Term(
        "bias",
        "Bias",
        "The judge's mean score minus the clinicians' mean score on the same responses: "
        "positive when the judge is kinder than the clinicians.",
    ),
    Term(
        "judge-assisted",
        "Judge-assisted estimate",
        "A clinician mean that uses the judge's scores of the responses no clinician rated to "
        "narrow its interval (prediction-powered inference). It estimates the same clinician "
        "mean, whatever the judge: a poor judge only narrows it less.",
    ),
    Term(
        "agreement",
        "Agreement among clinicians (α, κ)",
        "Krippendorff's α and Cohen's weighted κ: how far clinicians agree with each other "
        "beyond chance, 1 for perfect agreement and 0 for chance. They bound how well any "
        "judge can be expected to agree with a clinician.",
    ),
    Term(
        "calibration",
        "Calibration (affine, on held-out pairs)",
        "A straight-line correction, clinician score ≈ a + b·judge score, fitted on 70 % of "
        "the paired scores and checked on the other 30 % (held out, so the check is honest). "
        "If it lowers the errors there, rescaling the judge's scores removes most of its bias.",
    ),
    Term(
        "rouge",
        "ROUGE-L",
        "Word overlap with the human reference response: the longest sequence of words the "
        "two share in the same order, as an F-measure from 0 to 1. It says how alike two "
        "texts are, not how good a response is; its correlation with clinicians' scores says "
        "whether likeness to the reference tracks quality here.",
    ),
)
TERM_NAMES = {t.slug: t.name for t in TERMS}


TABLES: dict[str, TableSpec] = {
    "answer": TableSpec(
        "The answer first: can each judge be trusted?",
        (
            "judge",
            "attribute",
            "replace",
            "replace_reason",
            "reliability",
            "reliability_reason",
            "bias",
            "bias_reason",
            "assist",
            "assist_reason",
        ),
    ),  # fmt: skip
    "alt_test": TableSpec(
        "Can the judge replace the clinicians? (alternative annotator test)",
        (
            "judge",
            "attribute",
            "winning_rate",
            "advantage_probability",
            "passed",
            "n_clinicians",
            "n_instances",
            "epsilon",
            "metric",
            "reason",
        ),
        "Calderon, Reichart & Dror (ACL 2025): each clinician is left out in turn; the judge wins "
        "that clinician when it agrees with the remaining clinicians at least as well, up to a "
        "margin ε = 0.2 (experts), tested one-sided and corrected by Benjamini–Yekutieli over "
        "the clinicians. It passes when it wins at least half of them. Needs responses that two "
        "or more clinicians scored (30 per clinician).",
        term="alt-test",
    ),  # fmt: skip
    "worth": TableSpec(
        "How much clinician work could judge-assisted estimates save?",
        ("judge", "attribute", "saving", "n_responders", "reason"),
        "The median, over responders, of ρ²: the squared correlation of the judge's and the "
        "clinicians' scores of the same responses. At equal interval width, judge-assisted "
        "estimates save at most that share of clinician ratings.",
        term="judge-assisted",
    ),  # fmt: skip
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
            "estimable",
            "verdict",
            "reason",
        ),
        "ICC on responder-level means, human reference = mean of the clinicians per cell; "
        "each judge is not scored on its own family's responses. By simulation the 95 % "
        "bootstrap interval over 4 to 30 responders covers about 0.91 of the time; below 4 "
        "responders, from one conversation, or when clinicians or the judge give every "
        "responder the same mean, the ICC is not estimable (the reason column says which).",
        term="icc",
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
        term="agreement",
    ),  # fmt: skip
    "calibration": TableSpec(
        "Calibration: does a straight-line rescaling fix the judge? (affine, on held-out pairs)",
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
        term="calibration",
    ),  # fmt: skip
    "rouge": TableSpec(
        "Word overlap with the human reference (ROUGE-L), beside clinician scores",
        ("responder", "rouge_l", "clinician_avg"),
        term="rouge",
    ),
    "rouge_correlation": TableSpec(
        "Correlation of ROUGE-L with clinician scores (per response)",
        ("attribute", "n", "pearson_r", "pearson_p", "spearman_rho", "spearman_p", "reason"),
        term="rouge",
    ),
}


def _cell(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _present(name: str, df: pd.DataFrame | None) -> dict[str, Any]:
    spec = TABLES[name]
    if df is None:
        columns: list[str] = []
        rows: list[list[str]] = []
    else:
        columns = [c for c in spec.columns if c in df.columns] if spec.columns else list(df.columns)
        rows = [[_cell(v) for v in row] for row in df[columns].itertuples(index=False)]
    return {
        "name": name,
        "title": spec.title,
        "note": spec.note,
        "term": spec.term,
        "term_label": TERM_NAMES.get(spec.term, ""),
        "columns": columns,
        "rows": rows,
    }


def _verdicts(report: StudyReport) -> list[dict[str, Any]]:
    """Per attribute in rubric order (as the rating page and the other tables list them), each
    judge's plain-language verdict."""
    out = []
    table = report.reliability
    for attribute in report.attributes:
        rows = table[table["attribute"] == attribute]
        out.append(
            {
                "attribute": attribute,
                "judges": [
                    {
                        "judge": r.judge,
                        "verdict": r.verdict or "not estimable",
                        "text": r.verdict_text,
                        "icc": _cell(r.icc_c1),
                        "width": _cell(r.ci_width),
                    }
                    for r in rows.itertuples(index=False)
                ],
            }
        )
    return out


def _charts(report: StudyReport) -> dict[str, dict[str, Any]]:
    if report.reliability.empty:
        return {}
    rel, attrs = report.reliability, report.attributes
    out: dict[str, dict[str, Any]] = {}
    # A chart of ICCs none of which is estimable would be an empty frame: the verdicts say why
    # instead. The bias needs only a pair and is drawn whenever there is one.
    if "estimable" not in rel or rel["estimable"].any():
        out |= {
            "icc_heatmap": charts.heatmap(rel, attrs, field="icc_c1", title="ICC(C,1)"),
            "width_heatmap": charts.heatmap(
                rel, attrs, field="ci_width", title="Width of the 95% bootstrap CI"
            ),
            "forest": charts.forest(rel, attrs),
        }
    out["bias"] = charts.bias_bars(rel, attrs)
    if not report.ranking.empty:
        out["figure4"] = charts.human_vs_judges(report.ranking)
    return out


def _study(request: HttpRequest, study_id: int) -> Study:
    """The study if the signed-in person reads its results (annotation.membership), else 404."""
    return study_for(
        user=request.user,
        study_id=study_id,
        queryset=Study.objects.select_related("rubric"),
    )


@dataclass
class Pending:
    """A report left to a background job: its job, or why none could start."""

    job: Job | None = None
    refused: str = ""


# The header the pending report's poll sends: the job it follows (the poll starts none).
FOLLOW_HEADER = "X-Report-Job"


def _form_and_report(
    request: HttpRequest, study: Study
) -> tuple[ReportFilterForm, StudyReport | None, Pending | None]:
    """The report for the requested subset, or None when the request names a filter or
    parameter that is not valid: never the whole study's numbers under a filter it asked for.
    More resamples than the default, not cached: no report, and the job computing it (started
    now, or the same one again; the one the poll's header names, whose page is its owner's)."""
    form = ReportFilterForm(
        request.GET or None,
        choices=filter_choices(study=study),
        published_reading=has_published_reading(study=study),
    )
    if form.is_bound and not form.is_valid():
        return form, None, None
    filters, params = form.filters(), form.params()
    if not report_needs_job(params=params):
        return form, study_report(study=study, filters=filters, params=params), None
    report = study_report_cached(study=study, filters=filters, params=params)
    if report is not None:
        return form, report, None
    followed = request.headers.get(FOLLOW_HEADER)
    if followed:
        return form, None, Pending(job=job_get_for_user(user=request.user, job_id=followed))
    try:
        job, _ = report_job_start(owner=request.user, study=study, filters=filters, params=params)
    except JobRefused as exc:
        return form, None, Pending(refused=str(exc))
    return form, None, Pending(job=job)


def _filter_errors(form: ReportFilterForm) -> list[str]:
    return [
        f"{form.fields[name].label or name.capitalize()}: {' '.join(map(str, errors))}"
        if name in form.fields
        else " ".join(map(str, errors))
        for name, errors in form.errors.items()
    ]


@require_GET
@role_required(RESEARCHER)
def study_list(request: HttpRequest) -> HttpResponse:
    context = {
        "studies": studies_with_sizes(studies=studies_for(user=request.user)),
        # The studies whose team page this person may open (the ones they lead; admins: all).
        "led": led_study_ids(user=request.user),
    }
    return render(request, "analysis/study_list.html", context)


@require_GET
@role_required(RESEARCHER)
def dashboard(request: HtmxHttpRequest, study_id: int) -> HttpResponse:
    study = _study(request, study_id)
    form, report, pending = _form_and_report(request, study)
    if pending is not None:
        return _pending(request, study, form, pending)
    if report is None:
        context = {"study": study, "form": form, "filter_errors": _filter_errors(form)}
        template = "analysis/_filter_error.html" if request.htmx else "analysis/dashboard.html"
        return render(request, template, context, status=400)
    names = [
        "reliability", "alt_test", "worth", "human_means", "ranking", "interrater",
        "calibration", "rouge", "rouge_correlation",
    ]  # fmt: skip
    chart_specs = _charts(report)
    tables = {name: _present(name, report.table(name)) for name in names}
    context = {
        "study": study,
        "form": form,
        "report": report,
        "tables": tables,
        # The tables the report shows, for its table of contents (ROUGE's correlation only
        # with ROUGE scores).
        "toc_tables": [
            t
            for t in tables.values()
            if t["name"] != "rouge_correlation" or tables["rouge"]["rows"]
        ],
        "verdicts": _verdicts(report),
        "answer": [row._asdict() for row in report.answer.itertuples(index=False)],
        "charts": chart_specs,
        "chart_specs": [{"id": f"spec-{k}", "spec": v} for k, v in chart_specs.items()],
        "terms": TERMS,
        "thresholds": charts.status_thresholds(),
        "status_legend": charts.status_legend(),
        "query": request.GET.urlencode(),
    }
    if not request.htmx:
        # Over the whole study, outside the filtered report: only the full page shows it.
        consensus = against_adjudicated(study=study)
        context["adjudicated"] = None if consensus is None else consensus.icc.to_dict("records")
        context["adjudicated_alt"] = None if consensus is None else _alt_rows(consensus.alt_test)
        # The lead is told of responses marked unsafe where they look at their study.
        lead = holds_study_role(request.user, "lead")  # no query: the roles are kept
        if lead and study.pk in led_study_ids(user=request.user):
            context["escalations_open"] = escalations_open_count(study=study)
    template = "analysis/_report.html" if request.htmx else "analysis/dashboard.html"
    return render(request, template, context)


def _pending(
    request: HtmxHttpRequest, study: Study, form: ReportFilterForm, pending: Pending
) -> HttpResponse:
    """The page while a background job computes the report (202): the job's progress, polled
    until it ends; the poll answers the report itself once it is in the cache."""
    default = QueryDict(mutable=True)
    default.update(request.GET)
    default["bootstrap"] = str(INLINE_BOOTSTRAP)
    job = pending.job
    context = {
        "study": study,
        "form": form,
        "pending": pending,
        "job": job,
        "poll": job is not None and job.is_active,
        "follow_header": FOLLOW_HEADER,
        "query": request.GET.urlencode(),
        "default_query": default.urlencode(),
        "n_boot": form.params().n_boot,
        "inline_bootstrap": INLINE_BOOTSTRAP,
    }
    template = "analysis/_report_pending.html" if request.htmx else "analysis/dashboard.html"
    return render(request, template, context, status=429 if pending.refused else 202)


def _alt_rows(table: pd.DataFrame) -> list[dict[str, object]]:
    """The alt-test rows for the page: a figure the test could not give is left out (the
    row's note says why), never shown as a number or a verdict."""
    rows = []
    for row in table.to_dict("records"):
        testable = row["passed"] is not None
        rows.append(
            {
                "judge": row["judge"],
                "attribute": row["attribute"],
                "n_clinicians": row["n_clinicians"],
                "n_instances": row["n_instances"],
                "winning_rate": row["winning_rate"] if testable else None,
                "advantage_probability": row["advantage_probability"] if testable else None,
                "passed": ("passes" if row["passed"] else "does not pass") if testable else "",
                "reason": row["reason"] or "",
            }
        )
    return rows


@require_GET
@role_required(RESEARCHER)
def table_csv(request: HttpRequest, study_id: int, name: str) -> HttpResponse:
    study = _study(request, study_id)
    if name not in TABLES:
        return HttpResponse(status=404)
    form, report, pending = _form_and_report(request, study)
    if pending is not None:
        # The tables come with the job's result (a zip of these CSVs).
        if pending.job is not None:
            return redirect("analysis:job", job_id=pending.job.pk)
        return HttpResponse(
            f"Not exported: {pending.refused}\n",
            status=429,
            content_type="text/plain; charset=utf-8",
        )
    if report is None:
        return HttpResponse(
            "Not exported: " + "; ".join(_filter_errors(form)) + "\n",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    table = report.table(name)
    if table is None:
        table = pd.DataFrame(columns=list(TABLES[name].columns))
    return table_download(
        user=request.user,
        study=study,
        what=f"table:{name}",
        params=dict(request.GET.lists()),
        table=table,
        filename=f"{slugify(study.name)}-{name}.csv",
    )


@require_GET
@role_required(RESEARCHER)
def ratings_csv(request: HttpRequest, study_id: int) -> StreamingHttpResponse:
    """Every score of the study, streamed (long by default, ?layout=wide for one column per
    responder × attribute); logged in the export audit log. Clinicians as study codes unless
    ?identified=1 (admins and holders of the identities permission only)."""
    study = _study(request, study_id)
    wide = request.GET.get("layout") == "wide"
    identified = identified_requested(request.GET.get("identified"))
    identified_check(user=request.user, identified=identified)
    what, chunks = ratings_export_start(
        user=request.user,
        study=study,
        wide=wide,
        identified=identified,
        channel=ExportLog.Channel.WEB,
    )
    return csv_attachment(chunks, filename=f"{slugify(study.name)}-{what}.csv")


@require_GET
@role_required(RESEARCHER)
def final_scores_csv(request: HttpRequest, study_id: int) -> HttpResponse:
    """The final score of every response and attribute with its provenance (adjudicated,
    clinician consensus, a single clinician, or awaiting adjudication: docs/adjudication.md);
    recorded in the export log. No clinician is named."""
    study = _study(request, study_id)
    return table_download(
        user=request.user,
        study=study,
        what="final-scores",
        params={},
        table=final_scores_frame(study=study),
        filename=f"{slugify(study.name)}-final-scores.csv",
    )


# --- Cognitive-distortion labelling -------------------------------------------------------------

DISTORTION_TABLES: dict[str, TableSpec] = {
    "repetition": TableSpec(
        "Maximum repetition of any label across the N runs (Figure 2)",
        (),
        "Share of items whose most frequent label appears in exactly r runs, and in r or more.",
    ),
    "fleiss": TableSpec(
        "Fleiss' kappa per label across runs and the average (Tables 2 and 7)",
        (),
        "Each label as present/absent across the N runs; items with a failed run are left out; "
        "the average is over labels with a defined kappa.",
    ),
    "consensus": TableSpec(
        "Final labels per message (Appendix G)",
        (),
        "Labels in at least k of N runs; otherwise 'not sure if distortion' when some run said "
        "No Distortion, else 'not sure which distortion'. 'Others' counts only when alone.",
    ),
    "distribution": TableSpec("Distribution of final labels (Table 8)", ()),
    "agreement": TableSpec(
        "Agreement of the final labels with each clinician",
        (),
        "Mean Cohen's kappa over labels; joint probability of agreement as the same label set "
        "(exact), the same first label (dominant) or any label in common (overlap). Items with "
        "an ambiguous final label are excluded.",
    ),
    "agreement_labels": TableSpec("Cohen's kappa per label, final labels vs each clinician", ()),
    "others": TableSpec("Out-of-list labels, as written (counted as 'Others')", ()),
    "gold": TableSpec(
        "Clinicians' gold label per message, with its provenance",
        (),
        "adjudicated: an adjudicator's labels where the clinicians disagreed; "
        "clinician-consensus: the labels every clinician gave (ranked: the same dominant); "
        "single-clinician: one clinician's labels; awaiting-adjudication: no gold label yet.",
    ),
    "gold_kappa_f1": TableSpec(
        "κ_F1 of the final labels against the clinicians' gold",
        (),
        "Ranked scheme: the dominant label, multiclass; multi-label scheme: the label sets. "
        "Messages without a gold label or with an ambiguous final label are left out.",
    ),
}


def _distortion_study(request: HttpRequest, study_id: int) -> Study:
    return study_for(
        user=request.user,
        study_id=study_id,
        queryset=Study.objects.filter(kind=Study.Kind.DISTORTION_LABELLING),
    )


def _distortion_present(name: str, df: pd.DataFrame) -> dict[str, Any]:
    spec = DISTORTION_TABLES[name]
    rows = [[_cell(v) for v in row] for row in df.itertuples(index=False)]
    return {
        "name": name,
        "title": spec.title,
        "note": spec.note,
        "columns": list(df.columns),
        "rows": rows,
    }


def _consensus_k(request: HttpRequest) -> tuple[ConsensusForm, int | None, int]:
    form = ConsensusForm(request.GET or None)
    if form.is_valid():
        return form, form.cleaned_data.get("k"), form.cleaned_data.get("seed") or 0
    return form, None, 0


@require_GET
@role_required(RESEARCHER)
def distortion_dashboard(request: HttpRequest, study_id: int) -> HttpResponse:
    study = _distortion_study(request, study_id)
    form, k, _ = _consensus_k(request)
    report = distortion_report(study=study, k=k)
    tables = {name: _distortion_present(name, report.table(name)) for name in DISTORTION_TABLES}
    repetition = report.table("repetition")
    chart_specs = (
        [{"id": "spec-figure2", "spec": charts.max_repetition_bars(repetition)}]
        if not repetition.empty
        else []
    )
    context = {
        "study": study,
        "form": form,
        "report": report,
        "tables": tables,
        "chart_specs": chart_specs,
        "query": request.GET.urlencode(),
        "n_clinician_labels": sum(len(v) for v in report.clinicians.values()),
    }
    return render(request, "analysis/distortions.html", context)


@require_GET
@role_required(RESEARCHER)
def distortion_table_csv(request: HttpRequest, study_id: int, name: str) -> HttpResponse:
    study = _distortion_study(request, study_id)
    if name not in DISTORTION_TABLES:
        return HttpResponse(status=404)
    _, k, _ = _consensus_k(request)
    table = distortion_report(study=study, k=k).table(name)
    return table_download(
        user=request.user,
        study=study,
        what=f"distortion-table:{name}",
        params=dict(request.GET.lists()),
        table=table,
        filename=f"{slugify(study.name)}-distortions-{name}.csv",
    )


@require_GET
@role_required(RESEARCHER)
def distortion_labels_csv(request: HttpRequest, study_id: int, run_id: int) -> HttpResponse:
    """One configuration's final labels with the stratified 70/15/15 split column."""
    study = _distortion_study(request, study_id)
    _, k, seed = _consensus_k(request)
    report = distortion_report(study=study, k=k)
    try:
        header, rows = consensus_export_rows(report=report, run_id=run_id, seed=seed)
    except ValueError:
        return HttpResponse(status=404)
    return rows_download(
        user=request.user,
        study=study,
        what="distortion-labels",
        params={"run": run_id, "k": k, "seed": seed},
        header=header,
        rows=rows,
        filename=f"{slugify(study.name)}-run{run_id}-labels.csv",
    )


@role_required(RESEARCHER)
def kappa_f1(request: HttpRequest) -> HttpResponse:
    """Upload a classifier's predictions; a background job computes weighted F1, F1_random,
    κ_F1 and the simulated baseline (§5.2–5.3, Appendix J) and its page shows them. The upload
    is kept only until the job ends."""
    form = KappaF1Form(request.POST or None, request.FILES or None)
    if request.method == "POST" and form.is_valid():
        try:
            job, _ = kappa_f1_job_start(
                owner=request.user,
                upload=form.cleaned_data["file"],
                task=form.cleaned_data["kind"],
                labels=form.label_list(),
                n_sim=form.cleaned_data["n_sim"],
                seed=form.cleaned_data["seed"],
            )
        except JobRefused as exc:
            form.add_error(None, str(exc))
        else:
            return redirect("analysis:job", job_id=job.pk)
    return render(request, "analysis/kappa_f1.html", {"form": form})


@role_required(ADMIN)
def retest(request: HttpRequest, study_id: int) -> HttpResponse:
    """Each clinician's test-retest agreement and drift from the consensus (admins: by name)."""
    from analysis.retest_selectors import DRIFT_BLOCK, study_calibration

    study = get_object_or_404(Study, pk=study_id, kind=Study.Kind.RESPONSE_RATING)
    return render(
        request,
        "analysis/retest.html",
        {"study": study, "rows": study_calibration(study=study), "drift_block": DRIFT_BLOCK},
    )
