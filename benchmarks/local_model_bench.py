"""The tiny local model in the loop: invalid outputs prompt-only vs structured, tokens/s, overhead.

    .venv/bin/python -m benchmarks.local_model_bench [--items 60] [--concurrency 2] [--db NAME]

What it does, on this machine (needs the local-model extra, PostgreSQL and Redis):
1. creates a fresh PostgreSQL database (`mentalbench_bench_local` or --db, dropped first),
   migrates and loads the demo study (6 conversations × 10 responses);
2. serves SmolLM2-135M-Instruct with llama.cpp (2 threads, as bin/local-model does) and registers
   the two local endpoints (prompt-only, and structured: the rubric as a llama.cpp schema);
3. per mode, a judge run over `--items` demo responses executed by the platform's work loop
   (`services.run_work`, in this process — the same code a Celery worker runs), temperature 0,
   one ask per item (max_output_attempts=1, so the invalid rate is the model's, not hidden by
   re-asks); then a direct asyncio loop over the same prompts at the same concurrency through
   the same SDK (AsyncOpenAI, identical request fields), parsed by the same parser, no database;
4. prints a Markdown table: valid/invalid per mode with the commonest reasons, completion
   tokens/s as the server reported them, and direct wall time ÷ platform wall time.

Each mode starts with one untimed warm-up request (llama.cpp's first request evaluates the whole
shared prompt prefix), and the order alternates (platform then direct, then direct then
platform) so a drift in the machine's load does not favour one side. Needs Redis on
$BENCH_REDIS_URL (default redis://127.0.0.1:6379/13, used by the rate limiter only).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import tempfile
import time
from pathlib import Path
from unittest import mock

from benchmarks import harness


async def _direct(config, prompts, *, concurrency: int, max_tokens: int, schema, names, scale):
    """The same requests without the platform: a semaphore, the SDK, the parser, and the same
    rule for an answer the token limit cut off (invalid, whatever the parser reads from it)."""
    import openai

    from judging.providers import openai_structured
    from scoring.parsing import parse_judge_output

    client = openai.AsyncOpenAI(
        base_url=config.base_url, api_key="EMPTY", timeout=config.timeout, max_retries=0
    )
    extra = openai_structured(config, schema)
    gate = asyncio.Semaphore(concurrency)
    results: list[tuple[bool, str, int]] = []

    async def one(system: str, user: str) -> None:
        async with gate:
            response = await client.chat.completions.create(
                model=config.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                temperature=0.0,
                max_tokens=max_tokens,
                **extra,
            )
        text = response.choices[0].message.content or ""
        parse = parse_judge_output(text, names, scale)
        cut = response.choices[0].finish_reason == "length"
        error = "cut off by the token limit" if cut else parse.error or ""
        results.append((parse.ok and not cut, error, response.usage.completion_tokens))

    started = time.perf_counter()
    await asyncio.gather(*(one(system, user) for system, user in prompts))
    wall = time.perf_counter() - started
    await client.close()
    return wall, results


def _timed(fn, server_pid: int):
    """Run `fn`; its wall time, this process's CPU time and the llama.cpp server's CPU time.

    The CPU figures say where a slower side's time went: more server CPU per token means the
    model itself worked harder (e.g. less prompt-cache reuse), while equal server CPU with a
    longer wall means the server waited (for requests, or for a core)."""
    wall0, cpu0, server0 = time.perf_counter(), time.process_time(), harness.cpu_seconds(server_pid)
    value = fn()
    return (
        value,
        time.perf_counter() - wall0,
        time.process_time() - cpu0,
        harness.cpu_seconds(server_pid) - server0,
    )


def _reason(error: str) -> str:
    """A short bucket for an invalid output's reason (the first attempt's, numbers dropped)."""
    head = error.removeprefix("no valid judge output;").strip()
    head = head.removeprefix("attempt 1:").split("; attempt")[0].strip()
    if " is not on the " in head:
        return "a score off the 1–5 scale"
    if head.startswith("missing"):
        return "attributes missing"
    if "cut off" in head:
        return "cut off by the token limit"
    return head[:60]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=60)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument(
        "--threads", type=int, default=2, help="llama.cpp threads (1 when the cores are busy)"
    )
    harness.add_database_argument(parser, "mentalbench_bench_local")
    args = parser.parse_args()

    harness.fresh_database(args.db)
    redis_url = harness.bench_redis_url()
    harness.django_setup(
        DATABASE_URL=harness.database_url(args.db), REDIS_URL=redis_url,
        JUDGING_RATELIMIT_REDIS_URL=redis_url, LOG_LEVEL="WARNING",
        CELERY_TASK_ALWAYS_EAGER="1",  # launching must not enqueue: we run it here
    )  # fmt: skip
    from django.core.management import call_command

    from annotation.models import Rating
    from judging import local_model, prompts, services, tasks
    from judging.models import Run, RunItem
    from tests.local_llama import LocalLlama

    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    log = Path(tempfile.mkdtemp(prefix="mentalbench-llama-")) / "server.log"
    server = LocalLlama(log=log, threads=args.threads).start()
    try:
        endpoints = services.local_endpoints_register(
            base_url=server.base_url, model=local_model.MODEL_ALIAS
        )
        study_id = Run._meta.apps.get_model("annotation", "Study").objects.get(name="Demo study").id
        load_before = harness.load()
        rows = []
        for index, endpoint in enumerate(endpoints):
            # Launch without sending the work tasks (eager mode would run them inside the
            # launch), then run the work loop in the foreground, timed.
            with mock.patch.object(tasks.run_work, "delay", lambda run_id: None):
                run = services.judge_run_create(
                    study_id=study_id,
                    endpoint=endpoint,
                    subset=Run.Subset.SAMPLE,
                    sample_size=args.items,
                    temperature=0.0,
                    max_tokens=args.max_tokens,
                    concurrency=args.concurrency,
                    parallel_tasks=1,
                    max_output_attempts=1,
                )
            plan = services.RunPlan.load(run)
            items = RunItem.objects.filter(run=run).select_related("response__conversation")
            texts = [services.item_messages(item=item, rubric=plan.rubric) for item in items]
            names = [a["name"] for a in plan.rubric]

            def direct_loop(plan=plan, texts=texts, names=names):
                return asyncio.run(
                    _direct(
                        plan.config,
                        texts,
                        concurrency=args.concurrency,
                        max_tokens=args.max_tokens,
                        schema=plan.output_schema,
                        names=names,
                        scale=prompts.rubric_scale(plan.rubric),
                    )
                )

            # Warm-up, not timed: llama.cpp's first request evaluates the whole shared prompt
            # prefix (and a schema's first grammar); later ones reuse the cached prefix.
            asyncio.run(
                _direct(
                    plan.config,
                    texts[:1],
                    concurrency=1,
                    max_tokens=8,
                    schema=plan.output_schema,
                    names=names,
                    scale=prompts.rubric_scale(plan.rubric),
                )
            )
            direct_first = index % 2 == 1  # alternate which side goes first
            pid = server.pid
            if direct_first:
                (direct_wall, direct), _, direct_cpu, direct_server_cpu = _timed(direct_loop, pid)
            _, platform_wall, platform_cpu, platform_server_cpu = _timed(
                lambda run=run: services.run_work(run_id=run.id), pid
            )
            if not direct_first:
                (direct_wall, direct), _, direct_cpu, direct_server_cpu = _timed(direct_loop, pid)
            platform_tokens = sum(items.values_list("output_tokens", flat=True))
            ratings = Rating.objects.filter(run=run)
            valid = ratings.filter(status=Rating.Status.COMPLETE).count()
            reasons = collections.Counter(
                _reason(error)
                for error in ratings.filter(status=Rating.Status.INVALID).values_list(
                    "error", flat=True
                )
            )
            direct_valid = sum(ok for ok, _, _ in direct)
            direct_tokens = sum(tokens for _, _, tokens in direct)
            rows.append(
                {
                    "mode": "structured (llama.cpp schema)"
                    if endpoint.structured_output != "off"
                    else "prompt-only",
                    "items": ratings.count(),
                    "valid": valid,
                    "reasons": reasons.most_common(3),
                    "platform_wall": platform_wall,
                    "platform_tps": platform_tokens / platform_wall,
                    "direct_wall": direct_wall,
                    "direct_valid": direct_valid,
                    "direct_tps": direct_tokens / direct_wall,
                    "cpu": (platform_cpu, direct_cpu, platform_server_cpu, direct_server_cpu),
                }
            )
        load_after = harness.load()
    finally:
        server.stop()

    print(f"\nbefore: {load_before}; after: {load_after}\n")
    print(
        "| mode | items | valid | invalid (rate) | commonest reasons | platform wall s | "
        "direct wall s | direct ÷ platform | tokens/s (platform / direct) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        invalid = row["items"] - row["valid"]
        reasons = "; ".join(f"{reason} ({n})" for reason, n in row["reasons"]) or "—"
        print(
            f"| {row['mode']} | {row['items']} | {row['valid']} | {invalid} "
            f"({invalid / row['items']:.0%}) | {reasons} | {row['platform_wall']:.1f} | "
            f"{row['direct_wall']:.1f} | {row['direct_wall'] / row['platform_wall']:.2f} | "
            f"{row['platform_tps']:.1f} / {row['direct_tps']:.1f} |"
        )
        platform_cpu, direct_cpu, platform_server, direct_server = row["cpu"]
        print(
            f"  CPU s — benchmark process (platform / direct): {platform_cpu:.1f} / "
            f"{direct_cpu:.1f}; llama.cpp server: {platform_server:.1f} / {direct_server:.1f}"
        )
        if row["direct_valid"] != row["valid"]:
            print(f"  (direct loop: {row['direct_valid']} valid — temperature 0 is not bitwise)")


if __name__ == "__main__":
    main()
