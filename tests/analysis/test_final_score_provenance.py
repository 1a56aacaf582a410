"""Final scores and their provenance beyond their own download (docs/adjudication.md): in the
long and wide ratings CSV (both the COPY and the Python path), with thresholds per attribute,
and in a release that `import_adjudications` reads back to the same final scores."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from accounts.roles import RESEARCHER
from analysis import export
from analysis.release import ADJUDICATIONS, CHECKSUMS, DATASHEET, FINAL_SCORES, checksums_verify
from annotation.adjudication_selectors import (
    ADJUDICATED,
    AWAITING,
    CONSENSUS,
    SINGLE,
    adjudication_queue,
    attribute_thresholds,
    final_score_release_rows,
    final_scores,
)
from annotation.membership import ADJUDICATOR, member_add
from annotation.models import (
    Adjudication,
    AttributeThreshold,
    Rater,
    Rating,
    Response,
    Score,
    Study,
)
from annotation.rater_codes import rater_codes_assign
from annotation.services import rubric_get_or_create_default
from annotation.services.adjudication import adjudication_save
from tests.analysis.test_copy_export import awkward_study  # noqa: F401  (a fixture)
from tests.factories import user_make

pytestmark = pytest.mark.django_db


def run_command(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def _rate(rater: Rater, response: Response, values: dict) -> Rating:
    rating = Rating.objects.create(
        rater=rater, response=response, status="complete", source="form", rationale="r"
    )
    Score.objects.bulk_create(Score(rating=rating, attribute=a, value=v) for a, v in values.items())
    # The clinician joined the study with their first work (an assignment or import does it).
    rater_codes_assign(study_id=response.conversation.study_id, rater_ids=[rater.pk])
    return rating


def _adjudicate_some(study: Study, *, n: int = 3) -> list[tuple[int, int]]:
    """Settle the first `n` disputes of the queue, with different reasons; (response, attribute)
    of each."""
    adjudicator = user_make(username="senior_adjudicator_name")
    member_add(study=study, user=adjudicator, role=ADJUDICATOR)
    done = []
    reasons = ["rubric_gap", "rater_error", ""]
    for i, row in enumerate([r for r in adjudication_queue(study=study)][:n]):
        adjudication_save(
            study=study,
            response_id=row.response_id,
            attribute_id=row.attribute_id,
            score=1 + i % 5,
            reason=reasons[i % 3],
            reason_text='=said "no", then; +1' if i == 0 else "",
            rubric_needs_change=i == 0,
            user=adjudicator,
        )
        done.append((row.response_id, row.attribute_id))
    return done


@pytest.fixture
def adjudicated(small_study):
    """The small study with a third clinician on one response (a mean of three), a per-attribute
    threshold and some disputes adjudicated."""
    study = small_study.study
    attrs = list(study.rubric.attributes.order_by("position"))
    AttributeThreshold.objects.create(study=study, attribute=attrs[1], points=1)
    third = Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="dr_c")
    response = Response.objects.get(
        conversation__study=study, conversation__external_id="c0", responder__key="m1"
    )
    _rate(third, response, {a: 4 for a in attrs})
    done = _adjudicate_some(study)
    assert len(done) == 3
    return small_study


# --- Per-attribute thresholds --------------------------------------------------------------------


@pytest.mark.portable
def test_a_per_attribute_threshold_decides_the_queue_and_the_final_scores(small_study):
    study = small_study.study
    attrs = list(study.rubric.attributes.order_by("position"))
    before = {(r.response_id, r.attribute) for r in final_scores(study=study)}
    one_apart = [
        r for r in final_scores(study=study) if r.provenance == CONSENSUS and r.n_clinicians == 2
    ]
    queued = {(r.response_id, r.attribute_id) for r in adjudication_queue(study=study)}
    assert attribute_thresholds(study=study) == {a.pk: 2 for a in attrs}
    # Threshold 1 on the first attribute: every disagreement on it goes to the queue and stops
    # being a consensus; the other attributes keep the study's 2.
    AttributeThreshold.objects.create(study=study, attribute=attrs[0], points=1)
    assert attribute_thresholds(study=study)[attrs[0].pk] == 1
    after = {(r.response_id, r.attribute): r for r in final_scores(study=study)}
    assert set(after) == before
    queue = {(r.response_id, r.attribute_id) for r in adjudication_queue(study=study)}
    differing = [
        r for r in one_apart if r.attribute == attrs[0].name and not r.final_score.is_integer()
    ]
    assert differing, "the fixture has clinicians one point apart on the first attribute"
    for row in differing:
        assert after[(row.response_id, row.attribute)].provenance == AWAITING
        assert (row.response_id, attrs[0].pk) in queue - queued
    others = [r for r in one_apart if r.attribute != attrs[0].name]
    assert others and all(
        after[(r.response_id, r.attribute)].provenance == CONSENSUS for r in others
    )
    assert {q for q in queue if q[1] != attrs[0].pk} == {q for q in queued if q[1] != attrs[0].pk}


def test_a_threshold_must_be_of_the_studys_rubric_and_on_its_scale(small_study):
    from annotation.models import Attribute, Rubric

    study = small_study.study
    attrs = list(study.rubric.attributes.order_by("position"))
    with pytest.raises(ValidationError, match="at most 4"):
        AttributeThreshold(study=study, attribute=attrs[0], points=5).full_clean()
    with pytest.raises(ValidationError):
        AttributeThreshold(study=study, attribute=attrs[0], points=0).full_clean()
    other = Rubric.objects.create(name="Another rubric")
    foreign = Attribute.objects.create(rubric=other, name="Foreign", group="OTHER", position=0)
    with pytest.raises(ValidationError, match="not an attribute of the study's rubric"):
        AttributeThreshold(study=study, attribute=foreign, points=2).full_clean()
    AttributeThreshold(study=study, attribute=attrs[0], points=4).full_clean()


def test_the_admin_sets_thresholds_per_attribute_on_the_study(small_study, client):
    from annotation.models import Attribute, Rubric
    from tests.second_factor import totp_enrol

    study = small_study.study
    other = Rubric.objects.create(name="Another rubric")
    Attribute.objects.create(rubric=other, name="ForeignAttribute", group="OTHER", position=0)
    boss = user_make(username="thresholds_boss", is_staff=True, is_superuser=True)
    totp_enrol(boss)
    client.force_login(boss)
    page = client.get(f"/admin/annotation/study/{study.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert "adjudication thresholds per attribute" in html.lower()
    assert 'name="attribute_thresholds-TOTAL_FORMS"' in html
    # Only the study's own rubric's attributes can be chosen.
    assert "Safety" in html or study.rubric.attributes.first().name in html
    assert "ForeignAttribute" not in html


def test_the_api_gives_each_attributes_threshold(adjudicated):
    from knox.models import AuthToken
    from rest_framework.test import APIClient

    study = adjudicated.study
    attrs = list(study.rubric.attributes.order_by("position"))
    researcher = user_make(username="thresholds_researcher", role=RESEARCHER)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=researcher)[1]}")
    body = client.get(f"/api/studies/{study.pk}/final-scores/").json()
    assert body["attribute_thresholds"] == {
        a.name: (1 if a.pk == attrs[1].pk else 2) for a in attrs
    }


# --- The ratings CSV ------------------------------------------------------------------------------


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


@pytest.mark.portable
@pytest.mark.parametrize("path", ["copy", "python"])
def test_the_long_csv_carries_each_scores_final_score_and_provenance(adjudicated, path):
    study = adjudicated.study
    generator = export.long_csv if path == "copy" else export.long_csv_python
    text = "".join(generator(study=study))
    header = text.splitlines()[0].split(",")
    # Appended: every earlier column where it was.
    assert header == list(export.LONG_COLUMNS)
    assert header[-3:] == ["active_seconds", "final_score", "final_score_provenance"]
    rows = _rows(text)
    expected = {
        (str(r.response_id), r.attribute): (r.final_score, r.provenance)
        for r in final_scores(study=study)
    }
    assert {p for _, p in expected.values()} == {ADJUDICATED, CONSENSUS, SINGLE, AWAITING}
    for row in rows:
        final = expected.get((row["response"], row["attribute"]))
        if final is None:
            assert (row["final_score"], row["final_score_provenance"]) == ("", "")
            continue
        score, provenance = final
        assert row["final_score_provenance"] == provenance
        assert (float(row["final_score"]) if row["final_score"] else None) == score
    # Judges' rows carry the final score of the same response and attribute too.
    judged = [r for r in rows if r["rater_kind"] == "judge" and r["final_score_provenance"]]
    assert judged
    # The mean of three clinicians, written as the shortest text of the double.
    assert any(r["final_score"] in ("3.3333333333333335", "3.6666666666666665") for r in rows)


@pytest.mark.portable
@pytest.mark.parametrize("path", ["copy", "python"])
def test_the_wide_csv_appends_final_scores_and_provenance_per_cell(adjudicated, path):
    study = adjudicated.study
    generator = export.wide_csv if path == "copy" else export.wide_csv_python
    text = "".join(generator(study=study))
    header, cells = export.wide_columns(study=study)
    assert text.splitlines()[0] == ",".join(header)
    assert header[: 8 + len(cells)] == [*export.WIDE_KEYS, *(f"{r}_{a}" for r, a in cells)]
    assert len(header) == 8 + 3 * len(cells)
    rows = _rows(text)
    for final in final_scores(study=study):
        column = f"{final.responder}_{final.attribute}"
        mine = [r for r in rows if r["conversation"] == final.conversation]
        assert mine
        for row in mine:  # every row of the conversation, whoever rated it
            assert row[column + "_final_score_provenance"] == final.provenance
            value = row[column + "_final_score"]
            assert (float(value) if value else None) == final.final_score


def test_the_copy_path_writes_the_python_paths_bytes_with_final_scores(awkward_study):  # noqa: F811
    study = awkward_study.study
    attrs = list(study.rubric.attributes.order_by("position"))
    AttributeThreshold.objects.create(study=study, attribute=attrs[2], points=3)
    third = Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="dr_third")
    for response in Response.objects.filter(
        conversation__study=study, conversation__external_id__in=["c0", "c1"]
    ):
        _rate(third, response, {a: 2 for a in attrs})
    _adjudicate_some(study, n=4)
    for wide in (False, True):
        python = export.wide_csv_python if wide else export.long_csv_python
        copy = export.wide_csv if wide else export.long_csv
        assert "".join(copy(study=study)) == "".join(python(study=study))
    text = "".join(export.long_csv(study=study))
    assert ",adjudicated\n" in text and ",clinician-consensus\n" in text


# --- Release and re-import ----------------------------------------------------------------------


def release_reimport(out: Path, name: str, *, with_adjudications: bool = True) -> None:
    run_command("import_conversations", "--study", name, str(out / "conversations.csv"))
    args = ["import_mentalalign", "--study", name, "--human", str(out / "Human_judge.xlsx")]
    for path in sorted(out.glob("*_llm_judge.xlsx")):
        judge = path.name.removesuffix("_llm_judge.xlsx")
        args += ["--judge", f"{judge}={path}", "--exclude", f"{judge}="]
    run_command(*args)


def adjudications_import_args(sheet: str) -> list[str]:
    """The import_adjudications line of the datasheet, as arguments."""
    import shlex

    line = next(ln for ln in sheet.splitlines() if ln.startswith("python manage.py import_adj"))
    return shlex.split(line)[2:]


def test_a_release_carries_final_scores_and_adjudications_and_comes_back(adjudicated, tmp_path):
    study = adjudicated.study
    out = tmp_path / "release"
    run_command("release_study", "--study", study.name, "--out", str(out))
    assert {FINAL_SCORES, ADJUDICATIONS} <= {p.name for p in out.iterdir()}
    assert checksums_verify(out) == []
    listed = (out / CHECKSUMS).read_text()
    assert f"  {FINAL_SCORES}\n" in listed and f"  {ADJUDICATIONS}\n" in listed

    adjudications = _rows((out / ADJUDICATIONS).read_text(encoding="utf-8"))
    assert len(adjudications) == 3
    assert {r["adjudicator"] for r in adjudications} == {"A01"}
    assert {r["reason"] for r in adjudications} == {"rubric_gap", "rater_error", ""}
    flagged = next(r for r in adjudications if r["rubric_needs_change"] == "true")
    assert flagged["reason_text"] == '\'=said "no", then; +1'  # formula-safe in the file
    text = "".join(p.read_text(encoding="utf-8") for p in out.glob("*.csv"))
    text += (out / DATASHEET).read_text(encoding="utf-8")
    assert "senior_adjudicator_name" not in text

    sheet = (out / DATASHEET).read_text(encoding="utf-8")
    assert "### Adjudication and final scores" in sheet
    assert "2 points apart or more (the study's adjudication threshold; per attribute: " in sheet
    assert "| adjudicated | 3 |" in sheet
    assert "| Rubric gap (the rubric does not cover the case) | 1 |" in sheet
    assert "| none given | 1 |" in sheet
    assert "1 were marked *the rubric needs a change*" in sheet

    before = final_score_release_rows(study=study)
    assert before == [tuple(r.values()) for r in _rows((out / FINAL_SCORES).read_text())]
    name = "Adjudicated, re-imported"
    release_reimport(out, name)
    again = Study.objects.get(name=name)
    assert final_score_release_rows(study=again) != before  # not yet: adjudications missing
    args = adjudications_import_args(sheet)
    assert args[:3] == ["import_adjudications", "--study", "NEW STUDY"]
    args[2] = name
    args = [a if not a.endswith(".csv") else str(out / a) for a in args]
    summary = run_command(*args)
    assert "3 adjudications; created 3" in summary
    assert final_score_release_rows(study=again) == before
    assert again.attribute_thresholds.get().points == 1
    # Importing again changes nothing.
    assert "created 0, updated 3" in run_command(*args)
    assert final_score_release_rows(study=again) == before


def test_import_adjudications_refuses_bad_input_and_writes_nothing(adjudicated, tmp_path):
    study = adjudicated.study
    out = tmp_path / "release"
    run_command("release_study", "--study", study.name, "--out", str(out))
    name = "Copy for refusals"
    release_reimport(out, name)
    again = Study.objects.get(name=name)
    good = (out / ADJUDICATIONS).read_text(encoding="utf-8")
    header, *rows = list(csv.reader(io.StringIO(good)))
    bad = tmp_path / "bad.csv"

    def write(table: list[list[str]]) -> None:
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows([header, *table])
        bad.write_text(buffer.getvalue(), encoding="utf-8")

    for change, message in (
        ({3: "9"}, "row 2, column 'final_score': score 9 is not on"),
        ({0: "no-such-conversation"}, "row 2: the study has no response"),
        ({4: "gut_feeling"}, "unknown reason 'gut_feeling'"),
        ({6: "maybe"}, "expected true or false"),
    ):
        row = list(rows[0])
        for i, value in change.items():
            row[i] = value
        write([row, *rows[1:]])
        with pytest.raises(CommandError, match=message):
            run_command("import_adjudications", "--study", name, str(bad))
        assert not Adjudication.objects.filter(study=again).exists()
    with pytest.raises(CommandError, match="adjudicated twice"):
        write([*rows, rows[0]])
        run_command("import_adjudications", "--study", name, str(bad))
    with pytest.raises(CommandError, match="no attribute 'Nope'"):
        run_command(
            "import_adjudications",
            "--study",
            name,
            "--threshold",
            "Nope=2",
            str(out / ADJUDICATIONS),
        )
    with pytest.raises(CommandError, match="a threshold is 1 to 4"):
        run_command(
            "import_adjudications", "--study", name, "--threshold", "7", str(out / ADJUDICATIONS)
        )
    # Without the release's per-attribute threshold, the final scores differ from the release's:
    # --expect refuses and writes nothing.
    with pytest.raises(CommandError, match="final scores differ|final scores, the expected"):
        run_command(
            "import_adjudications", "--study", name, "--expect", str(out / FINAL_SCORES),
            str(out / ADJUDICATIONS),
        )  # fmt: skip
    assert not Adjudication.objects.filter(study=again).exists()
    assert not again.attribute_thresholds.exists()
    with pytest.raises(CommandError, match="no study named"):
        run_command("import_adjudications", "--study", "No such study", str(out / ADJUDICATIONS))
    assert Study.objects.filter(rubric=rubric_get_or_create_default()).count() == 2


# --- The alt-test against the adjudicated consensus ----------------------------------------------


def _annotations(seed: int, n: int = 40) -> tuple[dict, dict, dict, dict]:
    import numpy as np

    rng = np.random.default_rng(seed)
    truth = rng.integers(1, 6, n)

    def noisy(sd: float) -> dict[str, int]:
        values = np.clip(np.rint(truth + rng.normal(0, sd, n)), 1, 5).astype(int)
        return {f"i{k}": int(v) for k, v in enumerate(values)}

    return noisy(0.7), noisy(0.9), noisy(0.5), noisy(0.3)


def test_a_reference_everywhere_is_each_humans_test_against_the_reference_alone():
    """With the reference on every instance, the clinician left out is compared with it alone:
    each human's comparison is the plain test's on that human and the reference as a second
    human (an independent route through the unchanged code)."""
    from analysis import alt_test

    a, b, llm, ref = _annotations(3)
    with_ref = alt_test.alt_test(humans={"A": a, "B": b}, llm=llm, metric="neg_rmse", reference=ref)
    for name, human in (("A", a), ("B", b)):
        plain = alt_test.alt_test(humans={name: human, "R": ref}, llm=llm, metric="neg_rmse")
        mine = next(c for c in with_ref.humans if c.human == name)
        theirs = next(c for c in plain.humans if c.human == name)
        assert (mine.n_instances, mine.llm_advantage, mine.human_advantage) == (
            theirs.n_instances,
            theirs.llm_advantage,
            theirs.human_advantage,
        )
        assert mine.p_value == pytest.approx(theirs.p_value, rel=1e-12)
    # No reference, or an empty one, is the authors' test unchanged.
    three = {"A": a, "B": b, "C": ref}
    plain = alt_test.alt_test(humans=three, llm=llm, metric="accuracy")
    assert alt_test.alt_test(humans=three, llm=llm, metric="accuracy", reference={}) == plain
    # A reference on some instances changes only those instances' comparisons.
    some = {k: v for k, v in ref.items() if int(k[1:]) % 2 == 0}
    partial = alt_test.alt_test(humans=three, llm=llm, metric="neg_rmse", reference=some)
    assert partial.n_instances == plain.n_instances
    assert partial.humans != alt_test.alt_test(humans=three, llm=llm, metric="neg_rmse").humans


def test_the_dashboard_names_the_alt_test_against_the_adjudicated_consensus(adjudicated, client):
    from analysis.selectors import alt_test_against_adjudicated
    from annotation.membership import MEMBER_RESEARCHER

    study = adjudicated.study
    table = alt_test_against_adjudicated(study=study)
    assert table is not None and set(table["judge"]) == {"judge-x", "judge-y"}
    researcher = user_make(username="alt_researcher")
    member_add(study=study, user=researcher, role=MEMBER_RESEARCHER)
    client.force_login(researcher)
    html = client.get(f"/analysis/studies/{study.pk}/").content.decode()
    section = html[html.index('id="adjudicated"') :]
    assert "Judges against the adjudicated consensus" in section
    assert "Alt-test against the adjudicated consensus" in section
    # Too few responses per clinician here: not testable, said in words, no verdict.
    assert "not testable" in section and "does not pass" not in section
    Adjudication.objects.filter(study=study).delete()
    assert alt_test_against_adjudicated(study=study) is None
