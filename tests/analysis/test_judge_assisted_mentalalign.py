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


def _bounded(ys: np.ndarray, centre_estimate: float, se2: float) -> tuple[float, float]:
    """The product's interval by hand: the t interval of the estimate, its centre shifted and its
    variance raised as the clinician scores completed by half an observation at 1 and at 5
    shift and raise theirs (analysis.ppi.bounded_shift_and_variance)."""
    completed = np.concatenate([ys, [1.0, 5.0]])
    weights = np.concatenate([np.ones(ys.size), [0.5, 0.5]])
    centre = np.average(completed, weights=weights)
    n1 = ys.size + 1
    extra = (
        np.sum(weights * (completed - centre) ** 2) / (n1 - 1) / n1 - np.var(ys, ddof=1) / ys.size
    )
    half = sps.t.ppf(0.975, ys.size - 1) * np.sqrt(se2 + extra)
    mid = centre_estimate + centre - ys.mean()
    return max(mid - half, 1.0), min(mid + half, 5.0)


def test_ten_percent_labelled_with_one_judge_matches_ppi_py(mentalalign_module, labelled_ids):
    chosen, path = labelled_ids
    table = _run(mentalalign_module, "--judge", "gpt-4o", "--labelled", path)
    excluded = exclusions_for(study=mentalalign_module)["gpt-4o"]
    # The self-excluded responder keeps its rows, clinician-only.
    assert excluded and excluded <= set(table.responder)
    own = table[table.responder.isin(excluded)]
    assert (own["lambda"] == 0).all() and own.note.str.contains("self-preference").all()
    assert len(table) == 7 * table.responder.nunique() == 70
    assert table.n_labelled.between(0.8 * len(chosen), len(chosen)).all()
    assert set(table.design) == {f"{len(chosen)} listed conversations"}

    # An independent path from the long frame to ppi_py for a cell where every labelled
    # response has both a clinician and a judge score (there the estimator is PPI++ exactly).
    df = scores_frame(study=mentalalign_module, filters=Filters(judges=("gpt-4o",)))
    clean = table[
        (table.n_judge_missing == 0)
        & (table.n_nonresponse == 0)
        & ~table.responder.isin(excluded)
        & (table["lambda"] > 0)
    ]
    row = clean.iloc[len(clean) // 2]
    df = df[(df.responder == row.responder) & (df.attribute == row.attribute)]
    y = df[df.rater_kind == "clinician"].groupby("conversation")["score"].mean()
    f = df[df.rater_kind == "judge"].groupby("conversation")["score"].mean()
    listed = pd.Index(chosen)
    lab = y.index.intersection(f.index).intersection(listed)
    unl = f.index.difference(listed)
    ys, fs, fu = y[lab].to_numpy(), f[lab].to_numpy(), f[unl].to_numpy()
    est = float(np.ravel(ppi_mean_pointestimate(ys, fs, fu, lam=None))[0])
    # λ from ppi_py's estimate, linear in λ; sample variances, then the bounded correction.
    lam = (est - ys.mean()) / (fu.mean() - fs.mean())
    se2 = lam**2 * np.var(fu, ddof=1) / fu.size + np.var(ys - lam * fs, ddof=1) / ys.size
    assert (row.n_labelled, row.n_unlabelled) == (len(lab), len(unl))
    assert row.estimate == pytest.approx(est, abs=1e-9)
    assert (row.ci_low, row.ci_high) == pytest.approx(_bounded(ys, est, se2), abs=1e-9)
    assert row.interval == "bounded"


@pytest.mark.parametrize(
    "judges", [("gpt-4o",), ("claude-3.7-sonnet",), ("gpt-4o", "claude-3.7-sonnet")]
)
def test_default_mode_is_the_mean_of_all_clinician_scores_whichever_judge(
    mentalalign_module, judges
):
    """Clinicians rated every conversation: with no stored sample and no --labelled file every
    conversation is labelled, nothing is unlabelled, and each estimate is the mean of *all*
    the clinicians' valid scores of the cell, whatever the judges did: responses a judge failed
    to score stay in (counted in n_judge_missing) and the judge's self-excluded responder keeps
    its rows."""
    table = _run(mentalalign_module, *[a for j in judges for a in ("--judge", j)])
    df = scores_frame(study=mentalalign_module)
    clin = df[df.rater_kind == "clinician"]
    per_response = clin.groupby(["responder", "attribute", "conversation"], observed=True)[
        "score"
    ].mean()
    expected = per_response.groupby(level=["responder", "attribute"], observed=True).mean()
    assert len(table) == len(expected) == 70
    got = {(r.responder, r.attribute): r.estimate for r in table.itertuples(index=False)}
    want = {(str(r), str(a)): v for (r, a), v in expected.items()}
    assert got.keys() == want.keys()
    assert max(abs(got[k] - want[k]) for k in want) < 1e-12
    assert (table.n_unlabelled == 0).all() and (table["lambda"] == 0).all()
    np.testing.assert_allclose(table.estimate, table.clinician_only_estimate, rtol=0, atol=1e-12)
    np.testing.assert_allclose(table.ci_low, table.clinician_only_ci_low, rtol=0, atol=1e-12)
    counts = per_response.groupby(level=["responder", "attribute"], observed=True).size()
    assert {(r.responder, r.attribute): r.n_labelled for r in table.itertuples(index=False)} == {
        (str(r), str(a)): n for (r, a), n in counts.items()
    }
    # The clinician-only interval is the bounded t interval of those responses' means.
    row = table.iloc[0]
    ys = per_response.loc[(row.responder, row.attribute)].to_numpy()
    assert (row.clinician_only_ci_low, row.clinician_only_ci_high) == pytest.approx(
        _bounded(ys, ys.mean(), np.var(ys, ddof=1) / ys.size), abs=1e-12
    )
    if len(judges) == 2:
        nonresponse = table.groupby("responder")["n_nonresponse"].max()
        assert nonresponse[nonresponse > 0].to_dict() == NONRESPONSE
        noted = table[table.nonresponse_judge_gap < -1]
        # The judges score the unrated far lower: mostly the all-zero "not rated" cells.
        assert set(noted.responder) == {"original", "qwen_2", "qwen_3"}
        assert noted.note.str.contains("clinicians left .* unrated that the judges score").all()
    else:
        assert table.note.str.contains("self-preference exclusion").sum() == 7


#: Responses clinicians left unrated in the release (most per attribute cell, both judges
#: scoring): whole responses of Qwen-2.5-7B and Qwen-3-4B, and a few invalid clinician cells.
NONRESPONSE = {
    "claude": 2, "ds_qwen": 2, "gpt4o": 2, "llama_3": 2, "original": 3, "qwen_2": 60, "qwen_3": 29
}  # fmt: skip
