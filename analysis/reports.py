"""Report tables built from a long DataFrame of individual scores (pandas/numpy, no Django).

Input format (one row per individual score), produced by a selector from the ORM or by a
notebook from the released workbooks:

    conversation     conversation id (any hashable)
    responder        responder key, e.g. "gpt4o"
    responder_family family, e.g. "openai-gpt4o" (informational here)
    rater            rater name: a clinician's name or a judge's name
    rater_kind       "clinician" or "judge"
    attribute        e.g. "Guidance"
    score            float on the 1–5 scale (NaN = not scored)
    [condition, source]  optional filter columns (see :func:`filter_scores`)

The *human reference* of a (conversation, responder, attribute) cell is the mean of the
clinicians' scores in that cell. A judge is compared only on cells both it and the human
reference scored, and never on responders listed in ``exclusions[judge]`` (self-preference
exclusion, MB100k §5.3). Statistics come from :mod:`analysis.stats`.
"""

from __future__ import annotations

import itertools
import math
import zlib
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass

import numpy as np
import pandas as pd

from analysis import alt_test, stats

REQUIRED_COLUMNS: tuple[str, ...] = (
    "conversation",
    "responder",
    "rater",
    "rater_kind",
    "attribute",
    "score",
)
CLINICIAN = "clinician"
JUDGE = "judge"
#: Rater label of the human reference in :func:`ranking_table`.
HUMAN_REFERENCE = "human"

Exclusions = Mapping[str, Set[str]]

RELIABILITY_COLUMNS: tuple[str, ...] = (
    "judge",
    "attribute",
    "n_models",
    "n_pairs",
    "icc_c1",
    "ci_low",
    "ci_high",
    "ci_width",
    "status",
    "icc_a1",
    "a1_ci_low",
    "a1_ci_high",
    "msr",
    "msc",
    "ms_error",
    "human_mean",
    "judge_mean",
    "bias",
    "abs_bias_norm",
    "mse",
    "rmse",
    "mae",
    "human_sd",
    "judge_sd",
    "alignment_factor",
    "ci_method",
    "n_boot_valid",
    "n_boot_dropped",
    "n_conversations",
    "estimable",
    "verdict",
    "verdict_text",
    "reason",
)


def _check_columns(df: pd.DataFrame) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"scores DataFrame lacks columns {missing}")


def filter_scores(df: pd.DataFrame, **equals: object) -> pd.DataFrame:
    """Rows whose columns equal the given values; a list/set value means "one of".

    ``filter_scores(df, condition="anxiety", source=["CounselChat"])``; None values are ignored.
    """
    mask = np.ones(len(df), dtype=bool)
    for col, want in equals.items():
        if want is None:
            continue
        if isinstance(want, list | tuple | set | frozenset):
            mask &= df[col].isin(list(want)).to_numpy()
        else:
            mask &= (df[col] == want).to_numpy()
    return df[mask]


@dataclass(frozen=True, slots=True)
class PairedCells:
    """Judge scores paired with the human reference, one entry per (judge, cell).

    Codes index ``judges``, ``responders``, ``attributes`` and ``conversations``.
    """

    judges: list[object]
    responders: list[object]
    attributes: list[str]
    conversations: list[object]
    judge: np.ndarray
    responder: np.ndarray
    attribute: np.ndarray
    conversation: np.ndarray
    human: np.ndarray
    score: np.ndarray


def paired_cells(
    df: pd.DataFrame,
    *,
    attributes: Sequence[str],
    exclusions: Exclusions | None = None,
) -> PairedCells:
    """Pair every judge score with the human reference of its cell (vectorised, no groupby).

    Cells are keyed by one int64 built from factorised conversation/responder/attribute codes;
    the clinician mean per cell and the judge mean per (judge, cell) — a judge that scored a
    cell twice is averaged — come from ``np.unique`` + ``np.bincount``, and the join is a
    ``searchsorted`` on the sorted clinician keys. Judge cells without a human reference and
    excluded (judge, responder) pairs are dropped.
    """
    _check_columns(df)
    attrs = list(attributes)
    if len(set(attrs)) != len(attrs):
        raise ValueError(f"attributes must be unique, got {attrs}")
    attr_code = _index_of(df["attribute"], attrs)  # -1: not listed
    score = pd.to_numeric(df["score"], errors="coerce").to_numpy(dtype=np.float64)
    is_clin = (df["rater_kind"] == CLINICIAN).to_numpy()
    keep = (
        (attr_code >= 0) & np.isfinite(score) & (is_clin | (df["rater_kind"] == JUDGE).to_numpy())
    )
    # Factorising the Series (not its values) uses a categorical's integer codes: the
    # selector's frame is categorical, and hashing millions of strings was most of the time.
    conv_code, conv_uni = pd.factorize(df["conversation"][keep])
    resp_code, resp_uni = pd.factorize(df["responder"][keep])
    attr_code, score, is_clin = attr_code[keep], score[keep], is_clin[keep]
    n_r, n_a = max(len(resp_uni), 1), max(len(attrs), 1)
    cell = (conv_code.astype(np.int64) * n_r + resp_code) * n_a + attr_code

    h_keys, h_inv = np.unique(cell[is_clin], return_inverse=True)
    h_vals = np.bincount(h_inv, weights=score[is_clin]) / np.bincount(h_inv)

    is_judge = ~is_clin
    judge_code, judge_uni = pd.factorize(df["rater"][keep][is_judge])
    n_cells = int(len(conv_uni)) * n_r * n_a
    j_key = judge_code.astype(np.int64) * n_cells + cell[is_judge]
    j_keys, j_inv = np.unique(j_key, return_inverse=True)
    j_vals = np.bincount(j_inv, weights=score[is_judge]) / np.bincount(j_inv)
    j_cell = j_keys % max(n_cells, 1)
    j_judge = j_keys // max(n_cells, 1)

    pos = np.searchsorted(h_keys, j_cell)
    pos_c = np.minimum(pos, max(h_keys.size - 1, 0))
    found = (pos < h_keys.size) & (h_keys[pos_c] == j_cell) if h_keys.size else pos < 0
    j_resp = (j_cell // n_a) % n_r
    if exclusions:
        resp_index = {r: i for i, r in enumerate(resp_uni)}
        banned = np.zeros((max(len(judge_uni), 1), n_r), dtype=bool)
        for jdx, name in enumerate(judge_uni):
            for r in exclusions.get(name, ()):
                if r in resp_index:
                    banned[jdx, resp_index[r]] = True
        found &= ~banned[j_judge, j_resp]
    sel_cell = j_cell[found]
    return PairedCells(
        judges=list(judge_uni),
        responders=list(resp_uni),
        attributes=attrs,
        conversations=list(conv_uni),
        judge=j_judge[found],
        responder=j_resp[found],
        attribute=sel_cell % n_a,
        conversation=sel_cell // (n_a * n_r),
        human=h_vals[pos_c[found]],
        score=j_vals[found],
    )


def _index_of(column: pd.Series, values: Sequence[str]) -> np.ndarray:
    """Each row's position in ``values`` (-1 where it is not one of them), as int64; on a
    categorical column, looked up once per category."""
    if isinstance(column.dtype, pd.CategoricalDtype):
        per_category = pd.Index(values).get_indexer(column.cat.categories).astype(np.int64)
        codes = column.cat.codes.to_numpy()
        found: np.ndarray = np.where(codes >= 0, per_category[codes], -1)
        return found
    plain: np.ndarray = pd.Index(values).get_indexer(column).astype(np.int64)
    return plain


#: The fewest responders a judge's ICC is estimated on. By simulation (benchmarks/icc_coverage.py,
#: docs/analysis.md): the 95 % percentile bootstrap interval of ICC(C,1) for two raters covers
#: 0.66–0.68 of the time with 3 targets and 0.90–0.93 with 4 to 30, whatever the true ICC
#: (0.3–0.9). Below 4 the interval claims what the data cannot hold.
MIN_RESPONDERS = 4
#: The fewest conversations behind the responder means: with one, each mean is a single score,
#: the conversation-to-conversation spread of a responder cannot be seen at all, and the
#: two-stage bootstrap has nothing to resample.
MIN_CONVERSATIONS = 2


def not_estimable_reason(
    *, human: np.ndarray, judge: np.ndarray, n_conversations: int, boot: stats.BootstrapCI
) -> str | None:
    """Why a judge × attribute ICC is not estimable, in plain words, or None when it is.

    ``human``/``judge``: the responder-level means (one per responder with both). A number that
    is not estimable gets no status, verdict or colour.
    """
    n = int(human.size)
    if n < MIN_RESPONDERS:
        return (
            f"not estimable: only {n} responder{'s' if n != 1 else ''} ha{'ve' if n != 1 else 's'} "
            f"both clinician and judge scores; an ICC needs at least {MIN_RESPONDERS} (with 3 "
            "its 95 % interval covers only about 0.7 of the time)"
        )
    if n_conversations < MIN_CONVERSATIONS:
        return (
            f"not estimable: the scores come from {n_conversations} conversation; at least "
            f"{MIN_CONVERSATIONS} are needed to see how a responder varies from one "
            "conversation to the next"
        )
    for who, means in (("the clinicians give", human), ("the judge gives", judge)):
        if np.ptp(means) == 0:
            return (
                f"not estimable: {who} every responder the same mean ({means[0]:.2f}), so there "
                "is no order among responders to agree on (ICC would be 0 by construction)"
            )
    # A judge that is the clinicians plus a constant has ICC(C,1) = 1 in every resample: a
    # width of 0 that is real. Any other width of 0 means nothing varied.
    if boot.n_valid >= 2 and boot.ci_width == 0 and not math.isclose(boot.icc_c1, 1.0):
        return (
            "not estimable: every bootstrap resample gave the same ICC; a width of 0 means "
            "nothing varies, not that the estimate is precise"
        )
    return None


def _pair_seed(seed: int, judge: object, attribute: str) -> np.random.Generator:
    # A stable per-(judge, attribute) stream: a pair's CI does not change when other judges or
    # attributes are added to or removed from the table.
    tag = zlib.crc32(f"{judge}\x1f{attribute}".encode())
    return np.random.default_rng([seed, tag])


def reliability_table(
    df: pd.DataFrame,
    *,
    attributes: Sequence[str] = stats.ATTRIBUTES,
    exclusions: Exclusions | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    two_stage: bool = False,
    level: float = 0.95,
    cells: PairedCells | None = None,
    progress: Callable[[float], None] | None = None,
) -> pd.DataFrame:
    """One row per judge × attribute: ICC(C,1) with bootstrap CI, ICC(A,1), bias, errors.

    Method (MB100k §5, reproduces Tables 3–4; see shared/reference/README.md):
    1. human reference per (conversation, responder, attribute) = mean of clinicians' scores;
    2. for each judge keep only cells both it and the human reference scored, minus the
       responders in ``exclusions[judge]``;
    3. responder-level means of human and judge over those conversations → n×2 matrix;
    4. ICC(C,1), ICC(A,1) on it; percentile bootstrap over responders (``n_boot``; seeded per
       pair from ``seed``) or, with ``two_stage=True``, over responders then conversations;
    5. ``human_mean``/``judge_mean`` = mean over responders of responder means, ``bias`` =
       judge − human, ``abs_bias_norm`` = |bias|/4;
    6. ``mse``, ``rmse``, ``mae``, SDs over individual paired ratings;
       ``alignment_factor`` = MB10 AF of the judge over *all* listed attributes (so it repeats
       on the judge's rows; the per-attribute version is ``mae``).
    ``verdict``/``verdict_text`` apply the paper's guidance matrix; ``reason`` explains NaNs.
    Judges appear in order of first appearance, attributes in the given order. ``cells``:
    ``paired_cells(df, attributes=…, exclusions=…)`` already computed with these arguments
    (the dashboard pairs once for this table and the calibration table). ``progress`` is told
    the fraction of judge × attribute pairs bootstrapped after each one (a background job's bar).
    """
    if cells is None:
        cells = paired_cells(df, attributes=attributes, exclusions=exclusions)
    n_j, n_a, n_r = len(cells.judges), len(cells.attributes), max(len(cells.responders), 1)
    if n_j == 0:
        return pd.DataFrame(columns=list(RELIABILITY_COLUMNS))

    # Responder-level sums on a dense (judge, attribute, responder) grid.
    grp = (cells.judge * n_a + cells.attribute) * n_r + cells.responder
    size = n_j * n_a * n_r
    cnt = np.bincount(grp, minlength=size).reshape(n_j, n_a, n_r)
    h_sum = np.bincount(grp, weights=cells.human, minlength=size).reshape(n_j, n_a, n_r)
    j_sum = np.bincount(grp, weights=cells.score, minlength=size).reshape(n_j, n_a, n_r)
    with np.errstate(invalid="ignore", divide="ignore"):
        h_mean = h_sum / cnt
        j_mean = j_sum / cnt

    # Pair counts per (judge, attribute) and the judge-level Alignment Factor [MB10 §3.4.3].
    pair = cells.judge * n_a + cells.attribute
    diff = cells.score - cells.human
    n_pairs = np.bincount(pair, minlength=n_j * n_a).reshape(n_j, n_a)
    # Distinct conversations behind each (judge, attribute): unique (pair, conversation) keys.
    conv_keys = np.unique(
        pair.astype(np.int64) * max(len(cells.conversations), 1) + cells.conversation
    )
    n_convs = np.bincount(
        conv_keys // max(len(cells.conversations), 1), minlength=n_j * n_a
    ).reshape(n_j, n_a)
    af_num = np.bincount(cells.judge, weights=np.abs(diff), minlength=n_j)
    af_den = np.bincount(cells.judge, minlength=n_j)

    rows: list[dict[str, object]] = []
    for jdx, judge in enumerate(cells.judges):
        af = af_num[jdx] / af_den[jdx] if af_den[jdx] else math.nan
        sel_judge = cells.judge == jdx
        for adx, attribute in enumerate(cells.attributes):
            have = cnt[jdx, adx] > 0
            matrix = np.column_stack([h_mean[jdx, adx, have], j_mean[jdx, adx, have]])
            rng = _pair_seed(seed, judge, attribute)
            if two_stage:
                boot = _two_stage(cells, sel_judge, adx, have, n_r, n_boot, rng, level)
            else:
                boot = stats.bootstrap_icc_ci(matrix, n_boot=n_boot, seed=rng, level=level)
            point = stats.icc(matrix)  # NaN with a reason when n < 2
            bias = stats.mean_bias(matrix[:, 0], matrix[:, 1])
            npairs = int(n_pairs[jdx, adx])
            sel = sel_judge & (cells.attribute == adx)
            err = stats.error_metrics(cells.human[sel], cells.score[sel])
            why_not = not_estimable_reason(
                human=matrix[:, 0], judge=matrix[:, 1], n_conversations=int(n_convs[jdx, adx]),
                boot=boot,
            )  # fmt: skip
            if why_not:
                boot = stats.not_estimable(boot)
                guide = stats.Guidance(None, why_not[0].upper() + why_not[1:] + ".", why_not)
            else:
                guide = stats.reliability_guidance(boot.icc_c1, boot.ci_width)
            reasons = [r for r in (why_not, boot.reason, bias.reason, err.reason) if r]
            rows.append(
                {
                    "judge": judge,
                    "attribute": attribute,
                    "n_models": int(have.sum()),
                    "n_pairs": npairs,
                    "icc_c1": boot.icc_c1,
                    "ci_low": boot.ci_low,
                    "ci_high": boot.ci_high,
                    "ci_width": boot.ci_width,
                    "status": boot.status,
                    "icc_a1": boot.icc_a1,
                    "a1_ci_low": boot.a1_ci_low,
                    "a1_ci_high": boot.a1_ci_high,
                    "msr": point.msr,
                    "msc": point.msc,
                    "ms_error": point.mse,
                    "human_mean": bias.human_mean,
                    "judge_mean": bias.judge_mean,
                    "bias": bias.bias,
                    "abs_bias_norm": bias.abs_bias_norm,
                    "mse": err.mse,
                    "rmse": err.rmse,
                    "mae": err.mae,
                    "human_sd": err.human_sd,
                    "judge_sd": err.judge_sd,
                    "alignment_factor": af,
                    "ci_method": boot.method,
                    "n_boot_valid": boot.n_valid,
                    "n_boot_dropped": boot.n_dropped,
                    "n_conversations": int(n_convs[jdx, adx]),
                    "estimable": why_not is None,
                    "verdict": guide.verdict,
                    "verdict_text": guide.text,
                    "reason": "; ".join(dict.fromkeys(reasons)) or None,
                }
            )
            if progress is not None:
                progress(len(rows) / (n_j * n_a))
    return pd.DataFrame(rows, columns=list(RELIABILITY_COLUMNS))


def _two_stage(
    cells: PairedCells,
    sel_judge: np.ndarray,
    adx: int,
    have: np.ndarray,
    n_r: int,
    n_boot: int,
    rng: np.random.Generator,
    level: float,
) -> stats.BootstrapCI:
    """Build responder × conversation arrays for one (judge, attribute) and bootstrap them."""
    sel = sel_judge & (cells.attribute == adx)
    resp_rows = np.full(n_r, -1)
    resp_rows[have] = np.arange(int(have.sum()))
    conv_code, conv_uni = pd.factorize(cells.conversation[sel])
    human = np.full((int(have.sum()), len(conv_uni)), np.nan)
    judge = human.copy()
    human[resp_rows[cells.responder[sel]], conv_code] = cells.human[sel]
    judge[resp_rows[cells.responder[sel]], conv_code] = cells.score[sel]
    return stats.bootstrap_icc_ci_two_stage(human, judge, n_boot=n_boot, seed=rng, level=level)


def human_reference(df: pd.DataFrame, *, attributes: Sequence[str]) -> pd.DataFrame:
    """Human reference per cell: columns conversation, responder, attribute, score (mean)."""
    _check_columns(df)
    clin = df[(df["rater_kind"] == CLINICIAN) & df["attribute"].isin(list(attributes))]
    return (
        clin.dropna(subset=["score"])
        .groupby(["conversation", "responder", "attribute"], sort=False, observed=True)["score"]
        .mean()
        .reset_index()
    )


def _means_pivot(cells: pd.DataFrame, attributes: Sequence[str]) -> pd.DataFrame:
    table = cells.pivot_table(
        index="responder", columns="attribute", values="score", aggfunc="mean", observed=True
    )
    return table.reindex(columns=list(attributes))


def human_means_table(
    df: pd.DataFrame,
    attributes: Sequence[str] = stats.ATTRIBUTES,
    *,
    groups: Mapping[str, Sequence[str]] | None = stats.COMPOSITE_GROUPS,
) -> pd.DataFrame:
    """Responder × attribute means of the human reference (MB100k Table 2), sorted by Avg.

    Each cell's reference is the clinicians' mean; a responder's attribute mean is the mean
    over the conversations that have a reference. ``Avg`` is the mean of the attribute
    columns; composite columns (CSS, ARS by default; ``groups=None`` for none) follow it.
    """
    table = _means_pivot(human_reference(df, attributes=attributes), attributes)
    table["Avg"] = table[list(attributes)].mean(axis=1)
    if groups:
        comps = stats.composite_scores(table[list(attributes)].to_numpy(), attributes, groups)
        for name, values in comps.items():
            table[name] = values
    table = table.sort_values("Avg", ascending=False)
    table.columns.name = None
    return table


def ranking_table(
    df: pd.DataFrame,
    *,
    attributes: Sequence[str] = stats.ATTRIBUTES,
    exclusions: Exclusions | None = None,
) -> pd.DataFrame:
    """Responder means and ranks per rater (human reference + each judge; Tables 2, 9–13).

    Long format, one row per (rater, responder): the attribute means, ``Avg`` (mean over
    attributes), ``rank_<attribute>`` (1 = best, ties averaged), ``mean_rank`` (average of the
    attribute ranks) and ``rank`` (rank of ``Avg``). The human reference row uses rater
    ``"human"``. ``exclusions`` (judge → responders) drops responders from that judge's ranking;
    by default judges rank every responder, as in the paper's Tables 9–13.
    """
    _check_columns(df)
    attrs = list(attributes)
    parts: list[tuple[object, pd.DataFrame]] = [
        (HUMAN_REFERENCE, _means_pivot(human_reference(df, attributes=attrs), attrs))
    ]
    judges = df[(df["rater_kind"] == JUDGE) & df["attribute"].isin(attrs)].dropna(subset=["score"])
    for judge, sub in judges.groupby("rater", sort=False):
        # Per-cell mean first so a judge's duplicate scores of one cell count once.
        cells = sub.groupby(["conversation", "responder", "attribute"], sort=False)["score"]
        means = _means_pivot(cells.mean().reset_index(), attrs)
        banned = (exclusions or {}).get(judge, set())
        parts.append((judge, means[~means.index.isin(list(banned))]))
    frames = []
    for rater, means in parts:
        if means.empty:
            continue
        res = stats.ranking(means.to_numpy())
        out = means.copy()
        out.columns.name = None
        out["Avg"] = res.overall_mean
        for i, a in enumerate(attrs):
            out[f"rank_{a}"] = res.ranks[:, i]
        out["mean_rank"] = res.mean_rank
        out["rank"] = res.overall_rank
        out = out.reset_index()
        out.insert(0, "rater", rater)
        frames.append(out.sort_values("rank", kind="stable"))
    if not frames:
        return pd.DataFrame(columns=["rater", "responder", *attrs, "Avg", "mean_rank", "rank"])
    return pd.concat(frames, ignore_index=True)


def interrater_table(
    df: pd.DataFrame,
    *,
    attributes: Sequence[str] = stats.ATTRIBUTES,
    value_domain: Sequence[float] | None = (1, 2, 3, 4, 5),
) -> pd.DataFrame:
    """Agreement among clinicians on items (conversation × responder) several of them rated.

    One row per attribute:
    - ``n_items``: items rated by ≥ 2 clinicians; ``n_raters``: clinicians involved;
    - ``icc_c1``/``icc_a1``: on the items × clinicians matrix, complete rows only
      (``n_complete`` items) — ICC needs every clinician on every item used;
    - ``alpha_ordinal``/``alpha_interval``: Krippendorff's alpha, which uses incomplete items;
    - ``kappa_linear``/``kappa_quadratic``: weighted Cohen's kappa averaged over the clinician
      pairs sharing ≥ 2 items (Light's approach; ``n_rater_pairs`` pairs).
    ``value_domain`` fixes the rating scale for ordinal alpha and the kappa weights; scores
    outside it (e.g. a stray 0) are left out of those two but kept in ICC and interval alpha.
    """
    _check_columns(df)
    clin = df[(df["rater_kind"] == CLINICIAN) & df["attribute"].isin(list(attributes))]
    clin = clin.dropna(subset=["score"])
    rows = []
    for attribute in attributes:
        sub = clin[clin["attribute"] == attribute]
        wide = sub.pivot_table(
            index=["conversation", "responder"], columns="rater", values="score", aggfunc="mean"
        )
        matrix = wide.to_numpy(dtype=np.float64).reshape(len(wide), wide.shape[1])
        multi = matrix[np.isfinite(matrix).sum(axis=1) >= 2]
        reasons: list[str] = []
        if matrix.shape[1] >= 2:
            icc = stats.icc(multi)
            domain = None if value_domain is None else list(value_domain)
            alpha_o = stats.krippendorff_alpha(multi, level="ordinal", value_domain=domain)
            alpha_i = stats.krippendorff_alpha(multi, level="interval")
            kap_l, kap_q = [], []
            for a, b in itertools.combinations(range(matrix.shape[1]), 2):
                both = np.isfinite(matrix[:, a]) & np.isfinite(matrix[:, b])
                if both.sum() < 2:
                    continue
                kl = stats.weighted_kappa(matrix[both, a], matrix[both, b], labels=domain)
                kq = stats.weighted_kappa(
                    matrix[both, a], matrix[both, b], weights="quadratic", labels=domain
                )
                kap_l.append(kl.value)
                kap_q.append(kq.value)
            reasons += [r for r in (icc.reason, alpha_o.reason, alpha_i.reason) if r]
            if not kap_l:
                reasons.append("no clinician pair shares ≥ 2 items")
            icc_ok = icc.n >= MIN_RESPONDERS and icc.reason is None
            if not icc_ok and icc.reason is None:
                reasons.append(
                    f"ICC not estimable: {icc.n} item{'s' if icc.n != 1 else ''} rated by every "
                    f"clinician; an ICC needs at least {MIN_RESPONDERS}"
                )
            row = {
                "icc_c1": icc.icc_c1 if icc_ok else math.nan,
                "icc_a1": icc.icc_a1 if icc_ok else math.nan,
                "n_complete": icc.n,
                "alpha_ordinal": alpha_o.value,
                "alpha_interval": alpha_i.value,
                "kappa_linear": _nanmean(kap_l),
                "kappa_quadratic": _nanmean(kap_q),
                "n_rater_pairs": len(kap_l),
            }
        else:
            reasons.append("fewer than two clinicians rated this attribute")
            row = dict.fromkeys(
                ("icc_c1", "icc_a1", "alpha_ordinal", "alpha_interval", "kappa_linear"),
                math.nan,
            ) | {"kappa_quadratic": math.nan, "n_complete": 0, "n_rater_pairs": 0}
        rows.append(
            {
                "attribute": attribute,
                "n_items": int(multi.shape[0]),
                "n_raters": int(matrix.shape[1]),
                **row,
                "reason": "; ".join(dict.fromkeys(reasons)) or None,
            }
        )
    return pd.DataFrame(rows)


def _nanmean(values: list[float]) -> float:
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    return float(arr.mean()) if arr.size else math.nan


def calibration_table(
    df: pd.DataFrame,
    *,
    attributes: Sequence[str] = stats.ATTRIBUTES,
    exclusions: Exclusions | None = None,
    train_fraction: float = 0.7,
    seed: int = 0,
    cells: PairedCells | None = None,
) -> pd.DataFrame:
    """Affine calibration human ≈ a + b·judge per judge × attribute on paired cells.

    Uses the same pairing and exclusions as :func:`reliability_table` (``cells`` as there);
    the train/held-out split is seeded per (judge, attribute) so a row does not depend on
    the others.
    """
    if cells is None:
        cells = paired_cells(df, attributes=attributes, exclusions=exclusions)
    rows = []
    for jdx, judge in enumerate(cells.judges):
        for adx, attribute in enumerate(cells.attributes):
            sel = (cells.judge == jdx) & (cells.attribute == adx)
            res = stats.calibrate_affine(
                cells.human[sel],
                cells.score[sel],
                train_fraction=train_fraction,
                seed=_pair_seed(seed, judge, attribute),
            )
            before, after = res.before, res.after
            rows.append(
                {
                    "judge": judge,
                    "attribute": attribute,
                    "a": res.a,
                    "b": res.b,
                    "n_train": res.n_train,
                    "n_test": res.n_test,
                    "mae_before": before.mae if before else math.nan,
                    "mae_after": after.mae if after else math.nan,
                    "rmse_before": before.rmse if before else math.nan,
                    "rmse_after": after.rmse if after else math.nan,
                    "bias_before": before.bias if before else math.nan,
                    "bias_after": after.bias if after else math.nan,
                    "reason": res.reason,
                }
            )
    return pd.DataFrame(rows)


ALT_TEST_COLUMNS: tuple[str, ...] = (
    "judge",
    "attribute",
    "winning_rate",
    "advantage_probability",
    "passed",
    "n_clinicians",
    "n_instances",
    "epsilon",
    "metric",
    "reason",
)


def alt_test_table(
    df: pd.DataFrame,
    *,
    attributes: Sequence[str] = stats.ATTRIBUTES,
    exclusions: Exclusions | None = None,
    epsilon: float = alt_test.DEFAULT_EPSILON,
    metric: str = "neg_rmse",
    q: float = alt_test.DEFAULT_Q,
    reference: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The alt-test per judge × attribute (analysis.alt_test): may the judge replace the
    clinicians on this attribute?

    ``reference`` (columns conversation, responder, attribute, final_score; e.g. the adjudicated
    final scores): on the responses it scores, the clinician left out and the judge are both
    compared with it instead of with the remaining clinicians (alt_test's ``reference``).

    An instance is a response (conversation × responder); the humans are the clinicians (their
    scores of the attribute), the LLM is the judge (its mean score where it scored a response
    more than once). A judge is not tested on the responders of its ``exclusions``. ``metric``
    ``neg_rmse`` suits a 1–5 scale (a score one point off aligns better than one three off);
    ``accuracy`` counts exact agreement only. Not testable (NaN, ``passed`` None, ``reason``)
    when no clinician shares at least 30 responses with another clinician and the judge.
    """
    _check_columns(df)
    attrs = list(attributes)
    data = df[df["attribute"].isin(attrs)].dropna(subset=["score"])
    instance = data["conversation"].astype(str) + "\x1f" + data["responder"].astype(str)
    data = data.assign(instance=instance.to_numpy())
    clin = data[data["rater_kind"] == CLINICIAN]
    judges = data[data["rater_kind"] == JUDGE]
    settled: dict[str, dict[str, float]] = {}
    if reference is not None:
        ref = reference.dropna(subset=["final_score"])
        keys = ref["conversation"].astype(str) + "\x1f" + ref["responder"].astype(str)
        for attribute, part in ref.assign(instance=keys.to_numpy()).groupby("attribute"):
            settled[str(attribute)] = dict(
                zip(part["instance"], part["final_score"].astype(float), strict=True)
            )
    rows = []
    for judge, sub in judges.groupby("rater", sort=False, observed=True):
        banned = set((exclusions or {}).get(str(judge), set()))
        sub = sub[~sub["responder"].isin(list(banned))]
        for attribute in attrs:
            llm = sub[sub["attribute"] == attribute].groupby("instance")["score"].mean()
            cells = clin[clin["attribute"] == attribute]
            humans = {
                str(rater): dict(zip(part["instance"], part["score"], strict=True))
                for rater, part in cells.groupby("rater", sort=True, observed=True)
            }
            res = alt_test.alt_test(
                humans=humans,
                llm=llm.to_dict(),
                metric=metric,
                epsilon=epsilon,
                q=q,
                reference=settled.get(attribute),
            )
            rows.append(
                {
                    "judge": judge,
                    "attribute": attribute,
                    "winning_rate": res.winning_rate,
                    "advantage_probability": res.advantage_probability,
                    "passed": res.passed,
                    "n_clinicians": res.n_humans,
                    "n_instances": res.n_instances,
                    "epsilon": epsilon,
                    "metric": metric,
                    "reason": None
                    if res.reason is None
                    else (
                        f"not testable: no clinician scored {alt_test.MIN_INSTANCES_PER_HUMAN} or "
                        "more responses that another clinician and the judge also scored "
                        f"({res.n_instances} responses have two clinicians' and the judge's "
                        "scores)"
                    ),
                }
            )
    return pd.DataFrame(rows, columns=list(ALT_TEST_COLUMNS))


#: The median share of clinician ratings the judges must be able to replace, at equal interval
#: width, before the dashboard and the judge-assisted page call judge-assisted estimates worth
#: using: below a tenth, a judge run, its cost and a method to explain in the paper buy less
#: than a few more clinician ratings would.
WORTH_IT_SAVING = 0.10
#: The fewest paired conversations a responder needs for its within-responder correlation.
_MIN_CORRELATION_PAIRS = 3


def judge_worth_table(cells: PairedCells) -> pd.DataFrame:
    """Per judge × attribute: how much of the clinicians' rating work judge-assisted estimates
    could replace. Within one responder, PPI++ narrows the clinician mean's interval to
    √(1 − ρ²·N/(N + n)) of its width (ρ the item-level correlation of judge and clinician
    scores, N unlabelled and n labelled responses), so at equal width it saves at most ρ² of
    the clinician ratings (N ≫ n); a negative ρ saves nothing (λ is clipped at 0). ``saving``
    is the median of max(ρ, 0)² over the responders with at least three paired conversations
    and some spread on both sides; NaN with a ``reason`` where none has."""
    n_j, n_a, n_r = len(cells.judges), len(cells.attributes), max(len(cells.responders), 1)
    key = (cells.judge * n_a + cells.attribute) * n_r + cells.responder
    size = n_j * n_a * n_r

    def sums(values: np.ndarray) -> np.ndarray:
        return np.bincount(key, weights=values, minlength=size)

    n = np.bincount(key, minlength=size).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mh, mj = sums(cells.human) / n, sums(cells.score) / n
        dh, dj = cells.human - mh[key], cells.score - mj[key]
        cov, vh, vj = sums(dh * dj), sums(dh * dh), sums(dj * dj)
        # PPI++ clips λ to [0, 1]: a judge that runs against the clinicians helps nothing, so
        # only a positive correlation counts.
        r2 = np.where(
            (n >= _MIN_CORRELATION_PAIRS) & (vh > 0) & (vj > 0),
            np.maximum(cov, 0.0) ** 2 / (vh * vj),
            np.nan,
        )
    r2 = r2.reshape(n_j, n_a, n_r)
    rows = []
    for jdx, judge in enumerate(cells.judges):
        for adx, attribute in enumerate(cells.attributes):
            values = r2[jdx, adx][np.isfinite(r2[jdx, adx])]
            rows.append(
                {
                    "judge": judge,
                    "attribute": attribute,
                    "saving": float(np.median(values)) if values.size else math.nan,
                    "n_responders": int(values.size),
                    "reason": None
                    if values.size
                    else "not estimable: no responder has three conversations scored by both "
                    "the clinicians and the judge with some spread on each side",
                }
            )
    return pd.DataFrame(rows, columns=["judge", "attribute", "saving", "n_responders", "reason"])


ANSWER_COLUMNS: tuple[str, ...] = (
    "judge",
    "attribute",
    "replace",
    "replace_reason",
    "reliability",
    "reliability_reason",
    "bias",
    "bias_reason",
    "assist",
    "assist_reason",
)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' if n != 1 else ''}"


def answer_table(reliability: pd.DataFrame, alt: pd.DataFrame, worth: pd.DataFrame) -> pd.DataFrame:
    """The researcher's answer first, per judge × attribute: can the judge replace the
    clinicians (alt-test), is its reliability known (ICC status, or not estimable), its bias,
    and whether judge-assisted estimates are worth it; each with a one-line reason. Built from
    :func:`reliability_table`, :func:`alt_test_table` and :func:`judge_worth_table`."""
    keyed = {
        name: {(r.judge, r.attribute): r for r in frame.itertuples(index=False)}
        for name, frame in (("alt", alt), ("worth", worth))
    }
    rows = []
    for rel in reliability.itertuples(index=False):
        key = (rel.judge, rel.attribute)
        a, w = keyed["alt"].get(key), keyed["worth"].get(key)
        if a is None or a.passed is None or (isinstance(a.passed, float) and math.isnan(a.passed)):
            replace = "not testable"
            replace_reason = (a.reason if a is not None else None) or "no alt-test for this pair"
        else:
            wins = round(a.winning_rate * a.n_clinicians)
            replace = "yes" if a.passed else "no"
            clinicians = _plural(int(a.n_clinicians), "clinician")
            replace_reason = (
                f"as good as or better than {wins} of the {clinicians} "
                f"left out in turn (winning rate {a.winning_rate:.2f}; it must reach 0.50), on "
                f"{_plural(int(a.n_instances), 'response')}; advantage probability "
                f"{a.advantage_probability:.2f}; ε {a.epsilon:g}"
            )
        if rel.estimable:
            reliability_text = f"{rel.status} · {rel.verdict}"
            reliability_reason = (
                f"ICC(C,1) {rel.icc_c1:.2f}, 95 % interval {rel.ci_low:.2f} to {rel.ci_high:.2f} "
                f"(width {rel.ci_width:.2f}) on {_plural(int(rel.n_models), 'responder')}"
            )
        else:
            reliability_text = "not estimable"
            reliability_reason = str(rel.reason or "").removeprefix("not estimable: ")
        if np.isfinite(rel.bias):
            shown = round(float(rel.bias), 2)
            bias_text = f"{shown:+.2f}" if shown else "0.00"
            way = "higher" if rel.bias > 0 else "lower"
            bias_reason = (
                f"scores {abs(shown):.2f} {way} than the clinicians on the responders' means"
                if shown
                else "scores the responders' means as the clinicians do (within 0.005)"
            )
        else:
            bias_text, bias_reason = "not estimable", str(rel.reason or "no paired scores")
        if w is None or not np.isfinite(w.saving):
            assist, assist_reason = "not estimable", (w.reason if w is not None else "no pairs")
        else:
            assist = "worth it" if w.saving >= WORTH_IT_SAVING else "not worth it"
            assist_reason = (
                f"could replace up to {w.saving * 100:.0f} % of clinician ratings at equal "
                f"interval width (median ρ² over {_plural(int(w.n_responders), 'responder')}; "
                f"worth it from {WORTH_IT_SAVING * 100:.0f} %)"
            )
        rows.append(
            {
                "judge": rel.judge,
                "attribute": rel.attribute,
                "replace": replace,
                "replace_reason": replace_reason,
                "reliability": reliability_text,
                "reliability_reason": reliability_reason,
                "bias": bias_text,
                "bias_reason": bias_reason,
                "assist": assist,
                "assist_reason": assist_reason,
            }
        )
    out = pd.DataFrame(rows, columns=list(ANSWER_COLUMNS))
    # Attribute by attribute (in the rubric's order, as the reliability table lists them), the
    # judges side by side within each.
    order = {a: i for i, a in enumerate(dict.fromkeys(reliability["attribute"]))}
    judges = {j: i for i, j in enumerate(dict.fromkeys(reliability["judge"]))}
    key = out["attribute"].map(order) * max(len(judges), 1) + out["judge"].map(judges)
    return out.iloc[np.argsort(key.to_numpy(), kind="stable")].reset_index(drop=True)
