"""What the API's endpoints take in their query strings, and its pages: typed, bounded fields
that drf-spectacular writes into the schema and the server validates with (api_contract.py).

Kept apart from api_contract.py, which imports drf-spectacular: DRF imports the pagination
class while it defines its generic views, before drf-spectacular can be imported.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.core.validators import ProhibitNullCharactersValidator, RegexValidator
from django.db.models import QuerySet
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request

if TYPE_CHECKING:
    from django.http.request import QueryDict
    from rest_framework.views import APIView

# Pages. MAX_LIMIT bounds the largest JSON answer the API gives (docs/benchmarks.md, API pages).
DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
# PostgreSQL's int4 range: past it an id or offset cannot exist (and an int8 overflow was a 500).
MAX_OFFSET = 2**31 - 1
MAX_ID = 2**31 - 1
# Names of judges, sources, conditions and study codes: printable text, no control characters.
# \A and \Z, not ^ and $ (Python's $ matches before a final newline); the schema gets the
# ECMA anchors (drf-spectacular turns \A and \Z into ^ and $).
NAME_PATTERN = r"\A[^\x00-\x1f\x7f]+\Z"
NAME_MAX_LENGTH = 200
# DRF's own ?format= override (json, api: the browsable API); not part of the contract.
FRAMEWORK_PARAMETERS = frozenset({"format"})

_INTEGER = re.compile(r"[+-]?[0-9]{1,1000}")
# A decimal number as JSON writes it (no nan, inf, hex, underscores or spaces).
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]{1,3})?")
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def _shown(raw: object) -> str:
    text = repr(raw)
    return text if len(text) <= 40 else text[:37] + "..."


class IntegerParam(serializers.IntegerField):
    """A whole number in decimal digits, within [min_value, max_value]."""

    default_error_messages = {
        "invalid": "must be a whole number, got {input}",
        "max_value": "must be at most {max_value}",
        "min_value": "must be at least {min_value}",
        "max_string_length": "must be a whole number, got {input}",
    }

    def to_internal_value(self, data: Any) -> int:
        if not isinstance(data, str) or not _INTEGER.fullmatch(data):
            self.fail("invalid", input=_shown(data))
        return int(data)


class NumberParam(serializers.FloatField):
    """A finite decimal number, within [min_value, max_value]."""

    default_error_messages = {
        "invalid": "must be a number, got {input}",
        "max_value": "must be at most {max_value}",
        "min_value": "must be at least {min_value}",
        "max_string_length": "must be a number, got {input}",
    }

    def to_internal_value(self, data: Any) -> float:
        if not isinstance(data, str) or not _NUMBER.fullmatch(data):
            self.fail("invalid", input=_shown(data))
        value = float(data)
        if not math.isfinite(value):
            self.fail("invalid", input=_shown(data))
        return value


class FlagParam(serializers.BooleanField):
    """true/false (also 1/0, yes/no, on/off; any case)."""

    default_error_messages = {"invalid": "must be true or false (1 or 0), got {input}"}

    def to_internal_value(self, data: Any) -> bool:
        word = data.lower() if isinstance(data, str) else None
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        self.fail("invalid", input=_shown(data))
        raise AssertionError  # fail() raises


class NameParam(serializers.CharField):
    """A name as stored (no trimming): printable, 1 to NAME_MAX_LENGTH characters."""

    default_error_messages = {
        "invalid": "must be text",
        "blank": "must not be empty",
        "max_length": "must be at most {max_length} characters",
        "min_length": "must not be empty",
    }

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", NAME_MAX_LENGTH)
        kwargs.setdefault("min_length", 1)
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(**kwargs)
        # One message for NUL and the other control characters (the pattern in the schema).
        self.validators = [
            *(v for v in self.validators if not isinstance(v, ProhibitNullCharactersValidator)),
            RegexValidator(NAME_PATTERN, "must not contain control characters"),
        ]


class ChoiceParam(serializers.ChoiceField):
    """One of `choices`, exactly."""

    default_error_messages = {"invalid_choice": "must be one of {choices}, got {input}"}

    def to_internal_value(self, data: Any) -> Any:
        if data not in self.choices:
            self.fail(
                "invalid_choice", choices=", ".join(map(str, self.choices)), input=_shown(data)
            )
        return super().to_internal_value(data)


class QuerySerializer(serializers.Serializer[dict[str, Any]]):
    """What an endpoint takes in its query string; read by the schema and by the server."""


class PageQuery(QuerySerializer):
    limit = IntegerParam(
        min_value=1,
        max_value=MAX_LIMIT,
        default=DEFAULT_LIMIT,
        help_text=f"results per page (at most {MAX_LIMIT}; whole studies: the CSV export)",
    )
    offset = IntegerParam(min_value=0, max_value=MAX_OFFSET, default=0, help_text="results to skip")


def _flat_messages(detail: Any, prefix: str = "") -> list[str]:
    if isinstance(detail, Mapping):
        return [m for k, v in detail.items() for m in _flat_messages(v, f"{prefix}{k}: ")]
    if isinstance(detail, list | tuple):
        return [m for item in detail for m in _flat_messages(item, prefix)]
    return [f"{prefix}{detail}"]


def parameter_errors(detail: Any) -> dict[str, list[str]]:
    """A 400 body as ParameterErrors: each name with a flat list of messages."""
    if isinstance(detail, Mapping):
        return {str(name): _flat_messages(value) for name, value in detail.items()}
    return {"detail": _flat_messages(detail)}


def query_validate(serializer_class: type[QuerySerializer], params: QueryDict) -> dict[str, Any]:
    """The query string read through `serializer_class`, or ValidationError (400) naming each
    unknown, repeated or invalid parameter."""
    fields = serializer_class().fields
    errors: dict[str, list[str]] = {}
    data: dict[str, Any] = {}
    for name in params:
        values = params.getlist(name)
        field = fields.get(name)
        if field is None:
            if name not in FRAMEWORK_PARAMETERS:
                known = ", ".join(fields) or "none"
                errors[name] = [f"unknown parameter; this endpoint takes: {known}"]
        elif isinstance(field, serializers.ListField):
            data[name] = values
        elif len(values) > 1:
            errors[name] = [f"give it once (given {len(values)} times)"]
        else:
            data[name] = values[0]
    if errors:
        raise ValidationError(errors)
    serializer = serializer_class(data=data)
    if not serializer.is_valid():
        raise ValidationError(parameter_errors(serializer.errors))
    return dict(serializer.validated_data)


class ApiPagination(LimitOffsetPagination):
    """limit/offset pages from the validated query (PageQuery); never a page over MAX_LIMIT.

    A page is read in steps (a "deferred join"): the count and the ids of the page (narrow
    rows), then the page's own rows by id. Sorting whole rows to skip `offset` of them cost
    seconds at paper scale (420,000 ratings: the sort spilled to disk); ids alone sort in
    memory. A view may load the page's rows itself (``page_load(ids)``: dicts read with
    values(), without building model instances).
    """

    default_limit = DEFAULT_LIMIT
    max_limit = MAX_LIMIT

    def paginate_queryset(
        self, queryset: QuerySet[Any] | Sequence[Any], request: Request, view: APIView | None = None
    ) -> list[Any]:
        query = getattr(view, "query", {})
        self.request = request
        self.limit = query.get("limit", DEFAULT_LIMIT)
        self.offset = query.get("offset", 0)
        if not isinstance(queryset, QuerySet):
            self.count = len(queryset)
            return list(queryset[self.offset : self.offset + self.limit])
        ids, self.count = page_ids(queryset, offset=self.offset, limit=self.limit)
        load = getattr(view, "page_load", None)
        if load is not None:
            return list(load(ids))
        by_id = {obj.pk: obj for obj in queryset.filter(pk__in=ids)}
        return [by_id[pk] for pk in ids]

    def get_schema_operation_parameters(self, view: APIView) -> list[dict[str, Any]]:
        return []  # limit and offset are fields of the view's PageQuery


def page_ids(queryset: QuerySet[Any], *, offset: int, limit: int) -> tuple[list[Any], int]:
    """The primary keys of one page of `queryset` (in its order) and the length of the whole.

    Two narrow reads: the count, then the page's ids. A page in the second half of a list
    ordered by primary key is read from the end (PostgreSQL then steps over the rows after it,
    not before), so no page walks more than half the list. (One window query,
    ``COUNT(*) OVER ()`` beside the ids, was slower: with a LIMIT PostgreSQL walks the id index
    through nested loops for every row, where a count alone scans in parallel with hash joins.)
    """
    narrow = queryset.prefetch_related(None).select_related(None)
    count = narrow.count()
    if offset >= count:
        return [], count
    if offset > count // 2 and tuple(queryset.query.order_by) in {("id",), ("pk",)}:
        end = count - offset  # rows from this page's first to the list's last
        tail = narrow.order_by("-pk").values_list("pk", flat=True)[max(0, end - limit) : end]
        return list(reversed(tail)), count
    return list(narrow.values_list("pk", flat=True)[offset : offset + limit]), count
