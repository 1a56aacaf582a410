import csv
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from annotation.models import Conversation, ImportLog, Rating, Responder, Response, Study
from annotation.services import rubric_get_or_create_default

MODEL_KEYS = [
    "claude",
    "gemini",
    "gpt4o",
    "gpt4omini",
    "llama_3",
    "qwen_2",
    "qwen_3",
    "ds_llama",
    "ds_qwen",
]


def write_csv(path: Path, rows: list[dict], fieldnames: list[str] | None = None) -> Path:
    fieldnames = fieldnames or list(rows[0])
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fieldnames)
        writer.writeheader()
        writer.writerows(rows)
    return path


def sample_rows(n: int = 3) -> list[dict]:
    return [
        {
            "id": f"c{i}",
            "context": f"I have been feeling low for {i} weeks.",
            "response": f"Reference reply {i}.",
            **{key: f"{key} reply {i}." for key in MODEL_KEYS},
            "condition_1": "depression",
            "condition_2": "sleep" if i % 2 else "",
            "condition_3": "",
        }
        for i in range(n)
    ]


def run(*args: str) -> None:
    call_command("import_conversations", *args, stdout=open("/dev/null", "w"))  # noqa: SIM115


def counts() -> tuple[int, ...]:
    return (
        Study.objects.count(),
        Conversation.objects.count(),
        Response.objects.count(),
        Rating.objects.count(),
        ImportLog.objects.count(),
    )


@pytest.mark.django_db
def test_csv_import_creates_conversations_responses_and_conditions(tmp_path):
    run("--study", "S", str(write_csv(tmp_path / "d.csv", sample_rows(3))))
    study = Study.objects.get(name="S")
    assert study.rubric.attributes.count() == 7
    assert Conversation.objects.filter(study=study).count() == 3
    assert Response.objects.filter(conversation__study=study).count() == 30
    c1 = Conversation.objects.get(external_id="c1")
    assert c1.conditions == ["depression", "sleep"]
    assert Response.objects.get(conversation=c1, responder__key="original").text == (
        "Reference reply 1."
    )
    assert Responder.objects.get(key="original").is_reference
    assert Responder.objects.get(key="gpt4o").family == "openai-gpt4o"


@pytest.mark.django_db
def test_reimport_of_the_same_file_duplicates_nothing(tmp_path):
    path = write_csv(tmp_path / "d.csv", sample_rows(4))
    run("--study", "S", str(path))
    study_rows = (
        Conversation.objects.filter(study__name="S"),
        Response.objects.filter(conversation__study__name="S"),
    )
    before = tuple(q.count() for q in study_rows)
    run("--study", "S", str(path))
    assert tuple(q.count() for q in study_rows) == before == (4, 40)


@pytest.mark.django_db
def test_jsonl_import_with_condition_list_and_no_id_is_idempotent(tmp_path):
    path = tmp_path / "d.jsonl"
    rows = [
        {"context": "ctx one", "response": "ref", "gpt4o": "g", "conditions": ["a", "b"]},
        {"context": "ctx two", "response": "ref2", "gpt4o": "g2"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    run("--study", "S", str(path))
    run("--study", "S", str(path))
    assert Conversation.objects.filter(study__name="S").count() == 2
    assert Conversation.objects.get(study__name="S", context="ctx one").conditions == ["a", "b"]
    assert Response.objects.filter(conversation__study__name="S").count() == 4


@pytest.mark.django_db
def test_blank_response_text_from_a_ratings_release_is_filled_in(tmp_path):
    study = Study.objects.create(name="S", rubric=rubric_get_or_create_default())
    conversation = Conversation.objects.create(
        study=study, external_id="c0", context="I have been feeling low for 0 weeks."
    )
    responder, _ = Responder.objects.get_or_create(
        key="gpt4o", defaults={"name": "GPT-4o", "family": "openai-gpt4o"}
    )
    Response.objects.create(conversation=conversation, responder=responder, text="")
    run("--study", "S", str(write_csv(tmp_path / "d.csv", sample_rows(1))))
    assert Response.objects.get(conversation=conversation, responder=responder).text == (
        "gpt4o reply 0."
    )
    assert Response.objects.filter(conversation=conversation).count() == 10


# Each bad input: the one-line message names file, row and column where known; nothing written.
def _bad_cases(tmp_path: Path) -> list[tuple[list[str], str]]:
    rows = sample_rows(3)
    no_context = [{k: v for k, v in r.items() if k != "context"} for r in rows]
    blank_context = [dict(r) for r in rows]
    blank_context[1]["context"] = "  "
    duplicate = [dict(r) for r in rows]
    duplicate[2]["id"] = "c0"
    jsonl_bad = tmp_path / "bad.jsonl"
    jsonl_bad.write_text('{"context": "ok", "response": "r"}\n{"context": "x", \n')
    jsonl_type = tmp_path / "type.jsonl"
    jsonl_type.write_text('{"context": "ok", "response": "r"}\n{"context": 42, "response": "r"}\n')
    jsonl_conditions = tmp_path / "cond.jsonl"
    jsonl_conditions.write_text(
        '{"context": "ok", "response": "r", "conditions": ["a", "b", "c", "d"]}\n'
    )
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00\x81garbage\x00")
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("id,context,response\nc1,hello,reply,EXTRA\n")
    return [
        ([str(tmp_path / "missing.csv")], "missing.csv: file not found"),
        (
            [str(write_csv(tmp_path / "noctx.csv", no_context))],
            "noctx.csv, row 1, column 'context': required column 'context' is missing",
        ),
        (
            [str(write_csv(tmp_path / "blank.csv", blank_context))],
            "blank.csv, row 3, column 'context': missing value",
        ),
        (
            [str(write_csv(tmp_path / "dup.csv", duplicate))],
            "dup.csv, row 4: duplicate conversation 'c0' (first at row 2)",
        ),
        ([str(jsonl_bad)], "bad.jsonl, row 2: invalid JSON"),
        ([str(jsonl_type)], "type.jsonl, row 2, column 'context': expected text, got int 42"),
        (
            [str(jsonl_conditions)],
            "cond.jsonl, row 1, column 'conditions': 4 condition labels given, at most 3 allowed",
        ),
        ([str(binary)], "binary.csv: not UTF-8 text"),
        ([str(ragged)], "ragged.csv, row 2: more cells than header columns"),
        ([str(tmp_path / "data.xlsx")], "data.xlsx: file not found"),
    ]


@pytest.mark.django_db
@pytest.mark.parametrize("case", range(10))
def test_bad_input_gives_one_line_error_and_writes_nothing(tmp_path, case):
    args, message = _bad_cases(tmp_path)[case]
    before = counts()
    with pytest.raises(CommandError) as excinfo:
        run("--study", "New study", *args)
    assert message in str(excinfo.value)
    assert "\n" not in str(excinfo.value)
    assert counts() == before
    assert not Study.objects.filter(name="New study").exists()


@pytest.mark.django_db
def test_unsupported_extension_is_refused(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("context\nhello\n")
    before = counts()
    with pytest.raises(CommandError, match=r"data.txt: unsupported file type '.txt'"):
        run("--study", "S", str(path))
    assert counts() == before


@pytest.mark.django_db
def test_changed_text_on_reimport_is_refused_and_nothing_changes(tmp_path):
    rows = sample_rows(3)
    run("--study", "S", str(write_csv(tmp_path / "a.csv", rows)))
    before = counts()
    rows[2]["gpt4o"] = "an edited reply"
    rows.append({**rows[0], "id": "new", "context": "new context"})
    with pytest.raises(
        CommandError,
        match=r"b.csv, row 4, column 'gpt4o': the 'gpt4o' response "
        r"of conversation 'c2' is already stored",
    ):
        run("--study", "S", str(write_csv(tmp_path / "b.csv", rows)))
    assert counts() == before  # the new row was not written either


def test_a_csv_written_with_escaped_formula_cells_reads_back_as_written(db, tmp_path):
    """This platform's CSVs put an apostrophe before a cell a spreadsheet would run; the
    reader takes it off again, and only that one."""
    from annotation.csvsafe import reversible_cell

    texts = ["=HYPERLINK(1)", "- I feel low", "'=already quoted", "@home", "plain"]
    rows = [
        {"id": reversible_cell(f"-c{i}"), "context": reversible_cell(t), "response": "ok"}
        for i, t in enumerate(texts)
    ]
    path = write_csv(tmp_path / "escaped.csv", rows)
    call_command("import_conversations", "--study", "Escaped", str(path))
    stored = dict(
        Conversation.objects.filter(study__name="Escaped").values_list("external_id", "context")
    )
    assert stored == {f"-c{i}": t for i, t in enumerate(texts)}
