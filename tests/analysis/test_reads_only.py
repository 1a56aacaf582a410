"""Reading a study writes nothing: the dashboard, the CSV download and the API's ratings list,
opened for the first time right after an import, send no INSERT, UPDATE or DELETE to the
database (except the export audit log, which a download exists to write). Clinicians' study
codes are given by the import, when they join the study, not by the first page that shows them.

tests/test_codebase_rules.py holds the static half of the rule (no write calls in selectors and
exports); this is the half that proves it for what a researcher actually opens.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from knox.models import AuthToken
from rest_framework.test import APIClient

from analysis.models import ExportLog
from annotation.models import RaterCode, Study
from scoring.rubric import DEFAULT_ATTRIBUTES
from tests.factories import workbook_make

ATTRIBUTES = [a["name"] for a in DEFAULT_ATTRIBUTES]
WRITE = re.compile(r"^\s*(INSERT|UPDATE|DELETE)\b", re.IGNORECASE)
# The writes a read may make, each with its reason:
ALLOWED = {
    # A download is recorded in the export audit log (analysis/downloads.py): who took which
    # data when. That row is the download's purpose, not a side effect of reading the study.
    ExportLog._meta.db_table: "the export audit log",
}


def _scores(value: int) -> str:
    return json.dumps({a: value for a in ATTRIBUTES})


def _import(tmp_path: Path) -> Study:
    human = workbook_make(
        path=tmp_path / "Human_judge.xlsx",
        header=["ConvID", "Clinician", "context", "human_response_original", "human_response_m1"],
        rows=[
            [str(c), code, f"I feel low ({c}).", _scores(1 + (c + n) % 5), _scores(2 + c % 4)]
            for c in range(1, 7)
            for n, code in enumerate(("C01", "C02", "C03"))
        ],
    )
    judge = workbook_make(
        path=tmp_path / "judge.xlsx",
        header=["ConvID", "context", "judge_response_original", "judge_response_m1"],
        rows=[[str(c), f"I feel low ({c}).", _scores(3), _scores(1 + c % 5)] for c in range(1, 7)],
    )
    call_command(
        "import_mentalalign", "--study", "Read only", "--human", str(human),
        "--judge", f"judge-z={judge}", stdout=open("/dev/null", "w"),  # noqa: SIM115
    )  # fmt: skip
    return Study.objects.get(name="Read only")


def _writes(queries: list[dict]) -> list[str]:
    return [
        q["sql"]
        for q in queries
        if WRITE.match(q["sql"]) and not any(f'"{table}"' in q["sql"] for table in ALLOWED)
    ]


@pytest.mark.django_db
def test_the_first_views_of_an_imported_study_write_nothing(client, researcher, tmp_path):
    study = _import(tmp_path)
    # The import gave the three clinicians their codes (the judge keeps its name).
    codes = set(RaterCode.objects.filter(study=study).values_list("code", flat=True))
    assert codes == {"C01", "C02", "C03"}
    client.force_login(researcher)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Token {AuthToken.objects.create(user=researcher)[1]}")
    client.get("/")  # the session's own first writes (sign-in bookkeeping) happen here

    with CaptureQueriesContext(connection) as captured:
        dashboard = client.get(reverse("analysis:dashboard", args=[study.pk]))
        download = client.get(reverse("analysis:ratings_csv", args=[study.pk]))
        text = b"".join(download.streaming_content).decode()
        listed = api.get("/api/ratings/", {"study": study.pk, "limit": 1000})

    assert dashboard.status_code == 200 and download.status_code == 200
    assert listed.status_code == 200 and listed.json()["count"] == 6 * 2 * 4
    assert {r["rater"] for r in listed.json()["results"]} == codes | {"judge-z"}
    assert all(code in text for code in codes)
    assert _writes(captured.captured_queries) == []
    # The capture sees writes: the audit log's INSERT is in it.
    assert any(WRITE.match(q["sql"]) for q in captured.captured_queries)
    assert RaterCode.objects.filter(study=study).count() == 3
    assert ExportLog.objects.filter(study=study).count() == 1  # the one allowed write
