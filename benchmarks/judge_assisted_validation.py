"""Validate the judge-assisted intervals on MentalAlign-70k with the shipped estimator.

    .venv/bin/python -m benchmarks.judge_assisted_validation [--replicates 300] [--seed 0]
        [--db NAME] [--skip-import] [--write-docs] [--experiments]

Imports the released workbooks ($MENTALBENCH_SHARED/data/mentalalign70k, every
``<judge>_llm_judge.xlsx`` found there) into a fresh database (mentalbench_bench_ppi or --db,
dropped and recreated), loads Y/f through the selector of `manage.py judge_assisted`
(``judge_assisted_arrays``) and, per replicate, replaces only the clinicians' sample before
calling the command's own table (``analysis.judge_assisted.estimator.means_table``): no second
implementation of the estimator. Clinicians rated every conversation, so the mean of every
clinician score of a responder × attribute (the command's own default-mode estimate) is the
truth each interval is checked against.

Designs, each judge alone and all judges together: 5, 10 and 20 % of *conversations* labelled
uniformly at random (every response of a drawn conversation), and 10 % of *ratings* (responses,
independently of conversations). Reports the coverage of the 95 % judge-assisted and
clinician-only intervals — bounded (the product's) and plain Student t — per cell, the worst
cell and how many fall below 0.93; ``--write-docs`` puts the tables into docs/judge-assisted.md
between its coverage markers. ``--experiments`` adds the earlier research runs (budgets 5–50 %,
the cross-fitted predictor, active selection, the ICC lever) and rewrites
docs/judge-assisted-validation.png. See docs/judge-assisted.md.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.harness import ROOT

STUDY = "MentalAlign-70k"
BUDGETS = (0.05, 0.10, 0.20, 0.50)
#: The clinician samples the per-cell coverage table is made at.
SHARES = (0.05, 0.10, 0.20)
#: Seconds spent in the PPI++ and in the cross-fitted replicates (the speed target is PPI++).
SPENT = {"ppi": 0.0, "crossfit": 0.0}
FIGURE = ROOT / "docs" / "judge-assisted-validation.png"


def judge_files(data: Path) -> dict[str, Path]:
    """Judge name -> workbook, for every judge workbook shipped beside the clinicians' one."""
    names = {"claude": "claude-3.7-sonnet", "gpt-4o": "gpt-4o"}
    found = {}
    for path in sorted(data.glob("*_llm_judge.xlsx")):
        stem = path.name.removesuffix("_llm_judge.xlsx")
        found[names.get(stem, stem)] = path
    return found


def import_study(db: str, data: Path) -> None:
    harness.fresh_database(db)
    run = {"cwd": ROOT, "env": harness.database_env(db), "check": True}
    judges = [
        arg for name, path in judge_files(data).items() for arg in ("--judge", f"{name}={path}")
    ]
    subprocess.run(
        [sys.executable, "manage.py", "import_mentalalign", "--study", STUDY,
         "--human", str(data / "Human_judge.xlsx"), *judges],
        stdout=subprocess.DEVNULL,
        **run,
    )  # fmt: skip


def shipped_coverage(arrays, attributes, judges, design: str, share: float, reps: int,
                     seed: int) -> dict:  # fmt: skip
    """Coverage of the command's intervals (bounded, the product's; and plain t for comparison)
    over ``reps`` samples of the given design and share, per cell; the estimator is
    ``estimator.means_table`` itself. The truth of a cell is the mean of every clinician
    score of it: the command's default-mode estimate on the full data."""
    import dataclasses

    import pandas as pd

    from analysis.judge_assisted import estimator

    full = estimator.means_table(arrays, judges=judges, attributes=attributes)
    truth = full.set_index(["responder", "attribute"])["clinician_only_estimate"]
    conversations = arrays.y.index.get_level_values("conversation")
    conv_code, conv_uni = pd.factorize(conversations)
    n_conv, n_r = len(conv_uni), arrays.y.shape[1]
    rng = np.random.default_rng(seed)
    hits: dict[str, list[pd.Series]] = {k: [] for k in ("bounded", "bounded_clin", "t", "t_clin")}
    ratios: dict[str, list[pd.Series]] = {"bounded": [], "t": [], "saved": []}
    for _ in range(reps):
        if design == "conversations":
            chosen = np.zeros(n_conv, dtype=bool)
            chosen[rng.choice(n_conv, size=round(share * n_conv), replace=False)] = True
            mask = chosen[conv_code]
        else:  # one response (conversation × responder) rated with all its attributes
            chosen = np.zeros(n_conv * n_r, dtype=bool)
            chosen[rng.choice(n_conv * n_r, size=round(share * n_conv * n_r), replace=False)] = True
            mask = chosen.reshape(n_conv, n_r)[conv_code]
        sample = dataclasses.replace(arrays, labelled=mask)
        widths = {}
        for interval in ("bounded", "t"):
            table = estimator.means_table(
                sample, judges=judges, attributes=attributes, interval=interval
            ).set_index(["responder", "attribute"])
            table = table[np.isfinite(table["estimate"])]
            t = truth.reindex(table.index)
            hits[interval].append((table.ci_low <= t) & (t <= table.ci_high))
            hits[f"{interval}_clin"].append(
                (table.clinician_only_ci_low <= t) & (t <= table.clinician_only_ci_high)
            )
            widths[interval] = table.ci_high - table.ci_low
            if interval == "bounded":
                ratios["saved"].append(table.ratings_saved)
        ratios["bounded"].append(widths["bounded"] / widths["t"])
    cover = {k: pd.concat(v, axis=1).mean(axis=1) for k, v in hits.items()}
    return {
        "cover": pd.DataFrame(cover),
        "widening": pd.concat(ratios["bounded"], axis=1).median(axis=1),
        "saved": pd.concat(ratios["saved"], axis=1).median(axis=1),
    }


def cell_table(results: dict, judges: str, shares: tuple[float, ...]) -> str:
    """Markdown: one row per cell, the coverage of the judge-assisted and clinician-only bounded
    intervals at each share (conversations design), for one judge choice."""
    head = " | ".join(
        f"{round(s * 100)} % judge-assisted | {round(s * 100)} % clinician-only" for s in shares
    )
    lines = [f"| responder | attribute | {head} |", "|---|---|" + "---|" * (2 * len(shares))]
    first = results[(judges, "conversations", shares[0])]["cover"]
    for responder, attribute in first.index:
        cells = []
        for share in shares:
            row = results[(judges, "conversations", share)]["cover"].loc[(responder, attribute)]
            cells += [f"{row.bounded:.3f}", f"{row.bounded_clin:.3f}"]
        lines.append(f"| {responder} | {attribute} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary_table(results: dict) -> str:
    """Markdown: per judge choice, design and share, the worst cell of each interval, the median
    widening of the bounded interval over plain t and the median ratings saved."""
    lines = [
        "| judges | labelled | worst cell, bounded (judge-assisted / clinician-only) "
        "| cells below 0.93, bounded | worst cell, plain t (judge-assisted / clinician-only) "
        "| median width, bounded ÷ t | median ratings saved |",
        "|---|---|---|---|---|---|---|",
    ]
    for (judges, design, share), res in results.items():
        c = res["cover"]
        below = int(((c.bounded < 0.93) | (c.bounded_clin < 0.93)).sum())
        lines.append(
            f"| {judges} | {round(share * 100)} % of {design} "
            f"| {c.bounded.min():.3f} / {c.bounded_clin.min():.3f} | {below} of {len(c)} "
            f"| {c.t.min():.3f} / {c.t_clin.min():.3f} | {res['widening'].median():.3f} "
            f"| {res['saved'].median():.1%} |"
        )
    return "\n".join(lines)


def write_docs(text: str) -> None:
    """Replace the generated section of docs/judge-assisted.md (between its markers)."""
    path = ROOT / "docs" / "judge-assisted.md"
    doc = path.read_text()
    start, end = "<!-- coverage:start -->", "<!-- coverage:end -->"
    before, rest = doc.split(start)
    _, after = rest.split(end)
    path.write_text(f"{before}{start}\n{text}\n{end}{after}")


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
    parser.add_argument("--replicates", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-import", action="store_true", help="reuse the database")
    parser.add_argument(
        "--write-docs", action="store_true", help="rewrite the tables in docs/judge-assisted.md"
    )
    parser.add_argument(
        "--experiments",
        action="store_true",
        help="also the research runs: budgets 5-50 %%, cross-fitting, active selection, ICC lever",
    )
    harness.add_database_argument(parser, "mentalbench_bench_ppi")
    args = parser.parse_args()
    if not args.skip_import:
        import_study(args.db, harness.mentalalign_data())
    harness.django_setup(**harness.database_env(args.db))
    from analysis.judge_assisted.selectors import judge_assisted_arrays, judge_names
    from analysis.selectors import attribute_names
    from annotation.models import Study

    study = Study.objects.get(name=STUDY)
    attributes = attribute_names(study=study)
    judges_all = tuple(judge_names(study=study))
    choices = [(j,) for j in judges_all] + ([judges_all] if len(judges_all) > 1 else [])
    t0 = time.perf_counter()
    results = {}
    for judges in choices:
        # The command's default arrays: the labelled mask is what each replicate replaces.
        arrays = judge_assisted_arrays(study=study, judges=judges, labelled=None)
        runs = [("conversations", share) for share in SHARES] + [("ratings", 0.10)]
        for design, share in runs:
            results[(" + ".join(judges), design, share)] = shipped_coverage(
                arrays, attributes, list(judges), design, share, args.replicates, args.seed
            )
    seconds = time.perf_counter() - t0
    both = " + ".join(choices[-1])
    text = "\n".join([
        f"Generated by `python -m benchmarks.judge_assisted_validation --replicates "
        f"{args.replicates} --write-docs` ({args.replicates} replicates per row, seed "
        f"{args.seed}, {seconds:.0f} s).",
        "",
        summary_table(results),
        "",
        f"Per cell, {both}, a share of the conversations labelled uniformly at random:",
        "",
        cell_table(results, both, SHARES),
    ])  # fmt: skip
    print(text)
    if args.write_docs:
        write_docs(text)
    if args.experiments:
        experiments(study, attributes, choices, args)


def experiments(study, attributes, choices, args) -> None:
    """The research runs behind docs/judge-assisted.md's cross-fitting, active-selection and
    ICC-lever sections (library functions, not the command's estimator)."""
    from analysis.judge_assisted.selectors import judge_assisted_arrays

    choices = [c for c in choices if len(c) == 1][:2] + [
        tuple(sorted({j for c in choices for j in c}))
    ][:1]
    rows = []
    active: list[dict] = []
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
