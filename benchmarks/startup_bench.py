"""Start-up cost of management commands: wall time of `manage.py check` and of a small
`reliability_report`, in this checkout and in a baseline checkout, interleaved run by run so that
both see the same machine load. Prints medians and the ratio to the baseline.

    python -m benchmarks.startup_bench --baseline ../old-checkout --runs 7 --study "Small study"

Needs SECRET_KEY and DATABASE_URL pointing at a migrated database holding a study with clinician
and judge scores; the tests' synthetic "Small study" (8 conversations, 2 clinicians, 2 judges) is
made there with:

    python -c 'import django; django.setup(); from tests.factories import small_study_make
    small_study_make()'   # DJANGO_SETTINGS_MODULE set
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import harness


def _command(tree: Path, args: list[str]):
    def run() -> None:
        subprocess.run(
            [sys.executable, str(tree / "manage.py"), *args], cwd=tree,
            env={**os.environ, "PYTHONPATH": str(tree)}, check=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    return run


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
    baseline = options.baseline.resolve()
    for name, args in commands.items():
        this, base, ratio = harness.beside_floor(  # interleaved: both see the same load
            _command(harness.ROOT, args), _command(baseline, args), options.runs
        )
        print(f"{name}: baseline {base}; this {this}; ratio {ratio:.2f}; {harness.load()}")


if __name__ == "__main__":
    main()
