"""Start-up cost of management commands: wall time of `manage.py check` and of a small
`reliability_report`, in this checkout and in a baseline checkout, interleaved run by run so that
both see the same machine load. Prints medians and the ratio to the baseline.

    python benchmarks/startup_bench.py --baseline ../old-checkout --runs 7 --study "Small study"

Needs SECRET_KEY and DATABASE_URL pointing at a migrated database holding a study with clinician
and judge scores; the tests' synthetic "Small study" (8 conversations, 2 clinicians, 2 judges) is
made there with:

    python -c 'import django; django.setup(); from tests.analysis import conftest
    conftest.small_study._get_wrapped_function()(None)'   # DJANGO_SETTINGS_MODULE set
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def _time(tree: Path, args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, str(tree / "manage.py"), *args],
        cwd=tree, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="checkout to compare with")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--study", default="Small study")
    options = parser.parse_args()
    commands = {
        "check": ["check"],
        "reliability_report": [
            "reliability_report", "--study", options.study, "--bootstrap", "200", "--format", "csv",
        ],
    }  # fmt: skip
    trees = {"baseline": options.baseline.resolve(), "this": HERE}
    for name, args in commands.items():
        times: dict[str, list[float]] = {label: [] for label in trees}
        for _ in range(options.runs):
            for label, tree in trees.items():  # interleaved: both see the same load
                times[label].append(_time(tree, args))
        base = statistics.median(times["baseline"])
        this = statistics.median(times["this"])
        print(
            f"{name}: baseline median {base:.2f} s, this {this:.2f} s, "
            f"ratio {this / base:.2f} ({options.runs} runs each)"
        )


if __name__ == "__main__":
    main()
