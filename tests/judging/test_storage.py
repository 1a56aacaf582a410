"""The exactly-once store at both sizes: small stores through bulk_create, large ones (a batch
poller's chunks) through COPY on PostgreSQL. Same rows, same duplicate handling, same errors."""

from __future__ import annotations

import logging

import pytest
from django.db import DataError, connection, transaction

from annotation.models import Rating, Score
from judging import services
from judging.models import RunItem
from judging.prompts import DEFAULT_RUBRIC
from judging.services import Outcome, storage
from scoring.parsing import JudgeParse
from tests.factories import case_context, case_reply, study_make

# On SQLite too (bin/test runs `portable` a second time there): its path is bulk_create and a
# statement per item.
pytestmark = pytest.mark.portable

ATTRIBUTES = [a["name"] for a in DEFAULT_RUBRIC]
SIZE = 120  # above COPY_MIN_RESULTS


@pytest.fixture
def big_study(db):
    return study_make(
        name="store study",
        conversations=SIZE // 2,
        responders=("gpt4o", "llama_3"),
        context=case_context,
        text=case_reply,
    )


def _claimed(study, endpoint, token: str) -> tuple[services.RunPlan, list[RunItem]]:
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint)
    items = services.items_claim(run_id=run.id, token=token, limit=SIZE, within_concurrency=False)
    assert len(items) == SIZE
    return services.RunPlan.load(run), sorted(items, key=lambda item: item.response_id)


def _outcome(index: int) -> Outcome:
    """Valid answers, unusable ones and transport failures, in turn."""
    if index % 10 == 3:
        return Outcome(raw_output="no json here", error="no valid judge output; no JSON")
    if index % 10 == 7:
        return Outcome(error="timed out")  # no answer at all: no rating
    scores = {name: 1 + (index + i) % 5 for i, name in enumerate(ATTRIBUTES)}
    parse = JudgeParse(scores=scores, overall=index % 5 + 0.5, explanation=f"why ‘{index}’\n")
    return Outcome(
        raw_output=f'{{"n": {index}}}',
        parse=parse,
        input_tokens=10 + index,
        output_tokens=5,
        requests=1 + index % 2,
        latency_s=None if index % 4 == 0 else index if index % 4 == 1 else index / 10,
    )


def _items(run_id: int) -> list[tuple]:
    return list(
        RunItem.objects.filter(run_id=run_id)
        .order_by("response_id")
        .values_list(
            "status",
            "last_error",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "requests",
            "latency_s",
            "claim_token",
        )
    )


def _expected_items(outcomes: list[Outcome]) -> list[tuple]:
    return [
        (
            "failed" if outcome.error else "done",
            outcome.error,
            outcome.input_tokens,
            outcome.output_tokens,
            (outcome.input_tokens * 2.5 + outcome.output_tokens * 10.0) / 1_000_000,
            outcome.requests,
            outcome.latency_s,
            "",
        )
        for outcome in outcomes
    ]


def _stored(run_id: int) -> list[tuple]:
    ratings = Rating.objects.filter(run_id=run_id).order_by("response_id")
    return [
        (
            rating.response_id,
            rating.repeat,
            rating.assignment_id,
            rating.status,
            rating.source,
            rating.rationale,
            rating.overall,
            rating.raw_output,
            rating.error,
            rating.rationale_edited_ms,
            rating.created_at is not None and rating.updated_at is not None,
            sorted(
                (score.attribute_id, score.value, score.edited_ms) for score in rating.scores.all()
            ),
        )
        for rating in ratings.prefetch_related("scores")
    ]


def test_copy_and_bulk_create_store_the_same_rows(big_study, endpoint_factory, monkeypatch):
    stored = []
    for copy_from in (1, 10**9):  # every store through COPY, then none
        monkeypatch.setattr(storage, "COPY_MIN_RESULTS", copy_from)
        plan, items = _claimed(big_study, endpoint_factory("openai"), token=f"t{copy_from}")
        results = [(item, _outcome(i)) for i, item in enumerate(items)]
        assert services.judge_items_store(results=results, token=f"t{copy_from}", plan=plan) == SIZE
        stored.append(_stored(plan.run_id))
        assert _items(plan.run_id) == _expected_items([outcome for _, outcome in results])
        assert not RunItem.objects.filter(run_id=plan.run_id, finished_at=None).exists()
    assert stored[0] == stored[1]
    assert len(stored[0]) == SIZE - SIZE // 10
    assert Score.objects.filter(rating__run_id=plan.run_id).count() == (
        SIZE - 2 * SIZE // 10
    ) * len(ATTRIBUTES)


@pytest.mark.skipif(
    connection.vendor != "postgresql",
    reason="SQLite has no NULLS NOT DISTINCT: Django leaves the ratings' unique constraint out",
)
def test_a_duplicate_in_a_copied_store_is_skipped_and_the_rest_stored(
    big_study, endpoint_factory, caplog
):
    plan, items = _claimed(big_study, endpoint_factory("openai"), token="t")
    results = [(item, _outcome(0)) for item in items]
    # A rating of the first item was stored before (by whatever route): the unique constraint
    # catches the COPY's INSERT, and the results are settled one by one.
    first = items[0]
    Rating.objects.create(
        rater_id=plan.rater_id,
        response_id=first.response_id,
        run_id=plan.run_id,
        repeat=first.repeat,
        status=Rating.Status.INVALID,
        source=Rating.Source.JUDGE,
        raw_output="earlier",
    )
    with caplog.at_level(logging.INFO, logger="judging.services.storage"):
        assert services.judge_items_store(results=results, token="t", plan=plan) == SIZE
    assert f"result for run item {first.id} was already stored" in caplog.text
    assert Rating.objects.filter(run_id=plan.run_id).count() == SIZE
    assert Rating.objects.get(response_id=first.response_id, run_id=plan.run_id).raw_output == (
        "earlier"
    )
    assert Score.objects.filter(rating__run_id=plan.run_id).count() == (SIZE - 1) * len(ATTRIBUTES)
    assert not RunItem.objects.filter(run_id=plan.run_id, status=RunItem.Status.RUNNING).exists()


@pytest.mark.skipif(connection.vendor != "postgresql", reason="SQLite keeps any integer")
def test_a_value_the_column_cannot_hold_fails_the_whole_store(big_study, endpoint_factory):
    plan, items = _claimed(big_study, endpoint_factory("openai"), token="t")
    results = [(item, _outcome(0)) for item in items]
    broken = JudgeParse(scores={name: 40_000 for name in ATTRIBUTES}, explanation="x")
    results[-1] = (items[-1], Outcome(raw_output="{}", parse=broken))
    with pytest.raises(DataError):
        services.judge_items_store(results=results, token="t", plan=plan)
    assert not Rating.objects.filter(run_id=plan.run_id).exists()
    assert RunItem.objects.filter(run_id=plan.run_id, status=RunItem.Status.RUNNING).count() == SIZE


def test_billing_in_one_statement_counts_what_a_statement_per_item_counts(
    big_study, endpoint_factory
):
    plan, items = _claimed(big_study, endpoint_factory("openai"), token="t")
    half = SIZE // 2
    tokens = [(3 + i, 7 * i) for i in range(half)]
    with transaction.atomic():  # as a batch poller's store: the rows locked first
        list(RunItem.objects.select_for_update().filter(id__in=[i.id for i in items[:half]]))
        services.items_bill(
            received=[(item.id, *t) for item, t in zip(items[:half], tokens, strict=True)],
            plan=plan,
            locked=True,
        )
    services.items_bill(  # the immediate-mode loop's way, an item billed twice at the end
        received=[(item.id, *t) for item, t in zip(items[half:], tokens, strict=True)]
        + [(items[-1].id, *tokens[-1])],
        plan=plan,
    )
    fields = (
        "billed_completions",
        "billed_input_tokens",
        "billed_output_tokens",
        "billed_cost_usd",
    )

    def billed(part: list[RunItem]) -> list[tuple]:
        by_id = {row[0]: row[1:] for row in RunItem.objects.values_list("id", *fields)}
        return [by_id[item.id] for item in part]

    once, per_item = billed(items[:half]), billed(items[half:])
    assert once[:-1] == per_item[:-1]
    assert once[0] == (1, 3, 0, 3 * 2.5 / 1_000_000)
    last_in, last_out = tokens[-1]
    assert per_item[-1][:3] == (2, 2 * last_in, 2 * last_out)
