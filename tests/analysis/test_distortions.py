"""analysis.distortions: Appendix G consensus rule by rule, Figure 2 repetitions, per-label Fleiss
(vs statsmodels), Table 7/8 layouts, Cohen per label (vs sklearn), κ_F1 (hand values, §5.2 worked
example, simulation vs closed form), predictions CSV errors, the stratified split.

Pure Python/numpy/pandas (no Django, no database).
"""

from __future__ import annotations

import io
import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analysis import stats
from analysis.distortions.agreement import cohen_kappa_binary, kappa_f1
from analysis.distortions.consensus import (
    consensus_for_items,
    consensus_labels,
    label_distribution_table,
    unambiguous_mask,
)
from analysis.distortions.consistency import (
    fleiss_table,
    label_indicators,
    max_repetition_distribution,
    per_label_fleiss,
)
from analysis.distortions.evaluation import (
    clinician_agreement,
    kappa_f1_report,
    weighted_f1_batch_classes,
    weighted_f1_batch_multilabel,
)
from analysis.distortions.labels import (
    NOT_SURE_IF_DISTORTION,
    NOT_SURE_WHICH_DISTORTION,
    Kind,
    label_names,
)
from analysis.distortions.predictions_csv import PredictionsCsvError, read_predictions_csv
from analysis.distortions.splits import stratified_split
from judging.prompts import NO_DISTORTION
from scoring.distortions import OTHERS

sk_metrics = pytest.importorskip("sklearn.metrics")
sm_irr = pytest.importorskip("statsmodels.stats.inter_rater")

ER, FT, LAB, MR, PERS, OG = (
    "Emotional Reasoning",
    "Fortune Telling",
    "Labeling",
    "Mind Reading",
    "Personalization",
    "Overgeneralization",
)
ND = NO_DISTORTION
CDS = [n for n in label_names() if n != ND]


# ============================================================================================
# Appendix G — final label selection, every rule
# ============================================================================================


def test_threshold_label_in_all_five_runs() -> None:
    result = consensus_labels([[LAB]] * 5)
    assert result.labels == [LAB]
    assert result.rule == "threshold"
    assert not result.ambiguous


def test_threshold_is_at_least_four_of_five() -> None:
    # "we selected only those labels that appear at least four times across five runs"
    four = consensus_labels([[LAB], [LAB], [LAB], [LAB], [MR]])
    assert four.labels == [LAB]
    three = consensus_labels([[LAB], [LAB], [LAB], [MR], [FT]])
    assert three.labels == [NOT_SURE_WHICH_DISTORTION]


def test_several_labels_can_pass_the_threshold() -> None:
    runs = [[ER, LAB], [ER, LAB], [LAB, ER], [ER, LAB, MR], [ER]]
    result = consensus_labels(runs, scheme="multi")
    assert result.labels == [ER, LAB]  # 5 runs, then 4 runs
    assert result.counts == {ER: 5, LAB: 4, MR: 1}


def test_a_label_counts_once_per_run() -> None:
    runs = [[LAB, LAB], [LAB, LAB], [MR], [FT], [ER]]
    assert consensus_labels(runs).labels == [NOT_SURE_WHICH_DISTORTION]


def test_ranked_scheme_counts_secondary_labels_too() -> None:
    # Figure 1, GPT4-0.7 RLP: Pers. in all five runs, ER three times, FT twice -> Pers.
    runs = [[PERS, FT], [PERS, ER], [PERS, ER], [PERS, ER], [PERS, FT]]
    assert consensus_labels(runs, scheme="ranked").labels == [PERS]
    # A label that was only ever secondary still passes when it is in ≥ 4 runs.
    runs = [[ER, LAB], [FT, LAB], [MR, LAB], [OG, LAB], [ER]]
    assert consensus_labels(runs, scheme="ranked").labels == [LAB]


def test_ranked_order_puts_the_label_ranked_first_more_often_first() -> None:
    # LAB is in all five runs but always second; ER is ranked first in four runs.
    runs = [[ER, LAB], [ER, LAB], [ER, LAB], [ER, LAB], [FT, LAB]]
    result = consensus_labels(runs, scheme="ranked")
    assert result.labels == [ER, LAB]
    assert result.dominant == ER
    # The multi scheme orders by runs instead.
    assert consensus_labels(runs, scheme="multi").labels == [LAB, ER]


def test_no_distortion_passes_like_any_label() -> None:
    result = consensus_labels([[ND], [ND], [ND], [ND], [LAB]])
    assert result.labels == [ND]
    assert result.rule == "threshold"


def test_not_sure_if_distortion_when_no_distortion_appeared_at_least_once() -> None:
    # "If none of the labels met the threshold but 'No Distortion' appeared in at least one
    # run, we labeled the instance as 'not sure if distortion'"
    result = consensus_labels([[LAB], [LAB], [LAB], [MR], [ND]])
    assert result.labels == [NOT_SURE_IF_DISTORTION]
    assert result.rule == NOT_SURE_IF_DISTORTION
    assert result.ambiguous
    # Figure 1, GPT4o-0.5 MLP: ND three times, Pers. twice.
    runs = [[ND], [ND], [ND], [PERS], [PERS]]
    assert consensus_labels(runs).labels == [NOT_SURE_IF_DISTORTION]


def test_not_sure_which_distortion_when_diverse_and_no_distortion_absent() -> None:
    # "if the labels were too diverse without reaching any consensus and 'No Distortion' was
    # absent, we marked it as 'not sure which distortion'"
    result = consensus_labels([[LAB, MR], [LAB, FT], [LAB], [MR, ER], [FT, OG]])
    assert result.labels == [NOT_SURE_WHICH_DISTORTION]
    assert result.rule == NOT_SURE_WHICH_DISTORTION
    assert result.ambiguous


def test_others_accompanied_by_a_listed_label_is_ignored() -> None:
    # "'Others' was accompanied by at least one CD label from the given list. In such cases,
    # it was simply ignored and further processing was done based on the remaining labels."
    runs = [[OTHERS, LAB]] * 5
    result = consensus_labels(runs)
    assert result.labels == [LAB]
    assert OTHERS not in result.counts


def test_others_alone_is_retained_and_can_be_the_final_label() -> None:
    # "The 'Others' label was retained only in cases where it was not accompanied by any other
    # CD label." Table 8 has 2 such items (GPT4-0.x RLP).
    runs = [[OTHERS], [OTHERS], [OTHERS], [OTHERS], [LAB]]
    assert consensus_labels(runs).labels == [OTHERS]


def test_others_rule_is_applied_per_run_before_counting() -> None:
    # Others in all five runs, but accompanied in two: only 3 runs keep it -> below threshold.
    runs = [[OTHERS], [OTHERS], [OTHERS], [OTHERS, LAB], [MR, OTHERS]]
    result = consensus_labels(runs)
    assert result.counts[OTHERS] == 3
    assert result.labels == [NOT_SURE_WHICH_DISTORTION]


def test_others_never_blocks_not_sure_if_distortion() -> None:
    runs = [[OTHERS], [OTHERS], [ND], [LAB], [MR]]
    assert consensus_labels(runs).labels == [NOT_SURE_IF_DISTORTION]


def test_majority_vote_variant_k3() -> None:
    # §4.1: "traditionally carried out by majority voting, i.e., labels appearing in at least 3
    # out of 5 runs"
    runs = [[LAB], [LAB], [LAB], [MR], [FT]]
    assert consensus_labels(runs, k=3).labels == [LAB]


def test_failed_runs_count_as_runs_without_labels() -> None:
    assert consensus_labels([[LAB], [LAB], [LAB], [LAB], None]).labels == [LAB]
    result = consensus_labels([[LAB], [LAB], [LAB], None, None])
    assert result.labels == [NOT_SURE_WHICH_DISTORTION]
    assert result.n_valid_runs == 3
    nothing = consensus_labels([None] * 5)
    assert nothing.labels == [] and nothing.rule == "no valid runs" and nothing.ambiguous


@pytest.mark.parametrize(
    ("runs", "kwargs", "match"),
    [
        ([[LAB]] * 4, {}, "expected 5 runs"),
        ([[LAB]] * 5, {"k": 6}, "1 ≤ k ≤ n"),
        ([[LAB]] * 4 + [["Paranoia"]], {}, "unknown label"),
        ([[LAB, MR, FT]] + [[LAB]] * 4, {"scheme": "ranked"}, "≤ 2 labels"),
        ([LAB] * 5, {}, "a run is a list"),
    ],
)
def test_consensus_rejects_malformed_input(runs: list, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        consensus_labels(runs, **kwargs)


def test_consensus_for_items_names_the_item() -> None:
    with pytest.raises(ValueError, match="item 1"):
        consensus_for_items([[[LAB]] * 5, [[LAB]] * 4])


def test_unambiguous_mask_drops_items_ambiguous_in_any_setting() -> None:
    # §4.2: a valid RLP label but an ambiguous MLP label -> excluded from all settings.
    rlp = [[LAB], [MR], [NOT_SURE_IF_DISTORTION], [ND]]
    mlp = [[LAB], [NOT_SURE_WHICH_DISTORTION], [MR], [ND]]
    assert unambiguous_mask(rlp, mlp).tolist() == [True, False, False, True]


# ============================================================================================
# Figure 2 — maximum repetition
# ============================================================================================


def test_max_repetition_per_item_and_distribution() -> None:
    items = [
        [[PERS, FT], [PERS, ER], [PERS, ER], [PERS, ER], [PERS, FT]],  # Pers. ×5
        [[ND], [ND], [ND], [PERS], [PERS]],  # ND ×3
        [[LAB], [MR], [FT], [ER], [OG]],  # 1
        [[LAB, MR], [LAB], [MR], [LAB, MR], [MR]],  # MR ×4
    ]
    dist = max_repetition_distribution(items)
    assert dist.max_counts.tolist() == [5, 3, 1, 4]
    assert dist.counts == {0: 0, 1: 1, 2: 0, 3: 1, 4: 1, 5: 1}
    assert dist.proportions[5] == 0.25
    assert dist.at_least[4] == 0.5  # "at least one label repeated four or more times"
    assert dist.at_least[0] == 1.0
    frame = dist.as_frame()
    assert frame.loc[3, "items"] == 1


def test_max_repetition_dominant_basis_for_the_ranked_prompt() -> None:
    runs = [[ER, LAB], [FT, LAB], [MR, LAB], [ER, LAB], [OG, LAB]]
    assert max_repetition_distribution([runs]).max_counts.tolist() == [5]
    assert max_repetition_distribution([runs], basis="dominant").max_counts.tolist() == [2]


def test_max_repetition_counts_others_as_one_label_and_skips_failed_runs() -> None:
    runs = [[OTHERS], [OTHERS], None, [OTHERS], [LAB]]
    dist = max_repetition_distribution([runs])
    assert dist.max_counts.tolist() == [3]
    assert dist.n_runs == 5


# ============================================================================================
# Tables 2 and 7 — Fleiss per label
# ============================================================================================


def _random_runs(rng: np.random.Generator, n_items: int, n_runs: int = 5) -> list[list[list[str]]]:
    """Correlated runs: each item has a 'true' label set that each run reproduces noisily."""
    labels = label_names()
    items = []
    for _ in range(n_items):
        core = list(rng.choice(CDS, size=rng.integers(1, 3), replace=False))
        if rng.random() < 0.25:
            core = [ND]
        runs = []
        for _ in range(n_runs):
            run = [lab for lab in core if rng.random() < 0.85]
            if rng.random() < 0.3:
                run.append(str(rng.choice(labels)))
            if rng.random() < 0.05:
                run.append(OTHERS)
            runs.append(list(dict.fromkeys(run)) or [str(rng.choice(labels))])
        items.append(runs)
    return items


def test_per_label_fleiss_matches_statsmodels() -> None:
    rng = np.random.default_rng(7)
    items = _random_runs(rng, 300)
    result = per_label_fleiss(items)
    x, complete = label_indicators(items)
    assert complete.all()
    for j, name in enumerate(result.labels):
        present = x[:, :, j].sum(axis=1)
        table = np.column_stack([present, 5 - present])
        expected = sm_irr.fleiss_kappa(table, method="fleiss")
        assert result.kappas[name] == pytest.approx(expected, abs=1e-9)
    assert result.average == pytest.approx(np.mean(list(result.kappas.values())), abs=1e-12)
    assert result.labels == label_names()  # the 11 labels of Table 2, no "Others"
    assert result.n_items == 300 and result.n_dropped == 0


def test_per_label_fleiss_drops_items_with_a_failed_run() -> None:
    rng = np.random.default_rng(3)
    items = _random_runs(rng, 50)
    items[0][2] = None
    result = per_label_fleiss(items)
    assert result.n_dropped == 1 and result.n_items == 49
    assert result.kappas == per_label_fleiss(items[1:]).kappas


def test_per_label_fleiss_hand_example_and_undefined_label() -> None:
    # Two items, 5 runs; LAB: item 1 present in all, item 2 absent in all -> perfect agreement.
    items = [[[LAB]] * 5, [[MR]] * 5]
    result = per_label_fleiss(items, labels=[LAB, MR, FT])
    assert result.kappas[LAB] == pytest.approx(1.0)
    assert result.kappas[MR] == pytest.approx(1.0)
    assert math.isnan(result.kappas[FT])  # never assigned: P_e = 1
    assert "undefined" in (result.reasons[FT] or "")
    assert result.average == pytest.approx(1.0)  # undefined labels are left out
    table = fleiss_table({"cfg": result})
    assert table.loc["Average", "cfg"] == pytest.approx(1.0)


# Table 7 of the paper (per-label Fleiss' kappa) and its Average row.
TABLE_7 = {
    "GPT4-0.5 RLP": [0.66, 0.81, 0.80, 0.87, 0.82, 0.46, 0.84, 0.73, 0.81, 0.82, 0.93, 0.78],
    "GPT4-0.5 MLP": [0.78, 0.84, 0.834, 0.76, 0.78, 0.55, 0.79, 0.74, 0.81, 0.74, 0.92, 0.78],
    "GPT4-0.7 RLP": [0.60, 0.76, 0.73, 0.81, 0.75, 0.42, 0.80, 0.68, 0.76, 0.78, 0.91, 0.73],
    "GPT4-0.7 MLP": [0.72, 0.79, 0.78, 0.72, 0.72, 0.40, 0.73, 0.65, 0.77, 0.68, 0.90, 0.71],
    "GPT4o-0.5 RLP": [0.48, 0.56, 0.59, 0.66, 0.63, 0.40, 0.73, 0.58, 0.64, 0.75, 0.92, 0.63],
    "GPT4o-0.5 MLP": [0.62, 0.49, 0.65, 0.64, 0.66, 0.26, 0.68, 0.62, 0.63, 0.69, 0.89, 0.62],
    "GPT4o-0.7 RLP": [0.40, 0.44, 0.50, 0.56, 0.53, 0.16, 0.62, 0.48, 0.54, 0.63, 0.90, 0.52],
    "GPT4o-0.7 MLP": [0.55, 0.43, 0.58, 0.55, 0.59, 0.14, 0.59, 0.51, 0.54, 0.59, 0.86, 0.54],
}


@pytest.mark.parametrize("config", TABLE_7)
def test_table_7_average_is_the_plain_mean_of_the_11_labels(config: str) -> None:
    *per_label, average = TABLE_7[config]
    assert len(per_label) == 11
    assert np.mean(per_label) == pytest.approx(average, abs=0.006)  # table rounded to 2 d.p.


# ============================================================================================
# Table 8 — distribution of final labels
# ============================================================================================

# Table 8, GPT-4 0.5, RLP column: (count, percent) of 2530 items.
TABLE_8_GPT4_05_RLP = {
    "All-or-Nothing Thinking": (103, 4.1),
    ER: (959, 37.9),
    FT: (218, 8.6),
    LAB: (53, 2.1),
    "Magnification": (274, 10.8),
    "Mental Filter": (8, 0.3),
    MR: (211, 8.3),
    OG: (159, 6.3),
    PERS: (656, 25.9),
    "Should Statements": (45, 1.8),
    NOT_SURE_IF_DISTORTION: (64, 2.5),
    NOT_SURE_WHICH_DISTORTION: (28, 1.1),
    OTHERS: (2, 0.1),
    ND: (708, 28.0),
}


def _items_with_table_8_counts() -> list[list[str]]:
    exclusive = [ND, NOT_SURE_IF_DISTORTION, NOT_SURE_WHICH_DISTORTION, OTHERS]
    items = [[lab] for lab in exclusive for _ in range(TABLE_8_GPT4_05_RLP[lab][0])]
    flat = [lab for lab, (n, _) in TABLE_8_GPT4_05_RLP.items() if lab not in exclusive]
    flat = [lab for lab in flat for _ in range(TABLE_8_GPT4_05_RLP[lab][0])]
    n_rest = 2530 - len(items)
    # Item i gets flat[i] and, for the first len(flat) - n_rest items, flat[n_rest + i]: no
    # label block is longer than n_rest, so no item gets a label twice.
    rest = [
        [flat[i]] + ([flat[n_rest + i]] if n_rest + i < len(flat) else []) for i in range(n_rest)
    ]
    return items + rest


def test_label_distribution_table_reproduces_table_8_column() -> None:
    items = _items_with_table_8_counts()
    assert len(items) == 2530
    table = label_distribution_table({"GPT4-0.5 RLP": items})
    for label, (count, percent) in TABLE_8_GPT4_05_RLP.items():
        assert table.loc[label, ("GPT4-0.5 RLP", "n")] == count
        assert round(table.loc[label, ("GPT4-0.5 RLP", "%")], 1) == percent
    assert list(table.index[-4:]) == [
        NOT_SURE_IF_DISTORTION,
        NOT_SURE_WHICH_DISTORTION,
        OTHERS,
        ND,
    ]
    # Multi-label: percentages add up to more than 100 (Appendix G).
    assert table[("GPT4-0.5 RLP", "%")].sum() > 100


def test_label_distribution_table_takes_consensus_objects_and_several_configs() -> None:
    a = consensus_for_items([[[LAB]] * 5, [[ND]] * 5, [[LAB], [MR], [FT], [ER], [OG]]])
    b = [[LAB, MR], [MR]]
    table = label_distribution_table({"A": a, "B": b})
    assert table.loc[LAB, ("A", "n")] == 1
    assert table.loc[NOT_SURE_WHICH_DISTORTION, ("A", "%")] == pytest.approx(100 / 3)
    assert table.loc[MR, ("B", "%")] == 100.0
    assert table.loc[ND, ("B", "n")] == 0


# ============================================================================================
# Agreement with clinicians — Cohen per label, joint probability of agreement
# ============================================================================================


def test_cohen_kappa_binary_matches_sklearn_per_label() -> None:
    rng = np.random.default_rng(11)
    a = rng.random((400, 6)) < [0.1, 0.3, 0.5, 0.2, 0.05, 0.4]
    b = np.where(rng.random(a.shape) < 0.75, a, rng.random(a.shape) < 0.3)
    kappa, agree, reasons = cohen_kappa_binary(a, b)
    for j in range(a.shape[1]):
        assert kappa[j] == pytest.approx(sk_metrics.cohen_kappa_score(a[:, j], b[:, j]), abs=1e-12)
        assert agree[j] == pytest.approx(np.mean(a[:, j] == b[:, j]))
        assert reasons[j] is None
        # and the existing unweighted Cohen's kappa of analysis.stats agrees too
        assert kappa[j] == pytest.approx(
            stats.weighted_kappa(a[:, j], b[:, j], weights=None).value, abs=1e-12
        )


def test_cohen_kappa_binary_undefined_when_both_constant() -> None:
    kappa, agree, reasons = cohen_kappa_binary(np.zeros((5, 1)), np.zeros((5, 1)))
    assert math.isnan(kappa[0]) and agree[0] == 1.0 and "undefined" in (reasons[0] or "")


def test_clinician_agreement_hand_example() -> None:
    final = [[LAB], [ER, LAB], [MR], [NOT_SURE_WHICH_DISTORTION], [ND], [FT]]
    clinician = [[LAB], [LAB, ER], [FT], [MR], [ND], None]
    result = clinician_agreement(final, clinician)
    # item 4 is ambiguous and item 6 has no clinician label: both excluded
    assert result.n_items == 4 and result.n_excluded == 2
    assert result.exact == pytest.approx(3 / 4)
    assert result.dominant == pytest.approx(2 / 4)  # [ER, LAB] vs [LAB, ER] differ first
    assert result.overlap == pytest.approx(3 / 4)
    row = result.per_label.loc[LAB]
    assert row["kappa"] == pytest.approx(1.0)
    assert row["agreement"] == pytest.approx(1.0)
    mr = result.per_label.loc[MR]
    a = np.array([0, 0, 1, 0])
    b = np.array([0, 0, 0, 0])
    assert mr["agreement"] == pytest.approx(0.75)
    assert mr["kappa"] == pytest.approx(sk_metrics.cohen_kappa_score(a, b))
    kept = clinician_agreement(final, clinician, exclude_ambiguous=False)
    assert kept.n_items == 5 and NOT_SURE_WHICH_DISTORTION in kept.per_label.index


# ============================================================================================
# κ_F1 — §5.2–5.3, Appendix J
# ============================================================================================


def _labels_with_shares(shares: dict[str, int]) -> list[str]:
    return [lab for lab, n in shares.items() for _ in range(n)]


def test_f1_random_is_a2_b2_c2_for_the_worked_example() -> None:
    # §5.2: three classes with distribution a, b, c -> weighted F1 of random = a² + b² + c².
    y_true = _labels_with_shares({"A": 50, "B": 30, "C": 20})
    report = kappa_f1_report(y_true, y_true, kind="multiclass", n_sim=0)
    assert report.f1_random == pytest.approx(0.5**2 + 0.3**2 + 0.2**2)
    assert report.proportions == {"A": 0.5, "B": 0.3, "C": 0.2}
    assert report.f1 == pytest.approx(1.0) and report.kappa_f1 == pytest.approx(1.0)


def test_f1_random_expected_confusion_matrix_gives_a_b_c() -> None:
    # The §5.2 confusion matrix (row true, column predicted) with N=100: cell = p_true·p_pred·N.
    p = {"A": 0.5, "B": 0.3, "C": 0.2}
    y_true, y_pred = [], []
    for t, pt in p.items():
        for q, pq in p.items():
            n = round(pt * pq * 100)
            y_true += [t] * n
            y_pred += [q] * n
    f1 = sk_metrics.f1_score(y_true, y_pred, average=None, labels=list(p))
    assert f1 == pytest.approx([0.5, 0.3, 0.2])  # F1_A = a, F1_B = b, F1_C = c
    report = kappa_f1_report(y_true, y_pred, kind="multiclass", n_sim=0)
    assert report.f1 == pytest.approx(0.38)  # = a² + b² + c²
    assert report.kappa_f1 == pytest.approx(0.0, abs=1e-12)


def test_kappa_f1_against_hand_computed_values() -> None:
    y_true = _labels_with_shares({"A": 6, "B": 3, "C": 1})
    y_pred = ["A", "A", "A", "A", "B", "B", "B", "C", "C", "A"]
    # Per class: A tp=4 fp=1 fn=2 -> F1 8/11; B tp=1 fp=2 fn=2 -> 2/6; C tp=0 fp=2 fn=1 -> 0
    f1 = 0.6 * 8 / 11 + 0.3 * 2 / 6 + 0.1 * 0
    f1_random = 0.36 + 0.09 + 0.01
    report = kappa_f1_report(y_true, y_pred, kind="multiclass", n_sim=0)
    assert report.f1 == pytest.approx(f1)
    assert report.f1 == pytest.approx(sk_metrics.f1_score(y_true, y_pred, average="weighted"))
    assert report.f1_random == pytest.approx(f1_random)
    assert report.kappa_f1 == pytest.approx((f1 - f1_random) / (1 - f1_random))


# Multilabel cells of Table 4 (weighted F1, MentalRoBERTa), Table 10 (theoretical F1_random)
# and Table 5 (κ_F1). (The binary and multiclass cells of Table 5 do not follow from Tables 4
# and 10 by the §5.3 formula — a discrepancy in the paper, not tested here.)
MULTILABEL_TABLES_4_10_5 = {
    "RLP Gpt4-0.5": (0.575, 0.348, 0.348),
    "RLP Gpt4-0.7": (0.548, 0.325, 0.331),  # §5.4: "a 33.1% improvement"
    "RLP Gpt4o-0.5": (0.396, 0.217, 0.229),
    "RLP Gpt4o-0.7": (0.428, 0.207, 0.279),
    "MLP Gpt4-0.5": (0.609, 0.455, 0.283),
    "MLP Gpt4-0.7": (0.603, 0.413, 0.324),
    "MLP Gpt4o-0.5": (0.489, 0.253, 0.317),
    "MLP Gpt4o-0.7": (0.474, 0.238, 0.310),
    "Golden Gpt4-0.5": (0.311, 0.201, 0.138),
    "Golden Gpt4-0.7": (0.332, 0.202, 0.163),
    "Golden Gpt4o-0.5": (0.287, 0.199, 0.110),
    "Golden Gpt4o-0.7": (0.338, 0.203, 0.169),
}


@pytest.mark.parametrize("cell", MULTILABEL_TABLES_4_10_5)
def test_kappa_f1_reproduces_table_5_multilabel(cell: str) -> None:
    f1, f1_random, kappa = MULTILABEL_TABLES_4_10_5[cell]
    assert kappa_f1(f1, f1_random).value == pytest.approx(kappa, abs=0.0015)


def test_binary_weighted_f1_covers_both_classes() -> None:
    rng = np.random.default_rng(5)
    y_true = (rng.random(500) < 0.3).astype(int)
    y_pred = np.where(rng.random(500) < 0.8, y_true, 1 - y_true)
    report = kappa_f1_report(list(y_true), list(y_pred), kind="binary", n_sim=0)
    expected = sk_metrics.f1_score(y_true, y_pred, average="weighted")
    assert report.f1 == pytest.approx(expected)
    p = y_true.mean()
    assert report.f1_random == pytest.approx(p**2 + (1 - p) ** 2)


def test_multilabel_f1_and_closed_form() -> None:
    rng = np.random.default_rng(2)
    truth = rng.random((300, 5)) < [0.4, 0.3, 0.2, 0.1, 0.05]
    pred = np.where(rng.random(truth.shape) < 0.8, truth, ~truth)
    report = kappa_f1_report(truth.astype(int), pred.astype(int), kind="multilabel", n_sim=0)
    assert report.f1 == pytest.approx(sk_metrics.f1_score(truth, pred, average="weighted"))
    q = truth.mean(axis=0)
    assert report.f1_random == pytest.approx((q**2).sum() / q.sum())
    # One label per item: the multilabel closed form is the multiclass Σ p².
    one_hot = np.eye(3, dtype=int)[rng.integers(0, 3, 200)]
    single = kappa_f1_report(one_hot, one_hot, kind="multilabel", n_sim=0)
    p = one_hot.mean(axis=0)
    assert single.f1_random == pytest.approx((p**2).sum())


def test_multilabel_accepts_label_collections() -> None:
    y_true = [[LAB, MR], [ND], [LAB]]
    y_pred = [[LAB], [ND], [LAB, FT]]
    report = kappa_f1_report(y_true, y_pred, kind="multilabel", n_sim=0)
    assert report.labels == sorted([LAB, MR, ND, FT])
    assert report.proportions[LAB] == pytest.approx(2 / 3)


@pytest.mark.parametrize(
    ("kind", "make"),
    [
        ("binary", lambda rng, n: list(rng.choice(["CD", "ND"], size=n, p=[0.65, 0.35]))),
        (
            "multiclass",
            lambda rng, n: list(
                rng.choice(list("ABCDEF"), size=n, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05])
            ),
        ),
        (
            "multilabel",
            lambda rng, n: (rng.random((n, 6)) < [0.4, 0.3, 0.25, 0.1, 0.05, 0.3]).astype(int),
        ),
    ],
)
def test_simulated_baseline_agrees_with_closed_form(kind: Kind, make: Callable[..., Any]) -> None:
    rng = np.random.default_rng(123)
    y_true = make(rng, 3000)
    report = kappa_f1_report(y_true, y_true, kind=kind, n_sim=1000, seed=1)
    assert report.n_sim == 1000
    assert report.sim_sd > 0
    # Appendix J: "deviations well within the expected standard error"
    assert abs(report.sim_mean - report.f1_random) < 4 * report.sim_se, report
    again = kappa_f1_report(y_true, y_true, kind=kind, n_sim=1000, seed=1)
    assert again.sim_mean == report.sim_mean  # deterministic for a seed


def test_vectorised_batch_f1_matches_sklearn() -> None:
    rng = np.random.default_rng(4)
    t = rng.integers(0, 4, 200)
    preds = rng.integers(0, 4, (5, 200))
    batch = weighted_f1_batch_classes(t, preds, 4)
    for row, value in zip(preds, batch, strict=True):
        assert value == pytest.approx(sk_metrics.f1_score(t, row, average="weighted"))
    truth = rng.random((200, 4)) < 0.3
    draws = rng.random((5, 200, 4)) < 0.3
    batch = weighted_f1_batch_multilabel(truth, draws)
    for row, value in zip(draws, batch, strict=True):
        assert value == pytest.approx(sk_metrics.f1_score(truth, row, average="weighted"))


def test_kappa_f1_single_class_is_undefined_with_reason() -> None:
    report = kappa_f1_report(["A"] * 5, ["A"] * 5, kind="multiclass", n_sim=10)
    assert report.f1_random == 1.0
    assert math.isnan(report.kappa_f1) and "single class" in (report.reason or "")


def test_kappa_f1_input_errors() -> None:
    with pytest.raises(ValueError, match="binary task with 3 classes"):
        kappa_f1_report(["a", "b", "c"], ["a", "b", "c"], kind="binary")
    with pytest.raises(ValueError, match="not in labels"):
        kappa_f1_report(["a", "x"], ["a", "a"], kind="multiclass", labels=["a", "b"])
    with pytest.raises(ValueError, match="items"):
        kappa_f1_report(["a", "b"], ["a"], kind="multiclass")


# ============================================================================================
# Predictions CSV
# ============================================================================================


def _csv(tmp_path: Path, text: str, name: str = "preds.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_read_predictions_csv_kinds(tmp_path: Path) -> None:
    y_t, y_p, kind, labels = read_predictions_csv(_csv(tmp_path, "true,predicted\n1,0\n0,0\n"))
    assert (y_t, y_p, kind, labels) == (["1", "0"], ["0", "0"], "binary", ["0", "1"])
    text = "predicted,true\nA,B\nC,C\nB,A\n"
    y_t, y_p, kind, labels = read_predictions_csv(_csv(tmp_path, text))
    assert kind == "multiclass" and y_t == ["B", "C", "A"] and labels == ["A", "B", "C"]
    text = (
        'true,predicted\n"Labeling; Mind Reading",Labeling\nNo Distortion,Labeling|Mind Reading\n'
    )
    y_t, y_p, kind, labels = read_predictions_csv(_csv(tmp_path, text))
    assert kind == "multilabel"
    assert y_t == [[LAB, MR], [ND]] and y_p == [[LAB], [LAB, MR]]
    report = kappa_f1_report(y_t, y_p, kind=kind, labels=labels, n_sim=0)
    assert report.n_items == 2


def test_read_predictions_csv_from_a_file_object_and_known_labels() -> None:
    handle = io.StringIO("True , Predicted\nlabeling,LABELING\n")
    y_t, y_p, kind, labels = read_predictions_csv(handle, labels=[LAB, MR], kind="multiclass")
    assert y_t == [LAB] and y_p == [LAB] and labels == [LAB, MR]


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        ("", {}, "preds.csv: empty file"),
        ("true,pred\n1,0\n", {}, "preds.csv: missing column 'predicted' (header: true, pred)"),
        ("gold,predicted\n1,0\n", {}, "preds.csv: missing column 'true'"),
        ("true,predicted\n", {}, "preds.csv: no data rows"),
        ("true,predicted\nA,B\n,B\n", {}, "preds.csv: line 3, column 'true': empty cell"),
        ("true,predicted\nA,B\nA\n", {}, "preds.csv: line 3, column 'predicted': empty cell"),
        (
            "true,predicted\nLabeling,Paranoia\n",
            {"labels": [LAB, MR]},
            "preds.csv: line 2, column 'predicted': unknown label 'Paranoia'",
        ),
        ("true,predicted\nA;B,A\n", {"kind": "multiclass"}, "line 2, column 'true': several"),
        ("true,predicted\nA;;B,A\n", {}, "line 2, column 'true': empty label"),
        ("true,predicted\nA,B\nC,A\n", {"kind": "binary"}, "binary task but 3 labels"),
    ],
)
def test_read_predictions_csv_errors_name_file_line_and_column(
    tmp_path: Path, text: str, kwargs: dict, message: str
) -> None:
    with pytest.raises(PredictionsCsvError) as excinfo:
        read_predictions_csv(_csv(tmp_path, text), **kwargs)
    assert message in str(excinfo.value)
    assert "\n" not in str(excinfo.value)


# ============================================================================================
# §4.2 — stratified 70:15:15 split
# ============================================================================================


def test_stratified_split_proportions_per_stratum() -> None:
    rng = np.random.default_rng(0)
    strata = {"A": 400, "B": 233, "C": 101, "D": 20, "E": 7, "F": 1}
    labels = [lab for lab, n in strata.items() for _ in range(n)]
    labels = [labels[i] for i in rng.permutation(len(labels))]
    split = stratified_split(labels, seed=42)
    fractions = {"train": 0.7, "dev": 0.15, "test": 0.15}
    for lab, m in strata.items():
        got = Counter(s for s, x in zip(split, labels, strict=True) if x == lab)
        for name, f in fractions.items():
            # each split gets ⌊m·f⌋ or ⌈m·f⌉ of every stratum
            assert math.floor(m * f) <= got[name] <= math.ceil(m * f), (lab, name, got)
    # Hand check of one stratum: 400 items -> exactly 280 / 60 / 60.
    got_a = Counter(s for s, x in zip(split, labels, strict=True) if x == "A")
    assert got_a == {"train": 280, "dev": 60, "test": 60}
    total = Counter(split)
    n = len(labels)
    for name, f in fractions.items():
        assert abs(total[name] - n * f) <= 2


def test_stratified_split_is_deterministic_and_seeded() -> None:
    labels = [str(x) for x in np.random.default_rng(1).choice(list("abc"), size=300)]
    assert stratified_split(labels, seed=5) == stratified_split(labels, seed=5)
    assert stratified_split(labels, seed=5) != stratified_split(labels, seed=6)


def test_stratified_split_uses_the_dominant_label() -> None:
    labels = [[LAB, MR]] * 20 + [[MR, LAB]] * 20
    split = stratified_split(labels, seed=0)
    for block in (split[:20], split[20:]):
        assert Counter(block) == {"train": 14, "dev": 3, "test": 3}


def test_stratified_split_rejects_bad_fractions() -> None:
    with pytest.raises(ValueError, match="fractions"):
        stratified_split(["a"], fractions=(0.7, 0.2, 0.2))
