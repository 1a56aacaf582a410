"""JSON schemas for structured outputs, built from a study's rubric or distortion label set.

Structured outputs are an endpoint option (off by default: the papers' judges were prompted for
JSON, so a reproduction stays prompt-only). When on, the provider layer sends the schema in the
shape the endpoint's server understands (see `judging.providers.STRUCTURED_OUTPUTS`); whatever
comes back still goes through the same never-guess parsers.

Scores are `enum`s of the rubric's levels, never `minimum`/`maximum`: llama.cpp's grammar does
not enforce numeric bounds (a 135M model then answers 6 and 7 on a 1–5 scale), and an enum is
understood by every server. Every property is required and no other is allowed, which OpenAI's
strict mode demands.

Pure Python: no Django import here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .prompts import EXPLANATION_KEY, NO_DISTORTION, OVERALL_KEY

JUDGE_SCHEMA_NAME = "judge_rating"
LABELS_SCHEMA_NAME = "distortion_labels"


def _levels(attribute: Mapping[str, Any]) -> list[int]:
    anchors = attribute.get("anchors") or {}
    levels = sorted(int(level) for level in anchors)
    if not levels:
        raise ValueError(f"attribute {attribute.get('name')!r} has no levels")
    return levels


def judge_output_schema(rubric: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One integer per attribute (its levels as an enum), then Overall and Explanation.

    The key order follows the prompt's output format (Table 7), so a model that writes the
    keys in schema order writes what the prompt asked for.
    """
    if not rubric:
        raise ValueError("a structured judge output needs a rubric with attributes")
    properties: dict[str, Any] = {}
    all_levels: set[int] = set()
    for attribute in rubric:
        name = str(attribute["name"])
        levels = _levels(attribute)
        all_levels.update(levels)
        properties[name] = {"type": "integer", "enum": levels}
    # Overall is informational (the parser never stores it as a score); asking for one of the
    # levels keeps small models from writing endless decimals.
    properties[OVERALL_KEY] = {"type": "integer", "enum": sorted(all_levels)}
    properties[EXPLANATION_KEY] = {"type": "string"}
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def labels_output_schema(labels: Sequence[Mapping[str, str]], *, scheme: str) -> dict[str, Any]:
    """{"labels": [...]} with the label set (as the prompt spells it) as an enum.

    The ranked scheme allows at most two labels, dominant first, as its prompt says. "No
    Distortion" together with a distortion is still possible in the schema and is rejected by
    the parser with its reason — a schema that forbade it would need a oneOf that strict modes
    refuse.
    """
    names: list[str] = []
    for label in labels:
        shown = str(label.get("prompt_label") or label.get("name") or "").strip()
        if not shown:
            raise ValueError("distortion label without a name")
        if shown not in names:
            names.append(shown)
    if not names:
        raise ValueError("a structured label output needs a label set")
    if NO_DISTORTION not in names and not any(
        label.get("name") == NO_DISTORTION for label in labels
    ):
        names.append(NO_DISTORTION)
    array: dict[str, Any] = {"type": "array", "items": {"type": "string", "enum": names}}
    array["minItems"] = 1
    if scheme == "ranked":
        array["maxItems"] = 2
    return {
        "type": "object",
        "properties": {"labels": array},
        "required": ["labels"],
        "additionalProperties": False,
    }
