"""Bad files give the importers' one-line file/row/column error, never a 500 or a traceback,
through the commands and the /imports/ page alike, and write nothing; columns that differ only
in case or spaces are refused, not silently merged."""

import io
import zipfile

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from annotation.models import Conversation, Rater, Study

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

HEADER = ["ConvID", "context", "human_response_gpt4o"]


@pytest.fixture
def importer_client(client, django_user_model):
    return login_importer(client, django_user_model)


def _truncate(xml: bytes) -> bytes:
    return xml[: xml.index(b'<row r="2"') + 40]


# name, file name, content (built lazily), import kind, expected message
CASES = {
    "header over the responder key length": (
        "wide.csv",
        lambda: csv_bytes(["id", "context", "m" * 150], [["c1", "ctx", "reply"]]),
        "conversations",
        # the message quotes the first 59 characters of a long name
        f"wide.csv, row 1, column '{'m' * 59}…': the column name is 150 characters, more "
        "than the 100 a responder key may have",
    ),
    "workbook header over the responder key length": (
        "wide.xlsx",
        lambda: xlsx_bytes(["ConvID", "context", "human_response_" + "k" * 120], [[1, "c", GOOD]]),
        "human",
        f"wide.xlsx, row 1, column 'human_response_{'k' * 44}…': the responder key after "
        "'human_response_' must have 1 to 100 characters, not 120",
    ),
    "id over 200 characters": (
        "longid.csv",
        lambda: csv_bytes(["id", "context", "gpt4o"], [["c1", "a", "r"], ["x" * 250, "b", "r"]]),
        "conversations",
        "longid.csv, row 3, column 'id': the id is 250 characters, more than the 200 an id may "
        "have",
    ),
    "workbook id over 200 characters": (
        "longid.xlsx",
        lambda: xlsx_bytes(HEADER, [["x" * 250, "ctx", GOOD]]),
        "human",
        "longid.xlsx, row 2, column 'ConvID': the id is 250 characters, more than the 200",
    ),
    "source over 100 characters": (
        "source.jsonl",
        lambda: jsonl_bytes({"context": "c", "gpt4o": "r", "source": "s" * 101}),
        "conversations",
        "source.jsonl, row 1, column 'source': the source is 101 characters, more than the 100",
    ),
    "NUL byte in a CSV cell": (
        "nul.csv",
        lambda: csv_bytes(["id", "context", "gpt4o"], [["c1", "ok", "r"], ["c2", "ok", "a\x00b"]]),
        "conversations",
        "nul.csv, row 3, column 'gpt4o': contains a NUL byte at character 2, which cannot be "
        "stored",
    ),
    "NUL byte in a CSV header": (
        "nulhead.csv",
        lambda: csv_bytes(["id", "context", "gp\x00t"], [["c1", "ok", "r"]]),
        "conversations",
        "nulhead.csv, row 1, column 'gp\\x00t': contains a NUL byte at character 3",
    ),
    "escaped NUL in JSONL": (
        "nul.jsonl",
        lambda: jsonl_bytes('{"context": "a\\u0000b", "gpt4o": "r"}'),
        "conversations",
        "nul.jsonl, row 1, column 'context': contains a NUL byte at character 2",
    ),
    "lone surrogate in JSONL": (
        "surrogate.jsonl",
        lambda: jsonl_bytes('{"context": "ok", "gpt4o": "a\\ud800"}'),
        "conversations",
        "surrogate.jsonl, row 1, column 'gpt4o': contains an unpaired UTF-16 surrogate at "
        "character 2",
    ),
    "deeply nested JSONL": (
        "deep.jsonl",
        lambda: jsonl_bytes(
            {"context": "ok", "gpt4o": "r"},
            '{"context": "x", "conditions": ' + "[" * 100_000 + "]" * 100_000 + "}",
        ),
        "conversations",
        "deep.jsonl, row 2: JSON nested more than 20 levels deep (IMPORT_MAX_JSON_DEPTH)",
    ),
    "integer too long to convert in JSONL": (
        "bigint.jsonl",
        lambda: jsonl_bytes('{"context": "c", "id": 1' + "0" * 5000 + "}"),
        "conversations",
        "bigint.jsonl, row 1: invalid JSON (Exceeds the limit (4300 digits) for integer string",
    ),
    "truncated sheet XML": (
        "truncated.xlsx",
        lambda: xlsx_bytes(HEADER, [[1, "ctx", GOOD], [2, "ctx", GOOD]], patch=_truncate),
        "human",
        "truncated.xlsx, row 2: the worksheet XML is corrupt after row 1 (ParseError: ",
    ),
    "garbage in sheet XML": (
        "garbage.xlsx",
        lambda: xlsx_bytes(
            HEADER, [[1, "ctx", GOOD]], patch=lambda x: x.replace(b'<row r="2">', b"<row <<")
        ),
        "human",
        "garbage.xlsx, row 2: the worksheet XML is corrupt after row 1 (ParseError: not well-",
    ),
    "impossible cell reference in sheet XML": (
        "badref.xlsx",
        lambda: xlsx_bytes(
            HEADER, [[1, "ctx", GOOD]], patch=lambda x: x.replace(b'r="B2"', b'r="!!"')
        ),
        "human",
        "badref.xlsx, row 2: the worksheet XML is corrupt after row 1 (ValueError: ",
    ),
    # Duplicate and case-variant columns: refused with both names, never one silently kept.
    "duplicate CSV columns": (
        "dup.csv",
        lambda: csv_bytes(["id", "context", "gpt4o", "gpt4o"], [["c1", "ctx", "a", "b"]]),
        "conversations",
        "dup.csv, row 1, column 'gpt4o': columns 'gpt4o' and 'gpt4o' name the same column",
    ),
    "case-variant CSV columns": (
        "case.csv",
        lambda: csv_bytes(["id", "context", "gpt4o", "GPT4o"], [["c1", "ctx", "a", "b"]]),
        "conversations",
        "case.csv, row 1, column 'GPT4o': columns 'gpt4o' and 'GPT4o' name the same column",
    ),
    "space-variant CSV context columns": (
        "ctx.csv",
        lambda: csv_bytes(["context", " Context", "gpt4o"], [["a", "b", "r"]]),
        "conversations",
        "ctx.csv, row 1, column 'Context': columns 'context' and ' Context' name the same column",
    ),
    "reference twice (response and original)": (
        "ref.csv",
        lambda: csv_bytes(["context", "response", "original"], [["a", "b", "c"]]),
        "conversations",
        "ref.csv, row 1, column 'original': columns 'response' and 'original' both hold the "
        "human reference response",
    ),
    "duplicate key in one JSON object": (
        "dupkey.jsonl",
        lambda: jsonl_bytes('{"context": "c", "gpt4o": "a", "gpt4o": "b"}'),
        "conversations",
        "dupkey.jsonl, row 1, column 'gpt4o': keys 'gpt4o' and 'gpt4o' name the same column",
    ),
    "case-variant keys in one JSON object": (
        "casekey.jsonl",
        lambda: jsonl_bytes('{"context": "c", "gpt4o": "a", "GPT4o": "b"}'),
        "conversations",
        "casekey.jsonl, row 1, column 'GPT4o': keys 'gpt4o' and 'GPT4o' name the same column",
    ),
    "case-variant keys across JSONL lines": (
        "lines.jsonl",
        lambda: jsonl_bytes({"context": "c", "gpt4o": "a"}, {"context": "d", "GPT4o": "b"}),
        "conversations",
        "lines.jsonl, row 2, column 'GPT4o': key 'GPT4o' and key 'gpt4o' of an earlier line name "
        "the same column",
    ),
    "case- and space-variant workbook columns": (
        "dup.xlsx",
        lambda: xlsx_bytes(
            ["ConvID", "context", " human_response_gpt4o", "human_response_GPT4o"],
            [[1, "ctx", GOOD, GOOD]],
        ),
        "human",
        "dup.xlsx, row 1, column 'human_response_GPT4o': columns ' human_response_gpt4o' and "
        "'human_response_GPT4o' name the same column",
    ),
    "column without a name": (
        "noname.csv",
        lambda: csv_bytes(["id", "context", ""], [["c1", "ctx", "a reply"]]),
        "conversations",
        "noname.csv, row 1, column '#3': column 3 has no name",
    ),
}


@pytest.mark.django_db
@pytest.mark.parametrize("case", CASES)
def test_bad_file_through_the_command_gives_one_line_error_and_writes_nothing(tmp_path, case):
    name, content, kind, expected = CASES[case]
    path = tmp_path / name
    path.write_bytes(content())
    before = snapshot()
    assert_refused(command_error(path, kind), expected)
    assert snapshot() == before
    assert not Study.objects.filter(name=STUDY).exists()


@pytest.mark.django_db
@pytest.mark.parametrize("case", CASES)
def test_bad_upload_through_the_import_page_gives_one_line_error_and_writes_nothing(
    importer_client, case
):
    name, content, kind, expected = CASES[case]
    before = snapshot()
    assert_refused(view_error(importer_client, name, content(), kind), expected)
    assert snapshot() == before
    assert not Study.objects.filter(name=STUDY).exists()


@pytest.mark.django_db
def test_too_long_study_or_judge_name_is_refused_by_the_command(tmp_path):
    path = tmp_path / "ok.csv"
    path.write_bytes(csv_bytes(["context", "gpt4o"], [["ctx", "r"]]))
    before = snapshot()
    with pytest.raises(CommandError, match="the study name is 201 characters, more than the 200"):
        call_command("import_conversations", "--study", "s" * 201, str(path))
    book = tmp_path / "j.xlsx"
    book.write_bytes(xlsx_bytes(["ConvID", "context", "judge_response_gpt4o"], [[1, "c", GOOD]]))
    with pytest.raises(CommandError, match="the judge name is 300 characters, more than the 200"):
        call_command("import_mentalalign", "--study", "S", "--judge", f"{'j' * 300}={book}")
    assert snapshot() == before


@pytest.mark.django_db
def test_judge_named_like_a_clinician_rater_is_a_form_error_not_a_500(importer_client):
    Rater.objects.create(kind=Rater.Kind.CLINICIAN, name="Dr Who")
    response = importer_client.post(
        "/imports/",
        {
            "new_study": STUDY,
            "kind": "judge",
            "judge_name": "Dr Who",
            "file": SimpleUploadedFile(
                "j.xlsx",
                xlsx_bytes(["ConvID", "context", "judge_response_gpt4o"], [[1, "c", GOOD]]),
            ),
        },
    )
    assert response.status_code == 200
    assert response.context["form"].errors["file"] == [
        "rater 'Dr Who' exists and is a clinician, not a judge"
    ]
    assert not Study.objects.filter(name=STUDY).exists()


@pytest.mark.django_db
def test_workbook_rows_beyond_a_too_small_declared_dimension_are_still_read(tmp_path):
    # openpyxl trusts <dimension ref>; a file that understates it lost rows without a word.
    content = xlsx_bytes(
        HEADER,
        [[i, f"ctx {i}", GOOD] for i in range(1, 6)],
        patch=lambda x: x.replace(b'<dimension ref="A1:C6" />', b'<dimension ref="A1:C2" />'),
    )
    assert b'<dimension ref="A1:C2" />' in zipfile.ZipFile(io.BytesIO(content)).read(SHEET)
    path = tmp_path / "h.xlsx"
    path.write_bytes(content)
    call_command("import_mentalalign", "--study", STUDY, "--human", str(path), stdout=io.StringIO())
    assert Conversation.objects.filter(study__name=STUDY).count() == 5


ENTITY_BOMB = (
    b'<?xml version="1.0"?><!DOCTYPE s [<!ENTITY a "aaaaaaaaaa">'
    b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>'
)


@pytest.mark.django_db
def test_xml_entity_expansion_in_a_workbook_is_refused(tmp_path):
    # A guard, not a fix: it holds as long as openpyxl parses through defusedxml (a declared
    # dependency for that reason).
    path = tmp_path / "entities.xlsx"
    path.write_bytes(
        xlsx_bytes(
            HEADER,
            [[1, "CTX", GOOD]],
            patch=lambda x: ENTITY_BOMB + x.replace(b"CTX", b"&c;"),
        )
    )
    before = snapshot()
    assert_refused(command_error(path, "human"), "entities.xlsx: not a readable .xlsx workbook")
    assert snapshot() == before
