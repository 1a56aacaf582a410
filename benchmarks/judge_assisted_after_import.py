"""`judge_assisted` as a researcher meets it right after `import_mentalalign`, against the same
command after an explicit ANALYZE (the state a benchmark that runs VACUUM ANALYZE would show).

    .venv/bin/python -m benchmarks.judge_assisted_after_import [--repeats 3] [--copies 2]
        [--db NAME]

Per repeat: a fresh database (mentalbench_bench_after_import or --db, dropped and recreated), the
released workbooks imported with every judge file found, each under ``--copies`` names (2: the
two released judges make four, "<name>" and "<name> #2"), then `manage.py judge_assisted` over
all judges as a subprocess (start-up and checks included) twice, a plain ANALYZE, and the
command twice more. Prints each time, the medians and the ratio first-after-import ÷
first-after-ANALYZE. Tests never assert times; the figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys

from benchmarks import harness
from benchmarks.judge_assisted_validation import STUDY, judge_files


def timed(db: str, args: list[str]) -> float:
    return harness.seconds(
        lambda: subprocess.run(
            [sys.executable, "manage.py", *args], cwd=harness.ROOT,
            env=harness.database_env(db), check=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--copies", type=int, default=2, help="import each judge workbook under this many names"
    )
    harness.add_database_argument(parser, "mentalbench_bench_after_import")
    args = parser.parse_args()
    db = args.db
    data = harness.mentalalign_data()
    judges = {
        (name if copy == 0 else f"{name} #{copy + 1}"): path
        for copy in range(args.copies)
        for name, path in judge_files(data).items()
    }
    command = ["judge_assisted", "--study", STUDY, "--format", "csv"]
    command += [arg for name in judges for arg in ("--judge", name)]
    rows = []
    for repeat in range(args.repeats):
        harness.fresh_database(db)
        imported = timed(
            db,
            ["import_mentalalign", "--study", STUDY, "--human", str(data / "Human_judge.xlsx"),
             *(arg for name, path in judges.items() for arg in ("--judge", f"{name}={path}"))]
        )  # fmt: skip
        after_import = [timed(db, command), timed(db, command)]
        harness.psql(db, "ANALYZE")
        after_analyze = [timed(db, command), timed(db, command)]
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
        f"{first:.2f} s; after an explicit ANALYZE {analyzed:.2f} s; ratio {first / analyzed:.2f}; "
        f"{harness.load()}"
    )


if __name__ == "__main__":
    main()
