"""The clinicians' sample as a stored design: drawn with a seed, assigned, and used by the
judge-assisted estimates by default."""

from __future__ import annotations

import io
from collections import Counter

import pandas as pd
import pytest
from django.core.management import call_command
from django.urls import reverse

from accounts.roles import ADMIN, role_add
from analysis.judge_assisted.selectors import RATED_DESIGN, judge_assisted_report
from annotation.models import Assignment, ClinicianSample, Conversation, Rater
from annotation.services import assignments_create
from annotation.services.sampling import clinician_sample_draw

pytestmark = pytest.mark.django_db


def _ids(sample: ClinicianSample) -> set[str]:
    return set(sample.conversations.values_list("external_id", flat=True))


def test_uniform_draw_is_reproducible_from_its_stored_seed(small_study):
    study = small_study.study
    first = clinician_sample_draw(study=study, size=4, seed=11)
    again = clinician_sample_draw(study=study, size=4, seed=11)
    other = clinician_sample_draw(study=study, size=4, seed=12)
    assert _ids(first) == _ids(again) and len(_ids(first)) == 4
    assert (first.population, first.seed, first.method) == (9, 11, "uniform")
    assert {_ids(first) != _ids(other), "draft" in _ids(first) | _ids(other)} <= {True, False}
    # Different seeds draw different samples over a handful of tries (not a constant draw).
    draws = {frozenset(_ids(clinician_sample_draw(study=study, size=4, seed=s))) for s in range(8)}
    assert len(draws) > 1


def test_stratified_draw_takes_each_primary_condition_in_proportion(small_study):
    study = small_study.study
    conditions = dict(
        Conversation.objects.filter(study=study).values_list("external_id", "conditions")
    )
    sample = clinician_sample_draw(study=study, size=6, method="stratified", seed=3)
    primary = Counter((conditions[i] or ["(no condition)"])[0] for i in _ids(sample))
    # 9 conversations: 4 anxiety, 4 depression (first of two), 1 without condition ("draft").
    # 6 of 9 in proportion: 2.67 / 2.67 / 0.67 -> floors 2 / 2 / 0, the two left over go to
    # the largest remainders (all equal here: ties by name, "(no condition)" then "anxiety").
    assert primary == {"anxiety": 3, "depression": 2, "(no condition)": 1}


def test_stratified_sampling_without_strata_is_refused(small_study):
    """Conversations without conditions (or all of one) have nothing to stratify on: the stored
    design would claim a stratification that was a uniform draw."""
    study = small_study.study
    Conversation.objects.filter(study=study).update(conditions=[])
    with pytest.raises(ValueError, match="none of the study's conversations has a condition"):
        clinician_sample_draw(study=study, size=3, method="stratified")
    Conversation.objects.filter(study=study).update(conditions=["anxiety"])
    with pytest.raises(ValueError, match="every conversation's primary condition is 'anxiety'"):
        clinician_sample_draw(study=study, size=3, method="stratified")
    assert not ClinicianSample.objects.exists()
    assert clinician_sample_draw(study=study, size=3, method="uniform")


@pytest.mark.parametrize(
    ("size", "method", "message"),
    [(0, "uniform", "between 1 and the study's 9"), (10, "uniform", "between 1 and the study's 9"),
     (3, "cluster", "method must be one of uniform, stratified")],
)  # fmt: skip
def test_bad_draws_are_refused_and_store_nothing(small_study, size, method, message):
    with pytest.raises(ValueError, match=message):
        clinician_sample_draw(study=small_study.study, size=size, method=method)
    assert not ClinicianSample.objects.exists()


def test_judge_assisted_uses_the_stored_sample_by_default(small_study):
    study = small_study.study
    judges = ["judge-x", "judge-y"]
    before = judge_assisted_report(study=study, judges=judges)
    assert before.design.startswith(RATED_DESIGN) and "no stored clinician sample" in before.design
    sample = clinician_sample_draw(study=study, size=4, seed=5)
    after = judge_assisted_report(study=study, judges=judges)
    listed = judge_assisted_report(study=study, judges=judges, labelled=_ids(sample))
    assert after.design == sample.describe() and "seed 5" in after.design
    pd.testing.assert_frame_equal(
        after.means.drop(columns="design"), listed.means.drop(columns="design")
    )
    assert set(after.means["design"]) == {after.design}
    assert (after.means.n_unlabelled > 0).any()  # the conversations outside the sample
    rated = judge_assisted_report(study=study, judges=judges, design="rated")
    # The same numbers as before the draw, and the design says the sample was passed over.
    assert f"chosen over the stored {sample.describe()}" in rated.design
    pd.testing.assert_frame_equal(
        rated.means.drop(columns="design"), before.means.drop(columns="design")
    )
    assert set(rated.means["design"]) == {rated.design}

    out, err = io.StringIO(), io.StringIO()
    call_command(
        "judge_assisted", "--study", study.name, "--judge", "judge-y", "--format", "csv",
        stdout=out, stderr=err,
    )  # fmt: skip
    assert f"labelled: {sample.describe()}" in err.getvalue()
    # --design rated says on standard error and in the CSV's design column which sample it
    # passes over (it once printed "no stored clinician sample" when one existed).
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "judge_assisted", "--study", study.name, "--judge", "judge-y", "--format", "csv",
        "--design", "rated", stdout=out, stderr=err,
    )  # fmt: skip
    assert f"chosen over the stored {sample.describe()}" in err.getvalue()
    assert "no stored clinician sample" not in err.getvalue()
    assert set(pd.read_csv(io.StringIO(out.getvalue()))["design"]) == {
        judge_assisted_report(study=study, judges=["judge-y"], design="rated").design
    }


def test_admin_draws_the_sample_and_assigns_only_it(small_study, client, django_user_model):
    study = small_study.study
    admin = django_user_model.objects.create_user("ada", password="pw-ada-long-enough")
    role_add(user=admin, role=ADMIN)
    client.force_login(admin)
    response = client.post(
        reverse("annotation:manage_sample"),
        {"study": study.pk, "size": 3, "method": "uniform", "seed": 99},
    )
    assert response.status_code == 302
    sample = ClinicianSample.objects.get()
    assert (sample.created_by, sample.seed, sample.size) == (admin, 99, 3)
    page = client.get(reverse("annotation:manage"), {"study": study.pk}).content.decode()
    assert "clinician sample #" in page and "seed 99" in page

    bad = client.post(
        reverse("annotation:manage_sample"), {"study": study.pk, "size": 50, "method": "uniform"}
    )
    assert bad.status_code == 422 and "between 1 and the study" in bad.content.decode()
    assert ClinicianSample.objects.count() == 1

    new_clinician = Rater.objects.create(
        kind=Rater.Kind.CLINICIAN,
        name="dr_c",
        user=django_user_model.objects.create_user("dr_c"),
    )
    response = client.post(
        reverse("annotation:manage_assign"),
        {"study": study.pk, "clinicians": [new_clinician.pk], "overlap": 1,
         "overlap_percent": 0, "sample_only": "on"},
    )  # fmt: skip
    assert response.status_code == 302
    given = set(
        Assignment.objects.filter(rater=new_clinician).values_list(
            "conversation__external_id", flat=True
        )
    )
    # Only sampled conversations that no clinician holds yet (the fixture assigned the rest).
    assert given and given <= _ids(sample)


def test_assignments_create_limited_to_conversations(small_study):
    study = small_study.study
    clinician = Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="dr_z")
    Assignment.objects.filter(conversation__study=study).delete()
    chosen = set(
        Conversation.objects.filter(study=study, external_id__in=["c1", "c5"]).values_list(
            "pk", flat=True
        )
    )
    created = assignments_create(study=study, clinicians=[clinician], conversations=chosen)
    assert {a.conversation_id for a in created} == chosen
