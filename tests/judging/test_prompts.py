"""Prompt texts: the papers' wording, every rubric attribute and anchor, custom rubrics/labels.

Pure Python (no Django). Where the seed papers are at hand (shared/seeds beside the checkout)
the prompt texts are also checked word for word against them.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from judging.prompts import (
    DEFAULT_DISTORTIONS,
    DEFAULT_RUBRIC,
    GENERATION_MAX_TOKENS,
    GENERATION_SYSTEM_PROMPT,
    GENERATION_TEMPERATURE,
    NO_DISTORTION,
    distortion_multilabel_messages,
    distortion_ranked_messages,
    generation_messages,
    judge_messages,
    judge_output_template,
    rubric_scale,
    rubric_validate,
)

SEEDS = Path(__file__).resolve().parents[2].parent / "shared" / "seeds"


def seed_text(name: str) -> str:
    path = SEEDS / name
    if not path.exists():
        pytest.skip(f"seed file {path} is not available here")
    return path.read_text(encoding="utf-8")


def squash(text: str) -> str:
    """Whitespace-insensitive and typography-insensitive form for comparing with paper text."""
    text = text.replace("\u2019", "'").replace("*", "")
    return re.sub(r"\s+", " ", text).strip()


# ------------------------------------------------------------------------------ generation


def test_generation_prompt_is_the_papers() -> None:
    system, user = generation_messages("I feel anxious every morning.")
    assert system == GENERATION_SYSTEM_PROMPT
    assert system.startswith("You are a licensed psychiatrist responding to a user")
    assert user == "I feel anxious every morning."
    assert (GENERATION_TEMPERATURE, GENERATION_MAX_TOKENS) == (0.7, 512)


def test_generation_prompt_matches_seed_paper_word_for_word() -> None:
    assert squash(GENERATION_SYSTEM_PROMPT) in squash(seed_text("mentalbench10_paper.txt"))


def test_generation_rejects_empty_context() -> None:
    with pytest.raises(ValueError, match="empty"):
        generation_messages("   ")


# ------------------------------------------------------------------------------ judge


def test_default_rubric_has_the_seven_attributes_in_their_groups() -> None:
    names = [a["name"] for a in DEFAULT_RUBRIC]
    assert names == [
        "Guidance",
        "Informativeness",
        "Relevance",
        "Safety",
        "Empathy",
        "Helpfulness",
        "Understanding",
    ]
    groups = {a["name"]: a["group"] for a in DEFAULT_RUBRIC}
    assert [n for n in names if groups[n] == "CSS"] == names[:4]
    assert [n for n in names if groups[n] == "ARS"] == names[4:]
    assert rubric_scale(DEFAULT_RUBRIC) == (1, 5)
    rubric_validate(DEFAULT_RUBRIC)


def test_default_rubric_texts_are_verbatim_from_the_guidelines() -> None:
    guidelines = seed_text("evaluation_guidelines.md")
    for attribute in DEFAULT_RUBRIC:
        assert f"**Description**: {attribute['description']}" in guidelines, attribute["name"]
        for level, text in attribute["anchors"].items():
            assert re.search(rf"\*\*{level} \([A-Za-z ]+\)\*\*: {re.escape(text)}\n", guidelines), (
                attribute["name"],
                level,
            )


def test_judge_prompt_contains_every_attribute_and_anchor() -> None:
    system, user = judge_messages("I can't sleep.", "Try a bedtime routine.")
    for attribute in DEFAULT_RUBRIC:
        assert f"{attribute['name']} (1-5): {attribute['description']}" in system
        for level, text in attribute["anchors"].items():
            assert text in system, (attribute["name"], level)
    for level_name in ("5 (Excellent)", "4 (Good)", "3 (Moderate)", "2 (Poor)", "1 (Very Poor)"):
        assert level_name in system
    assert "one-sentence rationale" in system
    assert "Context:\nI can't sleep." in user and "Response:\nTry a bedtime routine." in user


def test_judge_prompt_output_format_is_table_7() -> None:
    system, _ = judge_messages("c", "r")
    template = judge_output_template()
    assert template in system
    # The paper's template with X as the placeholder; filled in, it is the JSON we parse.
    filled = json.loads(template.replace(": X", ": 3"))
    assert list(filled) == [a["name"] for a in DEFAULT_RUBRIC] + ["Overall", "Explanation"]
    assert filled["Explanation"] == "your explanation here"


def test_judge_prompt_follows_the_guidelines_evaluation_prompt() -> None:
    guidelines = squash(seed_text("evaluation_guidelines.md"))
    system, _ = judge_messages("c", "r")
    first_line = system.splitlines()[0]
    assert squash(first_line) in guidelines
    assert squash(judge_output_template()) in guidelines
    assert "Where X represents scores from 1-5 for each attribute." in guidelines
    assert system.endswith("Where X represents scores from 1-5 for each attribute.")


def test_judge_prompt_from_a_custom_rubric() -> None:
    rubric: list[dict[str, Any]] = [
        {
            "name": "Warmth",
            "group": "ARS",
            "description": "How warm the reply is.",
            # Keys as strings, as after a JSON round trip through the database.
            "anchors": {"0": "Cold", "1": "Neutral", "2": "Warm", "3": "Very warm"},
        },
        {
            "name": "Clarity",
            "group": "CSS",
            "description": "How clear the reply is.",
            "anchors": {0: "Confusing", 1: "Muddled", 2: "Clear", 3: "Crystal clear"},
        },
    ]
    system, _ = judge_messages("c", "r", rubric)
    assert "Warmth (0-3): How warm the reply is." in system
    assert "  - 3: Very warm" in system and "  - 0: Confusing" in system
    assert "Guidance" not in system
    assert '"Warmth": X' in system and '"Clarity": X' in system
    assert "from 0-3" in system


@pytest.mark.parametrize(
    ("rubric", "message"),
    [
        ([], "empty"),
        ([{"name": "", "description": "d", "anchors": {1: "a"}}], "no name"),
        ([{"name": "A", "description": "", "anchors": {1: "a"}}], "no description"),
        ([{"name": "A", "description": "d", "anchors": {}}], "no anchors"),
        ([{"name": "A", "description": "d", "anchors": {1: "a", 3: "c"}}], "not contiguous"),
        ([{"name": "A", "description": "d", "anchors": {"x": "a"}}], "integers"),
        ([{"name": "Overall", "description": "d", "anchors": {1: "a"}}], "reserved"),
        (
            [
                {"name": "A", "description": "d", "anchors": {1: "a", 2: "b"}},
                {"name": "A", "description": "d", "anchors": {1: "a", 2: "b"}},
            ],
            "twice",
        ),
        (
            [
                {"name": "A", "description": "d", "anchors": {1: "a", 2: "b"}},
                {"name": "B", "description": "d", "anchors": {1: "a", 2: "b", 3: "c"}},
            ],
            "differs",
        ),
    ],
)
def test_bad_rubrics_are_refused_with_the_attribute_named(
    rubric: list[dict[str, Any]], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        judge_messages("c", "r", rubric)


def test_judge_messages_need_context_and_response() -> None:
    with pytest.raises(ValueError, match="context"):
        judge_messages("", "r")
    with pytest.raises(ValueError, match="response"):
        judge_messages("c", "  ")


# ------------------------------------------------------------------------------ distortions


def test_default_distortions_are_table_1_plus_no_distortion() -> None:
    names = [d["name"] for d in DEFAULT_DISTORTIONS]
    assert len(names) == 11 and names[-1] == NO_DISTORTION
    assert names[:10] == [
        "Emotional Reasoning",
        "Overgeneralization",
        "Mental Filter",
        "Should Statements",
        "All-or-Nothing Thinking",
        "Mind Reading",
        "Fortune Telling",
        "Magnification",
        "Personalization",
        "Labeling",
    ]
    assert all(d["description"] for d in DEFAULT_DISTORTIONS)


def test_distortion_definitions_are_table_1s() -> None:
    paper = squash(seed_text("cognitive_distortions_paper.txt"))
    for label in DEFAULT_DISTORTIONS[:10]:
        assert squash(f"{label['name']}\t{label['description']}") in paper, label["name"]
        assert squash(label["example"]) in paper, label["name"]


def test_ranked_label_prompt_is_appendix_d_word_for_word() -> None:
    system, user = distortion_ranked_messages("I failed once, so I always fail.")
    assert user == "I failed once, so I always fail."
    assert system.startswith("As a specialized annotator in psychology")
    assert "most dominant" in system and "at most two labels" in system
    assert (
        "[Emotional Reasoning, Overgeneralization, Mental Filter, Should Statements, All or "
        "Nothing Thinking, Mind Reading, Fortune Telling, Magnification (Catastrophizing), "
        "Personalization, Labeling]"
    ) in system
    assert "**No Distortion**" in system
    assert squash(system) in squash(seed_text("cognitive_distortions_paper.txt"))


def test_multi_label_prompt_is_appendix_d_word_for_word() -> None:
    system, _ = distortion_multilabel_messages("Everyone hates me.")
    assert "comma-separated list" in system and "at most two" not in system
    assert squash(system) in squash(seed_text("cognitive_distortions_paper.txt"))


def test_distortion_prompts_take_a_custom_label_set() -> None:
    labels = [
        {"name": "Blaming", "description": "Holding others responsible for one's pain."},
        {"name": "Catastrophizing", "description": "Expecting the worst."},
    ]
    system, _ = distortion_ranked_messages("text", labels)
    assert "[Blaming, Catastrophizing]" in system and "Labeling" not in system
    # Without an entry named "No Distortion", the paper's none label stays...
    assert "**No Distortion**" in system
    # ...and with one, its prompt_label is how the prompt spells it.
    renamed = [*labels, {"name": NO_DISTORTION, "prompt_label": "None Found"}]
    system, _ = distortion_multilabel_messages("text", renamed)
    assert "return **None Found**." in system and "[Blaming, Catastrophizing]" in system
    defined, _ = distortion_multilabel_messages("text", labels, include_definitions=True)
    assert "- Blaming: Holding others responsible for one's pain." in defined
    with pytest.raises(ValueError, match="no distortion"):
        distortion_ranked_messages("text", [{"name": NO_DISTORTION}])
    with pytest.raises(ValueError, match="empty"):
        distortion_multilabel_messages(" ")
