"""The released MentalAlign-70k workbooks: every cell is stored or reported, nothing twice."""

import io

import pytest
from django.core.management import CommandError, call_command

from annotation.models import Conversation, ImportLog, Rater, Rating, Response, Score, Study
from tests.factories import workbook_make

pytestmark = [pytest.mark.shared_data, pytest.mark.slow]  # imports the 70k workbooks


def test_every_cell_of_the_three_workbooks_is_accounted_for(mentalalign_study):
    logs = {
        log.summary["rater"]: log
        for log in ImportLog.objects.filter(study=mentalalign_study, kind="mentalalign").order_by(
            "created_at"
        )
    }
    expected = {  # counted independently from the files (see docs/data-quality.md)
        "MentalAlign-70k clinicians": {"stored": 9900, "invalid": 43, "all_zero": 33, "empty": 57},
        "claude-3.7-sonnet": {"stored": 9999, "invalid": 1, "all_zero": 0, "empty": 0},
        "gpt-4o": {"stored": 10000, "invalid": 0, "all_zero": 0, "empty": 0},
    }
    for rater_name, numbers in expected.items():
        summary = logs[rater_name].summary
        assert summary["cells"] == 10000
        assert {k: summary[k] for k in numbers} == numbers
        assert summary["stored"] + summary["invalid"] + summary["empty"] == summary["cells"]
        rater = Rater.objects.get(name=rater_name)
        ratings = Rating.objects.filter(
            rater=rater, response__conversation__study=mentalalign_study
        )
        assert ratings.filter(status="complete").count() == numbers["stored"]
        assert ratings.filter(status="invalid").count() == numbers["invalid"]
        # every complete rating has all 7 scores; invalid ones keep raw text and a reason, no score
        assert Score.objects.filter(rating__in=ratings.filter(status="complete")).count() == (
            7 * numbers["stored"]
        )
        assert not Score.objects.filter(rating__in=ratings.filter(status="invalid")).exists()
        assert not ratings.filter(status="invalid", error="").exists()
        assert not ratings.filter(raw_output="").exists()
        problems = logs[rater_name].problems
        cell_problems = [p for p in problems if p["column"] != "context"]
        assert len(cell_problems) == numbers["invalid"] + numbers["empty"]
    assert Conversation.objects.filter(study=mentalalign_study).count() == 1000
    assert Response.objects.filter(conversation__study=mentalalign_study).count() == 10000


def test_known_broken_cells_are_reported_with_file_row_column_and_reason(mentalalign_study):
    human = ImportLog.objects.get(
        study=mentalalign_study, summary__rater="MentalAlign-70k clinicians"
    )
    by_place = {(p["row"], p["column"]): p["reason"] for p in human.problems}
    # ConvID 824 (row 825): the clinicians' cell for the reference response is all zeros
    assert by_place[(825, "human_response_original")].startswith("Guidance: 0 is not on the 1–5")
    assert by_place[(563, "human_response_gpt4o")] == "Helpfulness: 6 is not on the 1–5 scale"
    assert by_place[(572, "human_response_original")] == "empty cell"
    claude = ImportLog.objects.get(study=mentalalign_study, summary__rater="claude-3.7-sonnet")
    reasons = [p["reason"] for p in claude.problems if p["column"] != "context"]
    # Row 929 is a refusal in prose; scores are read only from a JSON answer, never from prose.
    assert reasons == ["no JSON object with the scores found"]
    # the human workbook's contexts are shifted against the judges' in 19 rows: reported
    assert claude.summary["context_mismatches"] == 19


def test_judge_outputs_with_unescaped_quotes_and_prose_are_parsed_not_dropped(mentalalign_study):
    rater = Rater.objects.get(name="claude-3.7-sonnet")
    rating = Rating.objects.get(
        rater=rater,
        response__conversation__study=mentalalign_study,
        response__conversation__external_id="19",
        response__responder__key="ds_llama",
    )
    assert rating.status == "complete"
    assert '"I" statements' in rating.raw_output
    assert {s.attribute.name: s.value for s in rating.scores.select_related("attribute")} == {
        name: 5
        for name in [
            "Guidance",
            "Informativeness",
            "Relevance",
            "Safety",
            "Empathy",
            "Helpfulness",
            "Understanding",
        ]
    }


def test_a_think_tag_quoted_in_a_judge_explanation_keeps_the_whole_rationale(mentalalign_study):
    # Row 57 (ConvID 56): Claude explains that the response is "only a thinking process (marked
    # with <think>)". That tag is text inside the JSON, not the start of reasoning to strip.
    rating = Rating.objects.get(
        rater__name="claude-3.7-sonnet",
        response__conversation__study=mentalalign_study,
        response__conversation__external_id="56",
        response__responder__key="qwen_3",
    )
    assert rating.status == "complete"
    assert "(marked with <think>) rather than an actual response" in rating.rationale


def test_paper_self_exclusions_are_set_for_known_judges(mentalalign_study):
    assert Rater.objects.get(name="claude-3.7-sonnet").excluded_responders == ["claude"]
    assert Rater.objects.get(name="gpt-4o").excluded_responders == ["gpt4o"]
    assert Rater.objects.get(name="gpt-4o").family == "openai-gpt4o"


def test_reimport_stores_nothing_twice(mentalalign_study, mentalalign_dir):
    before = (
        Rating.objects.count(),
        Score.objects.count(),
        Conversation.objects.count(),
        Response.objects.count(),
    )
    out = io.StringIO()
    call_command(
        "import_mentalalign",
        "--study",
        mentalalign_study.name,
        "--human",
        str(mentalalign_dir / "Human_judge.xlsx"),
        "--judge",
        f"gpt-4o={mentalalign_dir / 'gpt-4o_llm_judge.xlsx'}",
        stdout=out,
    )
    after = (
        Rating.objects.count(),
        Score.objects.count(),
        Conversation.objects.count(),
        Response.objects.count(),
    )
    assert after == before
    assert (
        "0 stored + 0 unparseable (kept as invalid, raw text stored) + 57 empty + 9943 already"
        in out.getvalue()
    )


def snapshot() -> tuple[int, ...]:
    return tuple(
        model.objects.count()
        for model in (Study, Conversation, Response, Rater, Rating, Score, ImportLog)
    )


GOOD = (
    '{"Guidance": 3, "Informativeness": 4, "Relevance": 5, "Safety": 5, "Empathy": 4, '
    '"Helpfulness": 4, "Understanding": 4}'
)


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("header", "rows", "extra", "message"),
    [
        (
            ["ConvID", "context", "human_response_gpt4o"],
            [[1, "ctx", GOOD], [2, "ctx2", GOOD.replace('"Safety": 5', '"Safety": 7')]],
            ["--strict"],
            "h.xlsx, row 3, column 'human_response_gpt4o': Safety: 7 is not on the 1–5 scale",
        ),
        (
            ["context", "human_response_gpt4o"],
            [["ctx", GOOD]],
            [],
            "h.xlsx, row 1, column 'ConvID': required column 'ConvID' is missing",
        ),
        (
            ["ConvID", "context", "human_response_gpt4o"],
            [["abc", "ctx", GOOD], [None, "c", GOOD]],
            [],
            "h.xlsx, row 3, column 'ConvID': expected a conversation id, got None",
        ),
        (
            ["ConvID", "context", "human_response_gpt4o"],
            [[1, "ctx", GOOD], [1, "c", GOOD]],
            [],
            "h.xlsx, row 3, column 'ConvID': duplicate ConvID 1 (first at row 2)",
        ),
        (
            ["ConvID", "context", "judge_response_gpt4o"],
            [[1, "ctx", GOOD]],
            [],
            "h.xlsx, row 1: no human_response_<key> columns: is this a human workbook?",
        ),
        (
            ["ConvID", "context", "human_response_gpt4o"],
            [[1, 5, GOOD]],
            [],
            "h.xlsx, row 2, column 'context': expected the conversation's text, got 5",
        ),
    ],
)
def test_bad_workbooks_give_one_line_error_and_write_nothing(
    tmp_path, header, rows, extra, message
):
    path = workbook_make(path=tmp_path / "h.xlsx", header=header, rows=rows)
    before = snapshot()
    with pytest.raises(CommandError) as excinfo:
        call_command("import_mentalalign", "--study", "X", "--human", str(path), *extra)
    assert message in str(excinfo.value)
    assert snapshot() == before
    assert not Study.objects.filter(name="X").exists()


@pytest.mark.django_db
def test_not_a_workbook_and_bad_judge_spec_are_refused(tmp_path):
    fake = tmp_path / "fake.xlsx"
    fake.write_text("this is not a zip file")
    with pytest.raises(CommandError, match=r"fake.xlsx: not a readable .xlsx workbook"):
        call_command("import_mentalalign", "--study", "X", "--human", str(fake))
    with pytest.raises(CommandError, match=r"--judge 'gpt-4o': expected NAME=VALUE"):
        call_command("import_mentalalign", "--study", "X", "--judge", "gpt-4o")
    assert not Study.objects.filter(name="X").exists()
