"""Parse an LLM judge's output into rubric scores, without ever guessing a score.

Judges wrap JSON in ```json fences, put prose around it, write "4/5", leave unescaped quotes in
the explanation, or stop mid-object at the token limit. We accept what the judge unambiguously
said and reject everything else with a reason; the caller always keeps the raw text.
"""

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)
# "Guidance": 4   "guidance": "4/5"   'Safety': 4.0   — one attribute per match, used only when
# the output is not valid JSON (e.g. an unescaped quote inside the explanation).
_PAIR = re.compile(
    r"""["']?(?P<key>[A-Za-z_ ]+?)["']?\s*:\s*"""
    r"""["']?(?P<value>[-+]?\d+(?:\.\d+)?(?:\s*/\s*\d+)?)["']?\s*[,}\n]"""
)
_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*(?:/\s*(\d+))?\s*$")


_THINK_BLOCK = re.compile(r"<(think|thinking)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(think|thinking)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking)>", re.IGNORECASE)


def strip_think(text: str) -> tuple[str, str]:
    """(answer, thinking) with a reasoning model's <think>…</think> removed from `text`.

    Handles: complete blocks (several are joined); a leading block whose opening tag is missing
    (DeepSeek-R1 chat templates put "<think>" in the prompt, so the output starts mid-thought and
    only "</think>" appears); an unterminated <think> cut by the token limit, where everything
    after it is thinking and the answer is empty. `<thinking>` is treated the same way.
    """
    if not text:
        return "", ""
    thoughts: list[str] = []
    first_open = _THINK_OPEN.search(text)
    first_close = _THINK_CLOSE.search(text)
    if first_close and (first_open is None or first_close.start() < first_open.start()):
        thoughts.append(text[: first_close.start()].strip())
        text = text[first_close.end() :]

    def take(match: re.Match[str]) -> str:
        thoughts.append(match.group(2).strip())
        return ""

    text = _THINK_BLOCK.sub(take, text)
    dangling = _THINK_OPEN.search(text)
    if dangling:
        thoughts.append(text[dangling.end() :].strip())
        text = text[: dangling.start()]
    return text.strip(), "\n\n".join(t for t in thoughts if t)


@dataclass(frozen=True)
class JudgeParse:
    scores: dict[str, int] = field(default_factory=dict)
    overall: float | None = None
    explanation: str = ""
    error: str | None = None  # None when every attribute got a valid score

    @property
    def ok(self) -> bool:
        return self.error is None


def _json_candidates(text: str) -> list[str]:
    candidates = [m.group(1).strip() for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start : end + 1])
    candidates.append(text.strip())
    return candidates


def _load_object(text: str) -> dict | None:
    for candidate in _json_candidates(text):
        try:
            value = json.loads(candidate)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _to_score(raw: object, scale: tuple[int, int]) -> tuple[int | None, str | None]:
    low, high = scale
    if isinstance(raw, bool) or raw is None:
        return None, f"{raw!r} is not a score"
    if isinstance(raw, int | float):
        number, denominator = float(raw), None
    else:
        match = _NUMBER.match(str(raw))
        if not match:
            return None, f"{raw!r} is not a score"
        number = float(match.group(1))
        denominator = int(match.group(2)) if match.group(2) else None
    if denominator is not None and denominator != high:
        return None, f"{raw!r} is not on the {low}–{high} scale"
    if not number.is_integer() or not low <= number <= high:
        return None, f"{raw!r} is not on the {low}–{high} scale"
    return int(number), None


def parse_judge_output(
    text: str | None, attributes: Sequence[str], scale: tuple[int, int] = (1, 5)
) -> JudgeParse:
    """Scores for every attribute, or an error that says what was wrong; never a partial guess."""
    if text is None or not str(text).strip():
        return JudgeParse(error="empty output")
    text, _ = strip_think(str(text))
    if not text:
        return JudgeParse(error="output held only <think> reasoning, no answer")

    obj = _load_object(text)
    overall: float | None = None
    explanation = ""
    if obj is not None:
        by_key = {str(k).strip().lower(): v for k, v in obj.items()}
        raw_scores = {a: by_key[a.lower()] for a in attributes if a.lower() in by_key}
        overall_raw = by_key.get("overall")
        explanation = str(by_key.get("explanation") or by_key.get("rationale") or "")
    else:
        # Not valid JSON: accept attribute: value pairs only if each attribute appears exactly once.
        found: dict[str, list[str]] = {}
        for match in _PAIR.finditer(text):
            found.setdefault(match.group("key").strip().lower(), []).append(match.group("value"))
        ambiguous = [a for a in attributes if len(found.get(a.lower(), [])) > 1]
        if ambiguous:
            return JudgeParse(error=f"not valid JSON and {', '.join(ambiguous)} given twice")
        raw_scores = {a: found[a.lower()][0] for a in attributes if a.lower() in found}
        overall_raw = (found.get("overall") or [None])[0]
        match = re.search(r'"explanation"\s*:\s*"(.*)', text, re.S | re.I)
        if match:
            explanation = match.group(1).rstrip().removesuffix("}").rstrip().removesuffix('"')
        if not raw_scores:
            return JudgeParse(error="no JSON object and no attribute scores found")

    missing = [a for a in attributes if a not in raw_scores]
    if missing:
        return JudgeParse(explanation=explanation, error=f"missing {', '.join(missing)}")
    scores: dict[str, int] = {}
    problems: list[str] = []
    for attribute in attributes:
        value, problem = _to_score(raw_scores[attribute], scale)
        if problem:
            problems.append(f"{attribute}: {problem}")
        else:
            scores[attribute] = value
    if overall_raw is not None:
        try:
            overall = float(str(overall_raw).split("/")[0])
        except ValueError:
            overall = None  # Overall is informational; a bad one does not void the scores
    if problems:
        return JudgeParse(explanation=explanation, error="; ".join(problems))
    return JudgeParse(scores=scores, overall=overall, explanation=explanation)
