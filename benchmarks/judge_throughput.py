"""Judge-run throughput: 10,000 ratings on Celery workers vs a one-request-at-a-time loop.

    .venv/bin/python -m benchmarks.judge_throughput [--items 10000] [--delay 0.3] [--db NAME]

What it does, end to end, on this machine:
1. creates a fresh PostgreSQL database (`mentalbench_bench_judging` or --db, dropped first) and
   migrates;
2. writes a synthetic study: items/10 conversations × 10 responders;
3. starts the fake LLM server (`tests.fakes.llm_server`, OpenAI wire protocol over HTTP) in its
   own process, answering every request after `--delay` seconds;
4. baseline: a sequential loop over `--baseline-items` responses through the same official SDK
   (one request at a time, parse, store the Rating and Scores) — what the papers' scripts do;
5. starts two Celery worker processes (Redis db 13), launches a judge run over all responses
   and waits until every rating is stored in Postgres;
6. prints ratings/s for both and their ratio (figures for docs/benchmarks.md).

Needs Redis on $BENCH_REDIS_URL (default redis://127.0.0.1:6379/13, flushed before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT

REDIS_URL = harness.bench_redis_url()


def _logged(path: Path, needle: str) -> bool:
    return path.exists() and needle in path.read_text(errors="replace")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--delay", type=float, default=0.3)
    parser.add_argument("--baseline-items", type=int, default=100)
    parser.add_argument(
        "--concurrency",
        type=int,
        default=200,
        help="requests in flight for the whole run, shared by its worker tasks",
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--logs", type=Path, default=Path("/tmp/mentalbench-bench"))
    harness.add_database_argument(parser, "mentalbench_bench_judging")
    args = parser.parse_args()

    harness.fresh_database(args.db)
    # The fake server takes any key; an allowed variable needs no encryption key (and workers
    # inherit it).
    harness.django_setup(
        DATABASE_URL=harness.database_url(args.db), REDIS_URL=REDIS_URL,
        JUDGING_RATELIMIT_REDIS_URL=REDIS_URL, LOG_LEVEL="WARNING",
        MENTALBENCH_KEY_BENCH="sk-bench",
    )  # fmt: skip
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()
    args.logs.mkdir(parents=True, exist_ok=True)

    from annotation.models import Conversation, Rater, Rating, Response, Score
    from annotation.responders import KNOWN_RESPONDERS
    from annotation.selectors import study_rubric
    from annotation.services import responders_ensure, study_get_or_create
    from judging import prompts, providers, services
    from judging.models import ModelEndpoint, Run
    from scoring.parsing import parse_judge_output

    # ---------------------------------------------------------------- data
    study, _ = study_get_or_create(name="Throughput benchmark")
    keys = sorted(KNOWN_RESPONDERS)[:10]
    responders = responders_ensure(keys=set(keys))
    conversations = Conversation.objects.bulk_create(
        Conversation(
            study=study,
            external_id=f"b{i}",
            context=f"I have felt anxious and exhausted for weeks and cannot focus (case {i}).",
        )
        for i in range(args.items // len(keys))
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
    total = Response.objects.filter(conversation__study=study).count()

    # ---------------------------------------------------------------- fake server
    port = harness.free_port()
    server_log = (args.logs / "fake-server.log").open("wb")
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.llm_server", "--port", str(port),
         "--delay", str(args.delay)],
        cwd=ROOT, stdout=server_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    workers: list[subprocess.Popen] = []
    try:
        harness.wait_for_port(port, what="the fake LLM server")
        endpoint = ModelEndpoint.objects.create(
            name="bench-judge",
            provider="openai",
            model="fake-gpt",
            family="fake",
            base_url=f"http://127.0.0.1:{port}/v1",
            api_key_env="MENTALBENCH_KEY_BENCH",
            price_input_per_mtok=2.5,
            price_output_per_mtok=10.0,
        )

        # ------------------------------------------------------------ sequential baseline
        rubric = study_rubric(study_id=study.id)
        names = [a["name"] for a in rubric]
        attribute_ids = {a["name"]: a["id"] for a in rubric}
        config = services.endpoint_config(endpoint)
        baseline_rater = Rater.objects.create(kind="judge", name="bench-sequential")
        sample = list(
            Response.objects.filter(conversation__study=study)
            .select_related("conversation")
            .order_by("id")[: args.baseline_items]
        )

        async def one(client, response):
            system, user = prompts.judge_messages(
                response.conversation.context, response.text, rubric
            )
            return await providers.complete_with_retries(
                config, system=system, user=user, max_tokens=1024, json_mode=True, client=client
            )

        async def sequential() -> float:
            client = providers.make_client(config)
            started = time.perf_counter()
            try:
                for response in sample:
                    completion = await one(client, response)
                    parse = parse_judge_output(completion.text, names)
                    # Stored one by one, as a script would (sync ORM from async: a thread hop).
                    await asyncio.to_thread(_store_baseline, response, completion.text, parse)
            finally:
                await client.close()
            return time.perf_counter() - started

        def _store_baseline(response, text, parse) -> None:
            from django.db import connection

            rating = Rating.objects.create(
                rater=baseline_rater,
                response=response,
                status="complete",
                source="judge",
                raw_output=text,
                rationale=parse.explanation,
            )
            Score.objects.bulk_create(
                Score(rating=rating, attribute_id=attribute_ids[name], value=value)
                for name, value in parse.scores.items()
            )
            connection.close()

        baseline_s = asyncio.run(sequential())
        baseline_rate = len(sample) / baseline_s
        print(f"sequential baseline: {len(sample)} ratings in {baseline_s:.1f}s "
              f"= {baseline_rate:.2f} ratings/s", flush=True)  # fmt: skip

        # ------------------------------------------------------------ Celery workers
        env = {**os.environ, "DB_CONN_MAX_AGE": "60", "LOG_LEVEL": "WARNING"}
        for n in range(args.workers):
            log = args.logs / f"worker{n}.log"
            log.unlink(missing_ok=True)
            workers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "celery",
                        "-A",
                        "mentalbench",
                        "worker",
                        "-P",
                        "prefork",
                        "-c",
                        "1",
                        "-n",
                        f"bench{n}@%h",
                        "--loglevel=INFO",
                        "--without-gossip",
                        "--without-mingle",
                        "--without-heartbeat",
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=log.open("wb"),
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )  # fmt: skip
            )
        for n in range(args.workers):
            log = args.logs / f"worker{n}.log"
            harness.wait_until(lambda log=log: _logged(log, "ready."), timeout=60, what=str(log))

        started = time.perf_counter()
        run = services.judge_run_create(
            study_id=study.id,
            endpoint=endpoint,
            concurrency=args.concurrency,
            parallel_tasks=args.workers,
        )
        last_print = 0.0
        while True:
            run.refresh_from_db(fields=["status"])
            if run.status != Run.Status.RUNNING:
                break
            if time.perf_counter() - last_print > 5:
                stored = Rating.objects.filter(run=run).count()
                print(f"  {stored} ratings stored after {time.perf_counter() - started:.0f}s",
                      flush=True)  # fmt: skip
                last_print = time.perf_counter()
            time.sleep(0.2)
        elapsed = time.perf_counter() - started
        stored = Rating.objects.filter(run=run, status="complete").count()
        scores = Score.objects.filter(rating__run=run).count()
        rate = stored / elapsed
        print(f"celery run ({args.workers} worker processes, concurrency {args.concurrency} "
              f"in all): {stored}/{total} ratings ({scores} scores) in {elapsed:.1f}s "
              f"= {rate:.1f} ratings/s; status {run.status}", flush=True)  # fmt: skip
        print(f"speed-up over the sequential loop: {rate / baseline_rate:.0f}x", flush=True)
        print(f"server delay {args.delay}s; {harness.load()}", flush=True)
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
        server.terminate()
        server.wait(timeout=10)
        redis.Redis.from_url(REDIS_URL).flushdb()
        from django.db import connections

        connections.close_all()


if __name__ == "__main__":
    main()
