"""Prompt texts for generation, LLM judging and cognitive-distortion labelling.

Every text here reproduces the wording of the papers in shared/seeds; the comments name the
section each one comes from. Rubrics and label sets are plain data (lists of dicts) so that a
study can store its own in the database and pass it in; the seed versions are the defaults.

Pure Python on purpose: no Django import, so workers, notebooks and tests can use it directly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from scoring.distortions import DEFAULT_DISTORTIONS, NO_DISTORTION
from scoring.rubric import DEFAULT_ATTRIBUTES

# --------------------------------------------------------------------------------------------
# Response generation — MentalBench-10 §3.2 "LLM Response Generation", the box "Prompt to the
# LLM Models" (also used unchanged for MentalBench-100k, §3 / Appendix B of that paper).
# --------------------------------------------------------------------------------------------

GENERATION_SYSTEM_PROMPT = (
    "You are a licensed psychiatrist responding to a user who has mental health concerns. "
    "Your response should be supportive, informative, and emotionally attuned, offering clear "
    "guidance while addressing the emotional state of the user. Maintain professionalism and "
    "ensure your reply is analytically thoughtful and psychologically appropriate."
)
# §3.2: "the same generation configuration across all models to ensure fairness: a temperature
# of 0.7 and a maximum token limit of 512".
GENERATION_TEMPERATURE = 0.7
GENERATION_MAX_TOKENS = 512


def generation_messages(context: str) -> tuple[str, str]:
    """(system, user) for one responder model: the §3.2 system prompt; the user's post as is.

    The paper calls it a *system* prompt, and the conversation context is the user's own
    message, so it goes in unchanged — adding framing text would change what the responder sees.
    """
    if not context or not context.strip():
        raise ValueError("generation_messages: the conversation context is empty")
    return GENERATION_SYSTEM_PROMPT, context


# --------------------------------------------------------------------------------------------
# Judge rubric — evaluation_guidelines.md "Evaluation Attributes" (same anchors as
# MentalBench-100k/MentalAlign-70k Appendix B, Table 7, and MentalBench-10 Appendix A, Table 5).
# Descriptions and anchor texts are verbatim from evaluation_guidelines.md.
# --------------------------------------------------------------------------------------------

# Level names of the 5-point Likert scale (evaluation_guidelines.md "Scoring Scale"; Table 7
# caption: "from 1 (Very Poor) to 5 (Excellent)").
LIKERT_LEVEL_NAMES: dict[int, str] = {
    5: "Excellent",
    4: "Good",
    3: "Moderate",
    2: "Poor",
    1: "Very Poor",
}

# The seed rubric lives in the shared vocabulary (scoring/); prompts render whatever rubric a
# study uses.
DEFAULT_RUBRIC: list[dict[str, Any]] = DEFAULT_ATTRIBUTES

# The two extra keys of the output format (Table 7 "Output Format").
OVERALL_KEY = "Overall"
EXPLANATION_KEY = "Explanation"


def rubric_validate(rubric: Sequence[Mapping[str, Any]]) -> None:
    """Raise ValueError naming the offending attribute when a rubric cannot build a prompt.

    Anchor keys may be ints or digit strings (a rubric that went through JSON has string keys).
    """
    if not rubric:
        raise ValueError("rubric is empty: it needs at least one attribute")
    seen: set[str] = set()
    scale: tuple[int, int] | None = None
    for position, attribute in enumerate(rubric, start=1):
        name = attribute.get("name")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"rubric attribute #{position} has no name")
        if name in seen:
            raise ValueError(f"rubric attribute {name!r} appears twice")
        if name in (OVERALL_KEY, EXPLANATION_KEY):
            raise ValueError(f"rubric attribute {name!r} clashes with a reserved output key")
        seen.add(name)
        if not str(attribute.get("description") or "").strip():
            raise ValueError(f"rubric attribute {name!r} has no description")
        anchors = _anchors(attribute)
        if not anchors:
            raise ValueError(f"rubric attribute {name!r} has no anchors")
        levels = sorted(anchors)
        if levels != list(range(levels[0], levels[-1] + 1)):
            raise ValueError(
                f"rubric attribute {name!r}: anchor levels {levels} are not contiguous"
            )
        this_scale = (levels[0], levels[-1])
        if scale is not None and this_scale != scale:
            raise ValueError(
                f"rubric attribute {name!r}: scale {this_scale} differs from the others' {scale}"
            )
        scale = this_scale


def rubric_scale(rubric: Sequence[Mapping[str, Any]]) -> tuple[int, int]:
    """(lowest, highest) anchor level; (1, 5) for the seed rubric."""
    rubric_validate(rubric)
    levels = sorted(_anchors(rubric[0]))
    return levels[0], levels[-1]


def _anchors(attribute: Mapping[str, Any]) -> dict[int, str]:
    raw = attribute.get("anchors") or {}
    try:
        return {int(level): str(text) for level, text in raw.items()}
    except (TypeError, ValueError) as exc:
        name = attribute.get("name")
        raise ValueError(f"rubric attribute {name!r}: anchor levels must be integers") from exc


# The opening and closing of the prompt follow evaluation_guidelines.md "Evaluation Prompt"
# (the prompt "used for both human and LLM judges"); between them every attribute is spelled out
# with its full description and its anchors, as in Table 7 (MentalAlign-70k Appendix B, §4.2).
_JUDGE_INTRO = (
    "You are evaluating responses to mental health concerns. Rate each response on a "
    "{low}-{high} scale for each attribute:"
)
# Table 7 "Justification" / evaluation_guidelines.md: one-sentence rationale.
_JUDGE_JUSTIFICATION = (
    "For each response, provide a one-sentence rationale summarizing your rating across all "
    "attributes."
)
_JUDGE_SCALE_NOTE = "Where X represents scores from {low}-{high} for each attribute."


def judge_system_prompt(rubric: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The judge instructions (Table 7) rendered from `rubric` (default: DEFAULT_RUBRIC)."""
    rubric = DEFAULT_RUBRIC if rubric is None else rubric
    low, high = rubric_scale(rubric)
    lines = [_JUDGE_INTRO.format(low=low, high=high), ""]
    for attribute in rubric:
        anchors = _anchors(attribute)
        lines.append(f"{attribute['name']} ({low}-{high}): {attribute['description'].strip()}")
        for level in sorted(anchors, reverse=True):  # Table 7 lists 5 first
            level_name = LIKERT_LEVEL_NAMES.get(level) if (low, high) == (1, 5) else None
            label = f"{level} ({level_name})" if level_name else str(level)
            lines.append(f"  - {label}: {anchors[level]}")
        lines.append("")
    lines.append(_JUDGE_JUSTIFICATION)
    lines.append("")
    lines.append("Output Format:")
    lines.append(judge_output_template(rubric))
    lines.append("")
    lines.append(_JUDGE_SCALE_NOTE.format(low=low, high=high))
    return "\n".join(lines)


def judge_output_template(rubric: Sequence[Mapping[str, Any]] | None = None) -> str:
    """The Table 7 output format: one key per attribute, then Overall and Explanation."""
    rubric = DEFAULT_RUBRIC if rubric is None else rubric
    # json.dumps quotes names safely; X stays a bare placeholder as in the paper.
    rows = [f"  {json.dumps(attribute['name'])}: X" for attribute in rubric]
    rows.append(f"  {json.dumps(OVERALL_KEY)}: X")
    rows.append(f'  {json.dumps(EXPLANATION_KEY)}: "your explanation here"')
    return "{\n" + ",\n".join(rows) + "\n}"


def judge_messages(
    context: str, response: str, rubric: Sequence[Mapping[str, Any]] | None = None
) -> tuple[str, str]:
    """(system, user) for one judge call on one response.

    The papers do not print the user turn; it carries the conversation context and the response
    under plain headings so the judge sees exactly what a clinician sees (context + one response,
    nothing about which system wrote it — blinding holds for judges too).
    """
    if not context or not context.strip():
        raise ValueError("judge_messages: the conversation context is empty")
    if response is None or not str(response).strip():
        raise ValueError("judge_messages: the response to rate is empty")
    user = f"Context:\n{context.strip()}\n\nResponse:\n{str(response).strip()}"
    return judge_system_prompt(rubric), user


# --------------------------------------------------------------------------------------------
# Cognitive-distortion labelling — cognitive_distortions_paper.txt §3.1 Table 1 (labels and
# definitions) and Appendix D "Annotation Prompts" (Ranked-Label and Multi-Label prompts).
# --------------------------------------------------------------------------------------------

# Appendix D, Ranked-Label Prompt (RLP), verbatim.
_RLP_INSTRUCTION = (
    "As a specialized annotator in psychology with expertise in cognitive distortions, analyze "
    "the `user input` to identify any underlying cognitive distortion(s) from the specified list "
    "called `COGNITIVE DISTORTIONS LIST`. Your task is to determine the most dominant cognitive "
    "distortion present. If there is a secondary distortion, note it as well. In cases where "
    "multiple distortions are present, select the most dominant one as the primary label, and if "
    "necessary, include one secondary label. The response must include at most two labels. If no "
    "distortions are found, label the `user input` as **{none}**."
)
_RLP_OUTPUT = (
    "Output Format: If cognitive distortions are identified, provide them as a comma-separated "
    "list, with the most dominant distortion listed first, followed by a secondary distortion if "
    "applicable. At most two distortions should be listed. If no distortions are found, return "
    "**{none}**."
)
# Appendix D, Multi-Label Prompt (MLP), verbatim.
_MLP_INSTRUCTION = (
    "As a specialized annotator in psychology with expertise in cognitive distortions, analyze "
    "the `user input` to identify any underlying cognitive distortion(s) from the specified list "
    "called `COGNITIVE DISTORTIONS LIST` and provide results as per the **Output Format** only."
)
_MLP_OUTPUT = (
    "Output Format: If any cognitive distortion(s) are identified, list them as a "
    "comma-separated list. If no distortion(s) are found, return **{none}**."
)


def _distortion_list(
    labels: Sequence[Mapping[str, str]], *, include_definitions: bool
) -> tuple[str, str]:
    """(list line, none label). The none label is the entry named "No Distortion", if any."""
    none_label = NO_DISTORTION
    names: list[str] = []
    definitions: list[str] = []
    for label in labels:
        name = label.get("name", "").strip()
        if not name:
            raise ValueError("distortion label without a name")
        shown = (label.get("prompt_label") or name).strip()
        if name == NO_DISTORTION:
            none_label = shown
            continue
        names.append(shown)
        if include_definitions and label.get("description"):
            example = label.get("example") or ""
            definitions.append(
                f"- {shown}: {label['description']}" + (f" Example: {example}" if example else "")
            )
    if not names:
        raise ValueError("the distortion label set has no distortion other than 'No Distortion'")
    line = "[" + ", ".join(names) + "]"
    if definitions:
        # Not in the paper's prompt (Appendix D lists names only): opt-in, for label sets whose
        # names are not self-explanatory.
        line += "\n\nDefinitions:\n" + "\n".join(definitions)
    return line, none_label


def distortion_ranked_messages(
    user_input: str,
    labels: Sequence[Mapping[str, str]] | None = None,
    *,
    include_definitions: bool = False,
) -> tuple[str, str]:
    """(system, user) for the Ranked-Label Prompt of Appendix D (at most two labels, ranked).

    The paper does not show how the `user input` was attached; it goes in the user turn
    unchanged. With the default labels and include_definitions=False the system text is the
    paper's prompt word for word.
    """
    labels = DEFAULT_DISTORTIONS if labels is None else labels
    listing, none_label = _distortion_list(labels, include_definitions=include_definitions)
    system = "\n\n".join(
        [
            _RLP_INSTRUCTION.format(none=none_label),
            f"`COGNITIVE DISTORTIONS LIST:` {listing}",
            _RLP_OUTPUT.format(none=none_label),
        ]
    )
    return system, _require_text(user_input)


def distortion_multilabel_messages(
    user_input: str,
    labels: Sequence[Mapping[str, str]] | None = None,
    *,
    include_definitions: bool = False,
) -> tuple[str, str]:
    """(system, user) for the Multi-Label Prompt of Appendix D (any number of labels)."""
    labels = DEFAULT_DISTORTIONS if labels is None else labels
    listing, none_label = _distortion_list(labels, include_definitions=include_definitions)
    system = "\n\n".join(
        [
            _MLP_INSTRUCTION,
            # Appendix D writes this heading without backticks in the MLP (and with them in the
            # RLP); kept as printed.
            f"COGNITIVE DISTORTIONS LIST: {listing}",
            _MLP_OUTPUT.format(none=none_label),
        ]
    )
    return system, _require_text(user_input)


def _require_text(user_input: str) -> str:
    if not user_input or not user_input.strip():
        raise ValueError("the user input to label is empty")
    return user_input


def labelling_messages(
    context: str, *, labels: list[dict[str, str]], scheme: str
) -> tuple[str, str]:
    """The Appendix D prompt of the scheme: Ranked-Label (RLP) or Multi-Label (MLP)."""
    if scheme == "multi":
        return distortion_multilabel_messages(context, labels)
    return distortion_ranked_messages(context, labels)
