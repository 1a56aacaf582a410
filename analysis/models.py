"""The analysis app only reads ratings; the one thing it stores is who exported what, when."""

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
