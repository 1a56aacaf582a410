"""Read-only REST API for researchers: studies, ratings with scores, distortion label annotations,
reliability reports, export.

Token or session authentication (settings.REST_FRAMEWORK); researchers and admins only —
clinicians get 403, anonymous requests 401. Reports use the same cached builder as the
dashboards (analysis.selectors.study_report).

Clinicians appear as their study code (C01, …), timestamps as days, and drafts are not served;
``?identified=1`` gives names, exact timestamps and ``?status=draft`` to admins and holders of
the identities permission, and every such request is written to the export audit log
(analysis/pseudonyms.py).

What each endpoint takes is its QuerySerializer (``query_serializers``), which both the schema
and the server read; pages, errors and their schema are analysis/api_contract.py's.
"""

from __future__ import annotations

import math
from datetime import date, datetime
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    inline_serializer,
)
from rest_framework import permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response as ApiResponse
from rest_framework.views import APIView

from accounts.roles import can_read_analysis
from analysis.api_contract import ContractMixin
from analysis.api_params import (
    MAX_ID,
    ChoiceParam,
    FlagParam,
    IntegerParam,
    NameParam,
    PageQuery,
    QuerySerializer,
)
from analysis.api_selectors import (
    label_annotations_listed,
    rating_rows,
    ratings_listed,
    studies_listed,
    study_or_none,
)
from analysis.jobs.serializers import JobSerializer
from analysis.jobs.services import JobRefused, report_job_start, report_needs_job
from analysis.models import ExportLog
from analysis.pseudonyms import RaterLabels, identified_check
from analysis.selectors import (
    Filters,
    ReportParams,
    StudyReport,
    final_scores_frame,
    judges_against_adjudicated,
    ratings_stamp,
    study_report,
    study_report_cached,
)
from analysis.services import export_log_create, ratings_export_start
from annotation.adjudication_selectors import attribute_thresholds_by_name
from annotation.csvsafe import csv_attachment
from annotation.membership import studies_for
from annotation.models import LabelAnnotation, Rating, Study

if TYPE_CHECKING:
    import pandas as pd


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


# What a rating or label annotation is shown from: a LabelAnnotation, or a rating's row of
# RATING_COLUMNS (rating_rows).
_Shown = TypeVar("_Shown", LabelAnnotation, dict[str, Any])


class PseudonymousFields(serializers.Serializer[_Shown]):
    """rater, created_at and updated_at as the context's RaterLabels shows them: a clinician's
    study code and the day, or (identified) the name and the exact time."""

    rater = serializers.SerializerMethodField(help_text="judge name; clinician study code")
    created_at = serializers.SerializerMethodField(help_text="day, or exact time if identified")
    updated_at = serializers.SerializerMethodField(help_text="day, or exact time if identified")

    def _rater(self, obj: _Shown) -> tuple[int, int, str, str]:
        """Study id, rater id, rater name and rater kind."""
        raise NotImplementedError

    def _stamp(self, obj: _Shown, name: str) -> datetime:
        raise NotImplementedError

    def get_rater(self, obj: _Shown) -> str:
        labels: RaterLabels = self.context["labels"]
        study_id, rater_id, name, kind = self._rater(obj)
        return labels.label(study_id=study_id, rater_id=rater_id, name=name, kind=kind)

    def _time(self, value: datetime) -> str:
        labels: RaterLabels = self.context["labels"]
        stamp: datetime | date = labels.timestamp(value)
        return stamp.isoformat()

    def get_created_at(self, obj: _Shown) -> str:
        return self._time(self._stamp(obj, "created_at"))

    def get_updated_at(self, obj: _Shown) -> str:
        return self._time(self._stamp(obj, "updated_at"))


class RatingSerializer(PseudonymousFields[dict[str, Any]]):
    """A rating: who rated which response, and the score given on each attribute."""

    # Read from a rating's row of RATING_COLUMNS (rating_rows), not from a model instance.

    id = serializers.IntegerField()
    study = serializers.IntegerField(source="response__conversation__study_id")
    conversation = serializers.CharField(source="response__conversation__external_id")
    response = serializers.IntegerField(source="response_id")
    responder = serializers.CharField(source="response__responder__key")
    rater_kind = serializers.CharField(source="rater__kind")
    run = serializers.IntegerField(source="run_id", allow_null=True, help_text="judge run id")
    repeat = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Rating.Status.choices)
    # A field named like Field.source: DRF's metaclass takes declared fields off the class.
    source = serializers.ChoiceField(choices=Rating.Source.choices)  # type: ignore[assignment]
    rationale = serializers.CharField()
    scores = serializers.DictField(child=serializers.IntegerField(), help_text="attribute → score")

    def _rater(self, row: dict[str, Any]) -> tuple[int, int, str, str]:
        return (
            row["response__conversation__study_id"],
            row["rater_id"],
            row["rater__name"],
            row["rater__kind"],
        )

    def _stamp(self, row: dict[str, Any], name: str) -> datetime:
        stamp: datetime = row[name]
        return stamp


class LabelAnnotationSerializer(
    PseudonymousFields[LabelAnnotation], serializers.ModelSerializer[LabelAnnotation]
):
    study = serializers.IntegerField(source="conversation.study_id")
    conversation = serializers.CharField(source="conversation.external_id")
    rater_kind = serializers.CharField(source="rater.kind")

    def _rater(self, annotation: LabelAnnotation) -> tuple[int, int, str, str]:
        rater = annotation.rater
        return annotation.conversation.study_id, rater.pk, rater.name, rater.kind

    def _stamp(self, annotation: LabelAnnotation, name: str) -> datetime:
        stamp: datetime = getattr(annotation, name)
        return stamp

    class Meta:
        model = LabelAnnotation
        fields = [
            "id", "study", "conversation", "rater", "rater_kind", "run", "repeat", "status",
            "source", "labels", "others", "error", "created_at", "updated_at",
        ]  # fmt: skip


IDENTIFIED_HELP = (
    "clinicians' names and exact timestamps (and drafts on request): admins and holders of the "
    "identities permission only; audited"
)
# The tables a report can return are the selector's; the API offers exactly those.
TABLES = StudyReport.TABLES
MAX_BOOTSTRAP = 20_000
MAX_SEED = 2**31 - 1
MAX_JUDGES = 20


class ReportQuery(QuerySerializer):
    bootstrap = IntegerParam(
        min_value=1, max_value=MAX_BOOTSTRAP, default=1000, help_text="bootstrap resamples"
    )
    seed = IntegerParam(min_value=0, max_value=MAX_SEED, default=0, help_text="random seed")
    as_published = FlagParam(default=False, help_text="count the release's 0/6 cells")
    condition = NameParam(required=False, help_text="only conversations with this label")
    # A field named like Field.source: DRF's metaclass takes declared fields off the class.
    source = NameParam(  # type: ignore[assignment]
        required=False, help_text="only conversations from this dataset"
    )
    clinician = NameParam(
        required=False, help_text="this clinician (study code) as the human reference"
    )
    judge = serializers.ListField(
        child=NameParam(),
        required=False,
        max_length=MAX_JUDGES,
        help_text="only these judges (repeat the parameter for several)",
    )


class ExportQuery(QuerySerializer):
    layout = ChoiceParam(
        choices=["long", "wide"],
        default="long",
        help_text=(
            "long: one row per score; wide: one row per rater × conversation, a column per "
            "responder × attribute"
        ),
    )
    identified = FlagParam(default=False, help_text=IDENTIFIED_HELP)


class StudyQuery(QuerySerializer):
    """A study by id takes no parameters."""


def _report_inputs(query: dict[str, Any]) -> tuple[Filters, ReportParams]:
    filters = Filters(
        condition=query.get("condition"),
        source=query.get("source"),
        clinician=query.get("clinician"),
        judges=tuple(query.get("judge") or ()) or None,
    )
    params = ReportParams(
        n_boot=query["bootstrap"], seed=query["seed"], as_published=query["as_published"]
    )
    return filters, params


# How long a client refused for its jobs at once is told to wait before asking again.
JOBS_RETRY_AFTER_SECONDS = 30


def _json_rows(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in r.items()}
        for r in df.to_dict("records")
    ]


class ErrorsAsJson(DefaultContentNegotiation):
    """The export streams its CSV itself, so any Accept header may reach it (`text/csv`, which
    a client generated from the schema may send, would otherwise be 406); its errors are JSON."""

    def select_renderer(
        self, request: Request, renderers: Any, format_suffix: str | None = None
    ) -> tuple[Any, str]:
        return (renderers[0], renderers[0].media_type)


class StudyViewSet(ContractMixin, viewsets.ReadOnlyModelViewSet[Study]):
    serializer_class = StudySerializer
    permission_classes = [IsResearcher]
    query_serializers = {
        "list": PageQuery,
        "retrieve": StudyQuery,
        "reports": ReportQuery,
        "export": ExportQuery,
        "final_scores": StudyQuery,
    }

    def get_queryset(self) -> QuerySet[Study]:
        # A study the caller is not a member of is not found: the same 404 as no study.
        return studies_listed(studies=studies_for(user=self.request.user))

    def _report_job(
        self, request: Request, study: Study, filters: Filters, params: ReportParams
    ) -> ApiResponse:
        """202 with the job computing the report (started now or already), 429 when the
        caller has as many jobs at once as one person may."""
        try:
            job, _ = report_job_start(
                owner=request.user,
                study=study,
                filters=filters,
                params=params,
                channel=ExportLog.Channel.API,
            )
        except JobRefused as exc:
            return ApiResponse(
                {"detail": str(exc)},
                status=status.HTTP_429_TOO_MANY_REQUESTS,
                headers={"Retry-After": str(JOBS_RETRY_AFTER_SECONDS)},
            )
        detail = (
            f"{params.n_boot:,} bootstrap resamples are computed by a background job; ask "
            "again once it is done (its url shows its progress)."
        )
        body = {"detail": detail, "job": JobSerializer(job, context={"request": request}).data}
        return ApiResponse(body, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        parameters=[OpenApiParameter("table", str, OpenApiParameter.PATH, enum=list(TABLES))],
        responses={
            200: inline_serializer(
                "Report",
                fields={
                    "study": serializers.IntegerField(),
                    "table": serializers.CharField(),
                    "ratings_version": serializers.CharField(
                        help_text="<submitted ratings>:<day the latest changed>; drafts never "
                        "move it"
                    ),
                    "notes": serializers.ListField(child=serializers.CharField()),
                    "rows": serializers.ListField(child=serializers.DictField()),
                },
            ),
            202: OpenApiResponse(
                inline_serializer(
                    "ReportPending",
                    fields={
                        "detail": serializers.CharField(),
                        "job": JobSerializer(),
                    },
                ),
                description="more bootstrap resamples than the default and not computed yet: "
                "a background job computes the report (the same job for the same request); "
                "ask again once the job is done",
            ),
        },
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
        subset; recomputed only when the study changed (its ratings, judges' names and
        exclusions, responders, rubric: analysis.selectors.study_version)."""
        # `format` comes from the router's suffix route (reports/reliability.json), which
        # answered 500 without the argument.
        if table not in TABLES:
            raise NotFound(f"unknown table {table!r}; choose one of {', '.join(TABLES)}")
        study = self.get_object()
        filters, params = _report_inputs(self.query)
        if report_needs_job(params=params):
            cached = study_report_cached(study=study, filters=filters, params=params)
            if cached is None:
                return self._report_job(request, study, filters, params)
            report = cached
        else:
            report = study_report(study=study, filters=filters, params=params)
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
        responses=inline_serializer(
            "FinalScores",
            fields={
                "study": serializers.IntegerField(),
                "adjudication_threshold": serializers.IntegerField(
                    help_text="clinicians this many points apart or more go to adjudication"
                ),
                "attribute_thresholds": serializers.DictField(
                    child=serializers.IntegerField(),
                    help_text="the threshold that applies to each attribute: its own where the "
                    "lead set one, else adjudication_threshold",
                ),
                "rows": serializers.ListField(
                    child=serializers.DictField(),
                    help_text="one per response × attribute: final_score and its provenance",
                ),
                "judges": serializers.ListField(
                    child=serializers.DictField(),
                    help_text="ICC of each judge × attribute against the final scores; "
                    "empty until something is adjudicated",
                ),
            },
        ),
    )
    @action(detail=True, methods=["get"], url_path="final-scores")
    def final_scores(
        self, request: Request, pk: str | None = None, format: str | None = None
    ) -> ApiResponse:
        """The final score of every response × attribute with its provenance (adjudicated,
        clinician-consensus, single-clinician, awaiting-adjudication), and each judge's ICC
        against them (docs/adjudication.md). No clinician is named."""
        study = self.get_object()
        judges = judges_against_adjudicated(study=study)
        return ApiResponse(
            {
                "study": study.pk,
                "adjudication_threshold": study.adjudication_threshold,
                "attribute_thresholds": attribute_thresholds_by_name(study=study),
                "rows": _json_rows(final_scores_frame(study=study)),
                "judges": [] if judges is None else _json_rows(judges),
            }
        )

    @extend_schema(responses={(200, "text/csv"): OpenApiTypes.STR})
    @action(
        detail=True,
        methods=["get"],
        url_path="export",
        renderer_classes=[JSONRenderer],
        content_negotiation_class=ErrorsAsJson,
    )
    def export(
        self, request: Request, pk: str | None = None, format: str | None = None
    ) -> StreamingHttpResponse:
        """Every score of the study as CSV, streamed: the way to take a whole study's data (the
        JSON lists are pages). Recorded in the export audit log."""
        study = self.get_object()
        wide = self.query["layout"] == "wide"
        identified = self.query["identified"]
        identified_check(user=request.user, identified=identified)
        what, chunks = ratings_export_start(
            user=request.user,
            study=study,
            wide=wide,
            identified=identified,
            channel=ExportLog.Channel.API,
        )
        return csv_attachment(chunks, filename=f"study-{study.pk}-{what}.csv")


class RatedQuery(QuerySerializer):
    """The filters of ratings and label annotations (one object, or a page of them)."""

    study = IntegerParam(min_value=1, max_value=MAX_ID, required=False, help_text="study id")
    rater = NameParam(required=False, help_text="judge name or clinician study code")
    status = ChoiceParam(
        choices=Rating.Status.values,
        required=False,
        help_text="draft only with identified=true; default: complete and invalid",
    )
    identified = FlagParam(default=False, help_text=IDENTIFIED_HELP)


class RatedPageQuery(RatedQuery, PageQuery):
    pass


if TYPE_CHECKING:
    # What the mixin is mixed into (for its self.request and super() calls).
    _ListViewSet = viewsets.GenericViewSet[Any]
else:
    _ListViewSet = object


class PseudonymousListMixin(ContractMixin, _ListViewSet):
    """Lists that show clinicians as study codes unless ?identified=1 (checked, and written
    to the export audit log once per request)."""

    audit_what = ""
    query_serializers = {"list": RatedPageQuery, "retrieve": RatedQuery}

    def identified(self) -> bool:
        if not hasattr(self, "_identified"):
            # Not in the query of a method the view refuses (405 after initial()).
            wanted: bool = self.query.get("identified", False)
            identified_check(user=self.request.user, identified=wanted)
            self._identified = wanted
        return self._identified

    def list_filters(self) -> dict[str, Any]:
        """The query's study, rater and status, as the list selectors take them. Drafts are a
        clinician's unfinished work: asked for without identified=1, the answer is 403."""
        status = self.query.get("status") or None
        identified = self.identified()
        if status == Rating.Status.DRAFT and not identified:
            raise PermissionDenied(
                "drafts are a clinician's unfinished work: they are served only with "
                "identified=1, to admins and holders of the identities permission"
            )
        return {
            "studies": studies_for(user=self.request.user),
            "study": self.query.get("study"),
            "rater": self.query.get("rater") or None,
            "status": status,
            "identified": identified,
        }

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        # Authentication, permissions and the query's validation first.
        super().initial(request, *args, **kwargs)
        if self.identified():
            study = self.query.get("study")
            export_log_create(
                user=request.user,
                study=study_or_none(study_id=study, studies=studies_for(user=request.user)),
                channel=ExportLog.Channel.API,
                what=self.audit_what,
                params={**dict(request.query_params.lists()), "path": request.path},
            )

    def get_serializer_context(self) -> dict[str, Any]:
        # DRF builds a new dict on each call (the stubs say Mapping).
        context = cast(dict[str, Any], super().get_serializer_context())
        context["labels"] = RaterLabels(identified=self.identified())
        return context


class RatingViewSet(PseudonymousListMixin, viewsets.ReadOnlyModelViewSet[Rating]):
    """Ratings with their scores, oldest first; filter by study, rater and status. Clinicians as
    study codes, days instead of times, no drafts — unless ?identified=1 (audited)."""

    serializer_class = RatingSerializer
    permission_classes = [IsResearcher]
    audit_what = "api:ratings"

    def get_queryset(self) -> QuerySet[Rating]:
        """The ratings listed (filters and order only: the rows are rating_rows')."""
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular reads the model only
            return Rating.objects.none()
        return ratings_listed(**self.list_filters())

    def page_load(self, ids: list[int]) -> list[dict[str, Any]]:
        """A page's rows (ApiPagination hands over the page's ids)."""
        return rating_rows(ids=ids)

    def retrieve(self, request: Request, *args: Any, **kwargs: Any) -> ApiResponse:
        rating = self.get_object()  # 404 outside the filters
        (row,) = rating_rows(ids=[rating.pk])
        return ApiResponse(self.get_serializer(row).data)


class LabelAnnotationViewSet(PseudonymousListMixin, viewsets.ReadOnlyModelViewSet[LabelAnnotation]):
    """Cognitive-distortion labels of clinicians and LLM runs (one row per rater, message, run
    and repeat), oldest first; filter by study, rater and status (drafts only with
    ?status=draft, identified). Out-of-list labels stand as "Others" in `labels`, verbatim in
    `others`. Clinicians as study codes unless ?identified=1 (audited)."""

    serializer_class = LabelAnnotationSerializer
    permission_classes = [IsResearcher]
    audit_what = "api:label-annotations"

    def get_queryset(self) -> QuerySet[LabelAnnotation]:
        if getattr(self, "swagger_fake_view", False):  # drf-spectacular reads the model only
            return LabelAnnotation.objects.none()
        return label_annotations_listed(**self.list_filters())
