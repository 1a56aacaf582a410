"""A background job as the REST API shows it: kept apart from analysis.jobs.api so that the
report endpoint (analysis.api), which answers a job when it leaves a report to one, can use it
(analysis.jobs.api imports analysis.api)."""

from __future__ import annotations

from django.urls import reverse
from rest_framework import serializers

from analysis.models import Job


class JobSerializer(serializers.ModelSerializer[Job]):
    download = serializers.SerializerMethodField(
        help_text="the result's URL while it can be downloaded, else null"
    )
    url = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "url",
            "kind",
            "state",
            "fraction",
            "message",
            "study",
            "error",
            "result",
            "download",
            "created_at",
            "started_at",
            "finished_at",
            "expires_at",
        ]

    def _absolute(self, path: str) -> str:
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path

    def get_url(self, job: Job) -> str:
        return self._absolute(reverse("job-detail", args=[job.pk]))

    def get_download(self, job: Job) -> str | None:
        if not job.can_download:
            return None
        return self._absolute(reverse("job-download", args=[job.pk]))
