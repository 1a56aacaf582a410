"""How well the planner's projections hold on MentalAlign-70k (figures in docs/judge-assisted.md).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/DB \\
        .venv/bin/python -m benchmarks.planner_validation [--study NAME] [--reps 3] [--seed 0]

Every check predicts from a subsample of the released data and compares with what a bigger
subsample realises; clinicians rated every conversation, so the realised figure is known:

1. Means (``planner_table``): from a uniformly random pilot of 100 labelled conversations, the
   labelled conversations needed for a target half-width, clinician-only and with the judges;
   then the half-width realised when that many (the pilot first) are labelled. Ratio
   predicted ÷ realised per responder × attribute.
2. The conversations lever (``icc_lever``): the ICC(C,1) CI width projected with c× the
   conversations from m of them, against the width the same bootstrap gives on c·m.
3. The responders lever: from k responders, the projected width with 2k and its 95 % range,
   against the width realised with those k and k others (all responders where fewer are left).
   How often the range holds the realised width, and the spread of the single projected width,
   for k = 3, 4, 5 (with at most 10 responders, 5 is the largest k that can be checked).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
import pandas as pd

from benchmarks import harness


def _wide(arrays, attribute: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(responders, conversations) human and judge scores of one attribute, and the ids."""
    y = arrays.y.xs(attribute, level="attribute")
    f = arrays.f.xs(attribute, level="attribute")
    return y.to_numpy(float).T, f.to_numpy(float).T, y.index.to_numpy()


def means_ratios(
    codes, *, judges: Sequence[str], attributes: list[str], exclusions, conversations: list[str],
    pilot: int, target: float, rng: np.random.Generator,
) -> pd.DataFrame:  # fmt: skip
    """Predicted ÷ realised half-width per cell and method, for one random labelling order."""
    from analysis.judge_assisted import estimator
    from analysis.planner import planner_table
    from analysis.ppi import z_value

    order = list(rng.permutation(conversations))

    def means(n: int) -> pd.DataFrame:
        arrays = estimator.cell_arrays(
            codes, judges=judges, attributes=attributes, exclusions=exclusions,
            labelled=order[:n],
        )  # fmt: skip
        return estimator.means_table(arrays, judges=judges, attributes=attributes)

    plan = planner_table(means(pilot), target_half_width=target)
    z = z_value(0.05)
    rows = []
    realised: dict[int, pd.DataFrame] = {}
    for method, column, width, se in [
        ("clinician-only", "needed_clinician_only", "half_width_clinician_only",
         "clinician_only_se"),
        ("judge-assisted", "needed_judge_assisted", "half_width_judge_assisted", "se"),
    ]:  # fmt: skip
        for cell in plan.to_dict("records"):
            n = int(cell[column])
            if not 10 <= n <= len(order) // 2:  # leave room for unlabelled conversations
                continue
            if n not in realised:
                realised[n] = means(n).set_index(["responder", "attribute"])
            got = realised[n].loc[(cell["responder"], cell["attribute"])]
            rows.append(
                {
                    "method": method, "responder": cell["responder"],
                    "attribute": cell["attribute"], "n": n,
                    # The planner's model: the pilot's half-width scaled by √(n_pilot / n).
                    "predicted": cell[width] * np.sqrt(cell["n_labelled"] / n),
                    "realised": z * got[se],
                }
            )  # fmt: skip
    out = pd.DataFrame(rows)
    out["ratio"] = out["predicted"] / out["realised"]
    return out


def conversation_lever_ratios(
    arrays, *, attributes: list[str], small: int, factor: float, n_boot: int,
    rng: np.random.Generator,
) -> list[float]:  # fmt: skip
    """Per attribute: width projected with ``factor`` × ``small`` conversations ÷ width of the
    same bootstrap on that many (the small subsample first)."""
    from analysis.planner import icc_lever

    ratios = []
    for attribute in attributes:
        h, j, _ = _wide(arrays, attribute)
        order = rng.permutation(h.shape[1])
        few, many = order[:small], order[: int(round(factor * small))]
        seed = int(rng.integers(2**31))
        projected = icc_lever(h[:, few], j[:, few], factor=factor, n_boot=n_boot, seed=seed,
                              min_responders=h.shape[0] + 1)  # fmt: skip
        realised = icc_lever(h[:, many], j[:, many], n_boot=n_boot, seed=seed + 1,
                             min_responders=h.shape[0] + 1)  # fmt: skip
        ratios.append(projected.width_more_conversations / realised.width_now)
    return ratios


def responder_lever_checks(
    arrays, *, attributes: list[str], k: int, n_boot: int, rng: np.random.Generator
) -> list[tuple[float, bool]]:
    """Per attribute, for one random set of ``k`` responders: (projected ÷ realised width,
    whether the projection's 95 % range holds the realised width)."""
    from analysis.planner import icc_lever

    out = []
    for attribute in attributes:
        h, j, _ = _wide(arrays, attribute)
        have = np.flatnonzero((np.isfinite(h) & np.isfinite(j)).any(axis=1))
        order = rng.permutation(have)
        few, many = order[:k], order[: 2 * k]
        seed = int(rng.integers(2**31))
        lever = icc_lever(h[few], j[few], factor=many.size / k, n_boot=n_boot, seed=seed,
                          min_responders=3)  # fmt: skip
        realised = icc_lever(h[many], j[many], n_boot=n_boot, seed=seed + 1).width_now
        held = lever.width_more_responders_low <= realised <= lever.width_more_responders_high
        out.append((lever.width_more_responders / realised, bool(held)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="MentalAlign-70k")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    harness.django_setup()
    from analysis.judge_assisted.estimator import cell_arrays
    from analysis.judge_assisted.selectors import judge_assisted_codes, judge_names
    from analysis.selectors import attribute_names, exclusions_for
    from annotation.models import Study

    t0 = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    study = Study.objects.get(name=args.study)
    attributes = attribute_names(study=study)
    exclusions = exclusions_for(study=study)
    judges = judge_names(study=study)
    codes = judge_assisted_codes(study=study, judges=judges)
    choices = [(j,) for j in judges] + ([tuple(judges)] if len(judges) > 1 else [])
    print(f"before: {harness.load()}")

    print("\n1. Means planner: predicted ÷ realised half-width (pilot 100, target 0.12)\n")
    print("| judges | method | cells | median | 10th–90th percentile |")
    print("|---|---|---|---|---|")
    for chosen in choices:
        frames = [
            means_ratios(
                codes,
                judges=chosen,
                attributes=attributes,
                exclusions=exclusions,
                conversations=list(codes.conversations),
                pilot=100,
                target=0.12,
                rng=rng,
            )  # fmt: skip
            for _ in range(args.reps)
        ]
        ratios = pd.concat(frames)
        for method, sel in ratios.groupby("method"):
            r = sel["ratio"].to_numpy()
            print(f"| {' + '.join(chosen)} | {method} | {r.size} | {np.median(r):.3f} "
                  f"| {np.quantile(r, 0.1):.2f}–{np.quantile(r, 0.9):.2f} |")  # fmt: skip

    print("\n2. Conversations lever: projected ÷ realised ICC(C,1) CI width\n")
    print("| from → to conversations | cells | median | 10th–90th percentile |")
    print("|---|---|---|---|")
    arrays_by = {
        chosen: cell_arrays(codes, judges=chosen, attributes=attributes, exclusions=exclusions)
        for chosen in choices
    }
    for small, factor in [(100, 2.0), (100, 5.0), (200, 2.0), (200, 5.0), (500, 2.0)]:
        r = np.array([
            x
            for chosen in choices
            for _ in range(args.reps)
            for x in conversation_lever_ratios(arrays_by[chosen], attributes=attributes,
                                               small=small, factor=factor,
                                               n_boot=args.n_boot, rng=rng)
        ])  # fmt: skip
        print(f"| {small} → {int(small * factor)} | {r.size} | {np.median(r):.3f} "
              f"| {np.quantile(r, 0.1):.2f}–{np.quantile(r, 0.9):.2f} |")  # fmt: skip

    print("\n3. Responders lever: from k responders to 2k (fewer where fewer are left)\n")
    print("| k | cells | range holds the realised width | projected ÷ realised: median "
          "| 5th–95th percentile |")  # fmt: skip
    print("|---|---|---|---|---|")
    for k in (3, 4, 5):
        checks = [
            c
            for chosen in choices
            for _ in range(args.reps)
            for c in responder_lever_checks(arrays_by[chosen], attributes=attributes, k=k,
                                            n_boot=args.n_boot, rng=rng)
        ]  # fmt: skip
        r = np.array([c[0] for c in checks])
        r = r[np.isfinite(r)]
        held = np.mean([c[1] for c in checks])
        print(f"| {k} | {len(checks)} | {held:.2f} | {np.median(r):.2f} "
              f"| {np.quantile(r, 0.05):.2f}–{np.quantile(r, 0.95):.2f} |")  # fmt: skip
    print(f"\nafter: {harness.load()}; {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
