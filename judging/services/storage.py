"""Result storage: what a work loop's LLM calls produced, stored exactly once.

One transaction locks the items, flips running → done only for those the loop still holds a
claim on, then inserts their Ratings, Responses or LabelAnnotations.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from annotation.importers.copy_load import analyze_after_commit, bulk_insert_values
from annotation.models import (
    LabelAnnotation,
    Rating,
    Response,
    Score,
)
from scoring.label_parsing import LabelParse
from scoring.parsing import JudgeParse

from .. import providers
from ..models import RunItem

if TYPE_CHECKING:
    from .engine import RunPlan


logger = logging.getLogger(__name__)

# ------------------------------------------------------------------------------ outcomes


@dataclass
class Outcome:
    """What the LLM calls for one item produced, before it is stored."""

    raw_output: str | None = None  # None when no answer arrived at all
    error: str = ""
    parse: JudgeParse | None = None
    label_parse: LabelParse | None = None
    answer: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    truncated: bool = False
    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    latency_s: float | None = None
    release: bool = False  # rate limited: give the item back rather than fail it
    endpoint_broken: bool = False
    problems: list[str] = field(default_factory=list)  # why earlier answers were unusable
    # (item id, input, output tokens) of each completion received, shared by the loop's items
    # and emptied into the database by the loop (items_bill) as they arrive.
    item_id: int | None = None
    ledger: list[tuple[int, int, int]] | None = None

    def add(self, completion: providers.Completion) -> None:
        self.input_tokens += completion.input_tokens or 0
        self.output_tokens += completion.output_tokens or 0
        self.requests += completion.attempts
        self.latency_s = (self.latency_s or 0.0) + completion.latency_s
        if self.ledger is not None and self.item_id is not None:
            self.ledger.append(
                (self.item_id, completion.input_tokens or 0, completion.output_tokens or 0)
            )

    @property
    def ok(self) -> bool:
        return not self.error


def _items_finish(results: Sequence[Result], *, token: str, plan: RunPlan) -> list[Result]:
    """Flip claimed items to done/failed; returns the results whose claim this loop still held.

    Precondition: inside a transaction. The rows are locked first, so no other loop can take
    them over between the check and the write.
    """
    owned = set(
        RunItem.objects.select_for_update()
        .filter(
            id__in=[item.id for item, _ in results],
            status=RunItem.Status.RUNNING,
            claim_token=token,
        )
        .values_list("id", flat=True)
    )
    kept = [(item, outcome) for item, outcome in results if item.id in owned]
    # Django's bulk_update would build a CASE per column and item, which costs more CPU than
    # the LLM call it records. On PostgreSQL one UPDATE joins the values passed as arrays;
    # elsewhere one statement per item, sent in one round trip (psycopg pipelines executemany).
    if not kept:
        return kept
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    rows = [
        (
            (RunItem.Status.DONE if outcome.ok else RunItem.Status.FAILED).value,
            outcome.error[:4000],
            outcome.input_tokens,
            outcome.output_tokens,
            (outcome.input_tokens * plan.price_input + outcome.output_tokens * plan.price_output)
            / 1_000_000,
            outcome.requests,
            outcome.latency_s,
            now,
            item.id,
            token,
        )
        for item, outcome in kept
    ]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql" and len({item.id for item, _ in kept}) == len(kept):
            # One statement with the values as arrays: a statement per item cost a batch
            # poller a third of a second per 5,000 results. The rows are locked above, so the
            # order the join updates them in cannot matter. (An item given twice keeps the
            # statement per item, where the first one wins.)
            columns = [list(column) for column in zip(*rows, strict=True)]
            # psycopg refuses a list mixing int and float: a latency given as 2 beside 0.5.
            columns[6] = [None if value is None else float(value) for value in columns[6]]
            cursor.execute(
                f"UPDATE {RunItem._meta.db_table} AS item SET status = v.status, "
                "last_error = v.last_error, input_tokens = item.input_tokens + v.input_tokens, "
                "output_tokens = item.output_tokens + v.output_tokens, "
                "cost_usd = item.cost_usd + v.cost_usd, requests = item.requests + v.requests, "
                "latency_s = v.latency_s, finished_at = %s, claim_token = '' "
                "FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::float8[], "
                "%s::bigint[], %s::float8[], %s::bigint[]) AS v(status, last_error, "
                "input_tokens, output_tokens, cost_usd, requests, latency_s, id) "
                "WHERE item.id = v.id AND item.claim_token = %s",
                [now, *columns[:7], columns[8], token],
            )
        else:
            cursor.executemany(
                f"UPDATE {RunItem._meta.db_table} SET status = %s, last_error = %s, "
                "input_tokens = input_tokens + %s, output_tokens = output_tokens + %s, "
                "cost_usd = cost_usd + %s, requests = requests + %s, latency_s = %s, "
                "finished_at = %s, claim_token = '' WHERE id = %s AND claim_token = %s",
                rows,
            )
    return kept


Result = tuple[RunItem, "Outcome"]


@transaction.atomic
def judge_items_store(*, results: Sequence[Result], token: str, plan: RunPlan) -> int:
    """Store judge results exactly once, in one transaction: item states, Ratings, Scores.

    An item whose claim this loop no longer holds (another loop took it over, or the same
    result arrives twice) stores nothing. Returns how many results were stored. One transaction
    per batch rather than per item: a batch is what finished during one wait of the loop, and
    its rows are written with one INSERT per table.
    """
    return _store_once(
        results, token=token, plan=plan, model=Rating, key=_rating_key, insert=_ratings_insert
    )


@transaction.atomic
def labelling_items_store(*, results: Sequence[Result], token: str, plan: RunPlan) -> int:
    """Store labelling results exactly once: item states and LabelAnnotations (as judges)."""
    return _store_once(
        results,
        token=token,
        plan=plan,
        model=LabelAnnotation,
        key=_annotation_key,
        insert=_annotations_insert,
    )


def _store_once(
    results: Sequence[Result], *, token: str, plan: RunPlan, model: Any, key: Any, insert: Any
) -> int:
    """The exactly-once store shared by judge and labelling runs (precondition: in atomic)."""
    owned = _items_finish(results, token=token, plan=plan)
    # No answer at all (transport failure): the item holds the reason, there is nothing to keep.
    answered = [(item, outcome) for item, outcome in owned if outcome.raw_output is not None]
    for item, _ in answered:
        if item.last_error:
            # A retried item replaces the invalid row its earlier attempt stored.
            model.objects.filter(status=Rating.Status.INVALID, **key(item, plan)).delete()
    try:
        with transaction.atomic():
            insert(answered, plan)
    except IntegrityError:
        # The unique constraint caught a row stored before: settle item by item.
        for item, outcome in answered:
            try:
                with transaction.atomic():
                    insert([(item, outcome)], plan)
            except IntegrityError:
                if not model.objects.filter(**key(item, plan)).exists():
                    raise  # not a duplicate: a real constraint violation
                logger.info("result for run item %s was already stored", item.id)
    return len(owned)


def judge_item_store(*, item: RunItem, token: str, outcome: Outcome, plan: RunPlan) -> bool:
    """One result; see judge_items_store."""
    return judge_items_store(results=[(item, outcome)], token=token, plan=plan) == 1


def _rating_key(item: RunItem, plan: RunPlan) -> dict[str, Any]:
    return {
        "rater_id": plan.rater_id,
        "response_id": item.response_id,
        "run_id": plan.run_id,
        "repeat": item.repeat,
    }


# Stores at least this large go through COPY on PostgreSQL (a batch poller's chunks of 5,000).
# Smaller ones, what one wait of the immediate-mode loop collects and the one-by-one retry
# after a duplicate, keep bulk_create: COPY's staging table costs a few statements of its own.
COPY_MIN_RESULTS = 100

_RATING_COLUMNS = (
    "rater_id",
    "response_id",
    "run_id",
    "repeat",
    "status",
    "source",
    "rationale",
    "overall",
    "raw_output",
    "error",
)
_SCORE_COLUMNS = ("rating_id", "attribute_id", "value")


def _ratings_insert(answered: Sequence[Result], plan: RunPlan) -> None:
    """A Rating per result (complete with Scores when valid, else invalid with the reason).

    The rows are those bulk_create wrote (every other column at its default, both timestamps
    the time of the insert); COPY only skips building a model object and SQL parameters per row,
    which took half of a batch poller's time. Constraints are checked by the INSERT all the same:
    a duplicate raises IntegrityError and _store_once settles the results one by one.
    """
    rows: list[tuple[Any, ...]] = []
    scores: list[dict[str, int] | None] = []
    for item, outcome in answered:
        parse = outcome.parse if outcome.ok else None
        rows.append(
            (
                plan.rater_id,
                item.response_id,
                plan.run_id,
                item.repeat,
                (Rating.Status.COMPLETE if parse else Rating.Status.INVALID).value,
                Rating.Source.JUDGE.value,
                parse.explanation if parse else "",
                parse.overall if parse else None,
                outcome.raw_output or "",
                "" if parse else outcome.error,
            )
        )
        scores.append(parse.scores if parse else None)
    if len(rows) >= COPY_MIN_RESULTS:
        ids = bulk_insert_values(Rating, _RATING_COLUMNS, rows)
    else:
        ratings = Rating.objects.bulk_create(
            Rating(**dict(zip(_RATING_COLUMNS, row, strict=True))) for row in rows
        )  # PostgreSQL and SQLite return the new ids
        ids = [rating.pk for rating in ratings]
    attribute_ids = plan.attribute_ids
    score_rows = [
        (rating_id, attribute_ids[name], value)
        for rating_id, values in zip(ids, scores, strict=True)
        if values is not None
        for name, value in values.items()
    ]
    if len(rows) >= COPY_MIN_RESULTS:
        bulk_insert_values(Score, _SCORE_COLUMNS, score_rows)
        # A batch run stores its results in chunks of thousands: the reports that follow
        # need statistics that know about them.
        analyze_after_commit({Rating: len(ids), Score: len(score_rows)})
    else:
        Score.objects.bulk_create(
            Score(rating_id=rating_id, attribute_id=attribute_id, value=value)
            for rating_id, attribute_id, value in score_rows
        )


def _annotation_key(item: RunItem, plan: RunPlan) -> dict[str, Any]:
    return {
        "rater_id": plan.rater_id,
        "conversation_id": item.conversation_id,
        "run_id": plan.run_id,
        "repeat": item.repeat,
    }


def _annotations_insert(answered: Sequence[Result], plan: RunPlan) -> None:
    """A LabelAnnotation per result: complete with its labels, or invalid with raw text and why."""
    LabelAnnotation.objects.bulk_create(
        LabelAnnotation(
            status=Rating.Status.COMPLETE if parse else Rating.Status.INVALID,
            source=Rating.Source.JUDGE,
            labels=parse.labels if parse else [],
            others=parse.others if parse else [],
            raw_output=outcome.raw_output or "",
            error="" if parse else outcome.error,
            **_annotation_key(item, plan),
        )
        for item, outcome in answered
        for parse in [outcome.label_parse if outcome.ok else None]
    )


@transaction.atomic
def generation_items_store(*, results: Sequence[Result], token: str, plan: RunPlan) -> int:
    """Store generated responses exactly once, with their generation metadata."""
    owned = _items_finish(results, token=token, plan=plan)
    for item, outcome in owned:
        if not outcome.ok:
            continue
        conversation_id, responder_id = item.conversation_id, plan.responder_id
        # A generation item is a conversation's; a generation plan names its responder.
        assert conversation_id is not None and responder_id is not None
        try:
            with transaction.atomic():
                Response.objects.create(
                    conversation_id=conversation_id,
                    responder_id=responder_id,
                    text=outcome.answer,
                    truncated=outcome.truncated,
                    metadata=outcome.metadata,
                )
        except IntegrityError:
            if not Response.objects.filter(
                conversation_id=conversation_id, responder_id=responder_id
            ).exists():
                raise
            logger.info("response for run item %s was already stored", item.id)
    return len(owned)
