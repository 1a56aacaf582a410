"""The analysis app only reads ratings (and the clinicians' study codes, which annotation
hands out: annotation.models.RaterCode); it stores who exported what, when, and the background
jobs that compute what a web request should not wait for."""

import uuid

from django.conf import settings
from django.db import models


class ExportLog(models.Model):
    """Audit log of data leaving the platform: CSV downloads, export_ratings runs, API exports."""

    class Channel(models.TextChoices):
        WEB = "web", "Download button"
        COMMAND = "command", "export_ratings command"
        API = "api", "REST API"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    study = models.ForeignKey(
        "annotation.Study", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    what = models.CharField(max_length=100, help_text="e.g. ratings-long, ratings-wide, table")
    params = models.JSONField(default=dict, blank=True)
    rows = models.PositiveIntegerField(null=True, blank=True, help_text="data rows written")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        # The permission sits on the log that audits its use (it was RaterCode's before study
        # codes moved to annotation; migration 0005 moved the permission row, grants included).
        permissions = [
            (
                "view_clinician_identities",
                "Can see clinicians' names, drafts and exact times (audited)",
            )
        ]

    def __str__(self) -> str:
        return f"{self.what} by {self.user or 'shell'} at {self.created_at:%Y-%m-%d %H:%M}"


class Job(models.Model):
    """A computation that can outlast a web request (a release bundle, a κ_F1 evaluation, a
    report with more bootstrap resamples than the default), run by a Celery worker while its
    page shows the fraction done (docs/jobs.md).

    A job is claimed once (queued → running, a status-guarded update), reports progress by
    updating its own row, and ends exactly once (done, failed or cancelled, each a guarded
    update from running); a cancel wins over a result that arrives after it. Its result (a file,
    a JSON summary, or both) is kept until `expires_at`, when the sweeper deletes the file.
    """

    class Kind(models.TextChoices):
        RELEASE = "release", "Release bundle (zip)"
        KAPPA_F1 = "kappa_f1", "κ_F1 evaluation"
        REPORT = "report", "Reliability report (more resamples)"

    class State(models.TextChoices):
        QUEUED = "queued", "Waiting for a worker"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"
        EXPIRED = "expired", "Result deleted (expired)"

    ACTIVE = (State.QUEUED, State.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    study = models.ForeignKey(
        "annotation.Study", on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    params = models.JSONField(default=dict, blank=True)
    digest = models.CharField(
        max_length=64,
        help_text="SHA-256 of kind, parameters and inputs: one job per digest",
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    fraction = models.FloatField(default=0.0, help_text="0 to 1, written while it runs")
    message = models.CharField(max_length=200, blank=True, help_text="what it is doing now")
    input_file = models.FileField(upload_to="jobs/in/", blank=True, max_length=200)
    result_file = models.FileField(upload_to="jobs/out/", blank=True, max_length=200)
    result_name = models.CharField(max_length=200, blank=True, help_text="the download's name")
    result = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["owner", "digest"], name="job_owner_digest"),
            models.Index(fields=["state", "heartbeat_at"], name="job_state_heartbeat"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.pk} ({self.state})"

    @property
    def is_active(self) -> bool:
        return self.state in self.ACTIVE

    @property
    def can_cancel(self) -> bool:
        return self.is_active

    @property
    def can_download(self) -> bool:
        return self.state == self.State.DONE and bool(self.result_file)

    @property
    def percent(self) -> int:
        return 100 if self.state == self.State.DONE else int(self.fraction * 100)
