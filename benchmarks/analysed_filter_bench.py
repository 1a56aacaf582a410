"""What the "study data only" rule (annotation/analysed.py) costs the analysis selector and the
long export: each timed with the rule and with it replaced by an empty filter, interleaved in
the same run, on report_bench's synthetic 357,000-score study.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m benchmarks.analysed_filter_bench [--runs 7] [--db NAME] [--keep]
"""

import argparse
import os
import statistics
import sys
import time

from benchmarks import report_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--db", default="mentalbench_bench_analysed")
    parser.add_argument("--keep", action="store_true", help="reuse an existing benchmark db")
    args = parser.parse_args()
    report_bench.DB = args.db
    if not args.keep:
        report_bench.fresh_db()
    os.environ.update(report_bench.env())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mentalbench.settings")
    sys.path.insert(0, str(report_bench.ROOT))
    import django

    django.setup()
    from django.db.models import Q

    import analysis.export as export
    import analysis.selectors as selectors
    from annotation.models import Study

    if not Study.objects.filter(name=report_bench.STUDY).exists():
        print(f"synthesized {report_bench.synthesize(1000)} scores")
    study = Study.objects.get(name=report_bench.STUDY)
    rule = selectors.analysed_ratings_q

    def no_rule(prefix: str = "", **_) -> Q:
        return Q()

    def use(q) -> None:
        selectors.analysed_ratings_q = export.analysed_ratings_q = q

    cases = {
        "selector: one query → long DataFrame": lambda: selectors.scores_frame(study=study),
        "long CSV export, in-process": lambda: sum(len(c) for c in export.long_csv(study=study)),
    }
    for name, run in cases.items():
        timed: dict[str, list[float]] = {"rule": [], "none": []}
        for _ in range(args.runs):
            for key, q in (("rule", rule), ("none", no_rule)):
                use(q)
                start = time.perf_counter()
                run()
                timed[key].append(time.perf_counter() - start)
        use(rule)
        with_rule, without = statistics.median(timed["rule"]), statistics.median(timed["none"])
        print(
            f"{name}: with the rule {with_rule:.3f} s, without {without:.3f} s, "
            f"ratio {with_rule / without:.2f}; runs {[round(t, 2) for t in timed['rule']]} / "
            f"{[round(t, 2) for t in timed['none']]}"
        )
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
