"""scores_frame turns a study's complete ratings into the long format of analysis.reports."""

from __future__ import annotations

import pytest

from analysis import reports, selectors
from analysis.selectors import Filters, scores_frame
from annotation.models import Rating, Score

# Filters, exports and saves must work on every supported database: bin/test runs these on
# SQLite as well.
pytestmark = pytest.mark.portable


def test_frame_has_every_complete_score_and_nothing_else(
    small_study, django_assert_max_num_queries
):
    with django_assert_max_num_queries(6):
        df = scores_frame(study=small_study.study)
    assert list(df.columns) == list(selectors.FRAME_COLUMNS)
    assert len(df) == small_study.n_complete_scores
    assert "draft" not in set(df["conversation"])
    assert set(df["rater_kind"]) == {"clinician", "judge"}
    assert df["score"].between(1, 5).all()
    # One row per score: the ids round-trip to the database.
    one = Score.objects.filter(
        rating__rater__name="dr_b",
        rating__response__conversation__external_id="c2",
        rating__response__responder__key="m3",
        attribute__name="Safety",
    ).get()
    row = df[
        (df.rater == "dr_b") & (df.conversation == "c2") & (df.responder == "m3")
        & (df.attribute == "Safety")
    ]  # fmt: skip
    assert row["score"].tolist() == [one.value]
    assert row["responder_family"].tolist() == ["fam-m3"]
    assert row["source"].tolist() == ["A"]


def test_filters_restrict_conversations_clinician_and_judges(small_study):
    by_source = scores_frame(study=small_study.study, filters=Filters(source="B"))
    assert set(by_source["conversation"]) == {"c4", "c5", "c6", "c7"}
    by_condition = scores_frame(study=small_study.study, filters=Filters(condition="depression"))
    assert set(by_condition["conversation"]) == {"c0", "c2", "c4", "c6"}
    one = scores_frame(
        study=small_study.study, filters=Filters(clinician="dr_b", judges=("judge-y",))
    )
    assert set(one["rater"]) == {"dr_b", "judge-y"}


def test_exclusions_come_from_the_raters(small_study):
    assert selectors.exclusions_for(study=small_study.study) == {
        "judge-x": {"m1"},
        "judge-y": set(),
    }
    df = scores_frame(study=small_study.study)
    table = reports.reliability_table(
        df, exclusions=selectors.exclusions_for(study=small_study.study), n_boot=50
    )
    n_models = table.groupby("judge")["n_models"].first().to_dict()
    assert n_models == {"judge-x": 4, "judge-y": 5}


def test_ratings_version_changes_when_a_rating_arrives(small_study):
    before = selectors.ratings_version(study=small_study.study)
    rating = Rating.objects.filter(status="draft").get()
    rating.status = "complete"
    rating.save(update_fields=["status", "updated_at"])
    assert selectors.ratings_version(study=small_study.study) != before


def test_coverage_counts_rated_conversations_and_overlap(small_study):
    cov = selectors.coverage(study=small_study.study)
    assert cov["conversations"] == 9
    assert cov["with_clinician"] == 8
    assert cov["with_two_clinicians"] == 4
    assert {r["rater"]: r["conversations"] for r in cov["raters"]}["dr_b"] == 4


def test_study_report_is_cached_until_new_ratings_arrive(
    small_study, django_assert_max_num_queries
):
    params = selectors.ReportParams(n_boot=50)
    first = selectors.study_report(study=small_study.study, params=params)
    with django_assert_max_num_queries(2):  # the version check only
        again = selectors.study_report(study=small_study.study, params=params)
    assert again.version == first.version
    rating = Rating.objects.filter(status="draft").get()
    rating.status = "complete"
    rating.save(update_fields=["status", "updated_at"])
    fresh = selectors.study_report(study=small_study.study, params=params)
    assert fresh.version != first.version
    assert fresh.coverage["with_clinician"] == 9


@pytest.mark.parametrize("as_published", [False, True])
def test_as_published_only_adds_imported_clinician_cells(small_study, as_published):
    df = scores_frame(study=small_study.study, as_published=as_published)
    # The invalid rating here is a judge's, so nothing is added.
    assert len(df) == small_study.n_complete_scores


def test_condition_filter_matches_whole_labels_only(small_study):
    from annotation.models import Conversation

    study = small_study.study
    # "anx" is inside the JSON text of every conversation's labels, but is no label.
    assert scores_frame(study=study, filters=Filters(condition="anx")).empty
    assert not Conversation.objects.filter(study=study, conditions__has_element="anx").exists()
    assert Conversation.objects.filter(study=study, conditions__has_element="anxiety").count() == 8
    covered = selectors.coverage(study=study, filters=Filters(condition="depression"))
    assert covered["conversations"] == 4
