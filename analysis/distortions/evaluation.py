"""Evaluating distortion labels: final labels against clinicians' (Cohen's kappa per label,
item-level agreement) and a classifier's predictions against the truth (weighted F1, F1_random,
κ_F1 with a simulated random baseline)  [CD §3.1, §5.2–5.3, Appendix J]."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike, NDArray

from analysis.distortions.agreement import (
    cohen_kappa_binary,
    f1_random_baseline,
    kappa_f1,
    weighted_f1,
)
from analysis.distortions.consensus import Consensus, final_sets
from analysis.distortions.labels import AMBIGUOUS_LABELS, Kind, LabelSpec, label_names
from analysis.stats import FloatArray
from scoring.distortions import OTHERS

# --------------------------------------------------------------------------------------------
# Agreement of final labels with clinicians
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClinicianAgreement:
    """Final (LLM-consensus) labels against clinicians' labels, item by item.

    ``per_label``: Cohen's kappa and agreement (share of items where both say present or both
    say absent) per label. All agreements are proportions in [0, 1].
    Item-level joint probability of agreement (the statistic Shreevastava & Foltz report as
    33.7% for their two annotators, §3.1), in three readings because the paper does not say
    which one was used: ``exact`` (same label set), ``dominant`` (same first label) and
    ``overlap`` (at least one label in common).
    """

    per_label: pd.DataFrame
    mean_kappa: float
    exact: float
    dominant: float
    overlap: float
    n_items: int
    n_excluded: int


def clinician_agreement(
    final_labels: Sequence[Consensus | Sequence[str]],
    clinician_labels: Sequence[Sequence[str] | None],
    *,
    labels: LabelSpec | None = None,
    exclude_ambiguous: bool = True,
) -> ClinicianAgreement:
    """Agreement of final labels with one clinician's (or a clinician consensus's) labels.

    Items without clinician labels are excluded, and with ``exclude_ambiguous`` (default, as
    §4.2 does for modelling) so are items whose final label is a special category; both are
    counted in ``n_excluded``. Labels: the label set plus "Others" when either side uses it.
    """
    ours = final_sets(final_labels)
    if len(ours) != len(clinician_labels):
        raise ValueError(f"{len(ours)} final label sets but {len(clinician_labels)} clinician sets")
    names = label_names(labels)
    pairs = []
    for mine, theirs in zip(ours, clinician_labels, strict=True):
        if not theirs:
            continue
        if exclude_ambiguous and (not mine or set(mine) & set(AMBIGUOUS_LABELS)):
            continue
        pairs.append((list(dict.fromkeys(mine)), list(dict.fromkeys(theirs))))
    seen = {lab for pair in pairs for side in pair for lab in side}
    columns = names + [lab for lab in (OTHERS, *AMBIGUOUS_LABELS) if lab in seen]
    unknown = seen - set(columns)
    if unknown:
        raise ValueError(f"labels outside the label set: {sorted(unknown)}")
    col = {lab: j for j, lab in enumerate(columns)}
    a = np.zeros((len(pairs), len(columns)), dtype=bool)
    b = np.zeros_like(a)
    for i, (mine, theirs) in enumerate(pairs):
        a[i, [col[lab] for lab in mine]] = True
        b[i, [col[lab] for lab in theirs]] = True
    kappa, agree, reasons = cohen_kappa_binary(a, b)
    per_label = pd.DataFrame(
        {
            "label": columns,
            "n": len(pairs),
            "kappa": kappa,
            "agreement": agree,
            "final_prevalence": a.mean(axis=0) if len(pairs) else np.nan,
            "clinician_prevalence": b.mean(axis=0) if len(pairs) else np.nan,
            "reason": reasons,
        }
    ).set_index("label")
    finite = kappa[np.isfinite(kappa)]
    n = len(pairs)

    def share(hit: Iterable[bool]) -> float:
        return float(np.mean(list(hit))) if n else math.nan

    return ClinicianAgreement(
        per_label=per_label,
        mean_kappa=float(finite.mean()) if finite.size else math.nan,
        exact=share(set(m) == set(t) for m, t in pairs),
        dominant=share(m[0] == t[0] for m, t in pairs),
        overlap=share(bool(set(m) & set(t)) for m, t in pairs),
        n_items=n,
        n_excluded=len(ours) - n,
    )


# --------------------------------------------------------------------------------------------
# κ_F1 — chance-corrected weighted F1  [CD §5.2–5.3, Appendix J]
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KappaF1Report:
    """Weighted F1, its random baseline (closed form and simulated) and κ_F1.

    ``proportions``: p_c (binary/multiclass: share of items in class c; multilabel: share of
    items carrying label c). ``sim_mean``/``sim_sd``: weighted F1 of ``n_sim`` random
    assignments drawn from those proportions (Appendix J.1); ``sim_se`` = sd/√n_sim.
    """

    kind: str
    labels: list[str]
    n_items: int
    proportions: dict[str, float]
    f1: float
    f1_random: float
    kappa_f1: float
    sim_mean: float
    sim_sd: float
    n_sim: int
    reason: str | None = None

    @property
    def sim_se(self) -> float:
        return self.sim_sd / math.sqrt(self.n_sim) if self.n_sim > 0 else math.nan

    @property
    def sim_z(self) -> float:
        """(simulated mean − closed form) in standard errors of the simulated mean."""
        se = self.sim_se
        return (self.sim_mean - self.f1_random) / se if se and se > 0 else math.nan


def _class_index(
    values: Sequence[object], classes: list[object], *, what: str
) -> NDArray[np.int64]:
    pos = {c: j for j, c in enumerate(classes)}
    try:
        return np.fromiter((pos[v] for v in values), dtype=np.int64, count=len(values))
    except KeyError as exc:
        raise ValueError(f"{what}: label {exc.args[0]!r} is not in labels {classes}") from None


def weighted_f1_batch_classes(
    t_idx: NDArray[np.int64], preds: NDArray[np.int64], n_classes: int
) -> FloatArray:
    """Weighted F1 of each row of ``preds`` (B, N) against ``t_idx`` (N,) — vectorised."""
    b, n = preds.shape
    offsets = (np.arange(b) * n_classes)[:, None]
    match = preds == t_idx[None, :]
    tp = np.bincount((offsets + t_idx[None, :])[match], minlength=b * n_classes)
    pred_count = np.bincount((offsets + preds).ravel(), minlength=b * n_classes)
    tp = tp.reshape(b, n_classes).astype(float)
    pred_count = pred_count.reshape(b, n_classes)
    support = np.bincount(t_idx, minlength=n_classes).astype(float)
    den = pred_count + support[None, :]
    f1 = np.divide(2.0 * tp, den, out=np.zeros_like(tp), where=den > 0)
    weighted: FloatArray = (f1 * support).sum(axis=1) / n
    return weighted


def weighted_f1_batch_multilabel(truth: NDArray[np.bool_], preds: NDArray[np.bool_]) -> FloatArray:
    """Weighted F1 of each (N, L) slice of ``preds`` (B, N, L) against ``truth`` (N, L)."""
    tp = (preds & truth[None]).sum(axis=1).astype(float)
    pred_count = preds.sum(axis=1)
    support = truth.sum(axis=0).astype(float)
    den = pred_count + support[None, :]
    f1 = np.divide(2.0 * tp, den, out=np.zeros_like(tp), where=den > 0)
    weighted: FloatArray = (f1 * support).sum(axis=1) / support.sum()
    return weighted


def _report(progress: Callable[[float], None] | None, sims: list[FloatArray], n_sim: int) -> None:
    if progress is not None:
        progress(sum(s.size for s in sims) / max(n_sim, 1))


def _chunks(total: int, size: int) -> Iterable[int]:
    while total > 0:
        yield min(size, total)
        total -= size


def _indicator(
    y: Sequence[Iterable[str]], classes: Sequence[object], *, what: str
) -> NDArray[np.bool_]:
    """(items, labels) boolean matrix from label collections (columns in ``classes`` order)."""
    col = {c: j for j, c in enumerate(classes)}
    sets = list(y)
    m = np.zeros((len(sets), len(classes)), dtype=bool)
    for i, s in enumerate(sets):
        if isinstance(s, str):
            raise ValueError(f"{what}, item {i}: a multilabel item is a collection, got {s!r}")
        for lab in s:
            if lab not in col:
                raise ValueError(f"{what}, item {i}: label {lab!r} is not in labels {classes}")
            m[i, col[lab]] = True
    return m


def _is_matrix(y: object) -> bool:
    return isinstance(y, np.ndarray) and y.ndim == 2 and y.dtype != object


def kappa_f1_report(
    y_true: Sequence[object] | ArrayLike,
    y_pred: Sequence[object] | ArrayLike,
    *,
    kind: Kind,
    labels: Sequence[str] | None = None,
    n_sim: int = 1000,
    seed: int = 0,
    progress: Callable[[float], None] | None = None,
) -> KappaF1Report:
    """Weighted F1, F1_random, κ_F1 and a simulated random baseline [CD §5.2–5.3, App. J].

    - F1: support-weighted F1 (sklearn ``average="weighted"``; binary tasks weight both
      classes, as the paper's binary F1_random ≈ p² + (1 − p)² in Table 10 implies).
    - F1_random, binary/multiclass: Σ_c p_c² (§5.2: random assignment with the true class
      distribution gives precision = recall = F1 = p_c per class; weighted, a² + b² + c²).
    - F1_random, multilabel: the paper applies "the proposed formula in section 5.2" (App. J)
      without saying what p_c is. We use the same derivation per label: label c is assigned
      at random with its prevalence q_c (share of items carrying it), so its precision = recall
      = F1 = q_c, and the support weights are q_c / Σ q: F1_random = Σ q_c² / Σ q_c. This
      equals Σ p_c² when every item has one label, and it is what the simulation (same F1 as
      the model's) converges to, so κ_F1 compares like with like.
    - κ_F1 = (F1 − F1_random) / (1 − F1_random) (§5.3).
    - Simulation (App. J.1: "random label assignment using np.random.choice ... repeated 1000
      times"): ``n_sim`` assignments, vectorised; multiclass draws each prediction from p,
      multilabel draws each label independently with probability q_c. The closed form is the
      large-N value: F1 is a ratio, so the simulated mean sits below it by O(1/N) (about
      0.1/N for a 65:35 binary task), well under one standard error of the mean for N ≥ 100
      and n_sim = 1000; ``sim_z`` reports the gap in standard errors.

    Args:
        y_true, y_pred: binary/multiclass: one label per item; multilabel: a label collection
            per item, or (items, labels) 0/1 matrices (then ``labels`` names the columns).
        labels: class order (and the allowed set); default: sorted union of both sides.
        progress: called with the fraction of the simulations done after each chunk (a
            background job's progress bar); whatever it raises stops the computation.
    """
    if kind not in ("binary", "multiclass", "multilabel"):
        raise ValueError(f"kind must be binary, multiclass or multilabel, got {kind!r}")
    rng = np.random.default_rng(seed)
    nan = math.nan
    classes: list[object]
    if kind == "multilabel":
        if _is_matrix(y_true) and _is_matrix(y_pred):
            truth = np.asarray(y_true).astype(bool)
            pred = np.asarray(y_pred).astype(bool)
            width = truth.shape[1]
            classes = list(labels) if labels is not None else [str(j) for j in range(width)]
            if len(classes) != width:
                raise ValueError(f"{len(classes)} labels for {width} indicator columns")
        else:
            # Not matrices: a label collection per item (_indicator checks each).
            true_sets = cast(Sequence[Iterable[str]], y_true)
            pred_sets = cast(Sequence[Iterable[str]], y_pred)
            if labels is not None:
                classes = list(labels)
            else:
                both = list(true_sets) + list(pred_sets)
                classes = sorted({lab for s in both for lab in s}, key=str)
            truth = _indicator(true_sets, classes, what="y_true")
            pred = _indicator(pred_sets, classes, what="y_pred")
        if truth.shape != pred.shape:
            raise ValueError(f"y_true and y_pred differ in shape: {truth.shape} vs {pred.shape}")
        n_items = truth.shape[0]
        names = [str(c) for c in classes]
        q = truth.mean(axis=0) if n_items else np.zeros(truth.shape[1])
        f1 = weighted_f1(truth, pred)
        f1_random = float((q**2).sum() / q.sum()) if q.sum() > 0 else nan
        proportions = dict(zip(names, map(float, q), strict=True))
        sims: list[FloatArray] = []
        # Chunks keep the (B, N, L) draw (uniform float64s, 8 bytes each) under ~40 MB whatever
        # n_sim is, so memory grows with the file, not with n_sim.
        step = max(1, int(5e6 // max(1, truth.size)))
        for b in _chunks(n_sim if n_items else 0, step):
            draws = rng.random((b, *truth.shape)) < q[None, None, :]
            sims.append(weighted_f1_batch_multilabel(truth, draws))
            _report(progress, sims, n_sim)
    else:
        t_list, p_list = list(y_true), list(y_pred)  # type: ignore[arg-type]
        if len(t_list) != len(p_list):
            raise ValueError(f"y_true has {len(t_list)} items, y_pred {len(p_list)}")
        classes = list(labels) if labels is not None else sorted(set(t_list) | set(p_list), key=str)
        if kind == "binary" and len(classes) > 2:
            raise ValueError(f"binary task with {len(classes)} classes: {classes}")
        t_idx = _class_index(t_list, classes, what="y_true")
        p_idx = _class_index(p_list, classes, what="y_pred")
        n_items = t_idx.size
        names = [str(c) for c in classes]
        p = np.bincount(t_idx, minlength=len(classes)) / max(n_items, 1)
        f1 = weighted_f1(t_idx, p_idx, labels=np.arange(len(classes)))
        baseline = f1_random_baseline(t_idx)
        f1_random = baseline.value
        proportions = dict(zip(names, map(float, p), strict=True))
        sims = []
        step = max(1, int(5e6 // max(1, n_items)))
        for b in _chunks(n_sim if n_items else 0, step):
            drawn = rng.choice(len(classes), size=(b, n_items), p=p)
            sims.append(weighted_f1_batch_classes(t_idx, drawn, len(classes)))
            _report(progress, sims, n_sim)
    simulated = np.concatenate(sims) if sims else np.array([])
    kappa = kappa_f1(f1.value, f1_random)
    return KappaF1Report(
        kind=kind,
        labels=names,
        n_items=int(n_items),
        proportions=proportions,
        f1=f1.value,
        f1_random=float(f1_random),
        kappa_f1=kappa.value,
        sim_mean=float(simulated.mean()) if simulated.size else nan,
        sim_sd=float(simulated.std(ddof=1)) if simulated.size > 1 else nan,
        n_sim=int(simulated.size),
        reason=f1.reason or kappa.reason,
    )
