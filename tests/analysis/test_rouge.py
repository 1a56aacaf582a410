"""analysis.rouge: ROUGE-L on hand-worked examples, the correlation against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from analysis.rouge import correlation, rouge_l

sps = pytest.importorskip("scipy.stats")


def test_rouge_l_known_values() -> None:
    ref = "the cat sat on the mat"
    out = rouge_l(["the cat sat on the mat", "dogs bark loudly", "the cat lay on a mat"], ref)
    # LCS("the cat sat on the mat", "the cat lay on a mat") = "the cat on mat": P = R = 4/6.
    np.testing.assert_allclose(out, [1.0, 0.0, 4 / 6])


def test_rouge_l_per_pair_references_and_missing_text() -> None:
    out = rouge_l(["a b c", None], ["a b d", "x"])
    assert out[0] == pytest.approx(2 / 3)
    assert math.isnan(out[1])


def test_correlation_matches_scipy() -> None:
    rng = np.random.default_rng(1)
    x = rng.normal(size=80)
    y = 0.5 * x + rng.normal(size=80)
    x[0] = np.nan
    res = correlation(x, y)
    assert res.n == 79
    assert res.pearson_r == pytest.approx(sps.pearsonr(x[1:], y[1:]).statistic, rel=1e-12)
    assert res.spearman_rho == pytest.approx(sps.spearmanr(x[1:], y[1:]).statistic, rel=1e-12)
    assert res.pearson_p == pytest.approx(sps.pearsonr(x[1:], y[1:]).pvalue, rel=1e-9)


def test_correlation_degenerate() -> None:
    assert "constant" in correlation([1, 1, 1, 1], [1, 2, 3, 4]).reason
    assert math.isnan(correlation([1, 2], [2, 1]).pearson_r)


def test_rouge_logs_nothing(caplog) -> None:
    """The scorer, left to pick its tokenizer, logged "Using default tokenizer." at INFO on
    every report (the server's log printed it eleven times a page); it is given the same
    tokenizer by name."""
    import logging

    with caplog.at_level(logging.DEBUG):
        rouge_l(["a kind reply"], "a kind and warm reply")
    assert not [r for r in caplog.records if "tokenizer" in r.getMessage()]
