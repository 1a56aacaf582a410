"""The clinicians' workbook of a released study: a Clinician column (one rater per code) and
the `[not rated]` / `[flagged]` markers, read as exactly that and never as scores."""

from __future__ import annotations

import json
from pathlib import Path

import openpyxl
import pytest
from django.core.management import CommandError, call_command

from annotation.models import Rater, Rating, Score
from scoring.rubric import DEFAULT_ATTRIBUTES

ATTRIBUTES = [a["name"] for a in DEFAULT_ATTRIBUTES]


def _scores(value: int) -> str:
    return json.dumps({a: value for a in ATTRIBUTES})


def _workbook(path: Path, rows: list[list[object]]) -> Path:
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(["ConvID", "Clinician", "context", "human_response_original", "human_response_m1"])
    for row in rows:
        sheet.append(row)
    book.save(path)
    return path


def test_each_clinician_code_becomes_a_rater_of_the_study(db, tmp_path, capsys):
    path = _workbook(
        tmp_path / "Human_judge.xlsx",
        [
            ["1", "C01", "I feel low.", _scores(4), "[not rated]"],
            ["1", "C02", "I feel low.", _scores(2), _scores(3)],
            ["2", "C02", "I cannot sleep.", "[flagged]", "[flagged]"],
        ],
    )
    call_command("import_mentalalign", "--study", "Released", "--human", str(path))
    out = capsys.readouterr().out
    assert "1 marked not rated" in out and "2 marked flagged" in out
    raters = dict(Rater.objects.filter(name__startswith="Released ").values_list("name", "kind"))
    assert raters == {"Released C01": "clinician", "Released C02": "clinician"}
    ratings = Rating.objects.filter(response__conversation__study__name="Released")
    assert ratings.count() == 3  # the markers store nothing
    assert not ratings.exclude(status="complete").exists()
    c01 = ratings.get(rater__name="Released C01")
    assert c01.response.responder.key == "original"
    assert set(Score.objects.filter(rating=c01).values_list("value", flat=True)) == {4}


def test_a_conversation_twice_for_one_clinician_is_refused(db, tmp_path):
    path = _workbook(
        tmp_path / "Human_judge.xlsx",
        [
            ["1", "C01", "I feel low.", _scores(4), _scores(4)],
            ["1", "C01", "I feel low.", _scores(3), _scores(3)],
        ],
    )
    with pytest.raises(CommandError, match=r"row 3, column 'ConvID': duplicate ConvID 1 for "):
        call_command("import_mentalalign", "--study", "Twice", "--human", str(path))
    assert not Rating.objects.exists()


def test_two_contexts_for_one_conversation_are_refused(db, tmp_path):
    path = _workbook(
        tmp_path / "Human_judge.xlsx",
        [
            ["1", "C01", "I feel low.", _scores(4), _scores(4)],
            ["1", "C02", "Something else.", _scores(3), _scores(3)],
        ],
    )
    with pytest.raises(CommandError, match=r"row 3, column 'context': the context of ConvID 1"):
        call_command("import_mentalalign", "--study", "Contexts", "--human", str(path))
    assert not Rating.objects.exists()


def test_a_missing_clinician_code_is_named(db, tmp_path):
    path = _workbook(tmp_path / "Human_judge.xlsx", [["1", None, "I feel low.", _scores(4), ""]])
    with pytest.raises(CommandError, match=r"row 2, column 'Clinician': expected a clinician"):
        call_command("import_mentalalign", "--study", "NoCode", "--human", str(path))


def test_an_empty_exclude_overrides_the_papers_self_exclusion(db, tmp_path):
    book = openpyxl.Workbook()
    book.active.append(["ConvID", "context", "judge_response_gpt4o"])
    book.active.append(["1", "I feel low.", _scores(4)])
    book.save(tmp_path / "judge.xlsx")
    judge = f"gpt-4o-new={tmp_path / 'judge.xlsx'}"
    call_command("import_mentalalign", "--study", "S", "--judge", judge, "--exclude", "gpt-4o-new=")
    assert Rater.objects.get(name="gpt-4o-new").excluded_responders == []
    call_command(
        "import_mentalalign",
        "--study",
        "S2",
        "--judge",
        judge.replace("gpt-4o-new", "gpt-4o-other"),
    )
    assert Rater.objects.get(name="gpt-4o-other").excluded_responders == ["gpt4o"]


def test_the_report_says_how_many_cells_are_all_zero(db, tmp_path, capsys):
    """A clinician cell of 0 on every attribute is the release's mark for a response with
    nothing to rate (the scale is 1-5): stored as an invalid rating without scores, and the
    import's report says how many of its unparseable cells are such marks. A 6 is invalid too,
    but not one of them."""
    path = _workbook(
        tmp_path / "Human_judge.xlsx",
        [
            ["1", "C01", "I feel low.", _scores(4), _scores(0)],
            ["2", "C01", "I cannot sleep.", _scores(6), _scores(3)],
        ],
    )
    call_command("import_mentalalign", "--study", "Zeros", "--human", str(path))
    out = capsys.readouterr().out
    assert "2 unparseable (kept as invalid, raw text stored; 1 of them all-zero 'not rated'" in out
    ratings = Rating.objects.filter(response__conversation__study__name="Zeros")
    invalid = ratings.filter(status=Rating.Status.INVALID)
    assert invalid.count() == 2 and not Score.objects.filter(rating__in=invalid).exists()
    assert ratings.filter(status=Rating.Status.COMPLETE).count() == 2
