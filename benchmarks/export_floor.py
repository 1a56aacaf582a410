"""`manage.py export_ratings` as a user types it, beside its floor: psql `\\copy` of its SELECT.

Used by report_bench and paper_scale. Each run is a fresh child process (so its peak RSS is the
export's own); the command runs with Django's system checks, as a user types it. The floor is
psql writing the very SELECT the export runs (formula-safe cells and all) to a file: what the
database and the disk cost with no Python at all.
"""

from __future__ import annotations

import re
import statistics
import sys
from pathlib import Path

from benchmarks.harness import load, run_with_peak_rss


def copy_select(*, study_name: str, wide: bool = False) -> str:
    """The SELECT the COPY export runs for `study_name`, with its parameters inlined."""
    from analysis import copy_export, export
    from analysis.copy_read import bind
    from annotation.csvsafe import safe_cell
    from annotation.models import Rater, Rating, Responder, Study

    study = Study.objects.get(name=study_name)
    if wide:
        _, cells = export.wide_columns(study=study)
        responders = dict(Responder.objects.values_list("key", "pk"))
        attributes = dict(study.rubric.attributes.values_list("name", "pk"))
        query = copy_export.wide_sql(
            identified=False, cells=[(responders[r], attributes[a]) for r, a in cells]
        )
    else:
        query = copy_export.long_sql(identified=False)
    params = {
        "study": study.pk,
        "complete": Rating.Status.COMPLETE.value,
        "clinician": Rater.Kind.CLINICIAN.value,
        "name": safe_cell(study.name),
        "threshold": study.adjudication_threshold,
    }
    return bind(query, params)


def measure(*, study_name: str, env: dict, out_dir: Path, runs: int) -> dict:
    """Median wall and peak RSS of export_ratings and of the \\copy floor, alternated run by run
    so that other load on the machine falls on both alike."""
    out = out_dir / "scores.csv"
    floor_out = out_dir / "floor.csv"
    # psql's \copy takes one line: SQL comments go first, or the rest of the line would be one.
    select = " ".join(re.sub(r"--[^\n]*", "", copy_select(study_name=study_name)).split())
    url = env["DATABASE_URL"]
    command = [sys.executable, "manage.py", "export_ratings", "--study", study_name]
    command += ["--out", str(out)]
    psql = ["psql", "-q", "-X", url, "-c", f"\\copy ({select}) TO '{floor_out}' WITH (FORMAT csv)"]
    exports, floors = [], []
    for _ in range(runs):
        exports.append(run_with_peak_rss(command, env))
        floors.append(run_with_peak_rss(psql, env))
    # Same rows: the export's file is the header plus exactly the floor's bytes.
    body = out.read_bytes().split(b"\n", 1)[1]
    same = body == floor_out.read_bytes()
    wall = statistics.median(w for w, _ in exports)
    floor = statistics.median(w for w, _ in floors)
    return {
        "export_s": wall,
        "export_runs": [w for w, _ in exports],
        "export_rss_mb": max(r for _, r in exports),
        "floor_s": floor,
        "floor_runs": [w for w, _ in floors],
        "ratio": wall / floor,
        "size_mb": out.stat().st_size / 1e6,
        "same_bytes": same,
    }


def report(result: dict) -> str:
    runs = ", ".join(f"{w:.2f}" for w in result["export_runs"])
    floor_runs = ", ".join(f"{w:.2f}" for w in result["floor_runs"])
    return (
        f"export_ratings ({result['size_mb']:.0f} MB CSV, with system checks): median "
        f"{result['export_s']:.2f} s (runs {runs}), peak RSS {result['export_rss_mb']:.0f} MB\n"
        f"floor, psql \\copy of the same SELECT: median {result['floor_s']:.2f} s "
        f"(runs {floor_runs}); ratio {result['ratio']:.2f}×; same rows byte for byte: "
        f"{result['same_bytes']}; {load()}"
    )
