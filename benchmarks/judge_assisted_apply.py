"""Time *Apply* on the judge-assisted page as a researcher meets it (figures in docs/benchmarks.md).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/DB REDIS_URL=redis://127.0.0.1:6379/N \\
        .venv/bin/python -m benchmarks.judge_assisted_apply [--study NAME] [--runs 7]

Through Django's test client (the whole view: permission check, ratings version, report,
charts, template), logged in as a researcher (`bench-researcher`, made if missing). In one
process, in this order:

- the first request of the process (the page with its defaults: Python imports of the
  statistics, cold caches);
- Apply with a share not computed before (50, 20, 10, 5 %): the database read and every table;
- Apply with a new target half-width (the report cached, the planner recomputed);
- the same Apply again (answered from the cache);
- the ICC lever the first time for the judges, then again.

Prints medians and the load average. Run it right after the import (the importer's ANALYZE),
not after a VACUUM ANALYZE a user never runs, and with no judge-assisted entries for the study
in the cache (a fresh Redis database, or delete the keys matching *judge-assisted*): otherwise
the "not computed before" Applies are cache hits.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks import harness

SHARES = ["50", "20", "10", "5"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="MentalAlign-70k")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    harness.django_setup()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import Client

    from accounts.roles import RESEARCHER, role_add
    from annotation.models import Study

    settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
    study = Study.objects.get(name=args.study)
    # A researcher, whom the page is for: staff would first be asked for a second factor.
    user, _ = get_user_model().objects.get_or_create(username="bench-researcher")
    role_add(user=user, role=RESEARCHER)
    client = Client()
    client.force_login(user)
    url = f"/analysis/studies/{study.pk}/judge-assisted/"
    htmx = {"HTTP_HX_REQUEST": "true"}

    def get(params: dict[str, str], **headers: str) -> None:
        response = client.get(url, params, **headers)
        if response.status_code != 200:
            raise SystemExit(f"{url} {params}: HTTP {response.status_code}")

    def timed(params: dict[str, str], **headers: str) -> float:
        return harness.seconds(lambda: get(params, **headers))

    # Targets nobody chose before: each a new planner, as for a researcher's first Apply.
    base = 0.1 + (time.time_ns() // 1000 % 1000) * 1e-5

    def target(run: int) -> str:
        return repr(base + run * 1e-8)

    def summary(times: list[float]) -> str:
        return (f"median {statistics.median(times):.3f} s of {len(times)} "
                f"({min(times):.3f}–{max(times):.3f})")  # fmt: skip

    print(f"before: {harness.load()}")
    first = timed({})
    shares = [timed({"share": share, "target": target(0)}, **htmx) for share in SHARES]
    targets = [timed({"share": "5", "target": target(r)}, **htmx) for r in range(1, args.runs + 1)]
    again = [timed({"share": "5", "target": target(1)}, **htmx) for _ in range(args.runs)]
    lever = {"share": "5", "target": target(1), "lever": "on"}
    lever_first = timed(lever, **htmx)
    lever_again = [timed(lever, **htmx) for _ in range(args.runs)]
    print(f"first request of the process: {first:.3f} s")
    print(f"Apply, a share not computed before: {summary(shares)}")
    print(f"Apply, a new target half-width: {summary(targets)}")
    print(f"Apply, the same settings again: {summary(again)}")
    print(f"Apply with the ICC lever, first time for these judges: {lever_first:.3f} s; "
          f"again: {summary(lever_again)}")  # fmt: skip
    print(f"after: {harness.load()}")


if __name__ == "__main__":
    main()
