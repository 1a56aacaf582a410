"""Reliability statistics as pure functions on numpy arrays.

No ORM, no pandas: a selector turns rows into arrays, these functions turn arrays into numbers
(docs/architecture.md). References, abbreviated in the docstrings:

- [MB100k] Badawi et al., "When Can We Trust LLMs in Mental Health? Large-Scale Benchmarks for
  Reliable LLM Evaluation" (MentalBench-100k / MentalAlign-70k), §5 (ICC framework), §6,
  Appendices F–H. Reference tables: shared/reference/paper_table{2,3,4}_*.csv.
- [MB10] MentalBench-10, §3.4.3 (Alignment Factor).
- McGraw & Wong (1996), Psychological Methods 1(1):30–46 — ICC(C,1) and ICC(A,1).
- Koo & Li (2016), J Chiropr Med 15(2):155–163 — ICC interpretation bands.

Degenerate input (constant ratings, fewer than two targets, all-missing) never raises: every
function returns NaN together with a human-readable ``reason``. Only a wrongly *shaped* argument
(a programming error) raises ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import krippendorff
import numpy as np
from numpy.typing import ArrayLike, NDArray

from scoring.rubric import ATTRIBUTE_NAMES

FloatArray = NDArray[np.float64]
SeedLike = int | np.random.Generator | None

#: The seven rating attributes in the paper's column order [MB100k §4, Appendix B]; the seed
#: rubric (annotation/rubric.py, plain data) is their one definition.
ATTRIBUTES: tuple[str, ...] = tuple(ATTRIBUTE_NAMES)

#: Cognitive Support Score and Affective Resonance Score groups [MB100k §4.1, Appendix B].
COMPOSITE_GROUPS: Mapping[str, tuple[str, ...]] = {
    "CSS": ("Guidance", "Informativeness", "Relevance", "Safety"),
    "ARS": ("Empathy", "Helpfulness", "Understanding"),
}

#: CI-width cut-offs of the reliability status [MB100k §5.4, §6.4, Table 3 notes]:
#: GR (good) if width ≤ 0.355, MR (moderate) if ≤ 0.560, PR (poor) otherwise.
STATUS_GOOD_MAX_WIDTH = 0.355
STATUS_MODERATE_MAX_WIDTH = 0.560

#: "High ICC" for the guidance matrix: Koo & Li's lower bound of *good* reliability (0.75), the
#: band the paper cites in §5.4. The paper gives no number for "high", so this is a parameter.
GUIDANCE_HIGH_ICC = 0.75
#: "Narrow CI" for the guidance matrix: the GR width (≤ 0.355). §6.4 calls Empathy's ~0.52
#: width "wide" and asks for validation, so MR widths count as wide.
GUIDANCE_NARROW_CI = STATUS_GOOD_MAX_WIDTH

# Mean squares below this fraction of the data's mean square are round-off, not variance: a
# bootstrap resample that draws the same responder n times has MSR ≈ 1e-31, not 0.
_REL_TOL = 1e-12


# --------------------------------------------------------------------------------------------
# Result types
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Estimate:
    """A single number, or NaN with the reason it could not be computed."""

    value: float
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None and not math.isnan(self.value)


@dataclass(frozen=True, slots=True)
class IccResult:
    """ICC(C,1), ICC(A,1) and the two-way ANOVA mean squares of one n×k matrix.

    ``mse`` here is the ANOVA *residual mean square* (MSE of McGraw & Wong), not the mean
    squared error of :class:`ErrorMetrics`.
    """

    icc_c1: float
    icc_a1: float
    msr: float
    msc: float
    mse: float
    n: int
    k: int
    n_dropped: int = 0
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class BootstrapCI:
    """Percentile bootstrap CI of ICC(C,1) (and of ICC(A,1)) with the paper's status."""

    method: str
    icc_c1: float
    ci_low: float
    ci_high: float
    ci_width: float
    status: str | None
    icc_a1: float
    a1_ci_low: float
    a1_ci_high: float
    n: int
    n_boot: int
    n_valid: int
    n_dropped: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class BiasResult:
    """Signed judge − human bias on responder means and its 1–5-scale normalisation."""

    human_mean: float
    judge_mean: float
    bias: float
    abs_bias_norm: float
    n: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ErrorMetrics:
    """Error metrics on individual paired ratings (human reference vs judge)."""

    mse: float
    rmse: float
    mae: float
    bias: float
    human_mean: float
    judge_mean: float
    human_sd: float
    judge_sd: float
    n_pairs: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class RankingResult:
    """Ranks of n responders (rows) on A attributes (columns); 1 = best."""

    ranks: FloatArray
    mean_rank: FloatArray
    overall_mean: FloatArray
    overall_rank: FloatArray


@dataclass(frozen=True, slots=True)
class Guidance:
    """Verdict of the paper's reliability guidance matrix with a plain-language sentence."""

    verdict: str | None
    text: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class CalibrationResult:
    """Affine correction human ≈ a + b·judge fitted on a train split, scored on held-out."""

    a: float
    b: float
    n_train: int
    n_test: int
    before: ErrorMetrics | None
    after: ErrorMetrics | None
    reason: str | None = None


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def _as_float(x: ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


def _rng(seed: SeedLike) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def paired_finite(a: ArrayLike, b: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Flatten two same-shaped arrays and keep the positions where both are finite (the pairs
    a paired statistic can use). Raises ValueError when the shapes differ."""
    x, y = _as_float(a), _as_float(b)
    if x.shape != y.shape:
        raise ValueError(f"shapes differ: {x.shape} vs {y.shape}")
    x, y = x.ravel(), y.ravel()
    keep = np.isfinite(x) & np.isfinite(y)
    return x[keep], y[keep]


# --------------------------------------------------------------------------------------------
# 1. Two-way ANOVA and ICC  [MB100k §5.2 eqs. 3–4, Appendix F, Listing 1; McGraw & Wong 1996]
# --------------------------------------------------------------------------------------------


def anova_terms_batch(y: ArrayLike) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Two-way ANOVA mean squares for a stack of complete n×k matrices.

    For each matrix Y (n targets × k raters), with grand mean Ȳ, row means Ȳ_i, column means Ȳ_j:
    MSR = k Σ_i (Ȳ_i − Ȳ)² / (n − 1), MSC = n Σ_j (Ȳ_j − Ȳ)² / (k − 1) and
    MSE = Σ_ij (Y_ij − Ȳ_i − Ȳ_j + Ȳ)² / ((n − 1)(k − 1))  [MB100k Appendix F, Listing 1].

    The residual sum of squares is summed directly instead of as SST − SSR − SSC, so it can
    never come out as a tiny negative number. Requires n ≥ 2, k ≥ 2 and no NaN (callers drop
    incomplete rows first).

    Args:
        y: array of shape (B, n, k) or (n, k).

    Returns:
        ``(msr, msc, mse)`` arrays of shape (B,) (shape () for a single matrix).
    """
    arr = _as_float(y)
    if arr.ndim not in (2, 3):
        raise ValueError(f"expected (n, k) or (B, n, k), got shape {arr.shape}")
    n, k = arr.shape[-2], arr.shape[-1]
    if n < 2 or k < 2:
        raise ValueError(f"need n ≥ 2 and k ≥ 2, got n={n}, k={k}")
    grand = arr.mean(axis=(-2, -1), keepdims=True)
    row = arr.mean(axis=-1, keepdims=True)
    col = arr.mean(axis=-2, keepdims=True)
    ss_rows = k * np.sum((row - grand) ** 2, axis=(-2, -1))
    ss_cols = n * np.sum((col - grand) ** 2, axis=(-2, -1))
    ss_err = np.sum((arr - row - col + grand) ** 2, axis=(-2, -1))
    return ss_rows / (n - 1), ss_cols / (k - 1), ss_err / ((n - 1) * (k - 1))


def icc_batch(y: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """ICC(C,1) and ICC(A,1) for a stack of complete n×k matrices, NaN where undefined.

    ICC(C,1) = (MSR − MSE) / (MSR + (k−1)·MSE)                       [MB100k eq. 3]
    ICC(A,1) = (MSR − MSE) / (MSR + (k−1)·MSE + k·(MSC − MSE)/n)     [MB100k eq. 4]

    These are McGraw & Wong's consistency and absolute-agreement single-rater ICCs (pingouin's
    ICC3 and ICC2). A matrix whose denominator is zero up to round-off (e.g. a bootstrap
    resample that drew the same responder every time, or constant ratings) gives NaN.

    Args:
        y: array of shape (B, n, k) (or (n, k), giving 0-d arrays).
    """
    arr = _as_float(y)
    msr, msc, mse = anova_terms_batch(arr)
    n, k = arr.shape[-2], arr.shape[-1]
    tol = _REL_TOL * (1.0 + np.mean(arr**2, axis=(-2, -1)))
    den_c = msr + (k - 1) * mse
    den_a = den_c + k * (msc - mse) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        c1 = np.where(np.abs(den_c) > tol, (msr - mse) / den_c, np.nan)
        a1 = np.where(np.abs(den_a) > tol, (msr - mse) / den_a, np.nan)
    return c1, a1


def icc(y: ArrayLike) -> IccResult:
    """ICC(C,1) and ICC(A,1) of an n×k matrix (n targets, k raters) [MB100k §5.2].

    In the judge-reliability use the targets are the responders (rows = responder-level means)
    and the two raters are the human reference and the judge; for clinician inter-rater
    agreement the targets are items and the raters are clinicians. Rows with any missing
    (NaN) cell are dropped (listwise deletion, as the two-way ANOVA needs a complete matrix);
    ``n_dropped`` counts them.
    """
    arr = _as_float(y)
    if arr.ndim != 2:
        raise ValueError(f"expected an (n, k) matrix, got shape {arr.shape}")
    k = arr.shape[1]
    complete = np.all(np.isfinite(arr), axis=1)
    dropped = int((~complete).sum())
    arr = arr[complete]
    n = arr.shape[0]
    nan = math.nan
    if k < 2:
        return IccResult(nan, nan, nan, nan, nan, n, k, dropped, f"need ≥ 2 raters, got k={k}")
    if n < 2:
        why = "all rows have missing cells" if dropped and n == 0 else "too few targets"
        return IccResult(
            nan, nan, nan, nan, nan, n, k, dropped, f"need ≥ 2 complete targets, got n={n} ({why})"
        )
    msr, msc, mse = (float(v) for v in anova_terms_batch(arr))
    c1, a1 = (float(v) for v in icc_batch(arr))
    reason = None
    if math.isnan(c1):
        reason = "ratings are constant: no variance between targets and no residual variance"
    return IccResult(c1, a1, msr, msc, mse, n, k, dropped, reason)


# --------------------------------------------------------------------------------------------
# 2–3. Bootstrap confidence intervals  [MB100k §5.1 "Sampling uncertainty", §5.4, Table 3]
# --------------------------------------------------------------------------------------------


def reliability_status(
    ci_width: float,
    *,
    good_max: float = STATUS_GOOD_MAX_WIDTH,
    moderate_max: float = STATUS_MODERATE_MAX_WIDTH,
) -> str | None:
    """GR if width ≤ 0.355, MR if ≤ 0.560, else PR; None for NaN [MB100k §5.4, Table 3]."""
    if ci_width is None or not np.isfinite(ci_width):
        return None
    if ci_width <= good_max:
        return "GR"
    if ci_width <= moderate_max:
        return "MR"
    return "PR"


def _summarise_boot(
    method: str,
    point: IccResult,
    c1: FloatArray,
    a1: FloatArray,
    n_boot: int,
    level: float,
    good_max: float,
    moderate_max: float,
) -> BootstrapCI:
    """Percentile CI from bootstrap replicates, dropping (and counting) undefined ones."""
    valid = np.isfinite(c1)
    n_valid = int(valid.sum())
    nan = math.nan
    alpha = (1.0 - level) / 2.0
    if n_valid < 2:
        return BootstrapCI(
            method,
            point.icc_c1,
            nan,
            nan,
            nan,
            None,
            point.icc_a1,
            nan,
            nan,
            point.n,
            n_boot,
            n_valid,
            n_boot - n_valid,
            f"only {n_valid} of {n_boot} resamples had a defined ICC(C,1)",
        )
    lo, hi = np.quantile(c1[valid], [alpha, 1.0 - alpha])
    a_valid = a1[np.isfinite(a1)]
    a_lo, a_hi = np.quantile(a_valid, [alpha, 1.0 - alpha]) if a_valid.size >= 2 else (nan, nan)
    width = float(hi - lo)
    return BootstrapCI(
        method=method,
        icc_c1=point.icc_c1,
        ci_low=float(lo),
        ci_high=float(hi),
        ci_width=width,
        status=reliability_status(width, good_max=good_max, moderate_max=moderate_max),
        icc_a1=point.icc_a1,
        a1_ci_low=float(a_lo),
        a1_ci_high=float(a_hi),
        n=point.n,
        n_boot=n_boot,
        n_valid=n_valid,
        n_dropped=n_boot - n_valid,
        reason=point.reason,
    )


def _nan_boot(method: str, point: IccResult, n_boot: int, reason: str) -> BootstrapCI:
    nan = math.nan
    return BootstrapCI(
        method,
        point.icc_c1,
        nan,
        nan,
        nan,
        None,
        point.icc_a1,
        nan,
        nan,
        point.n,
        n_boot,
        0,
        n_boot,
        reason,
    )


def not_estimable(boot: BootstrapCI) -> BootstrapCI:
    """The same bootstrap with every number an ICC claims removed (estimates, interval, status):
    what a caller returns once it has found the ICC not estimable."""
    nan = math.nan
    return BootstrapCI(
        boot.method, nan, nan, nan, nan, None, nan, nan, nan, boot.n, boot.n_boot, boot.n_valid,
        boot.n_dropped, boot.reason,
    )  # fmt: skip


def bootstrap_icc_ci(
    y: ArrayLike,
    *,
    n_boot: int = 1000,
    seed: SeedLike = None,
    level: float = 0.95,
    good_max: float = STATUS_GOOD_MAX_WIDTH,
    moderate_max: float = STATUS_MODERATE_MAX_WIDTH,
) -> BootstrapCI:
    """Percentile bootstrap CI of ICC(C,1) over targets (responders) [MB100k §5.1, Table 3].

    Rows of the n×k matrix (responder-level means of human and judge) are resampled with
    replacement ``n_boot`` times; both ICCs are recomputed on every resample in one vectorised
    call on a (n_boot, n, k) stack. The CI is the (α/2, 1 − α/2) percentile of the defined
    replicates; resamples whose ICC(C,1) is undefined (all drawn rows identical) are dropped and
    counted in ``n_dropped``. ``status`` is GR/MR/PR from the CI width.

    This bootstrap treats each responder's mean as fixed, i.e. it ignores the sampling error of
    the conversations behind each mean; see :func:`bootstrap_icc_ci_two_stage`.
    """
    arr = _as_float(y)
    point = icc(arr)
    method = "responders"
    if math.isnan(point.icc_c1):
        return _nan_boot(method, point, n_boot, point.reason or "ICC(C,1) undefined")
    arr = arr[np.all(np.isfinite(arr), axis=1)]
    idx = _rng(seed).integers(0, arr.shape[0], size=(n_boot, arr.shape[0]))
    c1, a1 = icc_batch(arr[idx])
    return _summarise_boot(method, point, c1, a1, n_boot, level, good_max, moderate_max)


def bootstrap_icc_ci_two_stage(
    human: ArrayLike,
    judge: ArrayLike,
    *,
    n_boot: int = 1000,
    seed: SeedLike = None,
    level: float = 0.95,
    good_max: float = STATUS_GOOD_MAX_WIDTH,
    moderate_max: float = STATUS_MODERATE_MAX_WIDTH,
) -> BootstrapCI:
    """Two-stage (responders, then conversations) percentile bootstrap CI of ICC(C,1), for the
    crossed design: every responder answered the same conversations.

    Stage 1 resamples responders with replacement (the same draws as :func:`bootstrap_icc_ci`
    with the same seed); stage 2 draws the conversation ids with replacement **once per
    replicate for every responder** and recomputes each drawn responder's human and judge means
    over the drawn conversations it has paired scores on. A hard conversation lowers every
    responder's scores alike, a column shift that ICC(C,1) ignores; drawing conversations
    independently per responder would turn it into spread between responders. By simulation
    (benchmarks/icc_coverage.py, ten responders): 0.89 coverage with 50 conversations and 0.94
    with 200, where per-responder draws covered 0.82 and 0.93 and the responders-only interval
    0.85 and 0.91. Unlike :func:`bootstrap_icc_ci` (the paper's method, §5.1) it propagates the
    conversations' sampling error, so its CIs are wider.

    Args:
        human, judge: (n_responders, n_conversations) arrays of per-conversation scores with
            NaN for missing, the same conversation in the same column for every responder; only
            cells where both are present are used (pairing as in the paper). Responders with no
            paired cell are dropped.

    Vectorised over resamples: a (n_boot, conversations) count matrix times the paired scores.
    """
    h, j = _as_float(human), _as_float(judge)
    if h.shape != j.shape or h.ndim != 2:
        raise ValueError(f"expected two (n, m) arrays of equal shape, got {h.shape}, {j.shape}")
    paired = np.isfinite(h) & np.isfinite(j)
    rows = np.flatnonzero(paired.any(axis=1))
    method = "two-stage"
    h, j, paired = h[rows], j[rows], paired[rows]
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.column_stack(
            [
                np.where(paired, h, 0.0).sum(axis=1) / paired.sum(axis=1),
                np.where(paired, j, 0.0).sum(axis=1) / paired.sum(axis=1),
            ]
        )
    point = icc(means)
    if math.isnan(point.icc_c1):
        return _nan_boot(method, point, n_boot, point.reason or "ICC(C,1) undefined")
    rng = _rng(seed)
    n, m = h.shape
    idx = rng.integers(0, n, size=(n_boot, n))
    draws = rng.integers(0, m, size=(n_boot, m)) + m * np.arange(n_boot)[:, None]
    counts = np.bincount(draws.ravel(), minlength=n_boot * m).reshape(n_boot, m).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        weight = counts @ paired.T.astype(float)  # (n_boot, responders)
        boot_h = counts @ np.where(paired, h, 0.0).T / weight
        boot_j = counts @ np.where(paired, j, 0.0).T / weight
    boot = np.stack(
        [np.take_along_axis(boot_h, idx, axis=1), np.take_along_axis(boot_j, idx, axis=1)],
        axis=-1,
    )
    # A replicate whose drawn conversations miss a drawn responder entirely has no mean for
    # it: undefined, dropped and counted like a degenerate resample.
    c1, a1 = icc_batch(np.where(np.isfinite(boot), boot, 0.0))
    complete = np.all(np.isfinite(boot), axis=(1, 2))
    c1, a1 = np.where(complete, c1, np.nan), np.where(complete, a1, np.nan)
    return _summarise_boot(method, point, c1, a1, n_boot, level, good_max, moderate_max)


# --------------------------------------------------------------------------------------------
# 4. Bias and error metrics  [MB100k §5.3 eq. 5, Appendix E/G Table 16; MB10 §3.4.3]
# --------------------------------------------------------------------------------------------


def mean_bias(
    human_means: ArrayLike, judge_means: ArrayLike, *, scale_span: float = 4.0
) -> BiasResult:
    """b = (1/n) Σ_i (Ȳ_i^(J) − Ȳ_i^(H)) and b̃ = |b| / 4  [MB100k §5.3 eq. 5].

    Inputs are responder-level means (one per responder); responders missing either mean are
    skipped. ``scale_span`` is max − min of the rating scale (4 on 1–5), so b̃ ∈ [0, 1].
    """
    h, j = paired_finite(human_means, judge_means)
    nan = math.nan
    if h.size == 0:
        return BiasResult(nan, nan, nan, nan, 0, "no responder has both a human and a judge mean")
    b = float(np.mean(j - h))
    return BiasResult(float(h.mean()), float(j.mean()), b, abs(b) / scale_span, int(h.size))


def error_metrics(human: ArrayLike, judge: ArrayLike) -> ErrorMetrics:
    """MSE, RMSE, MAE, mean difference and SDs over individual paired ratings.

    MSE = mean((judge − human)²) over every (conversation, responder) cell both rated, the
    definition behind MB100k Table 4 (reproduced to ±0.005). SDs use ddof = 1 over the same
    paired ratings (MB100k Table 16 "rating variability"). NaN pairs are ignored.
    """
    h, j = paired_finite(human, judge)
    nan = math.nan
    n = int(h.size)
    if n == 0:
        return ErrorMetrics(nan, nan, nan, nan, nan, nan, nan, nan, 0, "no paired ratings")
    d = j - h
    mse = float(np.mean(d**2))
    sd_h = float(h.std(ddof=1)) if n > 1 else nan
    sd_j = float(j.std(ddof=1)) if n > 1 else nan
    reason = None if n > 1 else "a single pair: SDs undefined"
    return ErrorMetrics(
        mse,
        math.sqrt(mse),
        float(np.mean(np.abs(d))),
        float(d.mean()),
        float(h.mean()),
        float(j.mean()),
        sd_h,
        sd_j,
        n,
        reason,
    )


def alignment_factor(human: ArrayLike, judge: ArrayLike) -> Estimate:
    """Alignment Factor AF = 1/(N·A) Σ_i Σ_a |LLM_{i,a} − Human_{i,a}|  [MB10 §3.4.3].

    Arrays of equal shape, typically (N items, A attributes); lower is better. Cells missing
    in either array are left out (so the divisor is the number of paired cells).
    """
    h, j = paired_finite(human, judge)
    if h.size == 0:
        return Estimate(math.nan, "no paired ratings")
    return Estimate(float(np.mean(np.abs(j - h))))


# --------------------------------------------------------------------------------------------
# 5. Composite scores  [MB100k §4.1, Appendix B]
# --------------------------------------------------------------------------------------------


def composite_scores(
    scores: ArrayLike,
    attributes: Sequence[str],
    groups: Mapping[str, Sequence[str]] = COMPOSITE_GROUPS,
) -> dict[str, FloatArray]:
    """Composite scores as the plain mean of each group's attributes (CSS, ARS by default).

    CSS = mean(Guidance, Informativeness, Relevance, Safety);
    ARS = mean(Empathy, Helpfulness, Understanding)  [MB100k §4.1].

    Args:
        scores: array (..., A) whose last axis follows ``attributes``.
        attributes: names of the last axis.
        groups: composite name → attribute names.

    Returns:
        composite name → array (...,). A composite is NaN where any of its attributes is
        missing (a partial mean would silently change the composite's definition); a group
        naming an attribute absent from ``attributes`` is all-NaN.
    """
    arr = _as_float(scores)
    if arr.shape[-1] != len(attributes):
        raise ValueError(f"last axis has {arr.shape[-1]} columns, {len(attributes)} names given")
    pos = {a: i for i, a in enumerate(attributes)}
    out: dict[str, FloatArray] = {}
    for name, members in groups.items():
        if not members or any(m not in pos for m in members):
            out[name] = np.full(arr.shape[:-1], np.nan)
            continue
        out[name] = arr[..., [pos[m] for m in members]].mean(axis=-1)
    return out


# --------------------------------------------------------------------------------------------
# 6. Rankings  [MB100k Table 2, Tables 9–13]
# --------------------------------------------------------------------------------------------


def rank_descending(values: ArrayLike, axis: int = 0) -> FloatArray:
    """Ranks along ``axis`` with 1 = highest value, ties get the average rank, NaN stays NaN."""
    from scipy import stats as sps  # lazily: scipy.stats costs ~1 s at start-up

    arr = _as_float(values)
    ranks: FloatArray = sps.rankdata(-arr, method="average", axis=axis, nan_policy="omit")
    return ranks.astype(np.float64)


def ranking(means: ArrayLike) -> RankingResult:
    """Rank n responders on A attributes from an (n, A) matrix of mean scores.

    ``ranks[i, a]`` ranks responder i on attribute a (1 = best, average ranks for ties);
    ``mean_rank`` averages those ranks over attributes; ``overall_mean`` is the mean score over
    attributes (the "Avg" column of MB100k Tables 2, 9–13) and ``overall_rank`` ranks it.
    """
    arr = _as_float(means)
    if arr.ndim != 2:
        raise ValueError(f"expected an (n, A) matrix, got shape {arr.shape}")
    ranks = rank_descending(arr, axis=0)
    rated = ~np.isnan(ranks)
    n_rated = rated.sum(axis=1)
    # Average over the attributes a responder was ranked on; NaN if it was ranked on none.
    mean_rank = np.where(
        n_rated > 0, np.where(rated, ranks, 0.0).sum(axis=1) / np.maximum(n_rated, 1), np.nan
    )
    overall = arr.mean(axis=1)
    return RankingResult(ranks, mean_rank, overall, rank_descending(overall))


# --------------------------------------------------------------------------------------------
# 7. Inter-rater agreement among clinicians
# --------------------------------------------------------------------------------------------


def krippendorff_alpha(
    ratings: ArrayLike,
    *,
    level: Literal["nominal", "ordinal", "interval", "ratio"] = "ordinal",
    value_domain: Sequence[float] | None = None,
) -> Estimate:
    """Krippendorff's alpha of an items × raters matrix (NaN = not rated).

    Thin wrapper over the ``krippendorff`` package (which wants raters × items). Items with
    fewer than two ratings are not pairable and contribute nothing. ``value_domain`` (e.g.
    1..5) fixes the ordinal scale when some levels were never used; values outside it are
    treated as missing.
    """
    arr = _as_float(ratings)
    if arr.ndim != 2:
        raise ValueError(f"expected an (items, raters) matrix, got shape {arr.shape}")
    if value_domain is not None:
        # The package raises on out-of-domain values; a stray 0 on a 1–5 scale is treated as
        # "not rated" instead, the same way weighted_kappa drops values outside its labels.
        arr = np.where(np.isin(arr, _as_float(value_domain)), arr, np.nan)
    counts = np.isfinite(arr).sum(axis=1)
    pairable = int((counts >= 2).sum())
    if pairable == 0:
        return Estimate(math.nan, "no item was rated by two or more raters")
    values = arr[counts >= 2]
    distinct = np.unique(values[np.isfinite(values)])
    if distinct.size < 2:
        return Estimate(math.nan, f"all ratings are identical ({distinct[0]:g}): alpha undefined")
    kwargs = {} if value_domain is None else {"value_domain": list(value_domain)}
    try:
        value = float(krippendorff.alpha(arr.T, level_of_measurement=level, **kwargs))
    except (ValueError, ZeroDivisionError) as exc:  # defensive: package-level degenerate input
        return Estimate(math.nan, f"krippendorff: {exc}")
    if not np.isfinite(value):
        return Estimate(math.nan, "no disagreement expected by chance: alpha undefined")
    return Estimate(value)


def weighted_kappa(
    a: ArrayLike,
    b: ArrayLike,
    *,
    weights: Literal["linear", "quadratic"] | None = "linear",
    labels: Sequence[float] | None = None,
) -> Estimate:
    """Cohen's kappa for two raters, optionally linearly or quadratically weighted.

    κ_w = 1 − Σ w_ij O_ij / Σ w_ij E_ij with O the observed confusion matrix, E the outer
    product of the marginals scaled to the same total, and w_ij = |i − j| (linear) or
    (i − j)² (quadratic) over the *positions* of ``labels`` (default: sorted union of observed
    values), the same convention as ``sklearn.metrics.cohen_kappa_score``. Pass the full scale
    (e.g. ``labels=range(1, 6)``) so that unused levels still space the weights correctly.
    Pairs with a missing rating are dropped; values outside ``labels`` are dropped too.
    """
    x, y = paired_finite(a, b)
    if x.size < 2:
        return Estimate(math.nan, f"need ≥ 2 paired ratings, got {x.size}")
    lab = np.unique(np.concatenate([x, y])) if labels is None else np.unique(_as_float(labels))
    # Map values to label positions; values not in ``labels`` are dropped.
    ix = np.minimum(np.searchsorted(lab, x), lab.size - 1)
    iy = np.minimum(np.searchsorted(lab, y), lab.size - 1)
    keep = (lab[ix] == x) & (lab[iy] == y)
    ix, iy = ix[keep], iy[keep]
    if ix.size < 2:
        return Estimate(math.nan, f"need ≥ 2 paired ratings within labels, got {ix.size}")
    q = lab.size
    observed = np.zeros((q, q))
    np.add.at(observed, (ix, iy), 1.0)
    expected = np.outer(observed.sum(axis=1), observed.sum(axis=0)) / observed.sum()
    grid = np.arange(q)
    if weights is None:
        w = 1.0 - np.eye(q)
    elif weights == "linear":
        w = np.abs(grid[:, None] - grid[None, :]).astype(float)
    elif weights == "quadratic":
        w = ((grid[:, None] - grid[None, :]) ** 2).astype(float)
    else:
        raise ValueError(f"unknown weights {weights!r}")
    den = float(np.sum(w * expected))
    if den == 0.0:
        return Estimate(math.nan, "both raters used a single category: kappa undefined")
    return Estimate(1.0 - float(np.sum(w * observed)) / den)


# --------------------------------------------------------------------------------------------
# 8. Reliability guidance  [MB100k §5.4 "Reliability guidance matrix", §6.4, Appendix H]
# --------------------------------------------------------------------------------------------

_GUIDANCE_TEXT: Mapping[str, str] = {
    "suitable": (
        "The AI judge puts responses in the same order as clinicians and we are confident "
        "about it, so it can be used for this attribute after any fixed over- or under-scoring "
        "is corrected."
    ),
    "needs validation": (
        "The AI judge seems to order responses like clinicians, but with this little data the "
        "result could still be far worse, so check it against more clinician ratings before "
        "relying on it."
    ),
    "unreliable": (
        "We can say with confidence that the AI judge does not order responses the way "
        "clinicians do, so its scores should not replace clinician review for this attribute."
    ),
    "unsuitable": (
        "The AI judge agrees poorly with clinicians and the estimate is also very uncertain, "
        "so it should not be used for this attribute."
    ),
}


def reliability_guidance(
    icc_c1: float,
    ci_width: float,
    *,
    high_icc: float = GUIDANCE_HIGH_ICC,
    narrow_ci: float = GUIDANCE_NARROW_CI,
) -> Guidance:
    """The paper's 2×2 guidance matrix on ICC(C,1) and its bootstrap CI width [MB100k §5.4].

    "high ICC / narrow CI indicates reliable performance suitable for clinical use; high ICC /
    wide CI suggests potential but requires validation; low ICC / narrow CI reflects
    unreliability; and low ICC / wide CI denotes poor performance unsuitable for application."

    High means ICC(C,1) ≥ ``high_icc`` (default 0.75, the lower bound of "good" in Koo & Li
    2016, cited in §5.4); narrow means CI width ≤ ``narrow_ci`` (default 0.355, the GR cut-off
    of §5.4/§6.4). Returns verdict "suitable", "needs validation", "unreliable" or
    "unsuitable" with one plain-language sentence, or verdict None when either input is NaN.
    """
    if icc_c1 is None or ci_width is None or not (np.isfinite(icc_c1) and np.isfinite(ci_width)):
        return Guidance(
            None,
            "There is not enough usable data to judge how well the AI judge agrees with "
            "clinicians.",
            "ICC(C,1) or its confidence interval is undefined",
        )
    high = icc_c1 >= high_icc
    narrow = ci_width <= narrow_ci
    verdict = {
        (True, True): "suitable",
        (True, False): "needs validation",
        (False, True): "unreliable",
        (False, False): "unsuitable",
    }[(bool(high), bool(narrow))]
    return Guidance(verdict, _GUIDANCE_TEXT[verdict])


# --------------------------------------------------------------------------------------------
# 9. Calibration  [MB100k §6.3, Appendix H Scenario A: systematic bias is correctable]
# --------------------------------------------------------------------------------------------


def calibrate_affine(
    human: ArrayLike,
    judge: ArrayLike,
    *,
    train_fraction: float = 0.7,
    seed: SeedLike = 0,
) -> CalibrationResult:
    """Fit human ≈ a + b·judge by least squares on a seeded random split; score on the rest.

    Paired items (NaN pairs dropped) are permuted with ``seed``; the first
    round(train_fraction·n) form the training part. ``before`` compares raw judge scores with
    human scores on the held-out part, ``after`` compares a + b·judge. Undefined when the
    judge's training scores are constant (slope not identifiable) or either part is too small.
    """
    h, j = paired_finite(human, judge)
    n = int(h.size)
    nan = math.nan
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(f"train_fraction must be in (0, 1), got {train_fraction}")
    n_train = int(round(train_fraction * n))
    n_test = n - n_train
    if n_train < 2 or n_test < 1:
        return CalibrationResult(
            nan,
            nan,
            n_train,
            n_test,
            None,
            None,
            f"need ≥ 2 training and ≥ 1 held-out pairs, got {n_train} and {n_test}",
        )
    perm = _rng(seed).permutation(n)
    tr, te = perm[:n_train], perm[n_train:]
    jt, ht = j[tr], h[tr]
    var = float(np.var(jt))
    before = error_metrics(h[te], j[te])
    if var <= _REL_TOL * (1.0 + float(np.mean(jt**2))):
        return CalibrationResult(
            nan,
            nan,
            n_train,
            n_test,
            before,
            None,
            "judge scores are constant on the training part: slope undefined",
        )
    b = float(np.mean((jt - jt.mean()) * (ht - ht.mean())) / var)
    a = float(ht.mean() - b * jt.mean())
    after = error_metrics(h[te], a + b * j[te])
    return CalibrationResult(a, b, n_train, n_test, before, after)
