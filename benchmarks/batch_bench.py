"""Batch mode at paper scale: a 100,000-item judge run through the fake server's OpenAI Batch
endpoints, beside an immediate-mode run measured in the same invocation.

    .venv/bin/python -m benchmarks.batch_bench [--items 100000] [--immediate-items 5000] [--db NAME]

What it does, end to end, on this machine:
1. creates a fresh PostgreSQL database (`mentalbench_bench_batch` or --db, dropped first) and
   migrates;
2. writes a synthetic study: items/10 conversations × 10 responders;
3. starts the fake LLM server (`tests.fakes.llm_server --no-record`) in its own process;
4. batch run, in a fresh "worker" process (the work a Celery worker does, called directly):
   - launch: `judge_run_create(mode=batch)` creates the items and, on commit, submits them:
     request lines streamed from the database into temporary JSONL files, split at OpenAI's
     50,000 requests per file, uploaded, batches created ("build + upload");
   - the fake provider answers every request when the batches are first retrieved (its own
     work, reported apart: a real provider takes minutes to hours here);
   - "results available → stored": one poll process per batch (as beat's per-batch poll tasks
     on two worker processes) downloads its output file and stores every rating and its 7
     scores through the exactly-once store;
   - each process's peak resident memory (VmHWM) and how many results it stored: the time
     counts only while the pollers run, so a batch a poller failed to lease, stored by the
     settling poll afterwards, would be missing from it (`stored_by_pollers` shows it, and
     `settle_s` is that last poll's time);
5. immediate run, in another fresh process: `services.run_work` (the work loop a Celery task
   runs) over `--immediate-items` responses with 200 requests in flight; ratings/s.
Prints one JSON object with every figure (for docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT


def _django(**env: str) -> None:
    """Django on the benchmark database: `env`'s DATABASE_URL, or the one the parent passed on."""
    # Celery eager: the launch's on-commit submit runs in this process, which is exactly the
    # work the batch_submit task does on a worker.
    harness.django_setup(
        REDIS_URL="", CELERY_TASK_ALWAYS_EAGER="1", LOG_LEVEL="WARNING",
        MENTALBENCH_KEY_BENCH="sk-bench", **env,
    )  # fmt: skip


def _peak_mb() -> float:
    """This process's peak resident memory (VmHWM: its own, not inherited from its parent)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def phase_batch(study_id: int, endpoint_id: int) -> dict:
    from annotation.models import Rating, Score
    from judging import services
    from judging.models import ModelEndpoint, ProviderBatch, Run
    from judging.providers import batch_api
    from judging.services import batch

    endpoint = ModelEndpoint.objects.get(id=endpoint_id)
    started = time.perf_counter()
    run = services.judge_run_create(study_id=study_id, endpoint=endpoint, mode=Run.Mode.BATCH)
    built = time.perf_counter() - started
    batches = list(ProviderBatch.objects.filter(run=run).order_by("id"))
    config = services.endpoint_config(endpoint=endpoint)
    sdk = batch_api.client(config)
    started = time.perf_counter()
    for record in batches:
        state = batch_api.retrieve(sdk, config, batch_id=record.provider_batch_id)
        assert state.state == "ended", state
    provider = time.perf_counter() - started
    # What beat does: one poll task per batch, run by as many worker processes at once (here
    # two, one per core); each polls, downloads and stores its batch.
    started = time.perf_counter()
    pollers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "benchmarks.batch_bench",
                "--phase",
                "poll",
                "--batch",
                str(record.id),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
            env=os.environ.copy(),
        )  # fmt: skip
        for record in batches
    ]
    peaks, by_poller = [], []
    for poller in pollers:
        out, _ = poller.communicate()
        line = next((x for x in out.splitlines() if x.startswith("RESULT ")), "RESULT {}")
        result = json.loads(line.removeprefix("RESULT "))
        peaks.append(result.get("peak_mb", 0.0))
        by_poller.append(result.get("stored", 0))
    stored = time.perf_counter() - started
    started = time.perf_counter()
    batch.batches_poll(force=True)  # settles the run
    settle = time.perf_counter() - started
    run.refresh_from_db()
    return {
        "items": run.items.count(),
        "batches": [b.request_count for b in batches],
        "request_file_mb": round(sum(b.bytes for b in batches) / 1e6, 1),
        "build_and_upload_s": round(built, 2),
        "fake_provider_s": round(provider, 2),
        "results_to_stored_s": round(stored, 2),
        "stored_by_pollers": by_poller,
        "settle_s": round(settle, 2),
        "status": run.status,
        "complete_ratings": Rating.objects.filter(run=run, status="complete").count(),
        "scores": Score.objects.filter(rating__run=run).count(),
        "peak_mb_launch_and_submit": round(_peak_mb(), 1),
        "peak_mb_pollers": peaks,
    }


def phase_poll(batch_id: int) -> dict:
    from judging.services import batch

    stored = batch.batch_poll(batch_id=batch_id, force=True)
    return {"peak_mb": round(_peak_mb(), 1), "stored": stored}


def phase_immediate(study_id: int, endpoint_id: int, items: int) -> dict:
    from annotation.models import Rating
    from judging import services
    from judging.models import ModelEndpoint

    endpoint = ModelEndpoint.objects.get(id=endpoint_id)
    started = time.perf_counter()
    # Celery eager: the launch runs its work loop at commit, in this process:
    # the time covers creating the items and every request, parse and store.
    run = services.judge_run_create(
        study_id=study_id,
        endpoint=endpoint,
        subset="sample",
        sample_size=items,
        concurrency=200,
        parallel_tasks=1,
    )
    elapsed = time.perf_counter() - started
    run.refresh_from_db()
    stored = Rating.objects.filter(run=run, status="complete").count()
    return {
        "items": items,
        "status": run.status,
        "complete_ratings": stored,
        "seconds": round(elapsed, 2),
        "ratings_per_s": round(stored / elapsed, 1),
        "peak_mb": round(_peak_mb(), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--immediate-items", type=int, default=5_000)
    parser.add_argument("--phase", choices=["batch", "immediate", "poll"], help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--study", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", type=int, help=argparse.SUPPRESS)
    harness.add_database_argument(parser, "mentalbench_bench_batch")
    args = parser.parse_args()
    # A throwaway key (settings refuse to start without one outside DEBUG), before anything
    # starts Django: the migration of the fresh database, this process, its children.
    os.environ.setdefault("SECRET_KEY", "bench-only-" + os.urandom(32).hex())
    if args.phase:
        _django()
        if args.phase == "poll":
            result = phase_poll(args.batch)
        elif args.phase == "batch":
            result = phase_batch(args.study, args.endpoint)
        else:
            result = phase_immediate(args.study, args.endpoint, args.immediate_items)
        print("RESULT " + json.dumps(result), flush=True)
        return

    harness.fresh_database(args.db)
    _django(DATABASE_URL=harness.database_url(args.db))
    from annotation.models import Conversation, Response
    from annotation.responders import KNOWN_RESPONDERS
    from annotation.services import responders_ensure, study_get_or_create
    from judging.models import ModelEndpoint

    started = time.perf_counter()
    study, _ = study_get_or_create(name="Batch benchmark")
    keys = sorted(KNOWN_RESPONDERS)[:10]
    responders = responders_ensure(keys=set(keys))
    conversations = Conversation.objects.bulk_create(
        (
            Conversation(
                study=study,
                external_id=f"b{i}",
                context=f"I have felt anxious and exhausted for weeks and cannot focus (case {i}).",
            )
            for i in range(args.items // len(keys))
        ),
        batch_size=5000,
    )
    Response.objects.bulk_create(
        (
            Response(
                conversation=conversation,
                responder=responders[key],
                text=f"That sounds really hard. Try short walks and talk to someone ({key} {i}).",
            )
            for i, conversation in enumerate(conversations)
            for key in keys
        ),
        batch_size=5000,
    )
    data_s = time.perf_counter() - started

    port = harness.free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.llm_server", "--port", str(port), "--no-record"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    results: dict = {"data_s": round(data_s, 1), "load_before": harness.load()}
    try:
        harness.wait_for_port(port, what="the fake LLM server")
        endpoints = {
            name: ModelEndpoint.objects.create(
                name=f"bench-{name}",
                provider="openai",
                model="fake-gpt",
                family="fake",
                base_url=f"http://127.0.0.1:{port}/v1",
                api_key_env="MENTALBENCH_KEY_BENCH",
                timeout_s=600,
                price_input_per_mtok=2.5,
                price_output_per_mtok=10.0,
                price_batch_input_per_mtok=1.25,
                price_batch_output_per_mtok=5.0,
            ).id
            for name in ("batch", "immediate")
        }
        for phase in ("batch", "immediate"):
            out = subprocess.run(
                [sys.executable, "-m", "benchmarks.batch_bench", "--phase", phase,
                 "--study", str(study.id), "--endpoint", str(endpoints[phase]),
                 "--immediate-items", str(args.immediate_items)],
                cwd=ROOT, capture_output=True, text=True, env=os.environ.copy(),
            )  # fmt: skip
            line = next((x for x in out.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                raise SystemExit(
                    f"{phase} phase failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
                )
            results[phase] = json.loads(line.removeprefix("RESULT "))
        results["load_after"] = harness.load()
        # What the pollers stored in the time measured (not what the settling poll stored).
        stored_per_s = (
            sum(results["batch"]["stored_by_pollers"]) / results["batch"]["results_to_stored_s"]
        )
        results["batch_stored_ratings_per_s"] = round(stored_per_s, 1)
        results["batch_vs_immediate_store_rate"] = round(
            stored_per_s / results["immediate"]["ratings_per_s"], 1
        )
    finally:
        server.terminate()
        server.wait(timeout=10)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
