"""The REST API's largest page at paper scale, over HTTP, beside its floor.

    .venv/bin/python -m benchmarks.api_pages [--conversations 10000] [--runs 5] [--keep] [--db NAME]

Builds (or with --keep reuses) benchmarks.paper_scale's study in its database
mentalbench_bench_paper (10,000 conversations × 10 responses; 420,000 ratings, 2.94 million
scores), serves the project with gunicorn (one worker, DEBUG off) on a free local port, and
times, with a researcher's API token, the largest page the API gives:
``GET /api/ratings/?study=…&limit=MAX_LIMIT`` at the first offset, the middle one and the last
(the deepest page: PostgreSQL steps over every rating before it), each the median of --runs
after one warm-up request, with the answer's size.

The floor, measured in the same run: the very SQL statements the page runs (captured from the
view through Django's test client) executed straight on PostgreSQL through psycopg, every row
fetched — the database's share, with no serialisation, no JSON and no HTTP.

Every figure is printed with the machine's load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from benchmarks import harness, paper_scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="reuse the paper-scale database")
    parser.add_argument(
        "--conversations", type=int, default=paper_scale.CONVERSATIONS, help="a smaller study"
    )
    harness.add_database_argument(parser, paper_scale.DB)
    args = parser.parse_args()

    # A throwaway key, as bin/test makes: settings refuse to start without one outside DEBUG.
    os.environ.setdefault("SECRET_KEY", "bench-only-" + os.urandom(32).hex())
    if not args.keep:
        harness.fresh_database(args.db)
    harness.django_setup(**harness.database_env(args.db))
    import logging

    import httpx
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext
    from knox.models import AuthToken

    from accounts.roles import RESEARCHER, role_add
    from analysis.api_params import MAX_LIMIT
    from annotation.models import Rating, Study

    logging.getLogger("httpx").setLevel(logging.WARNING)

    if not Study.objects.filter(name=paper_scale.STUDY).exists():
        start = time.perf_counter()
        n = paper_scale.synthesize(db=args.db, conversations=args.conversations)
        print(f"built the study: {n:,} scores in {time.perf_counter() - start:.0f} s")
    study = Study.objects.get(name=paper_scale.STUDY)
    n_ratings = Rating.objects.filter(response__conversation__study=study).count()
    user, _ = get_user_model().objects.get_or_create(username="bench-researcher")
    role_add(user=user, role=RESEARCHER)
    token = AuthToken.objects.create(user=user)[1]
    last = (n_ratings - 1) // MAX_LIMIT * MAX_LIMIT
    pages = {"first page": 0, "middle page": last // 2 // MAX_LIMIT * MAX_LIMIT, "last page": last}
    print(f"study {paper_scale.STUDY!r}: {n_ratings:,} ratings; pages of {MAX_LIMIT}")

    # The floor: the page's own SQL, captured from the view, run straight on PostgreSQL.
    floors: dict[str, list[str]] = {}
    client = Client(HTTP_AUTHORIZATION=f"Token {token}")
    for name, offset in pages.items():
        with CaptureQueriesContext(connection) as captured:
            response = client.get(
                "/api/ratings/", {"study": study.pk, "limit": MAX_LIMIT, "offset": offset}
            )
        assert response.status_code == 200, response.content[:300]
        # The reads (token lookup, count, page, scores, rater codes); not the BEGIN/COMMIT of
        # the code lookup's transaction.
        floors[name] = [
            q["sql"]
            for q in captured.captured_queries
            if q["sql"].lstrip().upper().startswith("SELECT")
        ]

    port = harness.free_port()
    server = subprocess.Popen(
        [
            sys.executable, "-m", "gunicorn", "mentalbench.wsgi", "--bind", f"127.0.0.1:{port}",
            "--workers", "1", "--timeout", "120",
        ],
        cwd=harness.ROOT, env={**os.environ, "DEBUG": "0", "ALLOWED_HOSTS": "127.0.0.1"},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Token {token}"},
            timeout=60,
        ) as http:
            harness.wait_for_healthz(f"http://127.0.0.1:{port}")
            for name, offset in pages.items():
                params = {"study": study.pk, "limit": MAX_LIMIT, "offset": offset}
                answer = http.get("/api/ratings/", params=params)  # warm-up
                assert answer.status_code == 200, answer.text[:300]
                size, count = len(answer.content), len(answer.json()["results"])

                def get_page(params=params) -> None:
                    http.get("/api/ratings/", params=params).raise_for_status()

                def run_sql(statements=floors[name]) -> None:
                    with connection.cursor() as cursor:
                        for sql in statements:
                            cursor.execute(sql)
                            cursor.fetchall()

                page, floor, ratio = harness.beside_floor(get_page, run_sql, args.runs)
                print(
                    f"GET /api/ratings/ {name} (offset {offset:,}, {count} ratings, "
                    f"{size / 1024:.0f} KB): {page}; floor, its {len(floors[name])} SQL "
                    f"statements on PostgreSQL: {floor}; {ratio:.1f}× the floor; target < 1 s; "
                    f"{harness.load()}"
                )
    finally:
        server.terminate()
        server.wait(timeout=30)
        AuthToken.objects.filter(user=user).delete()


if __name__ == "__main__":
    main()
