"""`manage.py release_study` at paper scale, beside `export_ratings` of the same study.

    .venv/bin/python -m benchmarks.release_bench [--runs 3] [--keep] [--db NAME]
        [--conversations 10000]

The study is the one of benchmarks.paper_scale (10,000 conversations × 10 responses, 4 judges,
2 clinicians on 1,000 conversations: 2.94 million scores), built in its database
mentalbench_bench_paper unless --keep finds it there. Each run is a fresh child process, as a
user types the command, alternated with export_ratings so that other load falls on both alike;
printed: median wall time, peak RSS, the release's size, and the load average. `--runs 0`
only builds the study (benchmarks.load_autosave --jobs-during copies it from there).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness, paper_scale


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="reuse the benchmark database")
    parser.add_argument(
        "--conversations", type=int, default=paper_scale.CONVERSATIONS, help="a smaller study"
    )
    harness.add_database_argument(parser, paper_scale.DB)
    args = parser.parse_args()
    if not args.keep:
        harness.fresh_database(args.db)
    env = harness.database_env(args.db)
    harness.django_setup(**env)
    from annotation.models import Response, Study

    if not Study.objects.filter(name=paper_scale.STUDY).exists():
        start = time.perf_counter()
        n = paper_scale.synthesize(db=args.db, conversations=args.conversations)
        print(f"built the study: {n:,} scores in {time.perf_counter() - start:.0f} s")
    if args.runs == 0:
        return
    study = Study.objects.get(name=paper_scale.STUDY)
    n_responses = Response.objects.filter(conversation__study=study).count()
    releases, exports = [], []
    size_mb = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "release"
        release = [sys.executable, "manage.py", "release_study", "--study", study.name]
        export = [sys.executable, "manage.py", "export_ratings", "--study", study.name]
        export += ["--out", str(Path(tmp) / "scores.csv")]
        for _ in range(args.runs):
            shutil.rmtree(out, ignore_errors=True)
            releases.append(harness.run_with_peak_rss([*release, "--out", str(out)], env))
            exports.append(harness.run_with_peak_rss(export, env))
        size_mb = sum(p.stat().st_size for p in out.iterdir()) / 1e6
    wall = statistics.median(w for w, _ in releases)
    export_wall = statistics.median(w for w, _ in exports)
    print(
        f"release_study, {n_responses:,} responses ({size_mb:.0f} MB): median {wall:.2f} s "
        f"(runs {', '.join(f'{w:.2f}' for w, _ in releases)}), peak RSS "
        f"{max(r for _, r in releases):.0f} MB\n"
        f"export_ratings of the same study: median {export_wall:.2f} s "
        f"(runs {', '.join(f'{w:.2f}' for w, _ in exports)}), peak RSS "
        f"{max(r for _, r in exports):.0f} MB; release / export {wall / export_wall:.1f}×; "
        f"{harness.load()}"
    )


if __name__ == "__main__":
    main()
