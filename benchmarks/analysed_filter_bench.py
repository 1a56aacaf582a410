"""What the "study data only" rule (annotation/analysed.py) costs the analysis selector and the
long export: each timed with the rule and with it replaced by an empty filter (its floor),
alternated in the same run, on report_bench's synthetic 357,000-score study.

    .venv/bin/python -m benchmarks.analysed_filter_bench [--runs 7] [--db NAME] [--keep]
        [--conversations 1000]
"""

import argparse

from benchmarks import harness, report_bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--keep", action="store_true", help="reuse an existing benchmark db")
    harness.add_database_argument(parser, "mentalbench_bench_analysed")
    args = parser.parse_args()
    if not args.keep:
        harness.fresh_database(args.db)
    harness.django_setup(**harness.database_env(args.db))
    from django.db.models import Q

    from analysis import export, selectors
    from annotation.models import Study

    if not Study.objects.filter(name=report_bench.STUDY).exists():
        print(f"synthesized {report_bench.synthesize(args.conversations)} scores")
    study = Study.objects.get(name=report_bench.STUDY)
    rule = selectors.analysed_ratings_q

    def no_rule(prefix: str = "", **_) -> Q:
        return Q()

    def using(q, run):
        def timed() -> None:
            selectors.analysed_ratings_q = export.analysed_ratings_q = q
            run()

        return timed

    cases = {
        "selector: one query → long DataFrame": lambda: selectors.scores_frame(study=study),
        "long CSV export, in-process": lambda: sum(len(c) for c in export.long_csv(study=study)),
    }
    for name, run in cases.items():
        with_rule, without, ratio = harness.beside_floor(
            using(rule, run), using(no_rule, run), args.runs
        )
        selectors.analysed_ratings_q = export.analysed_ratings_q = rule
        print(f"{name}: with the rule {with_rule}; without {without}; ratio {ratio:.2f}")
    print(harness.load())


if __name__ == "__main__":
    main()
