"""How often the judge-reliability ICC intervals hold, by simulation with the shipped code.

    .venv/bin/python -m benchmarks.icc_coverage [--datasets 400] [--boot 500] [--seed 0]

Two questions, both answered with analysis.stats' own bootstraps (no second implementation):

1. **The fewest responders** (analysis.reports.MIN_RESPONDERS). Responder-level means of the
   clinicians and the judge drawn from a bivariate normal whose ICC(C,1) is 0.3, 0.6 or 0.9; the
   paper's percentile bootstrap over responders (``bootstrap_icc_ci``); coverage of the true
   ICC by n = 3 … 30 responders.
2. **The crossed design.** Every responder answers the same conversations, so a conversation's
   difficulty shifts all responders alike. Data as MentalAlign-70k is shaped: ten responders
   whose true means spread with SD 0.5, conversations with a shared effect (SD 0.5) and noise
   (SD 0.9) per response, a judge that follows the responders' quality with slope 0.8, a
   responder-specific disagreement (SD 0.2) and its own noise. The estimand is the ICC(C,1) of
   the responders' true means (what the reliability report claims). Three intervals: the
   paper's (responders only, ``bootstrap_icc_ci``), the reliability report's ``--two-stage``
   (``bootstrap_icc_ci_two_stage``: responders, then one draw of conversation ids shared by
   every responder), and, written here for comparison, the two-stage bootstrap as the report
   drew it before (each drawn responder's conversations drawn independently).

Prints two markdown tables (docs/analysis.md, "When an ICC is estimable").
"""

from __future__ import annotations

import argparse
import time

import numpy as np

N_RESPONDERS = (3, 4, 5, 6, 8, 10, 15, 20, 30)
ICCS = (0.3, 0.6, 0.9)


def responder_minimum(datasets: int, boot: int, seed: int) -> str:
    from analysis import stats

    rng = np.random.default_rng(seed)
    lines = ["| true ICC(C,1) | " + " | ".join(f"n = {n}" for n in N_RESPONDERS) + " |"]
    lines.append("|---|" + "---|" * len(N_RESPONDERS))
    for rho in ICCS:
        cells = []
        for n in N_RESPONDERS:
            hits = 0
            for d in range(datasets):
                h = rng.normal(0, 1, n)
                j = rho * h + np.sqrt(1 - rho**2) * rng.normal(0, 1, n) + 0.3
                ci = stats.bootstrap_icc_ci(np.column_stack([h, j]), n_boot=boot, seed=d)
                hits += bool(ci.ci_low <= rho <= ci.ci_high)
            cells.append(f"{hits / datasets:.2f}")
        lines.append(f"| {rho} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _per_responder_two_stage(h: np.ndarray, j: np.ndarray, boot: int, rng: np.random.Generator):
    """The earlier two-stage bootstrap, for comparison: responders with replacement, then each
    drawn responder's conversations drawn on their own."""
    from analysis import stats

    n, m = h.shape
    who = rng.integers(0, n, size=(boot, n))
    conv = rng.integers(0, m, size=(boot, n, m))
    mh = np.take_along_axis(h[who], conv, -1).mean(axis=-1)
    mj = np.take_along_axis(j[who], conv, -1).mean(axis=-1)
    c1, _ = stats.icc_batch(np.stack([mh, mj], axis=-1))
    ok = c1[np.isfinite(c1)]
    return np.quantile(ok, [0.025, 0.975])


def crossed_design(datasets: int, boot: int, seed: int, conversations: int) -> dict[str, float]:
    from analysis import stats

    rng = np.random.default_rng(seed)
    n, slope, sd_mu, sd_gamma = 10, 0.8, 0.5, 0.2
    truth = 2 * slope * sd_mu**2 / (sd_mu**2 * (1 + slope**2) + sd_gamma**2)
    hits = {"responders": 0, "two-stage (crossed)": 0, "two-stage per responder (before)": 0}
    widths: dict[str, list[float]] = {k: [] for k in hits}
    for d in range(datasets):
        mu = rng.normal(3.5, sd_mu, n)
        gamma = rng.normal(0, sd_gamma, n)
        shared = rng.normal(0, 0.5, conversations)
        h = mu[:, None] + shared[None, :] + rng.normal(0, 0.9, (n, conversations))
        j = (
            1.0
            + slope * mu[:, None]
            + gamma[:, None]
            + 0.6 * shared[None, :]
            + rng.normal(0, 0.7, (n, conversations))
        )
        means = np.column_stack([h.mean(axis=1), j.mean(axis=1)])
        found = {
            "responders": stats.bootstrap_icc_ci(means, n_boot=boot, seed=d),
            "two-stage (crossed)": stats.bootstrap_icc_ci_two_stage(h, j, n_boot=boot, seed=d),
        }
        for name, ci in found.items():
            hits[name] += bool(ci.ci_low <= truth <= ci.ci_high)
            widths[name].append(ci.ci_width)
        low, high = _per_responder_two_stage(h, j, boot, np.random.default_rng([seed, d]))
        hits["two-stage per responder (before)"] += bool(low <= truth <= high)
        widths["two-stage per responder (before)"].append(high - low)
    return {
        **{f"{k} coverage": v / datasets for k, v in hits.items()},
        **{f"{k} width": float(np.median(v)) for k, v in widths.items()},
        "truth": truth,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", type=int, default=400)
    parser.add_argument("--boot", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    t0 = time.perf_counter()
    print(f"Coverage of the 95 % bootstrap interval of ICC(C,1) over responders, {args.datasets}")
    print(f"datasets per cell, {args.boot} resamples each:\n")
    print(responder_minimum(args.datasets, args.boot, args.seed))
    print("\nThe crossed design, ten responders (true ICC(C,1) of their means in the header):\n")
    rows = {m: crossed_design(args.datasets, args.boot, args.seed, m) for m in (50, 200)}
    truth = next(iter(rows.values()))["truth"]
    print(f"| interval (true ICC {truth:.3f}) | " + " | ".join(
        f"{m} conversations: coverage | median width" for m in rows
    ) + " |")  # fmt: skip
    print("|---|" + "---|---|" * len(rows))
    for name in ("responders", "two-stage (crossed)", "two-stage per responder (before)"):
        cells = " | ".join(
            f"{r[f'{name} coverage']:.3f} | {r[f'{name} width']:.3f}" for r in rows.values()
        )
        print(f"| {name} | {cells} |")
    print(f"\n({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
