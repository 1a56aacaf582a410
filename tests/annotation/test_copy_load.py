"""Imports through COPY: the same rows as bulk_create, constraints in force, nothing on failure."""

from __future__ import annotations

import pytest
from django.db import DataError, IntegrityError, connection, transaction

from annotation.importers.copy_load import bulk_insert
from annotation.importers.mentalbench import ConversationRecord
from annotation.models import Conversation, ImportLog, Rater, Rating, Response, Score, Study
from annotation.services import (
    conversations_import,
    responders_ensure,
    rubric_get_or_create_default,
)

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the COPY path is PostgreSQL's"
)


@pytest.fixture
def study(db) -> Study:
    return Study.objects.create(name="copy", rubric=rubric_get_or_create_default())


def _record(row: int, ext: str, **kwargs) -> ConversationRecord:
    defaults = {
        "context": f"context {ext} — naïve ✓",
        "conditions": ["anxiety", "sleep"],
        "source": "MB",
        "responses": {"original": f"ref {ext}", "gpt4o": f"model 'quoted' \"text\"\n{ext}"},
    }
    return ConversationRecord(row=row, external_id=ext, **{**defaults, **kwargs})


def _written() -> tuple[int, int, int]:
    """What this module's study holds; other studies (e.g. a session-wide import) are not ours."""
    return (
        Conversation.objects.filter(study__name="copy").count(),
        Response.objects.filter(conversation__study__name="copy").count(),
        ImportLog.objects.filter(study__name="copy").count(),
    )


def test_copy_import_stores_what_bulk_create_would(study):
    records = [_record(2 + i, f"c{i}") for i in range(5)]
    summary = conversations_import(study=study, records=records, file_name="f.csv", sha256="x")
    assert summary["conversations_created"] == 5 and summary["responses_created"] == 10
    stored = Conversation.objects.get(external_id="c3")
    assert (stored.context, stored.conditions, stored.source) == (
        "context c3 — naïve ✓",
        ["anxiety", "sleep"],
        "MB",
    )
    assert stored.created_at is not None
    response = Response.objects.get(conversation=stored, responder__key="gpt4o")
    assert response.text == "model 'quoted' \"text\"\nc3"
    assert (response.metadata, response.truncated) == ({}, False)
    # Never twice: the same records again create nothing.
    again = conversations_import(study=study, records=records, file_name="f.csv", sha256="x")
    assert again["conversations_created"] == again["responses_created"] == 0
    assert _written() == (5, 10, 2)


def test_bulk_insert_gives_primary_keys_in_the_callers_order(study):
    rater = Rater.objects.create(kind=Rater.Kind.JUDGE, name="j")
    conversation = Conversation.objects.create(study=study, external_id="x", context="c")
    responders = responders_ensure(keys={"a", "b"})
    response_ids = [
        Response.objects.create(conversation=conversation, responder=responders[k], text="t").pk
        for k in "ab"
    ]
    ratings = [
        Rating(rater=rater, response_id=pk, status="complete", source="import", rationale=str(pk))
        for pk in reversed(response_ids)
    ]
    bulk_insert(ratings)
    stored = [Rating.objects.get(pk=r.pk) for r in ratings]
    assert [(r.response_id, r.rationale) for r in stored] == [
        (r.response_id, r.rationale) for r in ratings
    ]
    attribute = study.rubric.attributes.first()
    bulk_insert([Score(rating=r, attribute=attribute, value=3) for r in ratings])
    assert Score.objects.filter(rating__in=[r.pk for r in ratings]).count() == 2


def test_a_constraint_violation_in_the_copy_import_writes_nothing(study):
    """Two records with one id get past a caller that skipped the reader's check; the unique
    constraint stops the INSERT … SELECT and the whole import is rolled back."""
    records = [_record(2, "same"), _record(3, "other"), _record(4, "same", context="different")]
    with pytest.raises(IntegrityError), transaction.atomic():
        conversations_import(study=study, records=records, file_name="f.csv", sha256="x")
    assert _written() == (0, 0, 0)


def test_a_value_the_column_cannot_hold_fails_the_copy_and_writes_nothing(study):
    conversations_import(
        study=study, records=[_record(2, "kept")], file_name="first.csv", sha256="1"
    )
    records = [_record(2, "new"), _record(3, "long", source="s" * 101)]  # source is 100 max
    with pytest.raises(DataError), transaction.atomic():
        conversations_import(study=study, records=records, file_name="f.csv", sha256="x")
    assert _written() == (1, 2, 1)
