"""The alternative annotator test (alt-test): may an LLM judge replace the clinicians?

Calderon, Reichart & Dror, "The Alternative Annotator Test for LLM-as-a-Judge: How to
Statistically Justify Replacing Human Annotators with LLMs", ACL 2025 (arXiv 2501.10970), §3.
Pure numpy/scipy on plain mappings, no Django (docs/analysis.md, "Can a judge replace the
clinicians?").

Leave one human out at a time. On every instance the excluded human annotated together with at
least one other human, score how well the excluded human's annotation and the LLM's align with
the *remaining* humans' annotations (``accuracy``: the share of them it equals; ``neg_rmse``:
minus the root mean squared difference from them). The LLM "wins" an instance when it aligns at
least as well (W^f_i = 1 if its score ≥ the human's), the human when they align at least as well
(W^h_i likewise; a tie counts for both). With d_i = W^h_i − W^f_i, a one-sided one-sample t-test
of H0: mean(d) ≥ ε against H1: mean(d) < ε asks whether the LLM is at least as good as this human
up to the cost-benefit margin ε (0.2 for experts, 0.15 skilled annotators, 0.1 crowd workers).
The p-values of all excluded humans are corrected together by the Benjamini–Yekutieli procedure
(FDR q, valid under any dependence between them). The **winning rate** ω is the share of humans
whose hypothesis is rejected; the LLM **passes** when ω ≥ 0.5. The **advantage probability** ρ,
the mean over humans of mean(W^f), estimates the chance that the LLM is as good as or better than
a randomly chosen human; it compares judges, whatever ε.

As in the authors' code: instances with fewer than ``min_humans_per_instance`` humans or without
an LLM annotation are dropped first, then a human with fewer than ``min_instances_per_human`` of
the rest is not tested (the t-test's normality needs about 30), and a human counts in ω's
denominator only when tested.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

METRICS = ("accuracy", "neg_rmse")
#: ε for expert annotators, the authors' rule of thumb (clinicians are experts).
DEFAULT_EPSILON = 0.2
DEFAULT_Q = 0.05
MIN_HUMANS_PER_INSTANCE = 2
MIN_INSTANCES_PER_HUMAN = 30
#: The winning rate at which the LLM passes.
PASS_RATE = 0.5

Annotations = Mapping[Any, object]


@dataclass(frozen=True)
class HumanComparison:
    """One excluded human: instances compared, the LLM's and the human's win shares, the
    one-sided p-value and whether Benjamini–Yekutieli rejected it (the LLM wins this human)."""

    human: Hashable
    n_instances: int
    llm_advantage: float  # mean W^f: the LLM aligns at least as well as this human
    human_advantage: float  # mean W^h
    p_value: float
    llm_wins: bool


@dataclass(frozen=True)
class AltTestResult:
    """The test's outcome; ``winning_rate``/``advantage_probability`` are NaN and ``passed``
    None, with ``reason`` in words, when no human could be tested."""

    winning_rate: float
    advantage_probability: float
    passed: bool | None
    epsilon: float
    metric: str
    q: float
    n_instances: int
    humans: list[HumanComparison] = field(default_factory=list)
    reason: str | None = None

    @property
    def n_humans(self) -> int:
        return len(self.humans)


def _matrix(
    humans: Mapping[Any, Annotations], llm: Annotations, metric: str
) -> tuple[list[Hashable], np.ndarray, np.ndarray]:
    """Instances (in first-seen order) × humans, and the LLM's column, as floats (NaN: not
    annotated). For accuracy, annotations are coded jointly so that equal values (by Python's
    ==, as the authors compare them) get equal codes."""
    instances: dict[Hashable, int] = {}
    for anns in humans.values():
        for i in anns:
            instances.setdefault(i, len(instances))
    names = list(instances)
    h_cols = [[anns.get(i) for i in names] for anns in humans.values()]
    l_col = [llm.get(i) for i in names]
    if metric == "accuracy":
        values = [v for col in (*h_cols, l_col) for v in col]
        present = [v is not None for v in values]
        codes, _ = pd.factorize(pd.Series([v for v in values if v is not None], dtype=object))
        coded = np.full(len(values), np.nan)
        coded[np.flatnonzero(present)] = codes
        flat = coded
    else:
        flat = np.array(
            [math.nan if v is None else float(v) for col in (*h_cols, l_col) for v in col],  # type: ignore[arg-type]
            dtype=np.float64,
        )
    grid = flat.reshape(len(h_cols) + 1, len(names)).T
    return names, grid[:, :-1], grid[:, -1]


def _alignment(pred: np.ndarray, others: np.ndarray, metric: str) -> np.ndarray:
    """Each row's alignment of ``pred`` (n,) with the non-NaN entries of ``others`` (n, m)."""
    have = np.isfinite(others)
    count = have.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        if metric == "accuracy":
            same = (others == pred[:, None]) & have
            return np.asarray(same.sum(axis=1) / count, dtype=np.float64)
        sq = np.where(have, (others - pred[:, None]) ** 2, 0.0)
        return np.asarray(-np.sqrt(sq.sum(axis=1) / count), dtype=np.float64)


def alt_test(
    *,
    humans: Mapping[Any, Annotations],
    llm: Annotations,
    metric: str = "accuracy",
    epsilon: float = DEFAULT_EPSILON,
    q: float = DEFAULT_Q,
    min_humans_per_instance: int = MIN_HUMANS_PER_INSTANCE,
    min_instances_per_human: int = MIN_INSTANCES_PER_HUMAN,
    reference: Annotations | None = None,
) -> AltTestResult:
    """The alt-test of one LLM against ``humans`` (human id → {instance id: annotation}); see
    the module doc. ``llm`` is {instance id: annotation}; a None annotation is missing.

    ``reference`` ({instance id: annotation}, e.g. an adjudicator's final scores): on an
    instance it holds, the excluded human and the LLM are both scored against that one
    annotation instead of the remaining humans'; which instances are kept and which humans are
    tested does not change. Without it (or on the instances it lacks) the test is the
    authors'."""
    from scipy import stats  # lazily: scipy.stats costs about a second at start-up

    if metric not in METRICS:
        raise ValueError(f"metric must be one of {', '.join(METRICS)}, got {metric!r}")
    if not 0.0 <= epsilon < 1.0:
        raise ValueError(f"epsilon must be in [0, 1), got {epsilon!r}")
    if not 0.0 < q < 1.0:
        raise ValueError(f"q must be strictly between 0 and 1, got {q!r}")
    given = {} if reference is None else {i: v for i, v in reference.items() if v is not None}
    # The reference joins the matrix as one more column (coded with the rest for accuracy),
    # under a key no human id can be.
    marker = object()
    names, grid, pred = _matrix({**humans, marker: given} if given else humans, llm, metric)
    ref = grid[:, -1] if given else np.full(len(names), np.nan)
    grid = grid[:, :-1] if given else grid
    ids = list(humans)
    kept = (np.isfinite(grid).sum(axis=1) >= min_humans_per_instance) & np.isfinite(pred)
    grid, pred, ref = grid[kept], pred[kept], ref[kept]
    compared: list[HumanComparison] = []
    for h, human in enumerate(ids):
        rows = np.isfinite(grid[:, h])
        if int(rows.sum()) < min_instances_per_human:
            continue
        others = np.delete(grid[rows], h, axis=1)
        settled = np.isfinite(ref[rows])
        # Where the reference holds the instance, it alone is what both are compared with.
        others = np.where(settled[:, None], np.nan, others)
        others = np.column_stack([others, np.where(settled, ref[rows], np.nan)])
        human_score = _alignment(grid[rows, h], others, metric)
        llm_score = _alignment(pred[rows], others, metric)
        w_llm = (llm_score >= human_score).astype(np.float64)
        w_human = (human_score >= llm_score).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            p = float(stats.ttest_1samp(w_human - w_llm, epsilon, alternative="less").pvalue)
        compared.append(
            HumanComparison(
                human=human,
                n_instances=int(rows.sum()),
                llm_advantage=float(w_llm.mean()),
                human_advantage=float(w_human.mean()),
                p_value=p,
                llm_wins=False,
            )
        )
    n_instances = int(kept.sum())
    if not compared:
        return AltTestResult(
            math.nan,
            math.nan,
            None,
            epsilon,
            metric,
            q,
            n_instances,
            [],
            f"no human annotated {min_instances_per_human} or more instances that at least "
            f"{min_humans_per_instance} humans and the LLM annotated ({n_instances} such "
            "instances in all)",
        )
    # A p-value the t-test could not give (every d_i equal to ε) rejects nothing.
    p_values = np.nan_to_num(np.array([c.p_value for c in compared]), nan=1.0)
    rejected = stats.false_discovery_control(p_values, method="by") <= q
    compared = [
        HumanComparison(
            c.human, c.n_instances, c.llm_advantage, c.human_advantage, c.p_value, bool(r)
        )
        for c, r in zip(compared, rejected, strict=True)
    ]
    winning_rate = float(rejected.mean())
    return AltTestResult(
        winning_rate=winning_rate,
        advantage_probability=float(np.mean([c.llm_advantage for c in compared])),
        passed=winning_rate >= PASS_RATE,
        epsilon=epsilon,
        metric=metric,
        q=q,
        n_instances=n_instances,
        humans=compared,
    )
