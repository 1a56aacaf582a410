"""`judge_assisted` on the imported MentalAlign-70k study (clinician ratings on all 1,000
conversations, so a labelled subset can be checked against the full data)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from django.core.management import call_command
from ppi_py import ppi_mean_pointestimate
from scipy import stats as sps
from statsmodels.stats.weightstats import DescrStatsW

from analysis.selectors import Filters, exclusions_for, scores_frame

# Module-scoped import rolled back at the end (see test_reliability_report.py for why every test
# carries django_db).
# Slow: each module imports the released 70k-row workbooks.
pytestmark = [pytest.mark.shared_data, pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture(scope="module")
def labelled_ids(mentalalign_module, tmp_path_factory) -> tuple[list[str], str]:
    from annotation.models import Conversation

    ids = sorted(
        Conversation.objects.filter(study=mentalalign_module).values_list("external_id", flat=True)
    )
    chosen = sorted(np.random.default_rng(0).choice(ids, size=len(ids) // 10, replace=False))
    path = tmp_path_factory.mktemp("labelled") / "ids.txt"
    path.write_text("\n".join(chosen) + "\n")
    return chosen, str(path)


def _run(study, *args: str) -> pd.DataFrame:
    out = io.StringIO()
    call_command("judge_assisted", "--study", study.name, "--format", "csv", *args, stdout=out)
    return pd.read_csv(io.StringIO(out.getvalue()))


def test_ten_percent_labelled_with_one_judge_matches_ppi_py(mentalalign_module, labelled_ids):
    chosen, path = labelled_ids
    table = _run(mentalalign_module, "--judge", "gpt-4o", "--labelled", path)
    excluded = exclusions_for(study=mentalalign_module)["gpt-4o"]
    assert excluded and not excluded & set(table.responder)  # self-exclusion applied
    assert len(table) == 7 * table.responder.nunique() >= 7 * 6
    assert table.n_labelled.between(0.8 * len(chosen), len(chosen)).all()
    assert (table.n_labelled + table.n_unlabelled).between(800, 1000).all()

    # An independent path from the long frame to ppi_py for one cell.
    row = table.iloc[len(table) // 2]
    df = scores_frame(study=mentalalign_module, filters=Filters(judges=("gpt-4o",)))
    df = df[(df.responder == row.responder) & (df.attribute == row.attribute)]
    y = df[df.rater_kind == "clinician"].groupby("conversation")["score"].mean()
    f = df[df.rater_kind == "judge"].groupby("conversation")["score"].mean()
    listed = pd.Index(chosen)
    lab = y.index.intersection(f.index).intersection(listed)
    unl = f.index.difference(listed)
    ys, fs, fu = y[lab].to_numpy(), f[lab].to_numpy(), f[unl].to_numpy()
    est = float(np.ravel(ppi_mean_pointestimate(ys, fs, fu, lam=None))[0])
    # Student's t on sample variances (analysis.ppi): λ from ppi_py's estimate, linear in λ.
    lam = (est - ys.mean()) / (fu.mean() - fs.mean())
    se = np.sqrt(lam**2 * np.var(fu, ddof=1) / fu.size + np.var(ys - lam * fs, ddof=1) / ys.size)
    half = sps.t.ppf(0.975, ys.size - 1) * se
    assert (row.n_labelled, row.n_unlabelled) == (len(lab), len(unl))
    # Listed conversations the judge scored but clinicians did not: non-response, in no pool.
    assert row.n_nonresponse == len(f.index.intersection(listed).difference(y.index))
    assert row.estimate == pytest.approx(est, abs=1e-9)
    assert (row.ci_low, row.ci_high) == pytest.approx((est - half, est + half), abs=1e-9)


def test_default_mode_is_the_clinician_mean_and_unrated_responses_are_nonresponse(
    mentalalign_module,
):
    """Clinicians rated every conversation: with no stored sample and no --labelled file every
    conversation is labelled, nothing is unlabelled, and each estimate is the clinician mean.
    The responses clinicians left unrated (whole responses of two small models, which the
    judges score far lower) are non-response with a warning, never judge-filled."""
    table = _run(mentalalign_module, "--judge", "gpt-4o", "--judge", "claude-3.7-sonnet")
    assert table.responder.nunique() == 10  # no chosen-judge exclusion covers both judges
    assert (table.n_unlabelled == 0).all()
    assert (table["lambda"] == 0).all()
    np.testing.assert_allclose(table.estimate, table.clinician_only_estimate, rtol=0, atol=1e-12)
    np.testing.assert_allclose(table.ci_low, table.clinician_only_ci_low, rtol=0, atol=1e-12)
    assert table.interval.str.startswith("t").all()
    # Clinician-only is the textbook t interval of the rated responses' clinician means.
    df = scores_frame(study=mentalalign_module, filters=Filters(judges=("gpt-4o",)))
    row = table.iloc[0]
    cell = df[(df.responder == row.responder) & (df.attribute == row.attribute)]
    y = cell[cell.rater_kind == "clinician"].groupby("conversation")["score"].mean()
    f = cell[cell.rater_kind == "judge"].groupby("conversation")["score"].mean()
    low, high = DescrStatsW(y[y.index.intersection(f.index)].to_numpy()).tconfint_mean(0.05)
    assert (row.clinician_only_ci_low, row.clinician_only_ci_high) == pytest.approx(
        (low, high), abs=1e-12
    )

    nonresponse = table.groupby("responder")["n_nonresponse"].max()
    assert nonresponse[nonresponse > 0].to_dict() == NONRESPONSE
    warned = table[table.warning.fillna("") != ""]
    assert set(warned.responder) == {"qwen_2", "qwen_3"}
    assert (warned.nonresponse_judge_gap < -1).all()  # judges score the unrated far lower
    assert warned.warning.str.contains("clinicians left .* unrated that the judges score").all()
    # Informative non-response: the judges are not used for those cells (clinician-only).
    assert (warned.interval == "t (clinician-only: informative non-response)").all()
    assert (table[table.warning.fillna("") == ""].interval == "t").all()


#: Responses clinicians left unrated in the release (most per attribute cell, both judges
#: scoring): whole responses of Qwen-2.5-7B and Qwen-3-4B, and a few invalid clinician cells.
NONRESPONSE = {
    "claude": 2, "ds_qwen": 2, "gpt4o": 2, "llama_3": 2, "original": 3, "qwen_2": 60, "qwen_3": 29
}  # fmt: skip
