"""How long a researcher waits for the study dashboard in Chromium at 1280 px, on the demo and on
MentalAlign-70k, beside the server's own answer time.

    .venv/bin/python -m benchmarks.dashboard_draw [--runs 5] [--db NAME] [--baseline CHECKOUT]

Served as `bin/up` serves it (gunicorn, DEBUG off, static files collected and served by
WhiteNoise) from a fresh database (mentalbench_bench_draw, or --db) with `seed_demo`, the demo
study rated by its three clinicians and one judge (seeded scores, written here), and the
released MentalAlign-70k workbooks imported. The demo's researcher signs in; each run opens the
dashboard in a new browser context (nothing cached in the browser) after the report was computed
once (the server's cache holds it, as for every visit but the first after a change).

Per page it reports the medians of: the server's answer (the HTML's responseEnd, the floor no
drawing can beat), *answer shown* (the answer table painted: DOMContentLoaded, as the page has
no render-blocking script), *first screen* (every chart in the first 900 px drawn; the page marks
it ``mentalbench:first-screen``) and *all charts* (every chart drawn,
``mentalbench:charts-drawn``). ``--baseline`` serves another checkout of the project (e.g. a
``git worktree`` of an older commit) on the same database and measures it in the same run. Tests
never assert times; the figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import harness
from benchmarks.judge_assisted_validation import STUDY, judge_files

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
TIMINGS = """() => {
  const nav = performance.getEntriesByType("navigation")[0];
  const mark = (name) => {
    const found = performance.getEntriesByName(name);
    return found.length ? found[0].startTime : null;
  };
  return {served: nav.responseEnd, answer: nav.domContentLoadedEventEnd,
          first: mark("mentalbench:first-screen"), all: mark("mentalbench:charts-drawn")};
}"""


def _demo_ratings() -> None:
    """The demo study as its clinicians and a judge would leave it: every response scored."""
    import numpy as np

    from annotation.management.commands.seed_demo import DEMO_STUDY
    from annotation.models import Rater, Rating, Response, Score

    responses = list(
        Response.objects.filter(conversation__study__name=DEMO_STUDY, conversation__practice=False)
    )
    attributes = list(responses[0].conversation.study.rubric.attributes.order_by("position"))
    raters = list(Rater.objects.filter(name__startswith="clinician"))
    raters.append(Rater.objects.get_or_create(kind=Rater.Kind.JUDGE, name="demo-judge")[0])
    rng = np.random.default_rng(0)
    for response in responses:
        quality = 2 + (response.responder_id % 4)
        for rater in raters:
            rating = Rating.objects.create(
                rater=rater,
                response=response,
                status=Rating.Status.COMPLETE,
                source=Rating.Source.JUDGE if rater.kind == "judge" else Rating.Source.FORM,
            )
            scores = np.clip(np.rint(quality + rng.normal(0, 0.7, len(attributes))), 1, 5)
            Score.objects.bulk_create(
                Score(rating=rating, attribute=a, value=int(v))
                for a, v in zip(attributes, scores, strict=True)
            )


def _researcher_reads_both() -> None:
    """The demo's researcher reads the imported study too: a member of it (the study-scoped
    access of this code) and a platform-wide researcher (what an older checkout measured as the
    baseline asks for; the demo keeps its researcher to its own study)."""
    from django.contrib.auth import get_user_model

    from accounts.roles import RESEARCHER, role_add
    from annotation.membership import MEMBER_RESEARCHER, member_add
    from annotation.models import Study

    user = get_user_model().objects.get(username="researcher")
    member_add(study=Study.objects.get(name=STUDY), user=user, role=MEMBER_RESEARCHER)
    role_add(user=user, role=RESEARCHER)


def _serve(checkout: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    port = harness.free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "mentalbench.wsgi", "--bind", f"127.0.0.1:{port}",
            "--workers", "1", "--worker-class", "gthread", "--threads", "8",
        ],
        cwd=checkout, env={**env, "PYTHONPATH": str(checkout)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    harness.wait_for_healthz(base)
    return server, base


def _measure(browser, base: str, cookies: list, url: str, runs: int) -> dict[str, list[float]]:
    import logging

    import httpx

    logging.getLogger("httpx").setLevel(logging.WARNING)  # its request lines

    # The report is computed once, as for every visit but the first after a change.
    httpx.get(base + url, cookies={c["name"]: c["value"] for c in cookies}, timeout=300)
    out: dict[str, list[float]] = {"served": [], "answer": [], "first": [], "all": []}
    for _ in range(runs):
        context = browser.new_context(base_url=base, viewport={"width": 1280, "height": 900})
        context.add_cookies(cookies)
        page = context.new_page()
        response = page.goto(url, wait_until="load")
        # A page that answers anything but the dashboard (a 404 for a study the researcher is
        # not a member of, a sign-in redirect) has no charts to wait for and would be timed as
        # a fast dashboard.
        if response is None or response.status != 200 or page.url != base + url:
            status = None if response is None else response.status
            raise SystemExit(f"{base + url} answered {status} at {page.url}: not the dashboard")
        page.wait_for_function(
            "() => [...document.querySelectorAll('[data-vega-spec]')]"
            ".every(el => el.dataset.drawn)",
            timeout=120_000,
        )
        times = page.evaluate(TIMINGS)
        if times["all"] is None:  # a checkout that does not mark: the moment all were drawn
            times["all"] = page.evaluate("performance.now()")
        for key, value in times.items():
            if value is not None:
                out[key].append(value / 1000)
        context.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh browser contexts (median)")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured beside")
    harness.add_database_argument(parser, "mentalbench_bench_draw")
    args = parser.parse_args()

    os.environ.setdefault("SECRET_KEY", "bench-only-" + os.urandom(32).hex())
    harness.fresh_database(args.db)
    data = harness.mentalalign_data()
    checkouts = {"this": harness.ROOT} | ({"baseline": args.baseline} if args.baseline else {})
    statics = {name: tempfile.mkdtemp(prefix="mentalbench-static-") for name in checkouts}
    env = {
        **harness.database_env(args.db),
        "DEBUG": "0",
        "DJANGO_SETTINGS_MODULE": "mentalbench.settings",
        "REDIS_URL": harness.bench_redis_url(),
    }
    for name, checkout in checkouts.items():
        subprocess.run(
            [sys.executable, "manage.py", "collectstatic", "--noinput", "-v0"],
            cwd=checkout, env={**env, "STATIC_ROOT": statics[name]}, check=True,
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
    judges = [arg for n, p in judge_files(data).items() for arg in ("--judge", f"{n}={p}")]
    for command in (
        ["seed_demo"],
        [
            "import_mentalalign",
            "--study",
            STUDY,
            "--human",
            str(data / "Human_judge.xlsx"),
            *judges,
        ],
    ):
        subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=harness.ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    harness.django_setup(**env)
    from django.conf import settings

    from annotation.models import Study

    _demo_ratings()
    _researcher_reads_both()
    pages = {
        "demo": f"/analysis/studies/{Study.objects.get(name='Demo study').pk}/",
        "MentalAlign-70k": f"/analysis/studies/{Study.objects.get(name=STUDY).pk}/",
    }
    results: dict[tuple[str, str], dict[str, list[float]]] = {}
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for name, checkout in checkouts.items():
                server, base = _serve(checkout, {**env, "STATIC_ROOT": statics[name]})
                try:
                    signing_in = browser.new_context(base_url=base)
                    page = signing_in.new_page()
                    page.goto("/accounts/login/")
                    page.fill("#id_login", "researcher")
                    page.fill("#id_password", settings.DEMO_PASSWORD)
                    with page.expect_navigation():
                        page.keyboard.press("Enter")
                    cookies = signing_in.cookies()
                    signing_in.close()
                    for label, url in pages.items():
                        results[(name, label)] = _measure(browser, base, cookies, url, args.runs)
                finally:
                    server.terminate()
                    server.wait(timeout=30)
            browser.close()
    finally:
        for path in statics.values():
            shutil.rmtree(path, ignore_errors=True)
        harness.drop_database(args.db)

    print(f"dashboard at 1280 px, medians of {args.runs}, {harness.load()}")
    print("| code | study | server's answer | answer shown | first screen | all charts |")
    print("|---|---|---|---|---|---|")
    for (name, label), times in results.items():
        cells = [
            f"{statistics.median(times[k]):.2f} s" if times[k] else "—"
            for k in ("served", "answer", "first", "all")
        ]
        print(f"| {name} | {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
