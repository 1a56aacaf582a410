"""Limits on what one imported file may hold: each is refused with a clear message before the
file is read into memory, through the commands and the /imports/ page (docs/importing.md)."""

import io
import os
import subprocess
import sys
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import override_settings

from annotation.importers import limits
from annotation.importers.base import ImportProblem
from annotation.importers.mentalalign import read_workbook
from annotation.models import Conversation, Responder, Study

from .hostile_files import (
    GOOD,
    SHEET,
    STUDY,
    assert_refused,
    command_error,
    csv_bytes,
    jsonl_bytes,
    login_importer,
    snapshot,
    view_error,
    xlsx_bytes,
)

MiB = 1024 * 1024
BOMB_CELL = 400 * MiB


@pytest.fixture
def importer_client(client, django_user_model):
    return login_importer(client, django_user_model)


@pytest.fixture(scope="module")
def zip_bomb(tmp_path_factory) -> Path:
    """A workbook whose one cell unpacks to 400 MiB, about 400 KB on disk (deflate)."""
    template = xlsx_bytes(["ConvID", "context", "human_response_gpt4o"], [[1, "ctx", "BOMB"]])
    path = tmp_path_factory.mktemp("bomb") / "bomb.xlsx"
    with zipfile.ZipFile(io.BytesIO(template)) as source, zipfile.ZipFile(path, "w") as target:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename != SHEET:
                target.writestr(info.filename, data, zipfile.ZIP_DEFLATED)
                continue
            before, after = data.split(b"BOMB")
            info = zipfile.ZipInfo(SHEET)
            info.compress_type = zipfile.ZIP_DEFLATED
            with target.open(info, "w", force_zip64=True) as sheet:
                sheet.write(before)
                chunk = b"A" * MiB
                for _ in range(BOMB_CELL // MiB):
                    sheet.write(chunk)
                sheet.write(after)
    assert path.stat().st_size < 1 * MiB
    return path


def _peak_bytes(call) -> int:
    tracemalloc.start()
    try:
        call()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak


@pytest.mark.django_db
def test_zip_bomb_workbook_is_refused_by_its_declared_size_before_parsing(
    zip_bomb, importer_client
):
    before = snapshot()
    expected = "bomb.xlsx: the workbook unpacks to 419,4"  # 400 MiB + the small XML members
    message = command_error(zip_bomb, "human")
    assert_refused(message, expected)
    assert "more than the limit of 67,108,864 (IMPORT_MAX_UNCOMPRESSED_BYTES)" in message

    # Refused from the zip's directory: nothing near the cell's size is ever decompressed.
    def read() -> None:
        with pytest.raises(ImportProblem):
            read_workbook(zip_bomb, kind="human")

    assert _peak_bytes(read) < 20 * MiB
    assert_refused(
        view_error(importer_client, "bomb.xlsx", zip_bomb.read_bytes(), "judge"), expected
    )
    assert snapshot() == before


@pytest.mark.django_db
@override_settings(IMPORT_MAX_UNCOMPRESSED_BYTES=1024 * MiB)
def test_zip_bomb_under_a_raised_size_limit_is_still_refused_by_its_ratio(zip_bomb):
    message = command_error(zip_bomb, "judge")
    assert_refused(message, f"bomb.xlsx: {SHEET} is compressed ")
    assert "(a real workbook stays under 100:1): refusing a possible zip bomb" in message


@pytest.mark.django_db
def test_a_million_columns_are_refused_at_the_header(tmp_path, importer_client):
    header = ["context", *(f"m{i}" for i in range(1_000_000))]
    content = (",".join(header) + "\n" + "ctx" + ",r" * 1_000_000 + "\n").encode()
    assert 9 * MiB < len(content) < 16 * MiB
    path = tmp_path / "wide.csv"
    path.write_bytes(content)
    before = snapshot()
    expected = "wide.csv, row 1: 1,000,001 columns, more than the limit of 200 (IMPORT_MAX_COLUMNS)"
    assert_refused(command_error(path, "conversations"), expected)
    assert_refused(view_error(importer_client, "wide.csv", content, "conversations"), expected)
    assert snapshot() == before
    assert Responder.objects.count() == 0


@pytest.mark.django_db
def test_a_workbook_row_reaching_column_xfd_is_refused(tmp_path):
    content = xlsx_bytes(
        ["ConvID", "context", "human_response_gpt4o"],
        [[1, "ctx", GOOD]],
        patch=lambda x: x.replace(b'r="C2"', b'r="XFD2"'),
    )
    path = tmp_path / "far.xlsx"
    path.write_bytes(content)
    assert_refused(
        command_error(path, "human"),
        "far.xlsx, row 2: 16,384 columns, more than the limit of 200 (IMPORT_MAX_COLUMNS)",
    )


@pytest.mark.django_db
@override_settings(IMPORT_MAX_CELLS=1000)
def test_a_workbook_of_blank_rows_up_to_row_100_million_stops_at_the_cell_limit(tmp_path):
    # openpyxl yields an empty row for every missing row number: without a limit this file of a
    # few KB would be read for hours.
    content = xlsx_bytes(
        ["ConvID", "context", "human_response_gpt4o"],
        [[1, "ctx", GOOD]],
        patch=lambda x: x.replace(b'<row r="2">', b'<row r="100000000">').replace(
            b'r="A2"', b'r="A100000000"'
        ),
    )
    path = tmp_path / "tall.xlsx"
    path.write_bytes(content)
    assert_refused(
        command_error(path, "human"),
        "tall.xlsx, row 335: the file holds more than 1,000 cells (rows × columns; "
        "IMPORT_MAX_CELLS)",
    )


@pytest.mark.django_db
@override_settings(IMPORT_MAX_CELLS=40)
def test_rows_beyond_the_cell_limit_stop_the_read_at_that_row(tmp_path, importer_client):
    rows = [[f"c{i}", f"context {i}", "reply"] for i in range(20)]
    content = csv_bytes(["id", "context", "gpt4o"], rows)
    path = tmp_path / "long.csv"
    path.write_bytes(content)
    expected = (
        "long.csv, row 15: the file holds more than 40 cells (rows × columns; IMPORT_MAX_CELLS)"
    )
    assert_refused(command_error(path, "conversations"), expected)
    assert_refused(view_error(importer_client, "long.csv", content, "conversations"), expected)
    jsonl = tmp_path / "long.jsonl"
    jsonl.write_bytes(jsonl_bytes(*({"context": f"c{i}", "gpt4o": "r"} for i in range(30))))
    assert_refused(command_error(jsonl, "conversations"), "long.jsonl, row 21: the file holds")


@pytest.mark.django_db
def test_a_cell_over_the_length_limit_is_refused(tmp_path, importer_client):
    long = "x" * 150_000
    csv_file = csv_bytes(["id", "context", "gpt4o"], [["c1", "ctx", "r"], ["c2", "ctx2", long]])
    expected = "big.csv, row 3: a cell is longer than the limit of 100,000 characters"
    path = tmp_path / "big.csv"
    path.write_bytes(csv_file)
    assert_refused(command_error(path, "conversations"), expected)
    assert_refused(view_error(importer_client, "big.csv", csv_file, "conversations"), expected)
    jsonl = tmp_path / "big.jsonl"
    jsonl.write_bytes(jsonl_bytes({"context": "ctx", "gpt4o": long}))
    assert_refused(
        command_error(jsonl, "conversations"),
        "big.jsonl, row 1, column 'gpt4o': the cell is 150,000 characters, more than the limit "
        "of 100,000 (IMPORT_MAX_CELL_CHARS)",
    )
    book = tmp_path / "big.xlsx"
    # openpyxl cuts a cell to Excel's 32,767 characters when it writes; a crafted file need not.
    book.write_bytes(
        xlsx_bytes(
            ["ConvID", "context", "judge_response_gpt4o"],
            [[1, "c", "LONG"]],
            patch=lambda x: x.replace(b"LONG", long.encode()),
        )
    )
    assert_refused(
        command_error(book, "judge"),
        "big.xlsx, row 2, column 'judge_response_gpt4o': the cell is 150,000 characters",
    )


@pytest.mark.django_db
@override_settings(IMPORT_MAX_CELL_CHARS=200_000)
def test_a_raised_cell_limit_admits_cells_beyond_the_csv_modules_default(tmp_path):
    path = tmp_path / "long-ok.csv"
    path.write_bytes(csv_bytes(["id", "context", "gpt4o"], [["c1", "ctx", "y" * 150_000]]))
    call_command("import_conversations", "--study", STUDY, str(path), stdout=io.StringIO())
    assert Conversation.objects.filter(study__name=STUDY).count() == 1


@pytest.mark.django_db
@override_settings(IMPORT_MAX_JSON_DEPTH=3)
def test_json_deeper_than_the_limit_is_refused_and_at_the_limit_accepted(tmp_path):
    ok = tmp_path / "ok.jsonl"
    ok.write_bytes(jsonl_bytes('{"context": "c", "gpt4o": "r", "conditions": ["a", "[[[["]}'))
    call_command("import_conversations", "--study", STUDY, str(ok), stdout=io.StringIO())
    deep = tmp_path / "deep.jsonl"
    deep.write_bytes(jsonl_bytes('{"context": "c2", "conditions": [[["a"]]]}'))
    assert_refused(
        command_error(deep, "conversations"),
        "deep.jsonl, row 1: JSON nested more than 3 levels deep (IMPORT_MAX_JSON_DEPTH)",
    )


@pytest.mark.django_db
@override_settings(IMPORT_MAX_FILE_BYTES=1000)
def test_files_over_the_size_limit_are_refused_before_they_are_read(tmp_path, importer_client):
    rows = [[f"c{i}", f"context {i}", "reply"] for i in range(100)]
    content = csv_bytes(["id", "context", "gpt4o"], rows)
    assert len(content) > 1000
    path = tmp_path / "big.csv"
    path.write_bytes(content)
    before = snapshot()
    assert_refused(
        command_error(path, "conversations"),
        f"big.csv: the file is {len(content):,} bytes, more than the import limit of 1,000 bytes "
        "(IMPORT_MAX_FILE_BYTES)",
    )
    # The upload is stopped as it arrives: the view never gets the file.
    assert_refused(
        view_error(importer_client, "big.csv", content, "conversations"),
        "big.csv: the file is more than 1,000 bytes, the import limit (IMPORT_MAX_FILE_BYTES)",
    )
    assert snapshot() == before


@pytest.mark.django_db
@override_settings(IMPORT_MAX_FILE_BYTES=100_000)
def test_upload_stopped_by_its_content_length_or_its_size_gives_a_form_error(importer_client):
    small = csv_bytes(["id", "context", "gpt4o"], [["c1", "ctx", "r"]])
    # A request far larger than the limit (content length checked first) ...
    response = importer_client.post(
        "/imports/",
        {
            "new_study": STUDY,
            "kind": "conversations",
            "file": SimpleUploadedFile("huge.csv", small + b"x" * 400_000),
        },
    )
    assert response.context["form"].errors["file"] == [
        "huge.csv: the file is more than 100,000 bytes, the import limit "
        "(IMPORT_MAX_FILE_BYTES); nothing was imported"
    ]
    # ... and a file within it goes through, CSRF still checked.
    csrf_client = type(importer_client)(enforce_csrf_checks=True)
    csrf_client.force_login(response.wsgi_request.user)
    refused = csrf_client.post(
        "/imports/",
        {"new_study": STUDY, "kind": "conversations", "file": SimpleUploadedFile("s.csv", small)},
    )
    assert refused.status_code == 403
    accepted = importer_client.post(
        "/imports/",
        {"new_study": STUDY, "kind": "conversations", "file": SimpleUploadedFile("s.csv", small)},
    )
    assert "1 conversations and 1 responses created" in accepted.content.decode()


@pytest.mark.django_db
@override_settings(IMPORT_MAX_RESPONDERS_PER_STUDY=3)
def test_responders_per_study_are_limited_across_imports(tmp_path, importer_client):
    first = tmp_path / "first.csv"
    first.write_bytes(csv_bytes(["id", "context", "a1", "a2"], [["c1", "ctx", "r", "r"]]))
    call_command("import_conversations", "--study", STUDY, str(first), stdout=io.StringIO())
    second = csv_bytes(["id", "context", "b1", "b2"], [["c2", "ctx2", "r", "r"]])
    (tmp_path / "second.csv").write_bytes(second)
    before = snapshot()
    expected = (
        f"second.csv, row 1: this import would give study {STUDY!r} 4 responders, more than the "
        "limit of 3 (IMPORT_MAX_RESPONDERS_PER_STUDY)"
    )
    assert_refused(command_error(tmp_path / "second.csv", "conversations"), expected)
    response = importer_client.post(
        "/imports/",
        {
            "study": Study.objects.get(name=STUDY).pk,
            "kind": "conversations",
            "file": SimpleUploadedFile("second.csv", second),
        },
    )
    assert response.context["form"].errors["file"] == [expected]
    assert snapshot() == before


def test_key_and_id_lengths_match_the_model_columns():
    from annotation.models import Conversation as C
    from annotation.models import Responder as R

    assert limits.ID_MAX_CHARS == C._meta.get_field("external_id").max_length
    assert limits.SOURCE_MAX_CHARS == C._meta.get_field("source").max_length
    assert limits.KEY_MAX_CHARS == R._meta.get_field("key").max_length


@pytest.mark.parametrize("value", ["0", "-5", "lots"])
def test_a_limit_that_is_not_a_positive_integer_stops_start_up(value):
    result = subprocess.run(
        [sys.executable, "-c", "import mentalbench.settings"],
        env={**os.environ, "IMPORT_MAX_CELLS": value},
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode != 0
    assert "IMPORT_MAX_CELLS" in result.stderr.strip().splitlines()[-1]


def _lie_about_size(archive: bytes, member: str, declared: int) -> bytes:
    """Rewrite the uncompressed size the zip declares for `member` (local header and central
    directory), as a hand-made bomb would, to get past a check of the declared sizes."""
    data = bytearray(archive)
    name = member.encode()
    local = data.index(b"PK\x03\x04")
    while data[local + 30 : local + 30 + len(name)] != name:
        local = data.index(b"PK\x03\x04", local + 4)
    data[local + 22 : local + 26] = declared.to_bytes(4, "little")
    central = data.index(b"PK\x01\x02")
    while data[central + 46 : central + 46 + len(name)] != name:
        central = data.index(b"PK\x01\x02", central + 4)
    data[central + 24 : central + 28] = declared.to_bytes(4, "little")
    return bytes(data)


@pytest.mark.django_db
def test_a_zip_that_understates_its_sizes_is_read_only_as_far_as_it_declares(tmp_path):
    # A guard for what the declared-size check relies on (zipfile's own behaviour), not a fix.
    template = xlsx_bytes(["ConvID", "context", "human_response_gpt4o"], [[1, "ctx", "BOMB"]])
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(template)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == SHEET:
                data = data.replace(b"BOMB", b"A" * (100 * MiB))
            target.writestr(info.filename, data, zipfile.ZIP_DEFLATED)
    path = tmp_path / "liar.xlsx"
    path.write_bytes(_lie_about_size(out.getvalue(), SHEET, 2000))
    with zipfile.ZipFile(path) as archive:
        assert archive.getinfo(SHEET).file_size == 2000  # passes the declared-size check

    messages = []

    def read() -> None:
        with pytest.raises(ImportProblem) as excinfo:
            read_workbook(path, kind="human")
        messages.append(str(excinfo.value))

    # zipfile stops at the declared size and fails the CRC: the 100 MiB are never unpacked.
    assert _peak_bytes(read) < 20 * MiB
    expected = "liar.xlsx: not a readable .xlsx workbook (BadZipFile)"
    assert_refused(messages[0], expected)
    assert_refused(command_error(path, "human"), expected)
