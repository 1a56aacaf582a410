"""Background jobs in the REST API: start one (or get the same one again), read its progress,
cancel it, download its result. A person sees only their own jobs (404 otherwise)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.files.storage import default_storage
from django.db.models import QuerySet
from django.http import FileResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response

from analysis.api import ErrorsAsJson, IsResearcher
from analysis.api_contract import ContractMixin, ErrorSerializer
from analysis.api_params import ChoiceParam, IntegerParam, PageQuery
from analysis.api_selectors import study_or_none
from analysis.downloads import zip_attachment
from analysis.jobs.kinds import release_params
from analysis.jobs.selectors import job_get_for_user, jobs_of
from analysis.jobs.serializers import JobSerializer
from analysis.jobs.services import (
    JobRefused,
    job_cancel,
    job_digest,
    job_start,
    kappa_f1_job_start,
)
from analysis.models import ExportLog, Job
from annotation.membership import studies_for


class JsonInteger(serializers.IntegerField):
    """A JSON number that is whole: no string, no true/false (DRF's own field takes "3")."""

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return data


class JsonBoolean(serializers.BooleanField):
    """JSON true or false, nothing else (DRF's own field takes 0, "no", "off")."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class ReleaseStartSerializer(serializers.Serializer[dict[str, Any]]):
    study = JsonInteger(min_value=1, max_value=2**31 - 1, help_text="the study's id")
    include_text = JsonBoolean(default=True, help_text="with the response texts")


@extend_schema_field({"type": "string", "format": "binary", "minLength": 1})
class UploadField(serializers.FileField):
    """A file part of a multipart request: the schema says binary (drf-spectacular would say a
    URI, which is what a FileField answers with, not what it takes), and not empty (an empty
    file is refused with 400, as Django's file field refuses it)."""


class KappaF1StartSerializer(serializers.Serializer[dict[str, Any]]):
    file = UploadField(help_text="the predictions CSV (columns `true`, `predicted`)")
    # A multipart body's values are text: the query parameters' strict fields read them.
    task = ChoiceParam(
        choices=["", "binary", "multiclass", "multilabel"],
        default="",
        help_text="the task's kind (empty: detected from the file)",
    )
    labels = serializers.CharField(
        max_length=2000,
        required=False,
        allow_blank=True,
        help_text="the label set, comma-separated (every cell must use it)",
    )
    n_sim = IntegerParam(min_value=10, max_value=10000, default=1000)
    seed = IntegerParam(min_value=0, max_value=2**31 - 1, default=0)

    def validate_file(self, upload: Any) -> Any:
        limit = settings.KAPPA_F1_MAX_FILE_BYTES
        if upload.size > limit:
            raise serializers.ValidationError(f"more than the {limit:,} bytes a file may have")
        return upload


START_RESPONSES = {
    201: JobSerializer,
    200: OpenApiResponse(JobSerializer, description="the same request's job, already started"),
    404: OpenApiResponse(ErrorSerializer, description="no such study"),
    429: OpenApiResponse(ErrorSerializer, description="too many jobs at once, or failed tokens"),
}


class JobViewSet(
    ContractMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[Job],
):
    serializer_class = JobSerializer
    permission_classes = [IsResearcher]
    query_serializers = {"list": PageQuery}
    lookup_value_regex = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

    def get_queryset(self) -> QuerySet[Job]:
        return jobs_of(user=self.request.user)

    def get_object(self) -> Job:
        return job_get_for_user(user=self.request.user, job_id=self.kwargs["pk"])

    def _started(self, request: Request, start: Callable[[], tuple[Job, bool]]) -> Response:
        try:
            job, created = start()
        except JobRefused as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_429_TOO_MANY_REQUESTS)
        body = JobSerializer(job, context={"request": request}).data
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=ReleaseStartSerializer, responses=START_RESPONSES)
    @action(detail=False, methods=["post"], parser_classes=[JSONParser])
    def release(self, request: Request, format: str | None = None) -> Response:
        """Start the study's release bundle (docs/release.md); the same request again while it
        runs, or while its zip is kept, answers that job (200) instead of starting another."""
        data = ReleaseStartSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        study = study_or_none(study_id=values["study"], studies=studies_for(user=request.user))
        if study is None:
            raise NotFound("no such study")
        params = release_params(study=study, include_text=values["include_text"])
        return self._started(
            request,
            lambda: job_start(
                owner=request.user,
                kind=Job.Kind.RELEASE,
                params={**params, "channel": ExportLog.Channel.API},
                digest=job_digest(kind=Job.Kind.RELEASE, params=params),
                study=study,
            ),
        )

    @extend_schema(
        request={"multipart/form-data": KappaF1StartSerializer}, responses=START_RESPONSES
    )
    @action(detail=False, methods=["post"], url_path="kappa-f1", parser_classes=[MultiPartParser])
    def kappa_f1(self, request: Request, format: str | None = None) -> Response:
        """Start a κ_F1 evaluation of an uploaded predictions file (docs/distortions.md); a file
        that cannot be read fails the job with the reason. The same file and parameters again
        answer the same job (200)."""
        data = KappaF1StartSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        return self._started(
            request,
            lambda: kappa_f1_job_start(
                owner=request.user,
                upload=values["file"],
                task=values["task"],
                labels=[x.strip() for x in values.get("labels", "").split(",") if x.strip()],
                n_sim=values["n_sim"],
                seed=values["seed"],
            ),
        )

    @extend_schema(request=None, responses={200: JobSerializer})
    @action(detail=True, methods=["post"])
    def cancel(
        self, request: Request, pk: str | None = None, format: str | None = None
    ) -> Response:
        """Cancel a queued or running job (an ended one is answered as it is). `format` is the
        router's suffix route's (cancel.json)."""
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
    def download(
        self, request: Request, pk: str | None = None, format: str | None = None
    ) -> FileResponse:
        """The job's result file, while it is kept."""
        job = self.get_object()
        if not job.can_download:
            raise NotFound("this job has no result to download (not finished, or deleted)")
        return zip_attachment(
            default_storage.open(job.result_file.name or "", "rb"), filename=job.result_name
        )
