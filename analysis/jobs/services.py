"""Background jobs: start (with dedupe and the per-person limit), claim, progress, finish, fail,
cancel, and the sweeper that expires results and gives up on jobs whose worker is gone.

Every state change is a status-guarded update, so a job ends exactly once whatever order a
cancel, a redelivered task and the sweeper arrive in; the worker's side is `job_execute`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterable
from datetime import timedelta
from typing import IO, Any, cast

from celery.exceptions import SoftTimeLimitExceeded
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.core.files import File
from django.core.files.storage import default_storage
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from analysis.jobs.kinds import RUNNERS, JobCancelled, Outcome, report_params
from analysis.models import ExportLog, Job
from analysis.selectors import Filters, ReportParams
from annotation.models import Study, Webhook
from annotation.services.webhooks import webhook_emit

logger = logging.getLogger(__name__)

# Progress is written at most this often: a bar that moves each second, and a running job that
# costs the database one small UPDATE a second at most.
PROGRESS_EVERY_SECONDS = 0.5


class JobRefused(ValueError):
    """A job that may not start now (the limit of jobs at once); the message says why and what
    to do."""


def job_digest(*, kind: str, params: dict[str, Any], inputs: Iterable[bytes] = ()) -> str:
    """What makes two requests the same: the kind, the parameters, the bytes of any upload."""
    hasher = hashlib.sha256(kind.encode())
    hasher.update(json.dumps(params, sort_keys=True, separators=(",", ":")).encode())
    for chunk in inputs:
        hasher.update(chunk)
    return hasher.hexdigest()


def _reusable(owner: AbstractBaseUser | AnonymousUser, digest: str) -> Job | None:
    live = Q(state__in=Job.ACTIVE) | Q(state=Job.State.DONE, expires_at__gt=timezone.now())
    return (
        Job.objects.filter(live, owner_id=owner.pk, digest=digest).order_by("-created_at").first()
    )


@transaction.atomic
def job_start(
    *,
    owner: AbstractBaseUser | AnonymousUser,
    kind: str,
    params: dict[str, Any],
    digest: str,
    study: Study | None = None,
    upload: IO[bytes] | None = None,
    upload_name: str = "input",
) -> tuple[Job, bool]:
    """(the job, whether it is new). The same request again (same owner, equal digest) while
    the first is queued, running or done and kept gives the first; otherwise a person may have
    JOBS_MAX_ACTIVE_PER_USER jobs queued or running (JobRefused beyond). The owner's row is
    locked for the check, so two requests at once cannot both pass it. The task is sent when
    the transaction commits."""
    owner_id = cast(int, owner.pk)  # a signed-in person (the views and the API require one)
    get_user_model().objects.select_for_update().filter(pk=owner_id).first()
    existing = _reusable(owner, digest)
    if existing is not None:
        return existing, False
    active = Job.objects.filter(owner_id=owner.pk, state__in=Job.ACTIVE).count()
    limit = settings.JOBS_MAX_ACTIVE_PER_USER
    if active >= limit:
        raise JobRefused(
            f"You have {active} jobs waiting or running, the most one person may have at once "
            f"({limit}). Wait for one to finish, or cancel one on the jobs page."
        )
    job = Job(owner_id=owner_id, kind=kind, params=params, digest=digest, study=study)
    if upload is not None:
        job.input_file.save(f"{job.pk}/{upload_name}", File(upload), save=False)
    job.save()
    job_id = str(job.pk)

    def send() -> None:
        from analysis.tasks import job_run

        job_run.delay(job_id)

    transaction.on_commit(send)
    return job, True


def kappa_f1_job_start(
    *,
    owner: AbstractBaseUser | AnonymousUser,
    upload: UploadedFile[bytes],
    task: str | None,
    labels: list[str] | None,
    n_sim: int,
    seed: int,
) -> tuple[Job, bool]:
    """Start a κ_F1 evaluation of an uploaded predictions file, as job_start answers (the page's
    form and the API's call): the same file and parameters again give the same job."""
    params = {
        "kind": task or None,
        "labels": labels or None,
        "n_sim": n_sim,
        "seed": seed,
        "file_name": upload.name,
    }
    return job_start(
        owner=owner,
        kind=Job.Kind.KAPPA_F1,
        params=params,
        digest=job_digest(kind=Job.Kind.KAPPA_F1, params=params, inputs=upload.chunks()),
        upload=upload,
        upload_name="predictions.csv",
    )


# The resamples a report may have and still be computed in the web request (the dashboard's
# and the API's default); more go to a background job.
INLINE_BOOTSTRAP = ReportParams().n_boot


def report_needs_job(*, params: ReportParams) -> bool:
    """Whether a report with these parameters is computed by a background job, never in the
    request (when the cache does not have it): more bootstrap resamples than the default."""
    return params.n_boot > INLINE_BOOTSTRAP


def report_job_start(
    *,
    owner: AbstractBaseUser | AnonymousUser,
    study: Study,
    filters: Filters,
    params: ReportParams,
    channel: str = ExportLog.Channel.WEB,
) -> tuple[Job, bool]:
    """Start computing a report into the dashboard's cache, as job_start answers: the same
    report asked for again (until the study changes) is the same job. A finished job whose
    report has left the cache since (evicted, the cache cleared) no longer holds its result:
    it is expired (its file goes at the next sweep) and a new job starts."""
    values = report_params(study=study, filters=filters, params=params)
    digest = job_digest(kind=Job.Kind.REPORT, params=values)
    # Called only on a cache miss, so a finished job of this digest lost its report.
    Job.objects.filter(
        owner_id=owner.pk, digest=digest, state=Job.State.DONE, expires_at__gt=timezone.now()
    ).update(expires_at=timezone.now())
    return job_start(
        owner=owner,
        kind=Job.Kind.REPORT,
        params={**values, "channel": channel},
        digest=digest,
        study=study,
    )


def job_cancel(*, job: Job) -> bool:
    """Cancel a queued or running job; False when it had already ended. A running job's worker
    notices at its next progress report and stops; a result that arrives later is discarded."""
    now = timezone.now()
    cancelled = Job.objects.filter(pk=job.pk, state__in=Job.ACTIVE).update(
        state=Job.State.CANCELLED, finished_at=now, message="cancelled"
    )
    return cancelled == 1


class ProgressWriter:
    """The callback a kind's computation reports to: writes (fraction, message) to the job's row
    at most every PROGRESS_EVERY_SECONDS, and raises JobCancelled once the row is no longer
    running (cancelled, or given up by the sweeper)."""

    def __init__(self, job_id: Any) -> None:
        self.job_id = job_id
        self.last = 0.0

    def __call__(self, fraction: float, message: str = "") -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_SECONDS:
            return
        self.last = now
        fields: dict[str, Any] = {"fraction": min(max(fraction, 0.0), 1.0)}
        fields["heartbeat_at"] = timezone.now()
        if message:
            fields["message"] = message[:200]
        if not Job.objects.filter(pk=self.job_id, state=Job.State.RUNNING).update(**fields):
            raise JobCancelled


def _claim(job_id: str) -> bool:
    now = timezone.now()
    claimed = Job.objects.filter(pk=job_id, state=Job.State.QUEUED).update(
        state=Job.State.RUNNING, started_at=now, heartbeat_at=now, message="started"
    )
    return claimed == 1


def _finish(job: Job, outcome: Outcome) -> None:
    """Keep the result, unless the job was cancelled meanwhile (then the file goes); a release
    that is kept is announced to the webhooks in the same transaction."""
    name = ""
    if outcome.file is not None:
        name = default_storage.save(f"jobs/out/{job.pk}/{outcome.file_name}", File(outcome.file))
    now = timezone.now()
    expires = now + timedelta(hours=settings.JOBS_RESULT_HOURS)
    with transaction.atomic():
        finished = Job.objects.filter(pk=job.pk, state=Job.State.RUNNING).update(
            state=Job.State.DONE,
            fraction=1.0,
            message="done",
            result=outcome.result,
            result_file=name,
            result_name=outcome.file_name,
            finished_at=now,
            expires_at=expires,
        )
        if finished and job.kind == Job.Kind.RELEASE:
            webhook_emit(
                event=Webhook.Event.RELEASE_READY,
                study_id=job.study_id,
                data={"study": job.study_id, "job": str(job.pk), "expires_at": expires.isoformat()},
            )
    if not finished and name:
        default_storage.delete(name)


def _fail(job_id: str, error: str) -> None:
    Job.objects.filter(pk=job_id, state=Job.State.RUNNING).update(
        state=Job.State.FAILED, error=error, message="failed", finished_at=timezone.now()
    )


def job_execute(*, job_id: str) -> None:
    """Run a queued job to its end (the task's body). Does nothing for a job that is not queued
    (a redelivered message, a cancelled job): a running job whose worker died is failed by the
    sweeper, never run twice. The person reads `error`: a problem the computation explains
    (ValueError and its kinds: an unreadable upload, a study that cannot be released) is shown
    as it is; anything else as what happened and where the details are."""
    if not _claim(job_id):
        return
    job = Job.objects.select_related("study", "owner").get(pk=job_id)
    try:
        outcome = RUNNERS[job.kind](job, ProgressWriter(job.pk))
    except JobCancelled:
        return
    except SoftTimeLimitExceeded:
        minutes = settings.JOBS_TIME_LIMIT_SECONDS / 60
        _fail(job_id, f"Stopped after {minutes:g} minutes, the most a job may run.")
        return
    except ValueError as exc:
        _fail(job_id, str(exc))
        return
    except Exception as exc:
        logger.exception("job %s (%s) failed", job_id, job.kind)
        _fail(
            job_id,
            f"An unexpected error stopped the job ({type(exc).__name__}). The server's log has "
            "the details; starting it again may help if it was a passing problem.",
        )
        return
    try:
        _finish(job, outcome)
    finally:
        if outcome.file is not None:
            outcome.file.close()


def jobs_sweep() -> dict[str, int]:
    """Delete the files of results past their time (the job stays, marked expired), and fail
    running jobs that have not reported for JOBS_STALE_SECONDS (their worker died; a job is
    never run twice behind a person's back). Idempotent."""
    now = timezone.now()
    expired = 0
    for job in Job.objects.filter(state=Job.State.DONE, expires_at__lte=now):
        if Job.objects.filter(pk=job.pk, state=Job.State.DONE).update(
            state=Job.State.EXPIRED, result_file="", message="result deleted"
        ):
            default_storage.delete(job.result_file.name or "")
            expired += 1
    # An upload is needed only until its job ends.
    ended = Job.objects.exclude(state__in=Job.ACTIVE).exclude(input_file="")
    for job in ended:
        if Job.objects.filter(pk=job.pk, input_file=job.input_file.name).update(input_file=""):
            default_storage.delete(job.input_file.name or "")
    stale = now - timedelta(seconds=settings.JOBS_STALE_SECONDS)
    gone = Job.objects.filter(state=Job.State.RUNNING, heartbeat_at__lt=stale).update(
        state=Job.State.FAILED,
        finished_at=now,
        message="failed",
        error=(
            f"The worker running it stopped reporting for over {settings.JOBS_STALE_SECONDS} s "
            "(it was restarted or died). Start the job again."
        ),
    )
    return {"expired": expired, "stale": gone}
