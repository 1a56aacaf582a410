"""Validate the judge-assisted (PPI++) intervals on MentalAlign-70k, where clinicians rated every
conversation, so the full-data clinician mean of each responder × attribute is known.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \\
        .venv/bin/python -m benchmarks.judge_assisted_validation [--replicates 200] [--seed 0]

Imports the released workbooks (../shared/data/mentalalign70k or $MENTALBENCH_SHARED) into a
fresh database (mentalbench_bench_ppi, dropped and recreated), loads Y/f through the same
selector as `manage.py judge_assisted`, then for each judge choice (each judge alone, all
judges) and budget (5, 10, 20, 50 % of conversations labelled uniformly at random), per
replicate: PPI++ and clinician-only 95 % CIs for every responder × attribute, checked against
the clinician mean over all conversations of that cell. Prints a Markdown table and writes
docs/judge-assisted-validation.png. See docs/judge-assisted.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.databases import database_env, database_recreate

ROOT = Path(__file__).resolve().parents[1]
DB = "mentalbench_bench_ppi"
STUDY = "MentalAlign-70k"
BUDGETS = (0.05, 0.10, 0.20, 0.50)
#: Seconds spent in the PPI++ and in the cross-fitted replicates (the speed target is PPI++).
SPENT = {"ppi": 0.0, "crossfit": 0.0}
FIGURE = ROOT / "docs" / "judge-assisted-validation.png"


def env() -> dict:
    return database_env(DB)


def import_study(data: Path) -> None:
    database_recreate(DB)
    run = {"cwd": ROOT, "env": env(), "check": True}
    subprocess.run(
        [
            sys.executable, "manage.py", "import_mentalalign", "--study", STUDY,
            "--human", str(data / "Human_judge.xlsx"),
            "--judge", f"claude-3.7-sonnet={data / 'claude_llm_judge.xlsx'}",
            "--judge", f"gpt-4o={data / 'gpt-4o_llm_judge.xlsx'}",
        ],
        stdout=subprocess.DEVNULL,
        **run,
    )  # fmt: skip


def run_validation(arrays, attributes, reps: int, seed: int, features=None) -> list[dict]:
    """``features`` (rows, responders, p), when given, adds the cross-fitted predictor."""
    import pandas as pd

    from analysis import ppi

    y = arrays.y.to_numpy(dtype=float)
    f = arrays.f.to_numpy(dtype=float)
    n_rows, n_r = y.shape
    conv_code, conv_uni = pd.factorize(arrays.y.index.get_level_values("conversation"))
    attr_idx = pd.Index(attributes).get_indexer(arrays.y.index.get_level_values("attribute"))
    n_cells = len(attributes) * n_r
    cell = (attr_idx[:, None] * n_r + np.arange(n_r)[None, :]).ravel()
    ok = (np.isfinite(y) & np.isfinite(f)).ravel()
    yv, fv, cv = y.ravel()[ok], f.ravel()[ok], cell[ok]
    xv = None if features is None else features.reshape(n_rows * n_r, -1)[ok]
    conv_obs = np.repeat(conv_code, n_r)[ok]
    truth = np.bincount(cv, weights=yv, minlength=n_cells) / np.maximum(
        np.bincount(cv, minlength=n_cells), 1
    )
    present = np.bincount(cv, minlength=n_cells) > 0
    rng = np.random.default_rng(seed)
    out = []
    chunk = 25
    for budget in BUDGETS:
        k = int(round(budget * len(conv_uni)))
        cover_p, cover_c, ratio, cover_x, ratio_x = [], [], [], [], []
        for start in range(0, reps, chunk):
            m = min(chunk, reps - start)
            # m independent uniform samples of k conversations, as an (m, n_conv) mask
            keys = rng.random((m, len(conv_uni)))
            labelled = keys <= np.sort(keys, axis=1)[:, [k - 1]]
            t0 = time.perf_counter()
            lab = labelled[:, conv_obs]  # (m, n_obs)
            rep = np.broadcast_to(np.arange(m)[:, None], lab.shape)
            big_cell = rep * n_cells + cv[None, :]
            est = ppi.ppi_mean_cells(
                y=np.broadcast_to(yv, lab.shape)[lab],
                f=np.broadcast_to(fv, lab.shape)[lab],
                cell=big_cell[lab],
                f_unlabelled=np.broadcast_to(fv, lab.shape)[~lab],
                cell_unlabelled=big_cell[~lab],
                n_cells=m * n_cells,
                alpha=0.05,
            )
            t = np.tile(truth, m)
            keep = np.tile(present, m) & np.isfinite(est.estimate)
            cover_p.append(((est.ci_low <= t) & (t <= est.ci_high))[keep])
            cover_c.append(
                ((est.clinician_only_ci_low <= t) & (t <= est.clinician_only_ci_high))[keep]
            )
            ratio.append(est.width_ratio[keep])
            SPENT["ppi"] += time.perf_counter() - t0
            t0 = time.perf_counter()
            if xv is not None:
                folds = rng.integers(0, 5, size=(m, len(conv_uni)))[:, conv_obs]
                xb = np.broadcast_to(xv, (*lab.shape, xv.shape[1]))
                cross = ppi.crossppi_mean_cells(
                    y=np.broadcast_to(yv, lab.shape)[lab], x=xb[lab], cell=big_cell[lab],
                    fold=folds[lab], x_unlabelled=xb[~lab], cell_unlabelled=big_cell[~lab],
                    n_cells=m * n_cells, n_folds=5, alpha=0.05,
                )  # fmt: skip
                kx = np.tile(present, m) & np.isfinite(cross.estimate)
                cover_x.append(((cross.ci_low <= t) & (t <= cross.ci_high))[kx])
                with np.errstate(invalid="ignore", divide="ignore"):
                    ratio_x.append((cross.se / est.clinician_only_se)[kx])
            SPENT["crossfit"] += time.perf_counter() - t0
        r = np.concatenate(ratio)
        out.append(
            {
                "budget": budget,
                "n_labelled": k,
                "coverage_ppi": float(np.concatenate(cover_p).mean()),
                "coverage_clinician_only": float(np.concatenate(cover_c).mean()),
                "median_width_ratio": float(np.nanmedian(r)),
                "ratings_saved_median": float(np.nanmedian(1 - r**2)),
                "cells": int(r.size),
            }
        )
        if xv is not None:
            rx = np.concatenate(ratio_x)
            out[-1].update(
                coverage_crossfit=float(np.concatenate(cover_x).mean()),
                crossfit_width_ratio=float(np.nanmedian(rx)),
                crossfit_ratings_saved=float(np.nanmedian(1 - rx**2)),
            )
    return out


def active_vs_uniform(arrays, attributes, disagreement, reps: int, seed: int) -> list[dict]:
    """Active inference (Zrnic & Candès, ICML 2024) against uniform sampling at the same
    expected budget, both with the same inverse-probability-weighted, power-tuned estimator:
    θ̂ = mean_i[λ f_i + (Y_i − λ f_i) ξ_i / π_i] over every conversation i of a cell, ξ_i ~
    Bernoulli(π_i); uniform π_i = n/M, active π_i ∝ the judges' disagreement on conversation i
    (mean |f_claude − f_gpt| over its cells, plus a floor of a fifth of its mean), capped at 1.
    λ minimises the estimated variance, clipped to [0, 1]; se² = var₀(terms)/M — all in
    ``analysis.ppi.ipw_mean_cells``."""
    import pandas as pd

    from analysis import ppi

    y = arrays.y.to_numpy(dtype=float)
    f = arrays.f.to_numpy(dtype=float)
    n_rows, n_r = y.shape
    conv_code, conv_uni = pd.factorize(arrays.y.index.get_level_values("conversation"))
    attr_idx = pd.Index(attributes).get_indexer(arrays.y.index.get_level_values("attribute"))
    n_cells = len(attributes) * n_r
    cell = (attr_idx[:, None] * n_r + np.arange(n_r)[None, :]).ravel()
    ok = (np.isfinite(y) & np.isfinite(f)).ravel()
    yv, fv, cv = y.ravel()[ok], f.ravel()[ok], cell[ok]
    conv_obs = np.repeat(conv_code, n_r)[ok]
    count = np.bincount(cv, minlength=n_cells)
    truth = np.bincount(cv, weights=yv, minlength=n_cells) / np.maximum(count, 1)
    big_m = len(conv_uni)
    d = np.bincount(conv_obs, weights=disagreement.ravel()[ok], minlength=big_m) / np.maximum(
        np.bincount(conv_obs, minlength=big_m), 1
    )
    score = d + 0.2 * d.mean()
    rng = np.random.default_rng(seed)
    out = []
    for budget in BUDGETS:
        n = budget * big_m
        pis = {"uniform": np.full(big_m, budget)}
        # Scale so that Σπ = n with the cap at 1 (a few fixed-point passes suffice).
        c = n / score.sum()
        for _ in range(50):
            c *= n / np.minimum(c * score, 1).sum()
        pis["active"] = np.minimum(c * score, 1)
        for name, pi in pis.items():
            cover, width = [], []
            for _ in range(reps):
                xi = rng.random(big_m) < pi
                est = ppi.ipw_mean_cells(
                    y=yv, f=fv, labelled=xi[conv_obs], pi=pi[conv_obs], cell=cv,
                    n_cells=n_cells, alpha=0.05,
                )  # fmt: skip
                keep = (count > 0) & np.isfinite(est.estimate)
                cover.append(((est.ci_low <= truth) & (truth <= est.ci_high))[keep])
                width.append((est.ci_high - est.ci_low)[keep])
            out.append(
                {
                    "budget": budget,
                    "design": name,
                    "coverage": float(np.concatenate(cover).mean()),
                    "median_width": float(np.median(np.concatenate(width))),
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-import", action="store_true", help="reuse the database")
    args = parser.parse_args()
    shared = Path(os.environ.get("MENTALBENCH_SHARED", ROOT.parent / "shared"))
    data = shared / "data" / "mentalalign70k"
    if not args.skip_import:
        import_study(data)
    os.environ.update(env())
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mentalbench.settings")
    import django

    django.setup()
    from analysis import judge_assisted
    from analysis.judge_assisted_selectors import judge_assisted_arrays
    from analysis.selectors import Filters, attribute_names, exclusions_for, scores_frame
    from annotation.models import Study

    study = Study.objects.get(name=STUDY)
    attributes = attribute_names(study=study)
    choices = [("gpt-4o",), ("claude-3.7-sonnet",), ("claude-3.7-sonnet", "gpt-4o")]

    # In-memory speed: every responder × attribute for the chosen judges from the scores,
    # factorised once into integer codes (benchmarks/judge_assisted_speed.py has the details).
    codes = judge_assisted.score_codes(
        scores_frame(study=study, filters=Filters(judges=choices[-1]))
    )
    exclusions = exclusions_for(study=study)  # a database read: not part of the timing
    timings = []
    for _ in range(5):
        t0 = time.perf_counter()
        arrays = judge_assisted.cell_arrays(
            codes, judges=choices[-1], attributes=attributes, exclusions=exclusions
        )
        judge_assisted.means_table(arrays, judges=choices[-1], attributes=attributes)
        timings.append(time.perf_counter() - t0)
    print(f"in-memory table, 2 judges × 10 responders × 7 attributes × 1,000 conversations: "
          f"median {np.median(timings):.3f} s over 5 runs")  # fmt: skip

    rows = []
    t0 = time.perf_counter()
    for judges in choices:
        arrays = judge_assisted_arrays(study=study, judges=judges)
        features = None
        if len(judges) > 1:
            # Cross-fitted predictor's features: the judges' mean and each judge's deviation
            # from it (0 where a self-exclusion leaves that judge out).
            mean = arrays.f.to_numpy(dtype=float)
            parts = [mean]
            for judge in judges:
                one = judge_assisted_arrays(study=study, judges=(judge,))
                dev = one.f.reindex_like(arrays.f).to_numpy(dtype=float) - mean
                parts.append(np.where(np.isfinite(dev), dev, 0.0))
            features = np.stack(parts, axis=-1)
        for row in run_validation(arrays, attributes, args.replicates, args.seed, features):
            rows.append({"judges": " + ".join(judges), **row})
        if features is not None:
            disagreement = np.abs(features[..., 1] - features[..., 2])
            active = active_vs_uniform(arrays, attributes, disagreement, args.replicates, args.seed)
    elapsed = time.perf_counter() - t0
    print(f"\n{args.replicates} replicates × {len(BUDGETS)} budgets × {len(choices)} judge "
          f"choices: {elapsed:.1f} s in all (loading included), of which PPI++ replicates "
          f"{SPENT['ppi']:.1f} s, cross-fitted replicates {SPENT['crossfit']:.1f} s\n")  # fmt: skip
    print("| judges | labelled | coverage PPI++ | coverage clinician-only | median width ratio "
          "| median ratings saved |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['judges']} | {r['budget']:.0%} ({r['n_labelled']}) | {r['coverage_ppi']:.3f} "
            f"| {r['coverage_clinician_only']:.3f} | {r['median_width_ratio']:.4f} "
            f"| {r['ratings_saved_median']:.1%} |"
        )
    cross = [r for r in rows if "coverage_crossfit" in r]
    if cross:
        print("\nCross-fitted linear predictor from both judges (5 folds), same replicates:\n")
        print("| labelled | coverage | median width ratio | median ratings saved |")
        print("|---|---|---|---|")
        for r in cross:
            print(
                f"| {r['budget']:.0%} | {r['coverage_crossfit']:.3f} "
                f"| {r['crossfit_width_ratio']:.4f} | {r['crossfit_ratings_saved']:.1%} |"
            )
    print("\nActive selection vs uniform sampling (IPW estimator, both judges):\n")
    print("| labelled (expected) | design | coverage | median CI width |")
    print("|---|---|---|---|")
    for r in active:
        print(
            f"| {r['budget']:.0%} | {r['design']} | {r['coverage']:.3f} | {r['median_width']:.4f} |"
        )
    figure(rows)

    # The ICC lever per judge × attribute: which lever narrows the reliability interval.
    from analysis.planner import icc_lever

    print("\n| judge | attribute | ICC(C,1) | CI width now | 2× conversations | 2× responders |")
    print("|---|---|---|---|---|---|")
    verdicts = []
    for (judge,) in choices[:2]:
        arrays = judge_assisted_arrays(study=study, judges=(judge,))
        for attribute in attributes:
            sub = (
                arrays.y.xs(attribute, level="attribute"),
                arrays.f.xs(attribute, level="attribute"),
            )
            lever = icc_lever(
                sub[0].to_numpy().T, sub[1].to_numpy().T, seed=args.seed,
                label=f"{attribute} for {judge}",
            )  # fmt: skip
            verdicts.append(lever.verdict)
            print(
                f"| {judge} | {attribute} | {lever.icc_c1:.3f} | {lever.width_now:.2f} "
                f"| {lever.width_more_conversations:.2f} | {lever.width_more_responders:.2f} |"
            )
    print("\n" + "\n".join(f"- {v}" for v in verdicts))


def figure(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for judges in dict.fromkeys(r["judges"] for r in rows):
        sel = [r for r in rows if r["judges"] == judges]
        x = [100 * r["budget"] for r in sel]
        ax1.plot(x, [r["coverage_ppi"] for r in sel], marker="o", label=f"PPI++: {judges}")
        ax2.plot(x, [r["median_width_ratio"] for r in sel], marker="o", label=judges)
    sel = [r for r in rows if r["judges"] == rows[0]["judges"]]
    ax1.plot([100 * r["budget"] for r in sel], [r["coverage_clinician_only"] for r in sel],
             marker="s", color="grey", linestyle="--", label="clinician only")  # fmt: skip
    ax1.axhline(0.95, color="black", linewidth=0.8)
    ax1.set(xscale="log", xlabel="conversations labelled (%)", ylabel="coverage of full-data mean",
            title="Coverage of 95% CIs", ylim=(0.85, 1.0))  # fmt: skip
    ax2.axhline(1.0, color="black", linewidth=0.8)
    ax2.set(xscale="log", xlabel="conversations labelled (%)",
            ylabel="median width PPI++ / clinician-only", title="Interval width ratio")  # fmt: skip
    for ax in (ax1, ax2):
        ax.minorticks_off()
        ax.set_xticks([5, 10, 20, 50], labels=["5", "10", "20", "50"])
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(FIGURE, dpi=110)
    print(f"\nfigure: {FIGURE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
