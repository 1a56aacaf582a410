"""ROUGE-L of responses against a reference text, and its correlation with clinicians' scores.

MentalBench-10 §1: lexical overlap with a reference says little about therapeutic quality; the
dashboard's ROUGE table (analysis.selectors.rouge_tables) shows how little, per attribute. Pure
functions on plain values and numpy arrays.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from analysis.stats import FloatArray, paired_finite


@dataclass(frozen=True, slots=True)
class CorrelationResult:
    """Pearson r and Spearman ρ with their p-values, or NaN with the reason."""

    pearson_r: float
    pearson_p: float
    spearman_rho: float
    spearman_p: float
    n: int
    reason: str | None = None


def rouge_l(responses: Sequence[str], references: Sequence[str] | str) -> FloatArray:
    """ROUGE-L F-measure of each response against its reference text (no stemming).

    ``references`` is one string per response or a single string used for all. Missing text
    (None) gives NaN; an empty text scores 0.
    """
    from rouge_score import rouge_scorer, tokenizers  # imported lazily: it pulls in nltk

    refs = [references] * len(responses) if isinstance(references, str) else list(references)
    if len(refs) != len(responses):
        raise ValueError(f"{len(responses)} responses but {len(refs)} references")
    # The library's own default tokenizer, named: left to choose it, the scorer prints "Using
    # default tokenizer." through absl's logging on every report.
    scorer = rouge_scorer.RougeScorer(
        ["rougeL"], use_stemmer=False, tokenizer=tokenizers.DefaultTokenizer(use_stemmer=False)
    )
    out = np.full(len(responses), np.nan)
    for i, (resp, ref) in enumerate(zip(responses, refs, strict=True)):
        if resp is None or ref is None:
            continue
        out[i] = scorer.score(ref, resp)["rougeL"].fmeasure
    return out


def correlation(x: ArrayLike, y: ArrayLike) -> CorrelationResult:
    """Pearson r and Spearman ρ (with p-values) over positions where both are present."""
    from scipy import stats as sps  # lazily: scipy.stats costs ~1 s at start-up

    a, b = paired_finite(x, y)
    n = int(a.size)
    nan = math.nan
    if n < 3:
        return CorrelationResult(nan, nan, nan, nan, n, f"need ≥ 3 paired values, got {n}")
    if np.all(a == a[0]) or np.all(b == b[0]):
        return CorrelationResult(nan, nan, nan, nan, n, "one variable is constant")
    pr = sps.pearsonr(a, b)
    sr = sps.spearmanr(a, b)
    return CorrelationResult(
        float(pr.statistic), float(pr.pvalue), float(sr.statistic), float(sr.pvalue), n
    )
