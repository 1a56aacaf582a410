"""`reliability_report` on the imported MentalAlign-70k study reproduces the paper's Tables 2–4.

The paper's code read the release with pandas and counted the human workbook's 33 all-zero
"not rated" cells (and a few 6s) as scores; our importer stores those cells as invalid ratings.
``--as-published`` reads them the paper's way; the default uses valid scores only.
"""

from __future__ import annotations

import io

import pandas as pd
import pytest
from django.core.management import CommandError, call_command

from analysis import reports
from analysis.pseudonyms import rater_codes
from analysis.selectors import attribute_names, scores_frame
from tests.conftest import REFERENCE

# The MentalAlign study comes from mentalalign_module (tests/conftest.py), rolled back at
# the end of this module. django_db on every test keeps the module's tests together: pytest-django
# runs unmarked tests last, which would split the module and its open transaction.
# Slow: each module imports the released 70k-row workbooks.
pytestmark = [pytest.mark.shared_data, pytest.mark.slow, pytest.mark.django_db]

JUDGES = ("claude-3.7-sonnet", "gpt-4o")
PAPER_NAMES = {  # responder key → paper Table 2 name
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


def _report(study, *args: str) -> tuple[pd.DataFrame, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "reliability_report",
        "--study",
        study.name,
        "--format",
        "csv",
        *args,
        stdout=out,
        stderr=err,
    )
    return pd.read_csv(io.StringIO(out.getvalue())), err.getvalue()


def _merged(ours: pd.DataFrame, csv: str) -> pd.DataFrame:
    paper = pd.read_csv(REFERENCE / csv)
    paper = paper[paper["judge"].isin(JUDGES)]
    merged = paper.merge(ours, on=["judge", "attribute"], suffixes=("_paper", ""))
    assert len(merged) == 14
    return merged


@pytest.fixture(scope="module")
def published(mentalalign_module) -> tuple[pd.DataFrame, str]:
    return _report(mentalalign_module, "--as-published", "--bootstrap", "20000", "--seed", "0")


def test_report_prints_the_contract_columns_first(published):
    table, _ = published
    assert list(table.columns[:13]) == [
        "judge", "attribute", "n_models", "icc_c1", "ci_low", "ci_high", "icc_a1", "ci_width",
        "status", "human_mean", "judge_mean", "bias", "mse",
    ]  # fmt: skip
    assert len(table) == 14
    assert (table["n_models"] == 9).all()


@pytest.mark.parametrize("column", ["icc_c1", "icc_a1", "human_mean", "judge_mean", "bias", "mse"])
def test_point_estimates_match_tables_3_and_4(published, column):
    csv = "paper_table3_icc.csv" if column.startswith("icc") else "paper_table4_bias.csv"
    merged = _merged(published[0], csv)
    deviation = (merged[column] - merged[f"{column}_paper"]).abs()
    worst = merged.loc[deviation.idxmax(), ["judge", "attribute"]].tolist()
    assert deviation.max() <= 0.01, f"{column}: max |Δ| {deviation.max():.4f} at {worst}"


def test_bootstrap_ci_and_status_match_table_3(published):
    merged = _merged(published[0], "paper_table3_icc.csv")
    for bound in ("ci_low", "ci_high"):
        deviation = (merged[bound] - merged[f"{bound}_paper"]).abs()
        assert deviation.max() <= 0.15, f"{bound}: max |Δ| {deviation.max():.3f}"
    assert int((merged["status"] == merged["status_paper"]).sum()) >= 11


def test_as_published_says_which_cells_it_read(published):
    note = published[1]
    assert "as published: 43 invalid imported clinician cells (33 all-zero" in note
    # The authors' plain json.loads rejects 6 Claude cells our parser reads (prose before the
    # JSON, an unescaped quote): as published, they are left out as they were in the paper.
    assert "as published: 6 imported judge cells that are not plain JSON" in note


def test_judge_cells_read_the_authors_way_bring_claude_safety_to_table_3(published):
    # With the 6 Claude cells that only our tolerant parser reads, Claude Safety ICC(C,1) is
    # 0.680 (0.685 printed); read with the authors' json.loads, as the paper did, 0.6835.
    table = published[0].set_index(["judge", "attribute"])
    assert table.loc[("claude-3.7-sonnet", "Safety"), "icc_c1"] == pytest.approx(0.685, abs=0.003)


def test_human_means_match_table_2(mentalalign_module):
    df = scores_frame(study=mentalalign_module, as_published=True)
    ours = reports.human_means_table(df, attribute_names(study=mentalalign_module), groups=None)
    ours = ours.rename(index=PAPER_NAMES).drop(index="original")
    paper = pd.read_csv(REFERENCE / "paper_table2_human.csv").set_index("model")
    columns = [*attribute_names(study=mentalalign_module), "Avg"]
    deviation = (ours.loc[paper.index, columns] - paper[columns]).abs()
    # Misprint in the paper (see tests/analysis/test_paper_arrays.py): data 2.76, printed 3.07.
    assert ours.loc["Qwen-3-4B", "Guidance"] == pytest.approx(2.76, abs=0.01)
    deviation.loc["Qwen-3-4B", "Guidance"] = 0.0
    assert deviation.to_numpy().max() <= 0.01, deviation.round(3)


def test_valid_only_default_moves_gpt4o_safety_away_from_the_published_value(mentalalign_module):
    valid, note = _report(mentalalign_module, "--bootstrap", "50")
    published, _ = _report(mentalalign_module, "--bootstrap", "50", "--as-published")
    key = ["judge", "attribute"]
    valid, published = valid.set_index(key), published.set_index(key)
    # The 33 all-zero "not rated" cells drag the human means of a few responders down, which is
    # most of what the published Safety ICC(C,1) of gpt-4o (0.48) measures.
    assert published.loc[("gpt-4o", "Safety"), "icc_c1"] == pytest.approx(0.48, abs=0.01)
    assert valid.loc[("gpt-4o", "Safety"), "icc_c1"] == pytest.approx(0.37, abs=0.03)
    assert "valid scores only: 43 invalid imported clinician cells" in note
    assert "--as-published" in note


def test_table_format_is_readable_and_carries_the_note(mentalalign_module):
    out = io.StringIO()
    call_command(
        "reliability_report", "--study", mentalalign_module.name, "--bootstrap", "20",
        "--judge", "gpt-4o", stdout=out,
    )  # fmt: skip
    text = out.getvalue()
    assert "gpt-4o" in text and "claude-3.7-sonnet" not in text
    assert "note: valid scores only" in text


def test_unknown_study_is_a_one_line_error(db):
    with pytest.raises(CommandError, match=r"^no study named 'Nope'"):
        call_command("reliability_report", "--study", "Nope", stdout=io.StringIO())


def test_subset_options_restrict_the_report(small_study):
    out = io.StringIO()
    call_command(
        "reliability_report", "--study", "Small study", "--format", "csv", "--bootstrap", "50",
        "--source", "A", "--clinician", "dr_b", "--judge", "judge-x", "--two-stage", stdout=out,
    )  # fmt: skip
    table = pd.read_csv(io.StringIO(out.getvalue()))
    assert set(table["judge"]) == {"judge-x"} and len(table) == 7
    assert (table["n_pairs"] == 4 * 4).all()  # 4 source-A conversations × 4 responders (m1 out)
    assert set(table["ci_method"]) == {"two-stage"}


def test_clinician_by_code_or_name_and_an_unknown_one_is_an_error(small_study):
    def run(clinician: str) -> str:
        out = io.StringIO()
        call_command(
            "reliability_report", "--study", "Small study", "--format", "csv", "--bootstrap",
            "20", "--clinician", clinician, stdout=out,
        )  # fmt: skip
        return out.getvalue()

    code = rater_codes(study_id=small_study.study.pk)[small_study.clinicians[1].pk]
    assert run(code) == run("dr_b")
    with pytest.raises(CommandError, match=r"^--clinician 'dr_z': no such clinician .*C01, C02"):
        run("dr_z")


def test_an_empty_subset_is_a_one_line_error(small_study):
    with pytest.raises(CommandError, match="no judge scores paired with clinician scores in this"):
        call_command("reliability_report", "--study", "Small study", "--source", "nowhere")
