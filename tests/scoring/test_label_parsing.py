"""scoring.label_parsing: the Appendix D output formats, common deviations, out-of-list labels
("Others", Appendix E/G) and answers that must be rejected rather than guessed.

Pure Python (no Django, no database).
"""

from __future__ import annotations

import pytest

from scoring.distortions import DEFAULT_DISTORTIONS, NO_DISTORTION
from scoring.label_parsing import OTHERS, LabelParse, label_key, parse_label_output


def parse(text: str | None, scheme: str = "multi") -> LabelParse:
    return parse_label_output(text, DEFAULT_DISTORTIONS, scheme=scheme)  # type: ignore[arg-type]


# --- the formats the prompts ask for (Appendix D) ------------------------------------------


def test_rlp_format_dominant_then_secondary() -> None:
    # RLP: "a comma-separated list, with the most dominant distortion listed first".
    result = parse("Emotional Reasoning, Labeling", "ranked")
    assert result.ok
    assert result.labels == ["Emotional Reasoning", "Labeling"]
    assert result.dominant == "Emotional Reasoning"
    assert result.others == []


def test_rlp_single_label() -> None:
    assert parse("Personalization", "ranked").labels == ["Personalization"]


def test_mlp_format_comma_separated_list_of_any_length() -> None:
    text = "Emotional Reasoning, Overgeneralization, Mental Filter, Mind Reading"
    result = parse(text, "multi")
    assert result.labels == [
        "Emotional Reasoning",
        "Overgeneralization",
        "Mental Filter",
        "Mind Reading",
    ]


@pytest.mark.parametrize("scheme", ["ranked", "multi"])
@pytest.mark.parametrize("text", ["**No Distortion**", "No Distortion", "No Distortion."])
def test_no_distortion_as_the_prompts_spell_it(scheme: str, text: str) -> None:
    assert parse(text, scheme).labels == [NO_DISTORTION]


@pytest.mark.parametrize("entry", DEFAULT_DISTORTIONS, ids=lambda e: e["name"])
def test_every_prompt_spelling_maps_to_the_table_1_name(entry: dict[str, str]) -> None:
    # The Appendix D list spells two labels differently from Table 1.
    for spelling in {entry["name"], entry["prompt_label"]}:
        assert parse(spelling).labels == [entry["name"]]
        assert parse(spelling.upper()).labels == [entry["name"]]


def test_the_whole_appendix_d_list_parses_in_the_multi_scheme() -> None:
    listing = ", ".join(
        e["prompt_label"] for e in DEFAULT_DISTORTIONS if e["name"] != NO_DISTORTION
    )
    result = parse(listing)
    assert result.labels == [e["name"] for e in DEFAULT_DISTORTIONS if e["name"] != NO_DISTORTION]


# --- spelling variants ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("all-or-nothing thinking", "All-or-Nothing Thinking"),
        ("All or nothing", "All-or-Nothing Thinking"),
        ("ALL_OR_NOTHING_THINKING", "All-or-Nothing Thinking"),
        ("catastrophising", "Magnification"),
        ("Catastrophizing", "Magnification"),
        ("Magnification/Catastrophizing", "Magnification"),
        ("Catastrophizing (Magnification)", "Magnification"),
        ("should statements", "Should Statements"),
        ("'Should' statements", "Should Statements"),
        ("“Should” Statement", "Should Statements"),
        ("Overgeneralisation", "Overgeneralization"),
        ("Over-generalization", "Overgeneralization"),
        ("Personalisation", "Personalization"),
        ("Labelling", "Labeling"),
        ("mind-reading", "Mind Reading"),
        ("Fortune-telling", "Fortune Telling"),
        ("None", NO_DISTORTION),
        ("No distortions found.", NO_DISTORTION),
        ("There are no cognitive distortions in the user input.", NO_DISTORTION),
    ],
)
def test_obvious_variants(text: str, expected: str) -> None:
    result = parse(text)
    assert result.labels == [expected], result
    assert result.others == []


def test_label_key_ignores_case_spacing_punctuation_and_british_spelling() -> None:
    assert label_key("All-or-Nothing Thinking") == label_key("all or nothing  thinking")
    assert label_key("Catastrophising") == label_key("catastrophizing")
    assert label_key("'Should' Statements") == label_key("Should Statement")


def test_duplicates_collapse_to_one_label() -> None:
    result = parse("Magnification, Catastrophizing, Labeling, labeling", "ranked")
    assert result.labels == ["Magnification", "Labeling"]


# --- deviations from the format ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "scheme", "expected"),
    [
        ("<think>Maybe mind reading? No.</think>\nFortune Telling", "ranked", ["Fortune Telling"]),
        ("Mind Reading</think>Labeling", "ranked", ["Labeling"]),  # opening tag in the prompt
        (
            '```json\n{"labels": ["Mind Reading", "Fortune Telling"]}\n```',
            "multi",
            ["Mind Reading", "Fortune Telling"],
        ),
        (
            'Here is my answer: {"dominant": "Labeling", "secondary": null} — hope it helps.',
            "ranked",
            ["Labeling"],
        ),
        (
            '{"secondary_distortion": "Labeling", "primary_distortion": "Emotional Reasoning", '
            '"explanation": "The user says: I feel stupid, so I am stupid."}',
            "ranked",
            ["Emotional Reasoning", "Labeling"],
        ),
        (
            '{"cognitive_distortions": "Emotional Reasoning, Labeling", "reasoning": "…"}',
            "multi",
            ["Emotional Reasoning", "Labeling"],
        ),
        ('["Mental Filter", "Should Statements"]', "multi", ["Mental Filter", "Should Statements"]),
        (
            '{"Emotional Reasoning": true, "Labeling": false, "Mind Reading": true}',
            "multi",
            ["Emotional Reasoning", "Mind Reading"],
        ),
        ("1. Overgeneralisation\n2. Labelling", "ranked", ["Overgeneralization", "Labeling"]),
        (
            "- Mind Reading\n- Fortune Telling\n- Labeling",
            "multi",
            ["Mind Reading", "Fortune Telling", "Labeling"],
        ),
        ("* Mind Reading\n* Labeling", "multi", ["Mind Reading", "Labeling"]),
        (
            "Cognitive Distortions:\n1. Mind Reading\n2. Labeling",
            "multi",
            ["Mind Reading", "Labeling"],
        ),
        (
            "Secondary: Labeling\nPrimary: Emotional Reasoning",
            "ranked",
            ["Emotional Reasoning", "Labeling"],
        ),
        ("Dominant distortion: Labeling\nSecondary distortion: None", "ranked", ["Labeling"]),
        ("Primary: Emotional Reasoning, Secondary: N/A", "ranked", ["Emotional Reasoning"]),
        (
            "Labeling (secondary), Emotional Reasoning (dominant)",
            "ranked",
            ["Emotional Reasoning", "Labeling"],
        ),
        (
            "Emotional Reasoning, Labeling\n\nExplanation: The user, however, feels worthless.",
            "ranked",
            ["Emotional Reasoning", "Labeling"],
        ),
        (
            "The cognitive distortions identified are: Emotional Reasoning, Labeling",
            "multi",
            ["Emotional Reasoning", "Labeling"],
        ),
        (
            "Emotional Reasoning: the user, because she feels it, believes it.\n"
            "Labeling: calls herself stupid",
            "multi",
            ["Emotional Reasoning", "Labeling"],
        ),
        ("Emotional Reasoning - assuming feelings are facts", "ranked", ["Emotional Reasoning"]),
        ("Final answer: Fortune Telling.", "ranked", ["Fortune Telling"]),
        (
            "Overgeneralization.\n\nThe user draws a broad conclusion from a single event.",
            "ranked",
            ["Overgeneralization"],
        ),
        ("Mind Reading and Fortune Telling", "multi", ["Mind Reading", "Fortune Telling"]),
        (
            "Mind Reading; Fortune Telling | Labeling",
            "multi",
            ["Mind Reading", "Fortune Telling", "Labeling"],
        ),
    ],
)
def test_common_deviations(text: str, scheme: str, expected: list[str]) -> None:
    result = parse(text, scheme)
    assert result.ok, result.error
    assert result.labels == expected


# --- out-of-list labels -> "Others" (§3.2, Appendix E Table 6) -------------------------------


@pytest.mark.parametrize(
    "label",
    [
        "Paranoid Thinking",
        "Lack of Empathy",
        "Paranoia (Mind Reading)",  # Table 6 lists it among the 'Others'
        "Disregard for Others' Feelings",
        "Jumping to Conclusions",
        "Delusions and Hallucinations",
        "Black and White Thinking",  # a synonym, not a spelling: the paper kept only the list
    ],
)
def test_out_of_list_label_is_kept_verbatim_as_others(label: str) -> None:
    result = parse(label)
    assert result.ok
    assert result.labels == [OTHERS]
    assert result.others == [label]
    assert result.raw_labels == [label]


def test_others_keep_their_position_in_a_ranked_answer() -> None:
    result = parse("Jumping to Conclusions, Mind Reading", "ranked")
    assert result.labels == [OTHERS, "Mind Reading"]
    assert result.others == ["Jumping to Conclusions"]


def test_several_others_are_one_category_but_all_kept_verbatim() -> None:
    result = parse("Paranoia, Delusions, Mind Reading")
    assert result.labels == [OTHERS, "Mind Reading"]
    assert result.others == ["Paranoia", "Delusions"]


# --- rejected, never guessed ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "scheme", "reason"),
    [
        (None, "multi", "empty output"),
        ("", "multi", "empty output"),
        ("   \n ", "ranked", "empty output"),
        ("<think>still thinking when the tokens ran out", "multi", "only <think>"),
        ("Sorry, I can't help with that.", "multi", "no label list"),
        (
            "I think this is fortune telling, but it could also be mind reading.",
            "multi",
            "prose mentions Mind Reading, Fortune Telling",
        ),
        ('{"foo": 1}', "multi", "no labels field"),
        ('{"labels": "the user is catastrophizing about her job"}', "multi", "prose"),
        ("No Distortion, Labeling", "multi", "together with distortions"),
        ("Emotional Reasoning, Labeling, Mind Reading", "ranked", "at most 2 labels"),
        ("Paranoia, Delusions, Mind Reading", "ranked", "at most 2 labels"),
    ],
)
def test_unparseable_or_contradictory_answers_are_errors(
    text: str | None, scheme: str, reason: str
) -> None:
    result = parse(text, scheme)
    assert not result.ok
    assert reason in (result.error or "")
    assert result.labels == []


def test_more_than_two_labels_are_fine_for_the_multi_scheme() -> None:
    assert len(parse("Emotional Reasoning, Labeling, Mind Reading", "multi").labels) == 3


def test_unknown_scheme_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="scheme"):
        parse_label_output("Labeling", None, scheme="single")  # type: ignore[arg-type]


def test_custom_label_set_of_plain_names() -> None:
    result = parse_label_output("Rumination, blaming", ["Rumination", "Blaming"], scheme="multi")
    assert result.labels == ["Rumination", "Blaming"]
    default_label = parse_label_output("Labeling", ["Rumination"], scheme="multi")
    assert default_label.labels == [OTHERS]


def test_fake_llm_server_answers_parse() -> None:
    # tests/fakes/llm_server.py answers with prompt-list spellings joined by ", ".
    prompt_labels = [e["prompt_label"] for e in DEFAULT_DISTORTIONS if e["name"] != NO_DISTORTION]
    for first in prompt_labels:
        for second in prompt_labels:
            if first != second:
                result = parse(f"{first}, {second}", "ranked")
                assert result.ok and len(result.labels) == 2 and OTHERS not in result.labels


# --- two answers are ambiguous, never merged or "the first one" -------------------------------


def test_two_fenced_json_answers_that_disagree_are_ambiguous() -> None:
    text = (
        '```json\n{"labels": ["Labeling"]}\n```\n\nOn reflection:\n\n'
        '```json\n{"labels": ["Mind Reading"]}\n```'
    )
    result = parse(text, "ranked")
    assert not result.ok and result.labels == []
    assert result.error == "ambiguous: two answers that disagree (Labeling | Mind Reading)"


def test_answer_and_final_answer_lines_are_not_merged_into_a_ranked_pair() -> None:
    result = parse("Answer: Labeling\nFinal answer: Mind Reading", "ranked")
    assert not result.ok and result.labels == []
    assert result.error.startswith("ambiguous: two answers")


def test_two_fenced_text_answers_that_disagree_are_ambiguous() -> None:
    result = parse("```\nLabeling\n```\nor rather\n```\nMind Reading\n```", "multi")
    assert not result.ok and result.error.startswith("ambiguous: two answers")


def test_a_ranked_answer_restated_in_another_order_is_ambiguous() -> None:
    text = "Answer: Labeling, Mind Reading\nFinal answer: Mind Reading, Labeling"
    assert not parse(text, "ranked").ok
    # For the multi-label scheme order carries no meaning: the same set said twice is one answer.
    assert parse(text, "multi").labels == ["Labeling", "Mind Reading"]


def test_the_same_answer_said_twice_is_one_answer() -> None:
    text = (
        '{"labels": ["Labeling"]}\n\nFinal answer: Labeling\n\n'
        '```json\n{"labels": ["Labeling"]}\n```'
    )
    assert parse(text, "ranked").labels == ["Labeling"]


def test_a_labels_heading_then_a_list_is_one_answer() -> None:
    text = "Final answer:\n1. Labeling\n2. Mind Reading\n\nExplanation: she calls herself a loser."
    assert parse(text, "ranked").labels == ["Labeling", "Mind Reading"]


def test_a_json_object_beside_the_answer_that_holds_no_labels_is_not_an_answer() -> None:
    text = '{"labels": ["Labeling"]}\n{"confidence": 0.8}'
    assert parse(text, "ranked").labels == ["Labeling"]


def test_a_think_tag_quoted_inside_a_json_answer_does_not_cut_it() -> None:
    text = '{"labels": ["Labeling"], "explanation": "no <think> block needed"}'
    assert parse(text, "ranked").labels == ["Labeling"]


def test_a_final_answer_line_that_disagrees_with_the_json_is_ambiguous() -> None:
    result = parse('{"labels": ["Labeling"]}\n\nFinal answer: Mind Reading', "ranked")
    assert not result.ok and result.error.startswith("ambiguous: two answers")
