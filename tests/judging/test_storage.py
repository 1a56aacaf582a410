"""The exactly-once store at both sizes: small stores through bulk_create, large ones (a batch
poller's chunks) through COPY on PostgreSQL. Same rows, same duplicate handling, same errors."""

from __future__ import annotations

import logging

import pytest
from django.db import DataError, connection

from annotation.models import Rating, Score
from judging import services
from judging.models import RunItem
from judging.prompts import DEFAULT_RUBRIC
from judging.services import Outcome, storage
from scoring.parsing import JudgeParse

from .conftest import make_study

ATTRIBUTES = [a["name"] for a in DEFAULT_RUBRIC]
SIZE = 120  # above COPY_MIN_RESULTS


@pytest.fixture
def big_study(db):
    return make_study("store study", conversations=SIZE // 2, responders=("gpt4o", "llama_3"))


def _claimed(study, endpoint, token: str) -> tuple[services._Plan, list[RunItem]]:
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint)
    items = services.items_claim(run_id=run.id, token=token, limit=SIZE, within_concurrency=False)
    assert len(items) == SIZE
    return services._Plan.load(run), sorted(items, key=lambda item: item.response_id)


def _outcome(index: int) -> Outcome:
    """Valid answers, unusable ones and transport failures, in turn."""
    if index % 10 == 3:
        return Outcome(raw_output="no json here", error="no valid judge output; no JSON")
    if index % 10 == 7:
        return Outcome(error="timed out")  # no answer at all: no rating
    scores = {name: 1 + (index + i) % 5 for i, name in enumerate(ATTRIBUTES)}
    parse = JudgeParse(scores=scores, overall=index % 5 + 0.5, explanation=f"why ‘{index}’\n")
    return Outcome(raw_output=f'{{"n": {index}}}', parse=parse, input_tokens=10, output_tokens=5)


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
    assert stored[0] == stored[1]
    assert len(stored[0]) == SIZE - SIZE // 10
    assert Score.objects.filter(rating__run_id=plan.run_id).count() == (
        SIZE - 2 * SIZE // 10
    ) * len(ATTRIBUTES)


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
