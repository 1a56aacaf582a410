"""`judge_assisted` as a researcher meets it right after `import_mentalalign`, against the same
command after an explicit ANALYZE (the state a benchmark that runs VACUUM ANALYZE would show).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m benchmarks.judge_assisted_after_import [--repeats 3]

Per repeat: a fresh database (mentalbench_bench_after_import, dropped and recreated), the
released workbooks imported with every judge file found, then `manage.py judge_assisted` over
all judges as a subprocess (start-up and checks included) twice, a plain ANALYZE, and the
command twice more. Prints each time, the medians and the ratio first-after-import ÷
first-after-ANALYZE. Tests never assert times; the figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.databases import database_env, database_recreate
from benchmarks.judge_assisted_validation import STUDY, judge_files

ROOT = Path(__file__).resolve().parents[1]
DB = "mentalbench_bench_after_import"


def timed(args: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=database_env(DB), check=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    shared = Path(os.environ.get("MENTALBENCH_SHARED", ROOT.parent / "shared"))
    data = shared / "data" / "mentalalign70k"
    judges = judge_files(data)
    command = ["judge_assisted", "--study", STUDY, "--format", "csv"]
    command += [arg for name in judges for arg in ("--judge", name)]
    rows = []
    for repeat in range(args.repeats):
        database_recreate(DB)
        imported = timed(
            ["import_mentalalign", "--study", STUDY, "--human", str(data / "Human_judge.xlsx"),
             *(arg for name, path in judges.items() for arg in ("--judge", f"{name}={path}"))]
        )  # fmt: skip
        after_import = [timed(command), timed(command)]
        subprocess.run(
            ["psql", "-q", "-X", database_env(DB)["DATABASE_URL"], "-c", "ANALYZE"], check=True
        )
        after_analyze = [timed(command), timed(command)]
        rows.append((imported, *after_import, *after_analyze))
        print(
            f"repeat {repeat + 1}: import {imported:.2f} s; judge_assisted after import "
            f"{after_import[0]:.2f} s, again {after_import[1]:.2f} s; after ANALYZE "
            f"{after_analyze[0]:.2f} s, again {after_analyze[1]:.2f} s"
        )
    first = statistics.median(r[1] for r in rows)
    analyzed = statistics.median(r[3] for r in rows)
    print(
        f"\n{len(judges)} judges, medians of {len(rows)}: import "
        f"{statistics.median(r[0] for r in rows):.2f} s; judge_assisted right after the import "
        f"{first:.2f} s; after an explicit ANALYZE {analyzed:.2f} s; ratio {first / analyzed:.2f}"
    )


if __name__ == "__main__":
    main()
