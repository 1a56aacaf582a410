"""The analysis app only reads ratings; it stores who exported what, when, and the
pseudonymous codes under which researchers see clinicians."""

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

    def __str__(self) -> str:
        return f"{self.what} by {self.user or 'shell'} at {self.created_at:%Y-%m-%d %H:%M}"


class RaterCode(models.Model):
    """A clinician's pseudonymous code in one study (C01, C02, …), shown to researchers instead
    of the clinician's name.

    Stored rather than derived so it is stable across exports, the API and the dashboards (and
    through a SECRET_KEY rotation), joinable in SQL, and different between studies: numbers are
    handed out in a random order per study, so a code says nothing about who joined first and
    C01 of one study is unrelated to C01 of another. Only admins see this table.
    """

    study = models.ForeignKey("annotation.Study", on_delete=models.CASCADE, related_name="+")
    rater = models.ForeignKey("annotation.Rater", on_delete=models.CASCADE, related_name="codes")
    number = models.PositiveIntegerField()
    code = models.CharField(max_length=16)

    class Meta:
        ordering = ["study", "number"]
        constraints = [
            models.UniqueConstraint(fields=["study", "rater"], name="rater_code_once_per_study"),
            models.UniqueConstraint(fields=["study", "number"], name="rater_code_unique_in_study"),
        ]
        permissions = [
            (
                "view_clinician_identities",
                "Can see clinicians' names, drafts and exact times (audited)",
            )
        ]

    def __str__(self) -> str:
        return self.code
