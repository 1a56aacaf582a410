"""`has_element`: a JSON array holds this string, on every database the platform runs on.

Django's JSONField `contains` lookup is PostgreSQL-only (SQLite raises "contains lookup is not
supported on this database backend"), and a text search on the JSON would match "Anxiety"
inside "Social Anxiety". Conditions are JSON arrays of strings, so the dashboards filter with
`conditions__has_element="Anxiety"`.
"""

import json

from django.db import NotSupportedError
from django.db.models import JSONField, Lookup


@JSONField.register_lookup
class HasElement(Lookup):
    lookup_name = "has_element"
    prepare_rhs = False  # the right-hand side is a plain string, not a JSON document

    def _rhs(self) -> str:
        if not isinstance(self.rhs, str):
            raise TypeError(f"has_element takes a string, not {type(self.rhs).__name__}")
        return self.rhs

    def as_postgresql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        # jsonb containment of a one-element array: the same test, and it can use a GIN index.
        return f"{lhs} @> %s::jsonb", [*lhs_params, json.dumps([self._rhs()])]

    def as_sqlite(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        sql = (
            f"EXISTS (SELECT 1 FROM json_each({lhs}) AS element "
            "WHERE element.type = 'text' AND element.value = %s)"
        )
        return sql, [*lhs_params, self._rhs()]

    def as_sql(self, compiler, connection):
        raise NotSupportedError(
            f"has_element (filtering by a label) is not implemented for {connection.vendor}; "
            "use PostgreSQL or SQLite"
        )
