"""Background jobs in the REST API: start one (or get the same one again), read its progress,
cancel it, download its result. A person sees only their own jobs (404 otherwise)."""

from __future__ import annotations

from typing import Any

from django.core.files.storage import default_storage
from django.db.models import QuerySet
from django.http import FileResponse
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.parsers import FormParser, JSONParser, MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from analysis.api import ErrorsAsJson, IsResearcher
from analysis.api_contract import ContractMixin, ErrorSerializer
from analysis.api_params import PageQuery
from analysis.api_selectors import study_or_none
from analysis.downloads import zip_attachment
from analysis.jobs.kinds import release_params
from analysis.jobs.selectors import job_get_for_user, jobs_of
from analysis.jobs.services import JobRefused, job_cancel, job_digest, job_start
from analysis.models import ExportLog, Job


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


class JobCreateSerializer(serializers.Serializer[dict[str, Any]]):
    kind = serializers.ChoiceField(choices=Job.Kind.choices)
    study = serializers.IntegerField(
        required=False, min_value=1, max_value=2**31 - 1, help_text="release: the study"
    )
    include_text = serializers.BooleanField(
        default=True, help_text="release: with the response texts"
    )
    file = serializers.FileField(
        required=False, help_text="kappa_f1: the predictions CSV (`true`, `predicted`)"
    )
    task = serializers.ChoiceField(
        choices=["", "binary", "multiclass", "multilabel"],
        default="",
        help_text="kappa_f1: the task's kind (empty: detected from the file)",
    )
    labels = serializers.ListField(
        child=serializers.CharField(max_length=200), required=False, max_length=100
    )
    n_sim = serializers.IntegerField(min_value=10, max_value=10000, default=1000)
    seed = serializers.IntegerField(min_value=0, max_value=2**31 - 1, default=0)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        from django.conf import settings

        if attrs["kind"] == Job.Kind.RELEASE and "study" not in attrs:
            raise serializers.ValidationError({"study": ["a release needs the study's id"]})
        if attrs["kind"] == Job.Kind.KAPPA_F1:
            upload = attrs.get("file")
            if upload is None:
                raise serializers.ValidationError({"file": ["κ_F1 needs the predictions file"]})
            if upload.size > settings.KAPPA_F1_MAX_FILE_BYTES:
                raise serializers.ValidationError(
                    {"file": [f"more than the {settings.KAPPA_F1_MAX_FILE_BYTES:,} bytes allowed"]}
                )
        return attrs


CREATE_RESPONSES = {
    201: JobSerializer,
    200: OpenApiResponse(JobSerializer, description="the same request's job, already started"),
    429: OpenApiResponse(ErrorSerializer, description="too many jobs at once"),
}


class JobViewSet(
    ContractMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[Job],
):
    serializer_class = JobSerializer
    permission_classes = [IsResearcher]
    parser_classes = [JSONParser, MultiPartParser, FormParser]
    query_serializers = {"list": PageQuery}
    lookup_value_regex = "[0-9a-f-]{36}"

    def get_queryset(self) -> QuerySet[Job]:
        return jobs_of(user=self.request.user)

    def get_object(self) -> Job:
        return job_get_for_user(user=self.request.user, job_id=self.kwargs["pk"])

    @extend_schema(request=JobCreateSerializer, responses=CREATE_RESPONSES)
    def create(self, request: Request) -> Response:
        """Start a job; the same request again while it runs, or while its result is kept,
        answers that job (200) instead of starting another."""
        data = JobCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        try:
            job, created = self._start(request, values)
        except JobRefused as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_429_TOO_MANY_REQUESTS)
        body = JobSerializer(job, context={"request": request}).data
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    def _start(self, request: Request, values: dict[str, Any]) -> tuple[Job, bool]:
        if values["kind"] == Job.Kind.RELEASE:
            study = study_or_none(study_id=values["study"])
            if study is None:
                raise NotFound("no such study")
            params = release_params(study=study, include_text=values["include_text"])
            return job_start(
                owner=request.user,
                kind=Job.Kind.RELEASE,
                params={**params, "channel": ExportLog.Channel.API},
                digest=job_digest(Job.Kind.RELEASE, params),
                study=study,
            )
        upload = values["file"]
        params = {
            "kind": values["task"] or None,
            "labels": values.get("labels") or None,
            "n_sim": values["n_sim"],
            "seed": values["seed"],
            "file_name": upload.name,
        }
        return job_start(
            owner=request.user,
            kind=Job.Kind.KAPPA_F1,
            params=params,
            digest=job_digest(Job.Kind.KAPPA_F1, params, upload.chunks()),
            upload=upload,
            upload_name="predictions.csv",
        )

    @extend_schema(request=None, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        """Cancel a queued or running job (an ended one is answered as it is)."""
        job = self.get_object()
        job_cancel(job=job)
        job.refresh_from_db()
        return Response(JobSerializer(job, context={"request": request}).data)

    @extend_schema(responses={(200, "application/zip"): OpenApiTypes.BINARY})
    @action(
        detail=True,
        methods=["get"],
        renderer_classes=[JSONRenderer],
        content_negotiation_class=ErrorsAsJson,
    )
    def download(self, request: Request, pk: str | None = None) -> FileResponse:
        """The job's result file, while it is kept."""
        job = self.get_object()
        if not job.can_download:
            raise NotFound("this job has no result to download (not finished, or deleted)")
        return zip_attachment(
            default_storage.open(job.result_file.name or "", "rb"), filename=job.result_name
        )
