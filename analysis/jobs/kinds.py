"""What each kind of background job computes: its inputs from the job's row, its progress
through the callback, its result as JSON, a file, or both.

A runner raises ValueError (or a subclass) with a sentence a person can act on when the inputs
cannot give a result; `job_execute` shows that sentence as the job's error.
"""

from __future__ import annotations

import dataclasses
import io
import math
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, Any

from django.conf import settings
from django.utils.text import slugify

from analysis.distortions.evaluation import kappa_f1_report
from analysis.distortions.predictions_csv import read_predictions_csv
from analysis.models import ExportLog, Job
from analysis.release import release_version, release_zip
from analysis.selectors import Filters, ReportParams, StudyReport, study_report, study_version
from analysis.services import export_log_create, export_log_finish
from annotation.csvsafe import frame_csv
from annotation.models import Study

Progress = Callable[..., None]


class JobCancelled(Exception):
    """Raised by the progress callback once the job was cancelled: the computation stops."""


@dataclass
class Outcome:
    """What a finished job keeps: a JSON summary and/or a file (read from its start)."""

    result: dict[str, Any] | None = None
    file: IO[bytes] | None = None
    file_name: str = ""


# --- the release bundle -------------------------------------------------------------------------


def release_params(*, study: Study, include_text: bool) -> dict[str, Any]:
    """The release's parameters, with the study's data version: a release asked for again after
    a rating changed is a new job, the same request before that is the same job."""
    return {"study": study.pk, "include_text": include_text, "version": release_version(study)}


def release_run(job: Job, progress: Progress) -> Outcome:
    study = job.study
    if study is None:
        raise ValueError("The study of this release was deleted.")
    include_text = bool(job.params.get("include_text", True))
    # Logged as it starts, like every download, so one that fails is in the log too.
    log = export_log_create(
        user=job.owner,
        study=study,
        channel=job.params.get("channel", ExportLog.Channel.WEB),
        what="release",
        params={"include_text": include_text, "job": str(job.pk)},
    )
    archive, summary = release_zip(study=study, include_text=include_text, progress=progress)
    export_log_finish(log=log, rows=summary.counts.get("conversations", 0))
    return Outcome(
        result={"files": summary.files, "conversations": summary.counts.get("conversations", 0)},
        file=archive,
        file_name=f"{slugify(study.name) or 'study'}-release.zip",
    )


# --- κ_F1 of an uploaded predictions file -------------------------------------------------------


def _number(value: float) -> float | None:
    return None if math.isnan(value) else value


def kappa_f1_run(job: Job, progress: Progress) -> Outcome:
    params = job.params
    name = params.get("file_name", "predictions.csv")
    with job.input_file.open("rb") as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        progress(0.0, f"reading {name}")
        y_true, y_pred, kind, labels = read_predictions_csv(
            text,
            kind=params.get("kind") or None,
            labels=params.get("labels") or None,
            max_rows=settings.KAPPA_F1_MAX_ROWS,
            max_labels=settings.KAPPA_F1_MAX_LABELS,
            name=name,
        )
    n_sim = int(params["n_sim"])
    # Reading the file is a tenth of the bar, the simulations the rest.
    progress(0.1, f"simulating {n_sim:,} random assignments")
    report = kappa_f1_report(
        y_true,
        y_pred,
        kind=kind,
        labels=labels,
        n_sim=n_sim,
        seed=int(params["seed"]),
        progress=lambda done: progress(0.1 + 0.9 * done, f"simulating ({done:.0%})"),
    )
    result = {
        key: _number(value) if isinstance(value, float) else value
        for key, value in dataclasses.asdict(report).items()
    }
    result["sim_z"] = _number(report.sim_z)
    result["file_name"] = name
    return Outcome(result=result)


# --- the dashboard's report with more bootstrap resamples than the default -------------------


def report_params(*, study: Study, filters: Filters, params: ReportParams) -> dict[str, Any]:
    """The report's subset and parameters, with the study's data version (as `study_report`'s
    cache key has them): the same report asked for again is the same job until the study
    changes."""
    return {
        "study": study.pk,
        "filters": dataclasses.asdict(filters),
        "report": dataclasses.asdict(params),
        "version": study_version(study=study),
    }


def report_inputs(params: dict[str, Any]) -> tuple[Filters, ReportParams]:
    """The Filters and ReportParams a report job's parameters hold."""
    filters = dict(params["filters"])
    if filters.get("judges") is not None:
        filters["judges"] = tuple(filters["judges"])
    return Filters(**filters), ReportParams(**params["report"])


def _reliability_summary(report: StudyReport) -> list[dict[str, Any]]:
    keep = ("judge", "attribute", "n_models", "icc_c1", "ci_low", "ci_high", "verdict")
    return [
        {k: _number(v) if isinstance(v, float) else v for k, v in row.items() if k in keep}
        for row in report.reliability.to_dict("records")
    ]


def report_run(job: Job, progress: Progress) -> Outcome:
    """Compute the report into the dashboard's cache (the same function and key the dashboard
    reads), and keep its tables as a zip of the CSVs the dashboard's links give."""
    study = job.study
    if study is None:
        raise ValueError("The study of this report was deleted.")
    filters, params = report_inputs(job.params)
    report = study_report(study=study, filters=filters, params=params, progress=progress)
    log = export_log_create(
        user=job.owner,
        study=study,
        channel=job.params.get("channel", ExportLog.Channel.WEB),
        what="report_tables",
        params={"n_boot": params.n_boot, "seed": params.seed, "job": str(job.pk)},
    )
    archive = tempfile.TemporaryFile()
    slug = slugify(study.name) or "study"
    names = []
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in StudyReport.TABLES:
            table = report.table(name)
            if table is None:
                continue
            zf.writestr(f"{slug}-{name}.csv", frame_csv(table))
            names.append(name)
    archive.seek(0)
    export_log_finish(log=log, rows=len(report.reliability))
    return Outcome(
        result={
            "tables": names,
            "n_boot": params.n_boot,
            "seed": params.seed,
            "n_scores": report.n_scores,
            "version": report.version,
            "reliability": _reliability_summary(report),
        },
        file=archive,
        file_name=f"{slug}-report-{params.n_boot}-resamples.zip",
    )


RUNNERS: dict[str, Callable[[Job, Progress], Outcome]] = {
    Job.Kind.RELEASE: release_run,
    Job.Kind.KAPPA_F1: kappa_f1_run,
    Job.Kind.REPORT: report_run,
}
