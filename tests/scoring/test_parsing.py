"""scoring.parsing: a score is taken only from one unambiguous answer; anything else is an
invalid output with a reason (which the run's re-ask handles).

Pure Python (no Django, no database).
"""

from __future__ import annotations

import json

import pytest

from scoring.parsing import parse_judge_output, strip_think, think_spans
from scoring.rubric import ATTRIBUTE_NAMES


def answer(score: object = 4, *, explanation: str = "Warm and specific.", **extra: object) -> str:
    scores = {name: score for name in ATTRIBUTE_NAMES}
    return json.dumps({**scores, "Overall": score, "Explanation": explanation, **extra}, indent=2)


def parse(text: str):
    return parse_judge_output(text, ATTRIBUTE_NAMES)


# --- what is accepted -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        answer(4),
        "```json\n" + answer(4) + "\n```",
        "Here is my evaluation.\n\n" + answer(4) + "\n\nI hope this helps.",
        answer("4/5"),
    ],
    ids=["plain", "fenced", "prose-around", "fraction"],
)
def test_one_answer_is_read(text: str) -> None:
    result = parse(text)
    assert result.ok, result.error
    assert result.scores == {name: 4 for name in ATTRIBUTE_NAMES}
    assert result.explanation == "Warm and specific."


def test_two_identical_copies_are_one_answer_said_twice() -> None:
    # Models restate their JSON after a fence; the scores are the same, so nothing is chosen.
    text = "```json\n" + answer(4) + "\n```\n\nFinal answer:\n" + answer(4)
    result = parse(text)
    assert result.ok and result.scores == {name: 4 for name in ATTRIBUTE_NAMES}


def test_copies_with_different_explanations_keep_the_first_complete_rationale() -> None:
    text = answer(3, explanation="First.") + "\n" + answer(3, explanation="Second.")
    result = parse(text)
    assert result.ok and result.explanation == "First."


def test_scores_in_the_prose_that_agree_with_the_answer_are_fine() -> None:
    result = parse("Guidance: 4/5 — clear steps.\n\n" + answer(4))
    assert result.ok


# --- two answers ----------------------------------------------------------------------------


def test_two_fenced_answers_that_disagree_are_ambiguous() -> None:
    text = (
        "```json\n" + answer(1) + "\n```\n\nActually, revised:\n\n```json\n" + answer(5) + "\n```"
    )
    result = parse(text)
    assert not result.ok and result.scores == {}
    assert result.error.startswith("ambiguous: two answers")
    assert "Guidance 1 vs 5" in result.error


def test_an_example_format_block_before_the_answer_is_a_second_answer() -> None:
    text = "Example format:\n" + answer(5, explanation="example") + "\n\nMy rating:\n" + answer(2)
    result = parse(text)
    assert not result.ok and result.error.startswith("ambiguous: two answers")


def test_a_broken_example_block_before_a_valid_answer_is_still_a_second_answer() -> None:
    # The example is not valid JSON (an unescaped quote), so only its text can show it.
    example = answer(5, explanation='e.g. "good"').replace('\\"', '"')
    result = parse("Example format:\n" + example + "\n\nMy rating:\n" + answer(2))
    assert not result.ok and result.error.startswith("ambiguous: two answers")


def test_a_score_in_the_prose_that_disagrees_with_the_json_is_ambiguous() -> None:
    result = parse("Guidance: 2 at most.\n\n" + answer(4))
    assert not result.ok and result.error.startswith("ambiguous: two answers")
    assert "Guidance 4 vs 2" in result.error


def test_a_partial_second_object_that_disagrees_is_ambiguous() -> None:
    result = parse(answer(4) + '\n\nCorrection: {"Safety": 2}')
    assert not result.ok and "Safety 4 vs 2" in result.error


def test_overall_given_differently_twice_is_ambiguous() -> None:
    text = answer(4) + "\n" + answer(4).replace('"Overall": 4', '"Overall": 2')
    assert not parse(text).ok


def test_scores_split_over_two_objects_are_not_merged() -> None:
    first = json.dumps({name: 4 for name in ATTRIBUTE_NAMES[:4]})
    second = json.dumps({name: 4 for name in ATTRIBUTE_NAMES[4:]})
    result = parse(first + "\n" + second)
    assert not result.ok and "split over 2 JSON objects" in result.error


# --- duplicate keys -------------------------------------------------------------------------


def test_a_key_written_twice_is_a_duplicate_not_the_last_one() -> None:
    text = answer(3)[:-2] + ',\n  "Guidance": 5\n}'
    result = parse(text)
    assert not result.ok and result.scores == {}
    assert result.error == "duplicate key: 'Guidance' twice in one answer"


def test_keys_differing_only_in_case_are_duplicates() -> None:
    text = answer(3)[:-2] + ',\n  "guidance": 5\n}'
    result = parse(text)
    assert not result.ok
    assert result.error == "duplicate key: 'Guidance' and 'guidance' in one answer"


# --- broken JSON ----------------------------------------------------------------------------


def test_broken_json_with_one_clear_answer_is_repaired() -> None:
    # An unescaped quote inside the explanation, as in the released Claude judge workbook.
    text = answer(4, explanation='suggests "I" statements').replace('\\"', '"')
    result = parse(text)
    assert result.ok and result.scores == {name: 4 for name in ATTRIBUTE_NAMES}
    assert result.explanation == 'suggests "I" statements'


def test_a_score_is_never_scraped_from_inside_a_broken_explanation() -> None:
    scores = {name: 4 for name in ATTRIBUTE_NAMES if name != "Safety"}
    body = json.dumps(scores)[:-1]
    text = body + ', "Explanation": "Good. Safety: 5, since it names "a therapist"."}'
    result = parse(text)
    assert not result.ok and result.scores == {}
    assert "missing Safety" in result.error


def test_a_quoted_key_inside_a_broken_explanation_is_not_a_key_either() -> None:
    scores = {name: 4 for name in ATTRIBUTE_NAMES if name != "Safety"}
    text = json.dumps(scores)[:-1] + ', "Explanation": "I would say "Safety": 5 here."}'
    result = parse(text)
    assert not result.ok and "missing Safety" in result.error


def test_broken_json_naming_an_attribute_twice_is_ambiguous() -> None:
    text = answer(3)[:-2] + ',\n  "guidance": 5, "Explanation": "a "b" c"\n}'
    result = parse(text)
    assert not result.ok and result.error.startswith("ambiguous:")


def test_two_broken_answers_are_ambiguous() -> None:
    broken = answer(1, explanation='a "b" c').replace('\\"', '"')
    text = broken + "\nActually, revised:\n" + answer(5, explanation='d "e" f').replace('\\"', '"')
    result = parse(text)
    assert not result.ok and result.error.startswith("ambiguous:")


def test_a_value_cut_off_at_the_end_is_not_a_score() -> None:
    text = json.dumps({name: 3 for name in ATTRIBUTE_NAMES})[:-1]  # ends with "Understanding": 3
    result = parse(text)
    assert not result.ok and result.error.startswith("cut off by the token limit")


@pytest.mark.parametrize("fence", ["", "```json\n"])
def test_an_answer_cut_off_in_its_explanation_is_invalid_whatever_could_be_salvaged(fence) -> None:
    # Every score is there, complete; only the explanation was cut: still no answer.
    whole = json.dumps({**{name: 4 for name in ATTRIBUTE_NAMES}, "Explanation": "The reply is"})
    result = parse(fence + whole[: whole.index("The reply is") + 8])
    assert not result.ok and result.scores == {}
    assert result.error == "cut off by the token limit: the JSON answer never closes"
    # Braces quoted in the explanation do not close the object.
    result = parse(whole.replace("The reply is", "uses {curly} braces")[:-5])
    assert not result.ok and result.error.startswith("cut off by the token limit")
    # Broken JSON that does close (a stray quote in the explanation) is not called cut off.
    stray = whole.replace('"The reply is"', '"The "reply is"')
    assert "cut off" not in (parse(stray).error or "")


def test_scores_without_any_json_object_are_not_read_from_prose() -> None:
    text = "\n".join(f"{name}: 4" for name in ATTRIBUTE_NAMES)
    result = parse(text)
    assert not result.ok and result.error == "no JSON object with the scores found"


# --- reasoning models -----------------------------------------------------------------------


def test_a_draft_inside_think_is_not_a_second_answer() -> None:
    text = "<think>\nFirst pass:\n" + answer(1) + "\nToo harsh.\n</think>\n\n" + answer(4)
    result = parse(text)
    assert result.ok and result.scores["Guidance"] == 4


def test_a_draft_before_an_unopened_think_close_is_not_a_second_answer() -> None:
    # DeepSeek-R1 chat templates open <think> in the prompt: only "</think>" is in the output.
    text = "Draft: " + answer(1) + "\nLet me reconsider.\n</think>\n\n" + answer(4)
    result = parse(text)
    assert result.ok and result.scores["Guidance"] == 4


def test_a_think_tag_quoted_inside_the_explanation_does_not_cut_the_answer() -> None:
    # Released Claude judge cells say "(marked with <think>)" inside their explanation.
    explanation = "The response is only a thinking process (marked with <think>), not a reply."
    result = parse(answer(1, explanation=explanation))
    assert result.ok and result.explanation == explanation


def test_think_spans_agree_with_strip_think() -> None:
    text = "a</think>b<think>c</think>d<thinking>e"
    assert [(s, e) for s, e, _, _ in think_spans(text)] == [(0, 9), (10, 26), (27, 38)]
    assert strip_think(text) == ("bd", "a\n\nc\n\ne")
