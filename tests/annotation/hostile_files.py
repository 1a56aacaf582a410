"""Build hostile import files in the test, and run them through the command or the /imports/
page; both must answer with the same one-line file/row/column error and write nothing."""

import csv
import io
import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import openpyxl
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command

from annotation.models import (
    Conversation,
    ImportLog,
    Rater,
    Rating,
    Responder,
    Response,
    Score,
    Study,
)

SHEET = "xl/worksheets/sheet1.xml"
GOOD = (
    '{"Guidance": 3, "Informativeness": 4, "Relevance": 5, "Safety": 5, "Empathy": 4, '
    '"Helpfulness": 4, "Understanding": 4}'
)


def csv_bytes(header: list[str], rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue().encode()


def jsonl_bytes(*objects: dict | str) -> bytes:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objects).encode()


def xlsx_bytes(
    header: list, rows: list[list], *, patch: Callable[[bytes], bytes] | None = None
) -> bytes:
    """A workbook as openpyxl writes it; `patch` rewrites the sheet's XML afterwards (to make
    it corrupt or hostile in ways openpyxl would not write)."""
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.append(header)
    for row in rows:
        sheet.append(row)
    buffer = io.BytesIO()
    book.save(buffer)
    if patch is None:
        return buffer.getvalue()
    out = io.BytesIO()
    with (
        zipfile.ZipFile(buffer) as source,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target,
    ):
        for info in source.infolist():
            data = source.read(info.filename)
            target.writestr(info.filename, patch(data) if info.filename == SHEET else data)
    return out.getvalue()


def snapshot() -> tuple[int, ...]:
    return tuple(
        model.objects.count()
        for model in (Study, Conversation, Responder, Response, Rater, Rating, Score, ImportLog)
    )


STUDY = "Hostile study"


def command_error(path: Path, kind: str) -> str:
    """The CommandError of importing `path` as `kind` (conversations / human / judge)."""
    if kind == "conversations":
        args = ["import_conversations", "--study", STUDY, str(path)]
    elif kind == "human":
        args = ["import_mentalalign", "--study", STUDY, "--human", str(path)]
    else:
        args = ["import_mentalalign", "--study", STUDY, "--judge", f"gpt-4o={path}"]
    with pytest.raises(CommandError) as excinfo:
        call_command(*args, stdout=io.StringIO())
    return str(excinfo.value)


def view_error(client, name: str, content: bytes, kind: str) -> str:
    """The one error the /imports/ page shows for uploading `content` as `name`."""
    response = client.post(
        "/imports/",
        {
            "new_study": STUDY,
            "kind": kind,
            "judge_name": "gpt-4o" if kind == "judge" else "",
            "file": SimpleUploadedFile(name, content),
        },
    )
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert list(errors) == ["file"], errors
    (message,) = errors["file"]
    assert "/tmp" not in message  # the uploaded name, not the temporary copy
    return message


def assert_refused(message: str, expected: str) -> None:
    assert expected in message, f"{expected!r} not in {message!r}"
    assert "\n" not in message and len(message) < 600


def login_importer(client, django_user_model):
    user = django_user_model.objects.create_user("importer", password="pw", is_staff=True)
    client.force_login(user)
    return client
