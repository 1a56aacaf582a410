"""`judge_assisted` on the imported MentalAlign-70k study (clinician ratings on all 1,000
conversations, so a labelled subset can be checked against the full data)."""

from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest
from django.core.management import call_command
from ppi_py import ppi_mean_ci

from analysis.selectors import Filters, exclusions_for, scores_frame

# Module-scoped import rolled back at the end (see test_reliability_report.py for why every test
# carries django_db).
pytestmark = [pytest.mark.shared_data, pytest.mark.django_db]


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
    low, high = ppi_mean_ci(y[lab].to_numpy(), f[lab].to_numpy(), f[unl].to_numpy(), alpha=0.05)
    assert (row.n_labelled, row.n_unlabelled) == (len(lab), len(unl))
    assert (row.ci_low, row.ci_high) == pytest.approx((low[0], high[0]), abs=1e-9)


def test_two_judges_without_labelled_file_use_every_rated_conversation(mentalalign_module):
    table = _run(mentalalign_module, "--judge", "gpt-4o", "--judge", "claude-3.7-sonnet")
    # Clinicians rated every conversation; the few unlabelled ones are responses whose imported
    # clinician cell was invalid (kept as unlabelled: the judges scored them).
    total = table.n_labelled + table.n_unlabelled
    assert (total <= 1000).all() and (table.n_labelled >= 0.9 * total).all()
    assert table.responder.nunique() == 10  # no chosen-judge exclusion covers both judges
    none_unlabelled = table[table.n_unlabelled == 0]
    assert len(none_unlabelled) and (none_unlabelled["lambda"] == 0).all()
    assert np.allclose(none_unlabelled.estimate, none_unlabelled.clinician_only_estimate)
