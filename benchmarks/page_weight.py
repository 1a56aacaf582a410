"""Bytes over the wire of a clinician's rating page, first load and repeat load, in Chromium.

    .venv/bin/python -m benchmarks.page_weight [--runs 3] [--db NAME] [--page rating|labelling]

Served as `bin/up` serves it: a fresh database (mentalbench_bench_weight, or --db) migrated and
loaded with `seed_demo`, static files collected (hashed names, precompressed, cached for a year)
and served by WhiteNoise, pages gzipped by the project's middleware, gunicorn with DEBUG off.

Chromium (Playwright, /usr/bin/chromium) signs in as the demo's clinician1 in one browser
context; a second context gets only its session cookie, so its cache is empty, and opens the
first demo conversation's rating page (10 responses × 7 attributes; `--page labelling`: the
first demo distortion message) as a clinician does after signing in on another device — the
*first load* — and then opens it again — the *repeat load*, where the browser may use what it
cached. Bytes are what the DevTools protocol reports as received for each request
(`encodedDataLength`: compressed body and headers); a file served from the browser's cache counts
0. Each figure is the median of --runs fresh contexts; sizes do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from urllib.parse import urlsplit

from benchmarks import harness

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def _load(context, url: str) -> dict[str, int]:
    """Open `url` in a new page of `context`; bytes received per request path, until the page
    and its requests have settled."""
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    paths: dict[str, str] = {}
    received: dict[str, int] = defaultdict(int)

    def sent(event) -> None:
        paths[event["requestId"]] = urlsplit(event["request"]["url"]).path

    def finished(event) -> None:
        path = paths.get(event["requestId"], "?")
        received[path] += int(event["encodedDataLength"])

    cdp.on("Network.requestWillBeSent", sent)
    cdp.on("Network.loadingFinished", finished)
    response = page.goto(url, wait_until="load")
    if response is None or response.status != 200:
        raise SystemExit(f"{url}: {response.status if response else 'no answer'}")
    page.wait_for_load_state("networkidle")
    cdp.detach()
    page.close()
    return dict(received)


def _kb(n: float) -> str:
    return f"{n / 1024:.1f} KB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="fresh browser contexts (median)")
    parser.add_argument("--page", choices=["rating", "labelling"], default="rating")
    harness.add_database_argument(parser, "mentalbench_bench_weight")
    args = parser.parse_args()

    os.environ.setdefault("SECRET_KEY", "bench-only-" + os.urandom(32).hex())
    harness.fresh_database(args.db)
    static_root = tempfile.mkdtemp(prefix="mentalbench-static-")
    env = {
        **harness.database_env(args.db),
        "DEBUG": "0",
        "STATIC_ROOT": static_root,
        "DJANGO_SETTINGS_MODULE": "mentalbench.settings",
        "PYTHONPATH": str(harness.ROOT),
    }
    # What bin/up does before it serves.
    for command in (["collectstatic", "--noinput", "-v0"], ["seed_demo"]):
        subprocess.run(
            [sys.executable, "manage.py", *command],
            cwd=harness.ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
        )  # fmt: skip
    harness.django_setup(**env)
    import logging

    from django.conf import settings

    from annotation.management.commands.seed_demo import DEMO_DISTORTION_STUDY, DEMO_STUDY
    from annotation.models import Assignment

    study = DEMO_STUDY if args.page == "rating" else DEMO_DISTORTION_STUDY
    token = (
        Assignment.objects.filter(rater__name="clinician1", conversation__study__name=study)
        .order_by("conversation__external_id")
        .values_list("token", flat=True)
        .first()
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the health checks' request lines
    port = harness.free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "mentalbench.wsgi", "--bind", f"127.0.0.1:{port}",
            "--workers", "1", "--worker-class", "gthread", "--threads", "8",
        ],
        cwd=harness.ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    firsts: list[int] = []
    repeats: list[int] = []
    parts: dict[str, list[int]] = defaultdict(list)
    try:
        harness.wait_for_healthz(base)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            for _ in range(args.runs):
                signing_in = browser.new_context(base_url=base)
                page = signing_in.new_page()
                page.goto("/accounts/login/")
                page.fill("#id_login", "clinician1")
                page.fill("#id_password", settings.DEMO_PASSWORD)
                with page.expect_navigation():
                    page.keyboard.press("Enter")
                cookies = signing_in.cookies()
                signing_in.close()
                # A browser with the session and nothing cached.
                context = browser.new_context(base_url=base)
                context.add_cookies(cookies)
                first = _load(context, f"{base}/rate/{token}/")
                repeat = _load(context, f"{base}/rate/{token}/")
                context.close()
                firsts.append(sum(first.values()))
                repeats.append(sum(repeat.values()))
                for path, n in first.items():
                    parts[path].append(n)
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(static_root, ignore_errors=True)
        harness.drop_database(args.db)

    print(f"{args.page} page of the demo, clinician1, gunicorn with DEBUG off, {harness.load()}")
    print(
        f"first load (nothing cached): median {_kb(statistics.median(firsts))} "
        f"(runs {', '.join(_kb(n) for n in firsts)}); target <= 25 KB"
    )
    print(
        f"repeat load (browser cache): median {_kb(statistics.median(repeats))} "
        f"(runs {', '.join(_kb(n) for n in repeats)}); target <= 8 KB"
    )
    print("first load by request (median):")
    for path, values in sorted(parts.items(), key=lambda kv: -statistics.median(kv[1])):
        print(f"  {_kb(statistics.median(values)):>9}  {path}")


if __name__ == "__main__":
    main()
