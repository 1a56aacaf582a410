"""Time the in-memory judge-assisted table on an imported study (MentalAlign-70k by default).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/DB \\
        .venv/bin/python -m benchmarks.judge_assisted_speed [--study NAME] [--runs 9]

Loads the study's scores once (the database read is not timed), factorises them once into
integer codes (timed separately: the selector does it once per request), then times the
in-memory path — Y/f arrays for the chosen judges and the means table for every responder ×
attribute — for each judge alone and for all judges together; also the paired differences and
ranking, and the old path from the string frame. Prints medians over ``--runs`` and the
machine's load average before and after. Figures in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse

from benchmarks import harness


def _median(fn, runs: int) -> tuple[float, float]:
    fn()  # warm caches (imports, first-call allocations)
    timing = harness.median_of(fn, runs)
    return timing.median, min(timing.runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="MentalAlign-70k")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    harness.django_setup()
    from analysis.judge_assisted import estimator
    from analysis.judge_assisted.selectors import judge_names
    from analysis.selectors import Filters, attribute_names, exclusions_for, scores_frame
    from annotation.models import Study

    study = Study.objects.get(name=args.study)
    attributes = attribute_names(study=study)
    judges = judge_names(study=study)
    exclusions = exclusions_for(study=study)
    frame = scores_frame(study=study, filters=Filters(judges=tuple(judges)))
    print(f"before: {harness.load()}")
    print(f"study {study.name!r}: {len(frame):,} scores, "
          f"{frame.conversation.nunique():,} conversations, {frame.responder.nunique()} "
          f"responders, {len(attributes)} attributes, judges {', '.join(judges)}\n")  # fmt: skip

    med, best = _median(lambda: estimator.score_codes(frame), args.runs)
    print(f"factorise the frame once (score_codes): median {med:.3f} s, fastest {best:.3f} s")
    codes = estimator.score_codes(frame)

    def table(source, chosen):
        arrays = estimator.cell_arrays(
            source, judges=chosen, attributes=attributes, exclusions=exclusions
        )
        return estimator.means_table(arrays, judges=chosen, attributes=attributes)

    def everything(chosen):
        arrays = estimator.cell_arrays(
            codes, judges=chosen, attributes=attributes, exclusions=exclusions
        )
        means = estimator.means_table(arrays, judges=chosen, attributes=attributes)
        diffs = estimator.differences_table(arrays, judges=chosen, attributes=attributes)
        return estimator.ranking_table(means, diffs)

    print("\n| judges | cells | means table from codes | from the string frame "
          "| means + differences + ranking |")  # fmt: skip
    print("|---|---|---|---|---|")
    for chosen in [*([j] for j in judges), judges]:
        cells = len(table(codes, chosen))
        fast, fast_best = _median(lambda c=chosen: table(codes, c), args.runs)
        slow, _ = _median(lambda c=chosen: table(frame, c), args.runs)
        full, _ = _median(lambda c=chosen: everything(c), args.runs)
        print(f"| {' + '.join(chosen)} | {cells} | {fast:.3f} s (fastest {fast_best:.3f}) "
              f"| {slow:.3f} s | {full:.3f} s |")  # fmt: skip
    print(f"\nafter: {harness.load()}")


if __name__ == "__main__":
    main()
