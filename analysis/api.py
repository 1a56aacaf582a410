"""Read-only REST API for researchers: studies, ratings with scores, distortion label annotations,
reliability reports, export.

Token or session authentication (settings.REST_FRAMEWORK); researchers and admins only —
clinicians get 403, anonymous requests 401. Reports use the same cached builder as the
dashboards (analysis.selectors.study_report).

Clinicians appear as their study code (C01, …), timestamps as days, and drafts are not served;
``?identified=1`` gives names, exact timestamps and ``?status=draft`` to admins and holders of
the identities permission, and every such request is written to the export audit log
(analysis/pseudonyms.py).
"""

from __future__ import annotations

import math
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.core.exceptions import PermissionDenied
from django.db.models import Count, Exists, OuterRef, Prefetch, Q, QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import permissions, serializers, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response as ApiResponse
from rest_framework.views import APIView

from analysis.downloads import csv_attachment
from analysis.models import ExportLog, RaterCode
from analysis.pseudonyms import RaterLabels, identified_check, identified_requested
from analysis.selectors import Filters, ReportParams, StudyReport, ratings_stamp, study_report
from analysis.services import export_log_create, ratings_export_start
from annotation.analysed import analysed_ratings_q
from annotation.models import LabelAnnotation, Rater, Rating, Score, Study
from annotation.roles import can_read_analysis

if TYPE_CHECKING:
    import pandas as pd
    from django.http.request import _ImmutableQueryDict

# The models whose serializers and lists show raters pseudonymously.
_Rated = TypeVar("_Rated", Rating, LabelAnnotation)


class IsResearcher(permissions.BasePermission):
    message = "Reliability data are for researchers and admins."

    def has_permission(self, request: Request, view: APIView) -> bool:
        return can_read_analysis(request.user)


class StudySerializer(serializers.ModelSerializer[Study]):
    attributes = serializers.SerializerMethodField()
    n_conversations = serializers.IntegerField(read_only=True)

    class Meta:
        model = Study
        fields = [
            "id",
            "name",
            "kind",
            "description",
            "attributes",
            "n_conversations",
            "created_at",
        ]

    def get_attributes(self, study: Study) -> list[str]:
        return [a.name for a in study.rubric.attributes.all()]


class PseudonymousFields(serializers.Serializer[_Rated]):
    """rater, created_at and updated_at as the context's RaterLabels shows them: a clinician's
    study code and the day, or (identified) the name and the exact time."""

    rater = serializers.SerializerMethodField(help_text="judge name; clinician study code")
    created_at = serializers.SerializerMethodField(help_text="day, or exact time if identified")
    updated_at = serializers.SerializerMethodField(help_text="day, or exact time if identified")

    def _study_id(self, obj: _Rated) -> int:
        raise NotImplementedError

    def get_rater(self, obj: _Rated) -> str:
        labels: RaterLabels = self.context["labels"]
        rater = obj.rater
        return labels.label(
            study_id=self._study_id(obj), rater_id=rater.pk, name=rater.name, kind=rater.kind
        )

    def _time(self, value: datetime) -> str:
        labels: RaterLabels = self.context["labels"]
        stamp: datetime | date = labels.timestamp(value)
        return stamp.isoformat()

    def get_created_at(self, obj: _Rated) -> str:
        return self._time(obj.created_at)

    def get_updated_at(self, obj: _Rated) -> str:
        return self._time(obj.updated_at)


class RatingSerializer(PseudonymousFields[Rating], serializers.ModelSerializer[Rating]):
    study = serializers.IntegerField(source="response.conversation.study_id")
    conversation = serializers.CharField(source="response.conversation.external_id")
    responder = serializers.CharField(source="response.responder.key")
    rater_kind = serializers.CharField(source="rater.kind")
    scores = serializers.SerializerMethodField()

    class Meta:
        model = Rating
        fields = [
            "id", "study", "conversation", "response", "responder", "rater", "rater_kind",
            "run", "repeat", "status", "source", "rationale", "scores", "created_at",
            "updated_at",
        ]  # fmt: skip

    def _study_id(self, rating: Rating) -> int:
        return rating.response.conversation.study_id

    def get_scores(self, rating: Rating) -> dict[str, int]:
        return {s.attribute.name: s.value for s in rating.scores.all()}


class LabelAnnotationSerializer(
    PseudonymousFields[LabelAnnotation], serializers.ModelSerializer[LabelAnnotation]
):
    study = serializers.IntegerField(source="conversation.study_id")
    conversation = serializers.CharField(source="conversation.external_id")
    rater_kind = serializers.CharField(source="rater.kind")

    def _study_id(self, annotation: LabelAnnotation) -> int:
        return annotation.conversation.study_id

    class Meta:
        model = LabelAnnotation
        fields = [
            "id", "study", "conversation", "rater", "rater_kind", "run", "repeat", "status",
            "source", "labels", "others", "error", "created_at", "updated_at",
        ]  # fmt: skip


REPORT_PARAMETERS = [
    OpenApiParameter("bootstrap", int, description="bootstrap resamples (default 1000)"),
    OpenApiParameter("seed", int, description="random seed (default 0)"),
    OpenApiParameter("as_published", bool, description="count the release's 0/6 cells"),
    OpenApiParameter("condition", str, description="only conversations with this label"),
    OpenApiParameter("source", str, description="only conversations from this dataset"),
    OpenApiParameter("clinician", str, description="this clinician (study code) as reference"),
    OpenApiParameter("judge", str, many=True, description="only these judges"),
]
IDENTIFIED_HELP = (
    "clinicians' names and exact timestamps (and drafts on request): admins and holders of the "
    "identities permission only; audited"
)
# The tables a report can return are the selector's; the API offers exactly those.
TABLES = StudyReport.TABLES


def _int(request: Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: f"{raw!r} is not an integer"}) from None
    if not low <= value <= high:
        raise ValidationError({name: f"must be between {low} and {high}"})
    return value


def _report(request: Request, study: Study) -> StudyReport:
    q = request.query_params
    filters = Filters(
        condition=q.get("condition") or None,
        source=q.get("source") or None,
        clinician=q.get("clinician") or None,
        judges=tuple(q.getlist("judge")) or None,
    )
    params = ReportParams(
        n_boot=_int(request, "bootstrap", 1000, 1, 20_000),
        seed=_int(request, "seed", 0, 0, 2**31 - 1),
        as_published=q.get("as_published", "").lower() in {"1", "true", "yes", "on"},
    )
    return study_report(study=study, filters=filters, params=params)


def _json_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in df.to_dict("records")
    ]


class StudyViewSet(viewsets.ReadOnlyModelViewSet[Study]):
    serializer_class = StudySerializer
    permission_classes = [IsResearcher]

    def get_queryset(self) -> QuerySet[Study]:
        return (
            Study.objects.annotate(n_conversations=Count("conversations"))
            .select_related("rubric")
            .prefetch_related("rubric__attributes")
            .order_by("name")
        )

    @extend_schema(
        parameters=[
            OpenApiParameter("table", str, OpenApiParameter.PATH, enum=list(TABLES)),
            *REPORT_PARAMETERS,
        ],
        responses=inline_serializer(
            "Report",
            fields={
                "study": serializers.IntegerField(),
                "table": serializers.CharField(),
                "ratings_version": serializers.CharField(
                    help_text="<submitted ratings>:<day the latest changed>; drafts never move it"
                ),
                "notes": serializers.ListField(child=serializers.CharField()),
                "rows": serializers.ListField(child=serializers.DictField()),
            },
        ),
    )
    @action(detail=True, methods=["get"], url_path=r"reports/(?P<table>[a-z_]+)")
    def reports(
        self,
        request: Request,
        pk: str | None = None,
        table: str = "reliability",
        format: str | None = None,
    ) -> ApiResponse:
        """A report table (reliability: one row per judge × attribute) for the study or a
        subset; recomputed only when the study's ratings changed."""
        # `format` comes from the router's suffix route (reports/reliability.json), which
        # answered 500 without the argument.
        if table not in TABLES:
            raise NotFound(f"unknown table {table!r}; choose one of {', '.join(TABLES)}")
        study = self.get_object()
        report = _report(request, study)
        df = report.table(table)
        return ApiResponse(
            {
                "study": study.pk,
                "table": table,
                "ratings_version": ratings_stamp(study=study),
                "notes": report.notes,
                "rows": [] if df is None else _json_rows(df),
            }
        )

    @extend_schema(
        parameters=[
            OpenApiParameter("layout", str, enum=["long", "wide"]),
            OpenApiParameter("identified", bool, description=IDENTIFIED_HELP),
        ],
        responses={(200, "text/csv"): OpenApiTypes.STR},
    )
    @action(detail=True, methods=["get"], url_path="export")
    def export(
        self, request: Request, pk: str | None = None, format: str | None = None
    ) -> StreamingHttpResponse:
        """Every score of the study as CSV (streamed); recorded in the export audit log."""
        study = self.get_object()
        wide = request.query_params.get("layout") == "wide"
        identified = identified_requested(request.query_params.get("identified"))
        identified_check(user=request.user, identified=identified)
        what, chunks = ratings_export_start(
            user=request.user,
            study=study,
            wide=wide,
            identified=identified,
            channel=ExportLog.Channel.API,
        )
        return csv_attachment(chunks, filename=f"study-{study.pk}-{what}.csv")


LIST_PARAMETERS = [
    OpenApiParameter("study", int, description="study id"),
    OpenApiParameter("rater", str, description="judge name or clinician study code"),
    OpenApiParameter("status", str, enum=[s.value for s in Rating.Status]),
    OpenApiParameter("identified", bool, description=IDENTIFIED_HELP),
]


def _filtered(
    queryset: QuerySet[_Rated], q: _ImmutableQueryDict, *, study_field: str, identified: bool
) -> QuerySet[_Rated]:
    """The list filters both viewsets share: study, rater and status."""
    if q.get("study"):
        try:
            queryset = queryset.filter(**{study_field: int(q["study"])})
        except ValueError:
            raise ValidationError({"study": "expected a study id"}) from None
    if q.get("rater"):
        if identified:
            queryset = queryset.filter(rater__name=q["rater"])
        else:
            # Judges by name, clinicians only by their code in the rating's own study: a name
            # must not be usable to probe whether a person rated.
            code = RaterCode.objects.filter(
                rater_id=OuterRef("rater_id"), study_id=OuterRef(study_field), code=q["rater"]
            )
            queryset = queryset.filter(
                Q(rater__kind=Rater.Kind.JUDGE, rater__name=q["rater"]) | Exists(code)
            )
    if q.get("status"):
        if q["status"] not in Rating.Status.values:
            raise ValidationError({"status": f"choose one of {', '.join(Rating.Status.values)}"})
        if q["status"] == Rating.Status.DRAFT and not identified:
            raise PermissionDenied(
                "drafts are a clinician's unfinished work: they are served only with "
                "identified=1, to admins and holders of the identities permission"
            )
        return queryset.filter(status=q["status"])
    # A draft is a clinician's unfinished work: only on explicit, identified request.
    return queryset.exclude(status=Rating.Status.DRAFT)


if TYPE_CHECKING:
    # What the mixin is mixed into (for its self.request and super() calls).
    _ListViewSet = viewsets.GenericViewSet[Any]
else:
    _ListViewSet = object


class PseudonymousListMixin(_ListViewSet):
    """Lists that show clinicians as study codes unless ?identified=1 (checked, and written
    to the export audit log once per request)."""

    audit_what = ""

    def identified(self) -> bool:
        if not hasattr(self, "_identified"):
            wanted = identified_requested(self.request.query_params.get("identified"))
            identified_check(user=self.request.user, identified=wanted)
            self._identified = wanted
        return self._identified

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)  # authentication and permissions first
        if self.identified():
            study = request.query_params.get("study", "")
            export_log_create(
                user=request.user,
                study=Study.objects.filter(pk=int(study)).first() if study.isdigit() else None,
                channel=ExportLog.Channel.API,
                what=self.audit_what,
                params={**dict(request.query_params.lists()), "path": request.path},
            )

    def get_serializer_context(self) -> dict[str, Any]:
        # DRF builds a new dict on each call (the stubs say Mapping).
        context = cast(dict[str, Any], super().get_serializer_context())
        context["labels"] = RaterLabels(identified=self.identified())
        return context


@extend_schema(parameters=LIST_PARAMETERS)
class RatingViewSet(PseudonymousListMixin, viewsets.ReadOnlyModelViewSet[Rating]):
    """Ratings with their scores, oldest first; filter by study, rater and status. Clinicians as
    study codes, days instead of times, no drafts — unless ?identified=1 (audited)."""

    serializer_class = RatingSerializer
    permission_classes = [IsResearcher]
    audit_what = "api:ratings"

    def get_queryset(self) -> QuerySet[Rating]:
        q = self.request.query_params
        ratings = (
            # Study data only: practice and test-retest repeat ratings are not listed.
            Rating.objects.filter(analysed_ratings_q())
            .select_related("response__conversation", "response__responder", "rater")
            .prefetch_related(
                Prefetch("scores", queryset=Score.objects.select_related("attribute"))
            )
            .order_by("id")
        )
        return _filtered(
            ratings, q, study_field="response__conversation__study_id", identified=self.identified()
        )


@extend_schema(parameters=LIST_PARAMETERS)
class LabelAnnotationViewSet(PseudonymousListMixin, viewsets.ReadOnlyModelViewSet[LabelAnnotation]):
    """Cognitive-distortion labels of clinicians and LLM runs (one row per rater, message, run
    and repeat), oldest first; filter by study, rater and status (drafts only with
    ?status=draft, identified). Out-of-list labels stand as "Others" in `labels`, verbatim in
    `others`. Clinicians as study codes unless ?identified=1 (audited)."""

    serializer_class = LabelAnnotationSerializer
    permission_classes = [IsResearcher]
    audit_what = "api:label-annotations"

    def get_queryset(self) -> QuerySet[LabelAnnotation]:
        annotations = LabelAnnotation.objects.select_related("conversation", "rater").order_by("id")
        return _filtered(
            annotations,
            self.request.query_params,
            study_field="conversation__study_id",
            identified=self.identified(),
        )
