"""End to end against a real model: SmolLM2-135M on llama.cpp's OpenAI-compatible server.

Nothing here is scripted: the server is the one bin/local-model starts, runs are launched as the
admin pages launch them and executed by a real Celery worker. A 135M model often answers
unusably — which is the point: every item must end as a valid result or as an invalid output
with its reason and raw text, no score off the rubric is ever stored, and the tokens stored are
the ones the server reported (a recording proxy in front of it checks that). Small on purpose
(three demo conversations, short answers): CI has two shared cores.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from annotation.models import Conversation, LabelAnnotation, Rating, Response, Score, Study
from annotation.services import responders_ensure, study_get_or_create
from judging import local_model, selectors, services
from judging.models import Run, RunItem
from tests.celery_workers import wait_for
from tests.fakes.llm_server import request_schema

pytestmark = [pytest.mark.slow, pytest.mark.local_model]

DEMO = Path(__file__).resolve().parents[2] / "annotation" / "demo" / "conversations.jsonl"
CONVERSATIONS = 3
RUN_TIMEOUT = 400  # seconds; generous: the CPU is shared, and a timeout only fails the test


def demo_rows(n: int = CONVERSATIONS) -> list[dict]:
    rows = [json.loads(line) for line in DEMO.read_text().splitlines() if line.strip()]
    return rows[:n]


def small_study(kind: str = Study.Kind.RESPONSE_RATING, **options) -> Study:
    """The first demo conversations; a rating study also gets their human reference answers."""
    study, _ = study_get_or_create(name=f"local {uuid.uuid4().hex[:6]}", kind=kind, **options)
    made = Conversation.objects.bulk_create(
        Conversation(study=study, external_id=row["id"], context=row["context"])
        for row in demo_rows()
    )
    if kind == Study.Kind.RESPONSE_RATING:
        (human,) = responders_ensure(keys={"human"}).values()
        Response.objects.bulk_create(
            Response(conversation=conversation, responder=human, text=row["response"])
            for conversation, row in zip(made, demo_rows(), strict=True)
        )
    return study


@pytest.fixture
def endpoints(transactional_db, local_llama):
    prompt_only, structured = services.local_endpoints_register(
        base_url=local_llama.base_url, model=local_model.MODEL_ALIAS
    )
    return prompt_only, structured


def finished(run: Run) -> Run:
    """The run once it settled by itself: done, or failed when every one of its items failed
    (a small model cut off by the token limit on every answer is a true failure, not a hang)."""
    wait_for(
        lambda: not Run.objects.get(id=run.id).is_active,
        timeout=RUN_TIMEOUT,
        what=f"{run} to finish by itself",
    )
    run.refresh_from_db()
    assert run.status in (Run.Status.DONE, Run.Status.FAILED), run.status
    failed = RunItem.objects.filter(run=run, status=RunItem.Status.FAILED).count()
    all_failed = failed == RunItem.objects.filter(run=run).count()
    assert (run.status == Run.Status.FAILED) == all_failed, (run.status, run.error)
    return run


def assert_tokens_are_the_servers(run: Run, local_llama, mark: int) -> None:
    requests, prompt_tokens, completion_tokens = local_llama.usage_since(mark)
    items = RunItem.objects.filter(run=run)
    assert sum(items.values_list("requests", flat=True)) == requests
    assert sum(items.values_list("input_tokens", flat=True)) == prompt_tokens > 0
    assert sum(items.values_list("output_tokens", flat=True)) == completion_tokens > 0
    progress = selectors.run_progress(run=run)
    assert (progress.input_tokens, progress.output_tokens) == (prompt_tokens, completion_tokens)


def assert_every_item_valid_or_invalid_with_reason(run: Run, stored) -> dict[str, int]:
    items = RunItem.objects.filter(run=run)
    assert not items.exclude(status__in=[RunItem.Status.DONE, RunItem.Status.FAILED]).exists()
    assert stored.count() == items.count(), "one stored result per item, never lost or doubled"
    for result in stored:
        assert result.raw_output.strip(), "the raw output is always kept"
        if result.status == Rating.Status.INVALID:
            assert result.error, "an invalid output says why"
        else:
            assert result.status == Rating.Status.COMPLETE and not result.error
    return {
        status: stored.filter(status=status).count()
        for status in (Rating.Status.COMPLETE, Rating.Status.INVALID)
    }


def test_generation_then_judge_runs_on_a_real_model_through_a_celery_worker(
    endpoints, local_llama, celery_worker_factory
):
    prompt_only, structured = endpoints
    study = small_study()
    celery_worker_factory()

    mark = local_llama.mark()
    generation = services.generation_run_create(
        study_id=study.id, endpoint=prompt_only, max_tokens=48, concurrency=2, parallel_tasks=1
    )
    generation = finished(generation)
    generated = Response.objects.filter(conversation__study=study, responder__family="smollm2")
    assert generated.count() == CONVERSATIONS
    assert RunItem.objects.filter(run=generation, status=RunItem.Status.DONE).count() == 3
    for response in generated:
        assert response.text.strip()
        assert response.metadata["model"]
        assert response.metadata["finish_reason"] in ("stop", "length")
        assert response.truncated == (response.metadata["finish_reason"] == "length")
    assert_tokens_are_the_servers(generation, local_llama, mark)

    levels = set(range(1, 6))
    for endpoint, schema_sent in ((prompt_only, False), (structured, True)):
        mark, body_mark = local_llama.mark(), local_llama.body_mark()
        run = services.judge_run_create(
            study_id=study.id,
            endpoint=endpoint,
            temperature=0.0,
            max_tokens=160,
            max_output_attempts=2,
            concurrency=2,
            parallel_tasks=1,
        )
        run = finished(run)
        ratings = Rating.objects.filter(run=run)
        # A judge never rates its own family's answers (self-preference exclusion): the
        # generated responses are left out, the human reference answers are rated.
        assert RunItem.objects.filter(run=run).count() == CONVERSATIONS
        assert not ratings.filter(response__in=generated).exists()
        counts = assert_every_item_valid_or_invalid_with_reason(run, ratings)
        scores = Score.objects.filter(rating__run=run)
        assert set(scores.values_list("value", flat=True)) <= levels
        assert not scores.filter(rating__status=Rating.Status.INVALID).exists()
        for rating in ratings.filter(status=Rating.Status.COMPLETE):
            assert rating.scores.count() == 7
        assert_tokens_are_the_servers(run, local_llama, mark)
        sent = [request_schema(body) for body in local_llama.bodies_since(body_mark)]
        assert sent and all((schema is not None) == schema_sent for schema in sent)
        print(f"{endpoint.name}: {counts}")


def test_labelling_runs_on_a_real_model_prompt_only_and_structured(
    endpoints, local_llama, celery_worker_factory
):
    prompt_only, structured = endpoints
    study = small_study(kind=Study.Kind.DISTORTION_LABELLING, label_scheme="ranked")
    celery_worker_factory()
    known = set(study.distortion_labels.values_list("name", flat=True)) | {"Others"}
    for endpoint, schema_sent in ((prompt_only, False), (structured, True)):
        mark, body_mark = local_llama.mark(), local_llama.body_mark()
        run = services.labelling_run_create(
            study_id=study.id,
            endpoint=endpoint,
            repeats=1,
            temperature=0.0,
            max_tokens=48,
            max_output_attempts=2,
            concurrency=2,
            parallel_tasks=1,
        )
        run = finished(run)
        stored = LabelAnnotation.objects.filter(run=run)
        counts = assert_every_item_valid_or_invalid_with_reason(run, stored)
        for annotation in stored.filter(status=Rating.Status.COMPLETE):
            assert annotation.labels and set(annotation.labels) <= known
        for annotation in stored.filter(status=Rating.Status.INVALID):
            assert annotation.labels == []
        assert_tokens_are_the_servers(run, local_llama, mark)
        sent = [request_schema(body) for body in local_llama.bodies_since(body_mark)]
        assert sent and all((schema is not None) == schema_sent for schema in sent)
        print(f"{endpoint.name}: {counts}")


@pytest.mark.django_db
def test_local_model_endpoint_command_registers_both_endpoints_once():
    from django.core.management import CommandError, call_command

    from judging.models import ModelEndpoint

    for port in (8012, 8013):  # a second call points the same rows elsewhere
        call_command(
            "local_model_endpoint",
            "--base-url",
            f"http://127.0.0.1:{port}/v1",
            stdout=open(os.devnull, "w"),  # noqa: SIM115
        )
    endpoints = ModelEndpoint.objects.filter(family="smollm2").order_by("name")
    assert [(e.name, e.structured_output, e.json_mode, e.base_url) for e in endpoints] == [
        (services.LOCAL_ENDPOINT_NAME, "off", False, "http://127.0.0.1:8013/v1"),
        (services.LOCAL_STRUCTURED_ENDPOINT_NAME, "llama_cpp", False, "http://127.0.0.1:8013/v1"),
    ]
    assert not any(e.api_key or e.api_key_env for e in endpoints)
    with pytest.raises(CommandError, match="must start with http:// or https://"):
        call_command("local_model_endpoint", "--base-url", "127.0.0.1:8012/v1")
