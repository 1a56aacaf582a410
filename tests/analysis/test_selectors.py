"""scores_frame turns a study's complete ratings into the long format of analysis.reports."""

from __future__ import annotations

import json

import pytest

from analysis import reports, selectors
from analysis.pseudonyms import rater_codes
from analysis.selectors import Filters, scores_frame
from annotation.models import Rating, Score

# Filters, exports and saves must work on every supported database: bin/test runs these on
# SQLite as well.
pytestmark = pytest.mark.portable


def test_frame_has_every_complete_score_and_nothing_else(
    small_study, django_assert_max_num_queries
):
    codes = rater_codes(study_id=small_study.study.pk)  # given when they joined
    dr_b = codes[small_study.clinicians[1].pk]
    with django_assert_max_num_queries(7):
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
        (df.rater == dr_b) & (df.conversation == "c2") & (df.responder == "m3")
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
    dr_b = rater_codes(study_id=small_study.study.pk)[small_study.clinicians[1].pk]
    one = scores_frame(
        study=small_study.study, filters=Filters(clinician=dr_b, judges=("judge-y",))
    )
    assert set(one["rater"]) == {dr_b, "judge-y"}
    # A clinician's name is not a filter value: it selects no clinician at all.
    by_name = scores_frame(study=small_study.study, filters=Filters(clinician="dr_b"))
    assert set(by_name["rater_kind"]) == {"judge"}


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
    dr_b = rater_codes(study_id=small_study.study.pk)[small_study.clinicians[1].pk]
    assert {r["rater"]: r["conversations"] for r in cov["raters"]}[dr_b] == 4
    assert not {"dr_a", "dr_b"} & {r["rater"] for r in cov["raters"]}


def test_study_report_is_cached_until_new_ratings_arrive(
    small_study, django_assert_max_num_queries
):
    params = selectors.ReportParams(n_boot=50)
    first = selectors.study_report(study=small_study.study, params=params)
    with django_assert_max_num_queries(7):  # the version check only (study_version)
        again = selectors.study_report(study=small_study.study, params=params)
    assert again.version == first.version
    rating = Rating.objects.filter(status="draft").get()
    rating.status = "complete"
    rating.save(update_fields=["status", "updated_at"])
    fresh = selectors.study_report(study=small_study.study, params=params)
    assert fresh.version != first.version
    assert fresh.coverage["with_clinician"] == 9


def test_study_report_is_recomputed_when_a_judges_exclusions_change(small_study):
    """A re-import with another --exclude (or an admin's edit) changes a judge's exclusions and
    no rating: the dashboard must not keep the numbers of the old exclusions."""
    from annotation.services import judge_rater_get_or_create

    params = selectors.ReportParams(n_boot=50)
    first = selectors.study_report(study=small_study.study, params=params)
    assert first.reliability.groupby("judge")["n_models"].first()["judge-x"] == 4
    judge_rater_get_or_create(name="judge-x", excluded=[])
    fresh = selectors.study_report(study=small_study.study, params=params)
    assert fresh.reliability.groupby("judge")["n_models"].first()["judge-x"] == 5


@pytest.mark.parametrize(
    "change",
    [
        "study_name",
        "study_description",
        "rubric_attribute",
        "judge_name",
        "judge_exclusions",
        "responder_name",
        "clinician_sample",
    ],
)
def test_study_version_changes_with_what_names_and_shapes_the_analyses(small_study, change):
    from annotation.models import Attribute, ClinicianSample, Conversation, Rater, Responder

    study = small_study.study
    before = selectors.study_version(study=study)
    assert selectors.study_version(study=study) == before  # nothing changed: the same
    if change == "study_name":
        study.name = "Renamed study"
        study.save()
    elif change == "study_description":
        study.description = "What this study is."
        study.save()
    elif change == "rubric_attribute":
        first = Attribute.objects.filter(rubric=study.rubric).order_by("position").first()
        Attribute.objects.filter(pk=first.pk).update(description="Reworded.")
    elif change == "judge_name":
        Rater.objects.filter(name="judge-y").update(name="judge-z")
    elif change == "judge_exclusions":
        Rater.objects.filter(name="judge-y").update(excluded_responders=["m2"])
    elif change == "responder_name":
        Responder.objects.filter(key="m1").update(name="Another model")
    else:
        sample = ClinicianSample.objects.create(
            study=study, method="uniform", size=1, population=9, seed=7
        )
        sample.conversations.add(Conversation.objects.filter(study=study).first())
    assert selectors.study_version(study=study) != before


@pytest.mark.parametrize("as_published", [False, True])
def test_as_published_only_adds_imported_clinician_cells(small_study, as_published):
    df = scores_frame(study=small_study.study, as_published=as_published)
    # The invalid rating here is a judge's, so nothing is added.
    assert len(df) == small_study.n_complete_scores


# --- --as-published reads imported cells with the authors' rule --------------------------------

ATTRS = ["Guidance", "Informativeness", "Relevance", "Safety", "Empathy", "Helpfulness"]
ATTRS += ["Understanding"]


def _cell(value: object = 4, **extra: object) -> str:
    return json.dumps({**{a: value for a in ATTRS}, "Explanation": "ok", **extra})


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (_cell(4), {a: 4.0 for a in ATTRS}),
        ("```json\n" + _cell(3) + "\n```", {a: 3.0 for a in ATTRS}),  # their one fence rule
        ("Here is my rating:\n" + _cell(4), {}),  # prose first: json.loads fails
        ("```JSON\n" + _cell(4) + "\n```", {}),  # only a lower-case ```json was stripped
        ('{"Guidance": 4, "Explanation": "uses "I" statements"}', {}),  # unescaped quote
        (_cell(0), {a: 0.0 for a in ATTRS}),  # off-scale numbers count
        (_cell("4"), {a: 4.0 for a in ATTRS}),  # float("4")
        (_cell("4/5"), {}),  # float("4/5") raises
        (_cell(None), {}),
        ('{"guidance": 4}', {}),  # exact key only
        ('{"Guidance": 1, "Guidance": 5}', {"Guidance": 5.0}),  # json.loads keeps the last
        ("[4, 4]", {}),
        ("", {}),
        (None, {}),
    ],
)
def test_published_cell_scores_reads_a_cell_like_the_authors_script(raw, expected):
    assert selectors.published_cell_scores(raw=raw, attributes=ATTRS) == expected


def test_as_published_reads_imported_judge_cells_with_the_authors_json_loads(small_study):
    """A judge cell our parser recovers (prose before the JSON) counts by default and is
    dropped as published; a plain-JSON cell is read from its raw text either way."""
    study = small_study.study
    attributes = list(study.rubric.attributes.order_by("position"))
    judge = small_study.judges[1]
    response = study.conversations.get(external_id="c0").responses.filter(responder__key="m2").get()
    other = study.conversations.get(external_id="c1").responses.filter(responder__key="m2").get()
    Rating.objects.filter(rater=judge, response__in=[response, other]).delete()
    for target, raw in ((response, "My rating:\n" + _cell(2)), (other, _cell(5))):
        rating = Rating.objects.create(
            rater=judge, response=target, status="complete", source="import", raw_output=raw
        )
        value = 2 if target == response else 5
        Score.objects.bulk_create(
            Score(rating=rating, attribute=a, value=value) for a in attributes
        )

    def judge_cells(df, conversation):
        rows = df[
            (df.rater == judge.name) & (df.conversation == conversation) & (df.responder == "m2")
        ]
        return sorted(rows["score"].tolist())

    default = scores_frame(study=study)
    published = scores_frame(study=study, as_published=True)
    assert judge_cells(default, "c0") == [2.0] * 7
    assert judge_cells(published, "c0") == []
    assert judge_cells(default, "c1") == judge_cells(published, "c1") == [5.0] * 7
    assert len(published) == len(default) - 7
    notes = selectors.data_notes(study=study, as_published=True)
    assert any("1 imported judge cells that are not plain JSON" in n for n in notes)
    assert selectors.data_notes(study=study, as_published=False) == []


def test_as_published_reads_imported_clinician_cells_with_the_same_rule(small_study):
    study = small_study.study
    clinician = small_study.clinicians[0]
    response = study.conversations.get(external_id="c0").responses.filter(responder__key="m3")[0]
    Rating.objects.filter(rater=clinician, response=response).delete()
    Rating.objects.create(
        rater=clinician, response=response, status="invalid", source="import",
        raw_output=_cell(0, Safety=None), error="Guidance: 0 is not on the 1–5 scale",
    )  # fmt: skip
    published = scores_frame(study=study, as_published=True)
    code = rater_codes(study_id=study.pk)[clinician.pk]  # researchers see codes
    rows = published[
        (published.rater == code) & (published.conversation == "c0")
        & (published.responder == "m3")
    ]  # fmt: skip
    assert sorted(rows["attribute"]) == sorted(a for a in ATTRS if a != "Safety")
    assert (rows["score"] == 0).all()


def test_condition_filter_matches_whole_labels_only(small_study):
    from annotation.models import Conversation

    study = small_study.study
    # "anx" is inside the JSON text of every conversation's labels, but is no label.
    assert scores_frame(study=study, filters=Filters(condition="anx")).empty
    assert not Conversation.objects.filter(study=study, conditions__has_element="anx").exists()
    assert Conversation.objects.filter(study=study, conditions__has_element="anxiety").count() == 8
    covered = selectors.coverage(study=study, filters=Filters(condition="depression"))
    assert covered["conversations"] == 4


def test_the_report_does_not_depend_on_the_order_ratings_were_stored_in(small_study):
    """The same ratings stored in the opposite order (as a study re-imported from its release
    stores them) give the same table to the last bit: the bootstrap resamples responders by
    their number, so the frame's order must not come from the storage order."""
    from annotation.models import Conversation, Response, Study
    from annotation.rater_codes import rater_codes_assign

    original = small_study.study
    mirror = Study.objects.create(name="Mirror", rubric=original.rubric)
    conversations = {
        c.pk: Conversation.objects.create(
            study=mirror, external_id=c.external_id, context=c.context, source=c.source
        )
        for c in Conversation.objects.filter(study=original).order_by("pk")
    }
    responses = {
        r.pk: Response.objects.create(
            conversation=conversations[r.conversation_id], responder=r.responder, text=r.text
        )
        for r in Response.objects.filter(conversation__study=original).order_by("pk")
    }
    ratings = Rating.objects.filter(response__conversation__study=original).order_by("-pk")
    for rating in ratings.prefetch_related("scores"):
        scores = list(rating.scores.all())
        rating.pk, rating.response = None, responses[rating.response_id]
        rating.assignment = None
        rating.save()
        Score.objects.bulk_create(
            Score(rating=rating, attribute_id=s.attribute_id, value=s.value) for s in scores
        )
    # The clinicians joined the mirror too, as the import of a release gives them their codes.
    rater_codes_assign(study_id=mirror.pk, rater_ids=[c.pk for c in small_study.clinicians])

    def table(study: Study) -> str:
        frame = scores_frame(study=study)
        return reports.reliability_table(
            frame,
            exclusions=selectors.exclusions_for(study=study),
            n_boot=200,
        ).to_csv(index=False)

    assert table(mirror) == table(original)


def test_report_cache_keys_tell_every_subset_apart():
    """Names are anyone's text (an API query may hold "|"): two subsets never share a key, and
    the key stays short whatever the names."""
    keys = {
        Filters(condition="a|b").key(),
        Filters(condition="a", source="b").key(),
        Filters(condition="a", clinician="b").key(),
        Filters(judges=("a|b",)).key(),
        Filters(judges=("a", "b")).key(),
        Filters().key(),
        Filters(clinician_ratings="latest").key(),
    }
    assert len(keys) == 7
    assert Filters(judges=("y", "x")).key() == Filters(judges=("x", "y")).key()
    assert len(Filters(judges=("j" * 200,) * 20).key()) == 64
