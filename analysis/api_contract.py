"""The REST API's contract, kept in one place for the server and its OpenAPI schema.

- **Query parameters** are declared once per endpoint, as a QuerySerializer (a view's
  ``query_serializers``, keyed by action or method). ApiAutoSchema writes it into the schema
  (types, bounds, enums, patterns), and ContractMixin validates every request with the same
  serializer: an unknown name, a name given twice (unless it is a list), or a value of the wrong
  type or out of bounds answers 400 naming the parameter, before any work is done.
- **Pages**: ``limit`` (1 to MAX_LIMIT, default DEFAULT_LIMIT) and ``offset`` (0 to MAX_OFFSET)
  are fields of the list endpoints' query serializers (api_params.PageQuery); ApiPagination
  pages with the validated values. Whole-study data leave through the streamed CSV export,
  never as one page.
- **Errors**: a 400 body is ``{"<parameter>": ["message", ...]}`` (ParameterErrors); 401, 403,
  404 and 429 bodies are ``{"detail": "message"}`` (Error), 429 with ``Retry-After``; 414 is
  the HTTP server's own answer to a URL longer than it takes.
  ApiAutoSchema documents on each operation the statuses it can answer (docs/api-tokens.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.defaults import page_not_found
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers
from rest_framework.exceptions import ParseError, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView, exception_handler

from analysis.api_params import QuerySerializer, parameter_errors, query_validate

if TYPE_CHECKING:
    from drf_spectacular.utils import Direction

    _View = APIView
else:
    _View = object


class ContractMixin(_View):
    """Validates the query string with the view's QuerySerializer for the action (viewsets) or
    the method (other views), after authentication and permissions, before the handler runs;
    the values are in ``self.query``."""

    query_serializers: ClassVar[Mapping[str, type[QuerySerializer]]] = {}
    query: dict[str, Any]

    @classmethod
    def query_serializer_for(cls, action: str) -> type[QuerySerializer] | None:
        return cls.query_serializers.get("get" if action == "head" else action)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        action = getattr(self, "action", None) or (request.method or "get").lower()
        serializer_class = self.query_serializer_for(action)
        self.query = (
            {}
            if serializer_class is None
            else query_validate(serializer_class, request.query_params)
        )


# --- errors -----------------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    detail = serializers.CharField(help_text="what went wrong, in one sentence")


class ParameterErrorsSerializer(serializers.Serializer[dict[str, Any]]):
    """Each refused query parameter with what is wrong with it."""


class ParameterErrorsExtension(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]
    """ParameterErrors in the schema: an object of parameter name → list of messages."""

    target_class = ParameterErrorsSerializer

    def map_serializer(self, auto_schema: AutoSchema, direction: str) -> dict[str, Any]:
        return {
            "type": "object",
            "description": "each refused query parameter with what is wrong with it",
            "additionalProperties": {"type": "array", "items": {"type": "string"}},
        }


ERROR_RESPONSES: dict[int, OpenApiResponse] = {
    400: OpenApiResponse(
        ParameterErrorsSerializer,
        description="a query parameter is unknown, repeated, of the wrong type or out of bounds",
    ),
    401: OpenApiResponse(
        ErrorSerializer, description="no credentials, or a wrong or expired token"
    ),
    403: OpenApiResponse(
        ErrorSerializer,
        description="not a researcher or admin, or identified data without the permission",
    ),
    404: OpenApiResponse(ErrorSerializer, description="no such object"),
    429: OpenApiResponse(
        ErrorSerializer,
        description="too many failed token attempts from this address; wait Retry-After seconds",
    ),
}


# The parameters' bounds let a query string outgrow one request line (20 judge names of 200
# characters are 4 KB in ASCII, 48 KB percent-encoded in 4-byte UTF-8); the HTTP server refuses
# such a URL itself, with its own body, before the API sees it.
URI_TOO_LONG = (
    "the URL is longer than the HTTP server takes (gunicorn: a 4094-byte request line); the "
    "body is the server's own"
)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's handler, with every 400 body in the ParameterErrors shape (a body that is no JSON
    too: the jobs' starts take one)."""
    response = exception_handler(exc, context)
    if response is not None and isinstance(exc, ValidationError | ParseError):
        response.data = parameter_errors(response.data)
    return response


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """404 for URLs no view matched: the Error body under /api/, Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"no API endpoint at {request.path}"}, status=404)
    return page_not_found(request, exception or Exception())


class ApiAutoSchema(AutoSchema):
    """drf-spectacular's schema, plus each view's QuerySerializer as the query parameters and
    the error answers each operation can give."""

    def get_override_parameters(self) -> list[Any]:
        parameters = list(super().get_override_parameters())
        if not self._is_api():
            return parameters
        action = getattr(self.view, "action", None) or self.method.lower()
        serializer_class = cast(ContractMixin, self.view).query_serializer_for(action)
        if serializer_class is not None and serializer_class().fields:
            parameters.append(serializer_class)
        parameters.append(
            OpenApiParameter(
                "Retry-After",
                OpenApiTypes.INT,
                OpenApiParameter.HEADER,
                response=[429],
                description="seconds until token attempts are accepted again",
            )
        )
        return parameters

    def _is_api(self) -> bool:
        return isinstance(self.view, ContractMixin)

    def _get_format_parameters(self) -> list[dict[str, Any]]:
        # DRF's ?format= override is not part of the contract (the export is CSV whatever it
        # says, and every other answer JSON).
        return [] if self._is_api() else list(super()._get_format_parameters())

    def _get_response_bodies(self, direction: Direction = "response") -> dict[str, Any]:
        # Here rather than in get_response_serializers, which @extend_schema(responses=...)
        # replaces.
        bodies = dict(super()._get_response_bodies(direction))
        if not self._is_api():
            return bodies
        statuses = [400, 401, 403, 429]
        if "{" in self.path:  # an object named in the path may not exist
            statuses.append(404)
        for code in statuses:
            bodies[str(code)] = self._get_response_for_code(  # type: ignore[no-untyped-call]
                ERROR_RESPONSES[code], str(code), direction=direction
            )
        bodies["414"] = {"description": URI_TOO_LONG}
        return bodies
