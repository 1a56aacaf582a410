"""Helpers the run tests share: scenario markers for the fake LLM server, and runs made and worked
through the services (immediate mode in the test process, batch mode submitted and polled).

Importable without Django (the provider tests run with `-p no:django` and use `marker`): the
services and models are imported where used.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from scoring.rubric import DEFAULT_ATTRIBUTES
from tests.fakes.llm_server import scenario

if TYPE_CHECKING:
    from annotation.models import Study
    from judging.models import ModelEndpoint, Run

ATTRIBUTES = [a["name"] for a in DEFAULT_ATTRIBUTES]


def marker(name: str, **params: object) -> str:
    """A scenario marker unique to this call site, so 'first n calls' counters never collide."""
    return scenario(name, key=uuid.uuid4().hex[:10], **params)


def script(*answers: str) -> str:
    """A labelling scenario: the fake answers these, one per call, in order ("" → empty)."""
    entries = "|".join(a.replace(" ", "_") if a else "EMPTY" for a in answers)
    return scenario("labels", key=uuid.uuid4().hex[:10], script=entries)


def _worked(run: Run) -> Run:
    from judging import services

    services.run_work(run_id=run.id)
    run.refresh_from_db()
    return run


def judge(study: Study, endpoint: ModelEndpoint, **options: object) -> Run:
    """A judge run launched and worked to its end in this process."""
    from judging import services

    return _worked(services.judge_run_create(study_id=study.id, endpoint=endpoint, **options))


def label(study: Study, endpoint: ModelEndpoint, **options: object) -> Run:
    """A distortion-labelling run launched and worked to its end in this process."""
    from judging import services

    return _worked(services.labelling_run_create(study_id=study.id, endpoint=endpoint, **options))


def batch_endpoint(endpoint_factory, provider: str) -> ModelEndpoint:
    """An endpoint of the fake server with batch prices."""
    return endpoint_factory(
        provider, price_batch_input_per_mtok=1.25, price_batch_output_per_mtok=5.0
    )


def launch(study: Study, endpoint: ModelEndpoint, **options: object) -> Run:
    """A batch-mode judge run, submitted as the task its launch sends on commit would."""
    from judging import services
    from judging.models import Run
    from judging.services import batch

    run = services.judge_run_create(
        study_id=study.id, endpoint=endpoint, mode=Run.Mode.BATCH, **options
    )
    batch.run_submit(run_id=run.id)
    return run


def poll_until_settled(run: Run, *, rounds: int = 20) -> Run:
    """Poll the run's batches until the run is no longer active (an error after `rounds`)."""
    from judging.services import batch

    for _ in range(rounds):
        batch.batches_poll(force=True)
        run.refresh_from_db()
        if not run.is_active:
            return run
    raise AssertionError(f"run {run.id} still {run.status} after {rounds} polls")
