"""Judge-run throughput: a judge run on Celery workers beside a plain asyncio loop.

    .venv/bin/python -m benchmarks.judge_throughput [--items 10000] [--delay 0.3]
        [--concurrency 200] [--runs 3] [--db NAME]

What it does, end to end, on this machine:
1. creates a fresh PostgreSQL database (`mentalbench_bench_judging` or --db, dropped first) and
   migrates;
2. writes a synthetic study: items/10 conversations × 10 responders;
3. starts the fake LLM server (`tests.fakes.llm_server`, OpenAI wire protocol over HTTP) in its
   own process, answering every request after `--delay` seconds;
4. a sequential loop over `--baseline-items` responses through the same official SDK (one
   request at a time, parse, store the Rating and Scores): what the papers' scripts do;
5. starts two Celery worker processes (Redis db 13);
6. `--runs` times, alternating which goes first: a judge run over all responses at
   `--concurrency` (launched, worked by the workers, until every item has ended), and the peer,
   a plain asyncio loop in this process with the same concurrency, SDK client, prompts, parser
   and fake server that stores each half second's ratings and scores in one transaction, with
   none of the platform's claims, leases, billing or rate limiter;
7. prints each run, the medians and the ratio engine ÷ peer, and how many items each stored and
   failed. Exits 1 when a judge run stored fewer ratings than it had items.

Needs Redis on $BENCH_REDIS_URL (default redis://127.0.0.1:6379/13, flushed before and after).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.harness import ROOT

REDIS_URL = harness.bench_redis_url()


def _logged(path: Path, needle: str) -> bool:
    return path.exists() and needle in path.read_text(errors="replace")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--delay", type=float, default=0.3)
    parser.add_argument(
        "--baseline-items", type=int, default=100, help="sequential loop's items (0: none)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=200,
        help="requests in flight for the whole run, shared by its worker tasks; the peer's too",
    )
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--runs", type=int, default=3, help="judge runs, each beside a peer run")
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
    from judging.models import ModelEndpoint, Run, RunItem
    from judging.services.engine import JUDGE_MAX_TOKENS
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
         "--delay", str(args.delay), "--no-record"],
        cwd=ROOT, stdout=server_log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    workers: list[subprocess.Popen] = []
    failed_runs = 0
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
        rubric = study_rubric(study_id=study.id)
        names = [a["name"] for a in rubric]
        attribute_ids = {a["name"]: a["id"] for a in rubric}
        config = services.endpoint_config(endpoint=endpoint)
        # One thread, hence one database connection, for every store of this process's loops.
        db_thread = ThreadPoolExecutor(max_workers=1)

        def store(rater: Rater, received: list[tuple[Any, str, Any]]) -> int:
            """Ratings and their scores in one transaction, as a careful script would."""
            from django.db import transaction

            with transaction.atomic():
                ratings = Rating.objects.bulk_create(
                    Rating(
                        rater=rater,
                        response=response,
                        status="complete" if parse.ok else "invalid",
                        source="judge",
                        raw_output=text,
                        rationale=parse.explanation,
                        overall=parse.overall,
                        error=parse.error or "",
                    )
                    for response, text, parse in received
                )
                Score.objects.bulk_create(
                    Score(rating=rating, attribute_id=attribute_ids[name], value=value)
                    for rating, (_, _, parse) in zip(ratings, received, strict=True)
                    if parse.ok
                    for name, value in parse.scores.items()
                )
            return len(ratings)

        async def in_db_thread(function: Any, *call_args: Any) -> Any:
            return await asyncio.get_running_loop().run_in_executor(db_thread, function, *call_args)

        async def ask(client: Any, response: Any) -> tuple[Any, str, Any]:
            system, user = prompts.judge_messages(
                response.conversation.context, response.text, rubric
            )
            completion = await providers.complete_with_retries(
                config, system=system, user=user, max_tokens=JUDGE_MAX_TOKENS,
                json_mode=endpoint.json_mode, client=client,
            )  # fmt: skip
            return response, completion.text, parse_judge_output(completion.text, names)

        def responses(limit: int | None = None) -> list[Any]:
            rows = (
                Response.objects.filter(conversation__study=study)
                .select_related("conversation")
                .order_by("id")
            )
            return list(rows[:limit] if limit else rows)

        # ------------------------------------------------------------ sequential baseline
        baseline_rate = None
        if args.baseline_items:

            async def sequential() -> float:
                rater = await in_db_thread(
                    lambda: Rater.objects.create(kind="judge", name="bench-sequential")
                )
                sample = await in_db_thread(responses, args.baseline_items)
                client = providers.make_client(config)
                started = time.perf_counter()
                try:
                    for response in sample:
                        await in_db_thread(store, rater, [await ask(client, response)])
                finally:
                    await client.close()
                return time.perf_counter() - started

            baseline_s = asyncio.run(sequential())
            baseline_rate = args.baseline_items / baseline_s
            print(f"sequential loop: {args.baseline_items} ratings in {baseline_s:.1f}s "
                  f"= {baseline_rate:.2f} ratings/s", flush=True)  # fmt: skip

        # ------------------------------------------------------------ the asyncio peer
        async def peer(n: int) -> tuple[float, int, int]:
            """`concurrency` requests in flight from one asyncio loop; every half second what
            came back is stored. Returns (seconds, ratings stored, answers that failed)."""
            started = time.perf_counter()
            rater = await in_db_thread(
                lambda: Rater.objects.create(kind="judge", name=f"bench-asyncio-{n}")
            )
            todo = iter(await in_db_thread(responses))
            client = providers.make_client(config, max_connections=args.concurrency)
            received: list[tuple[Any, str, Any]] = []
            stored = failed = 0

            async def asker() -> None:
                nonlocal failed
                for response in todo:  # one shared iterator: each asker takes the next
                    try:
                        received.append(await ask(client, response))
                    except providers.ProviderError:
                        failed += 1

            async def flush() -> None:
                nonlocal stored
                batch = received[:]
                received.clear()
                if batch:
                    stored += await in_db_thread(store, rater, batch)

            askers = [asyncio.create_task(asker()) for _ in range(args.concurrency)]
            pending = set(askers)
            try:
                while pending:
                    _, pending = await asyncio.wait(pending, timeout=0.5)
                    await flush()
            finally:
                await client.close()
            return time.perf_counter() - started, stored, failed

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

        def engine() -> tuple[float, int, int]:
            """A judge run over every response, launched and waited for until it ends."""
            started = time.perf_counter()
            run = services.judge_run_create(
                study_id=study.id,
                endpoint=endpoint,
                concurrency=args.concurrency,
                parallel_tasks=args.workers,
            )
            while True:
                run.refresh_from_db(fields=["status"])
                if run.status != Run.Status.RUNNING:
                    break
                time.sleep(0.1)
            elapsed = time.perf_counter() - started
            stored = Rating.objects.filter(run=run, status="complete").count()
            failed = RunItem.objects.filter(run=run, status=RunItem.Status.FAILED).count()
            if failed:
                errors = (
                    RunItem.objects.filter(run=run, status=RunItem.Status.FAILED)
                    .values_list("last_error", flat=True)
                    .first()
                )
                print(f"    judge run {run.id}: {failed} failed, e.g. {errors}", flush=True)
            return elapsed, stored, failed

        rates: dict[str, list[float]] = {"engine": [], "peer": []}
        ratios: list[float] = []
        for n in range(args.runs):
            order = ["peer", "engine"] if n % 2 == 0 else ["engine", "peer"]
            figures: dict[str, float] = {}
            for which in order:
                # CPU of the processes that do the work: the workers (and their pool
                # children) for the engine, this process for the peer.
                pids = [w.pid for w in workers] if which == "engine" else [os.getpid()]
                cpu_before = _tree_cpu(pids)
                if which == "engine":
                    elapsed, stored, failed = engine()
                    if stored < total:
                        failed_runs += 1
                else:
                    elapsed, stored, failed = asyncio.run(peer(n))
                cpu_ms = (_tree_cpu(pids) - cpu_before) * 1000 / max(1, stored)
                figures[which] = stored / elapsed
                rates[which].append(figures[which])
                print(f"  run {n + 1} {which:6}: {stored}/{total} ratings stored, {failed} "
                      f"failed, in {elapsed:.1f}s = {figures[which]:.1f} ratings/s, "
                      f"{cpu_ms:.1f} CPU ms per rating; {harness.load()}",
                      flush=True)  # fmt: skip
            ratios.append(figures["engine"] / figures["peer"])
            print(f"  run {n + 1} engine / peer = {ratios[-1]:.3f}", flush=True)

        engine_rate = statistics.median(rates["engine"])
        peer_rate = statistics.median(rates["peer"])
        print(f"judge run ({args.workers} worker processes, concurrency {args.concurrency} in "
              f"all): median {engine_rate:.1f} ratings/s "
              f"({', '.join(f'{r:.1f}' for r in rates['engine'])})", flush=True)  # fmt: skip
        print(f"asyncio peer (one process, concurrency {args.concurrency}): median "
              f"{peer_rate:.1f} ratings/s ({', '.join(f'{r:.1f}' for r in rates['peer'])})",
              flush=True)  # fmt: skip
        print(f"engine / peer: median of the runs' ratios {statistics.median(ratios):.3f} "
              f"({', '.join(f'{r:.3f}' for r in ratios)})", flush=True)  # fmt: skip
        if baseline_rate:
            print(f"speed-up over the sequential loop: {engine_rate / baseline_rate:.0f}x",
                  flush=True)  # fmt: skip
        print(f"server delay {args.delay}s; {harness.load()}", flush=True)
        db_thread.submit(_close_connection).result()
        db_thread.shutdown()
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
    if failed_runs:
        raise SystemExit(f"{failed_runs} judge run(s) stored fewer ratings than their items")


def _tree_cpu(pids: list[int]) -> float:
    """CPU seconds used so far by these processes and their descendants (still running)."""
    total = 0.0
    todo = list(pids)
    while todo:
        pid = todo.pop()
        try:
            total += harness.cpu_seconds(pid)
            for task in Path(f"/proc/{pid}/task").iterdir():
                todo.extend(int(child) for child in (task / "children").read_text().split())
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
    return total


def _close_connection() -> None:
    from django.db import connection

    connection.close()


if __name__ == "__main__":
    main()
