"""Reproduce MentalBench-100k / MentalAlign-70k Tables 2–4 from the released workbooks.

The workbooks are read directly with pandas (no importer, no database), turned into the long
format of analysis.reports and compared with shared/reference/paper_table{2,3,4}_*.csv.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis import reports, stats

pytestmark = pytest.mark.shared_data

SHARED = Path(
    os.environ.get("MENTALBENCH_SHARED") or Path(__file__).resolve().parents[3] / "shared"
)
DATA = SHARED / "data" / "mentalalign70k"
REFERENCE = SHARED / "reference"

JUDGE_FILES = {"claude-3.7-sonnet": "claude_llm_judge.xlsx", "gpt-4o": "gpt-4o_llm_judge.xlsx"}
#: Self-preference exclusion of the paper (§5.3; data README).
EXCLUSIONS = {"claude-3.7-sonnet": {"claude"}, "gpt-4o": {"gpt4o"}}
#: Responder key → name in paper Table 2 (data README).
PAPER_NAMES = {
    "gpt4o": "GPT-4o",
    "gemini": "Gemini-2.0-Flash",
    "gpt4omini": "GPT-4o-Mini",
    "llama_3": "LLaMA-3.1-8B",
    "ds_llama": "DeepSeek-LLaMA-8B",
    "qwen_2": "Qwen-2.5-7B",
    "claude": "Claude-3.5-Haiku",
    "ds_qwen": "DeepSeek-Qwen-7B",
    "qwen_3": "Qwen-3-4B",
}
POINT_COLUMNS = ("icc_c1", "icc_a1", "human_mean", "judge_mean", "bias", "mse")
_FENCE = re.compile(r"^```(?:json)?\s*|\s*```$")


def _require_data() -> None:
    if not (DATA / "Human_judge.xlsx").exists():
        pytest.skip(f"../shared/data not found: {DATA} (set MENTALBENCH_SHARED to its parent)")


def _parse(cell: object) -> dict | None:
    if not isinstance(cell, str):
        return None
    try:
        parsed = json.loads(_FENCE.sub("", cell.strip()))
    except json.JSONDecodeError:
        return None  # a few judge cells are truncated or prose; the paper skips them too
    return parsed if isinstance(parsed, dict) else None


def _workbook_rows(path: Path, prefix: str, rater: str, kind: str) -> list[tuple]:
    sheet = pd.read_excel(path)
    sheet.columns = [str(c).strip() for c in sheet.columns]  # some headers have a leading space
    rows = []
    for column in sheet.columns:
        if not column.startswith(prefix):
            continue
        responder = column.removeprefix(prefix)
        for conversation, cell in zip(sheet["ConvID"], sheet[column], strict=True):
            scores = _parse(cell)
            if scores is None:
                continue
            for attribute in stats.ATTRIBUTES:
                value = scores.get(attribute)
                # Out-of-range 0s and 6s in the human file are kept: the published means
                # include them (dropping them moves Qwen-2.5's means by ~0.09).
                if isinstance(value, int | float) and not isinstance(value, bool):
                    rows.append((conversation, responder, rater, kind, attribute, float(value)))
    return rows


@pytest.fixture(scope="module")
def scores() -> pd.DataFrame:
    _require_data()
    rows = _workbook_rows(DATA / "Human_judge.xlsx", "human_response_", "clinicians", "clinician")
    for judge, filename in JUDGE_FILES.items():
        rows += _workbook_rows(DATA / filename, "judge_response_", judge, "judge")
    df = pd.DataFrame(
        rows, columns=["conversation", "responder", "rater", "rater_kind", "attribute", "score"]
    )
    return df.assign(responder_family=df["responder"])


@pytest.fixture(scope="module")
def table(scores: pd.DataFrame) -> pd.DataFrame:
    return reports.reliability_table(
        scores, attributes=stats.ATTRIBUTES, exclusions=EXCLUSIONS, n_boot=1000, seed=0
    )


@pytest.fixture(scope="module")
def precise_table(scores: pd.DataFrame) -> pd.DataFrame:
    # With 1,000 resamples the Monte Carlo error of a 2.5 % percentile over 9 responders is
    # large: across seeds, status agreement with the paper ranges 8–13 of 14 and the worst CI
    # bound moves 0.06–0.20. 20,000 resamples pin our bootstrap CI down (11–12 of 14 on
    # every seed tried, bounds within ~0.11), so the comparison tests the method, not a seed.
    return reports.reliability_table(
        scores, attributes=stats.ATTRIBUTES, exclusions=EXCLUSIONS, n_boot=20_000, seed=0
    )


def _merged(ours: pd.DataFrame, csv: str) -> pd.DataFrame:
    paper = pd.read_csv(REFERENCE / csv)
    paper = paper[paper["judge"].isin(list(JUDGE_FILES))]
    merged = paper.merge(ours, on=["judge", "attribute"], suffixes=("_paper", ""))
    assert len(merged) == 14
    return merged


def test_every_pair_has_nine_models_and_paired_cells(table: pd.DataFrame) -> None:
    assert len(table) == 14
    assert (table["n_models"] == 9).all()
    assert table["n_pairs"].between(8_900, 9_000).all()
    assert table["reason"].isna().all()


@pytest.mark.parametrize("column", POINT_COLUMNS)
def test_point_estimates_match_tables_3_and_4(table: pd.DataFrame, column: str) -> None:
    csv = "paper_table3_icc.csv" if column.startswith("icc") else "paper_table4_bias.csv"
    merged = _merged(table, csv)
    deviation = (merged[column] - merged[f"{column}_paper"]).abs()
    worst = merged.loc[deviation.idxmax(), ["judge", "attribute"]].tolist()
    assert deviation.max() <= 0.01, f"{column}: max |Δ| {deviation.max():.4f} at {worst}"


def test_bootstrap_ci_bounds_and_status_match_table_3(precise_table: pd.DataFrame) -> None:
    merged = _merged(precise_table, "paper_table3_icc.csv")
    for bound in ("ci_low", "ci_high"):
        deviation = (merged[bound] - merged[f"{bound}_paper"]).abs()
        assert deviation.max() <= 0.15, f"{bound}: max |Δ| {deviation.max():.3f}"
    agree = int((merged["status"] == merged["status_paper"]).sum())
    assert agree >= 11, merged[["judge", "attribute", "ci_width", "ci_width_paper", "status_paper"]]


def test_default_bootstrap_is_in_the_papers_neighbourhood(table: pd.DataFrame) -> None:
    # The production default (1,000 resamples): loose bounds, it must not be wildly off.
    merged = _merged(table, "paper_table3_icc.csv")
    assert ((merged["ci_low"] - merged["ci_low_paper"]).abs() <= 0.25).all()
    assert ((merged["ci_high"] - merged["ci_high_paper"]).abs() <= 0.25).all()
    assert int((merged["status"] == merged["status_paper"]).sum()) >= 8


def test_human_means_match_table_2(scores: pd.DataFrame) -> None:
    ours = reports.human_means_table(scores, stats.ATTRIBUTES, groups=None)
    ours = ours.rename(index=PAPER_NAMES).drop(index="original")
    paper = pd.read_csv(REFERENCE / "paper_table2_human.csv").set_index("model")
    columns = [*stats.ATTRIBUTES, "Avg"]
    deviation = (ours.loc[paper.index, columns] - paper[columns]).abs()
    # Known misprint: the paper prints 3.07 for Qwen-3-4B Guidance, but the data give 2.76 and
    # the paper's own row average (3.64) is only consistent with 2.76 (3.07 would make it 3.69).
    assert ours.loc["Qwen-3-4B", "Guidance"] == pytest.approx(2.76, abs=0.01)
    row = paper.loc["Qwen-3-4B", list(stats.ATTRIBUTES)].copy()
    row["Guidance"] = 2.76
    assert row.mean() == pytest.approx(paper.loc["Qwen-3-4B", "Avg"], abs=0.005)
    deviation.loc["Qwen-3-4B", "Guidance"] = 0.0
    assert deviation.to_numpy().max() <= 0.01, deviation.round(3)
    assert not math.isnan(deviation.to_numpy().max())
    assert list(ours.index[:3]) == ["GPT-4o", "Gemini-2.0-Flash", "GPT-4o-Mini"]


def test_guidance_verdicts_follow_icc_and_width(precise_table: pd.DataFrame) -> None:
    row = precise_table.set_index(["judge", "attribute"]).loc[
        ("claude-3.7-sonnet", "Informativeness")
    ]
    assert row["verdict"] == "suitable"  # ICC(C,1) 0.915, narrow CI
    safety = precise_table.set_index(["judge", "attribute"]).loc[("gpt-4o", "Safety")]
    assert safety["verdict"] == "unsuitable"  # ICC(C,1) 0.48, CI width ≈ 0.74
    assert np.isfinite(precise_table["alignment_factor"]).all()
