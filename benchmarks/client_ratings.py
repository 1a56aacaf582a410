"""The Python client's ratings DataFrame beside the CSV export it reads, over HTTP.

    .venv/bin/python -m benchmarks.client_ratings [--conversations 2000] [--runs 5] [--keep]

Builds (or with --keep reuses) benchmarks.paper_scale's synthetic study with --conversations
conversations × 10 responses (7 attributes, 42 ratings a conversation) in its own database,
serves the project with gunicorn (one worker, DEBUG off) on a free local port, and times, with a
researcher's API token, each the median of --runs after one warm-up:

- the floor: ``GET /api/studies/<id>/export/`` read to its end as bytes (what any HTTP client
  pays for the rows);
- ``Client.ratings(<id>)``: the same request parsed into a pandas DataFrame as it arrives.

The target is the DataFrame within 1.5× the export's time. Printed with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from benchmarks import harness, paper_scale

DB = "mentalbench_bench_client"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="reuse the benchmark database")
    parser.add_argument("--conversations", type=int, default=2000)
    harness.add_database_argument(parser, DB)
    args = parser.parse_args()

    os.environ.setdefault("SECRET_KEY", "bench-only-" + os.urandom(32).hex())
    if not args.keep:
        harness.fresh_database(args.db)
    harness.django_setup(**harness.database_env(args.db))
    sys.path.insert(0, str(harness.ROOT / "client"))
    import requests
    from django.contrib.auth import get_user_model
    from knox.models import AuthToken
    from mentalbench_client import Client

    from accounts.roles import RESEARCHER, role_add
    from annotation.models import Study

    if not Study.objects.filter(name=paper_scale.STUDY).exists():
        start = time.perf_counter()
        n = paper_scale.synthesize(db=args.db, conversations=args.conversations)
        print(f"built the study: {n:,} scores in {time.perf_counter() - start:.0f} s")
    study = Study.objects.get(name=paper_scale.STUDY)
    user, _ = get_user_model().objects.get_or_create(username="bench-researcher")
    role_add(user=user, role=RESEARCHER)
    token = AuthToken.objects.create(user=user)[1]

    port = harness.free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "mentalbench.wsgi", "--bind", f"127.0.0.1:{port}",
            "--workers", "1", "--timeout", "300",
        ],
        cwd=harness.ROOT, env={**os.environ, "DEBUG": "0", "ALLOWED_HOSTS": "127.0.0.1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        harness.wait_for_healthz(base)
        session = requests.Session()
        session.headers["Authorization"] = f"Token {token}"
        url = f"{base}/api/studies/{study.pk}/export/"
        size = 0

        def export_bytes() -> None:
            nonlocal size
            with session.get(url, stream=True, timeout=300) as response:
                response.raise_for_status()
                size = sum(len(chunk) for chunk in response.iter_content(1 << 20))

        client = Client(base, token=token, timeout=300)
        rows = 0

        def dataframe() -> None:
            nonlocal rows
            rows = len(client.ratings(study.pk))

        export_bytes()
        dataframe()  # warm-ups
        frame, export, ratio = harness.beside_floor(dataframe, export_bytes, args.runs)
        print(
            f"Client.ratings: {rows:,} rows, a DataFrame in {frame}; the CSV export read as "
            f"bytes ({size / 1e6:.0f} MB): {export}; {ratio:.2f}× the export; target ≤ 1.5×; "
            f"{harness.load()}"
        )
    finally:
        server.terminate()
        server.wait(timeout=30)
        AuthToken.objects.filter(user=user).delete()


if __name__ == "__main__":
    main()
