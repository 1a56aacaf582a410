"""Parse an LLM judge's output into rubric scores, without ever guessing a score.

Judges wrap JSON in ```json fences, put prose around it, write "4/5", leave unescaped quotes in
the explanation, or stop mid-object at the token limit. The rule (docs/judging.md, "What counts
as an answer"): a score is taken only when the output, once <think> reasoning is removed, holds
exactly one answer that names every rubric attribute exactly once with a valid level. Everything
else is an error with a reason; the caller always keeps the raw text.

- An *answer* is a JSON object with at least one rubric attribute as a key. Two answers that
  disagree on any score (a draft and a revision, an "Example format" block and the real answer)
  are ``ambiguous: two answers``. Two copies that give the same score for every attribute they
  name are one answer said twice and are accepted (models restate their JSON after a fence);
  the rationale stored is that of the first complete copy.
- A score stated in the prose around the answer ("Guidance: 3") is part of what the judge said:
  if it differs from the answer's, the output is ambiguous too.
- A key written twice in one object (``Guidance`` twice, or ``Guidance`` and ``guidance``) is a
  ``duplicate key``: JSON would silently keep the last one.
- Broken JSON is repaired (json_repair) only when the repair is that one unambiguous answer:
  every attribute must be a key of the repaired object, be written exactly once in the whole
  output with a complete value, and the repair must read that same value. So a score is never
  taken from inside an explanation string, and never from a value cut off by the token limit.
- An answer cut off by the token limit is never an answer, whatever a repair could read from it:
  a JSON object that never closes (the output stops inside it) is ``cut off by the token limit``.
  Callers that know the provider stopped at the limit (finish reason "length", Anthropic's
  "max_tokens") reject the output with the same reason before parsing (`CUT_OFF`).
- Reasoning inside <think>…</think> is removed first: a reasoning model's drafts there are not
  answers. A "<think>" written inside a JSON string (an explanation quoting the tag) is text.
"""

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import json_repair

# The reason every reader gives for an answer the token limit cut off (also the prefix callers use
# when the provider says it stopped there).
CUT_OFF = "cut off by the token limit"

_NUMBER = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*(?:/\s*(\d+))?\s*$")


_THINK_BLOCK = re.compile(r"<(think|thinking)>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN = re.compile(r"<(think|thinking)>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</(think|thinking)>", re.IGNORECASE)


def think_spans(text: str) -> list[tuple[int, int, int, int]]:
    """(start, end, inner_start, inner_end) of each piece of <think> reasoning in `text`.

    Handles: complete blocks; a leading block whose opening tag is missing (DeepSeek-R1 chat
    templates put "<think>" in the prompt, so the output starts mid-thought and only "</think>"
    appears); an unterminated <think> cut by the token limit, where everything after it is
    thinking. `<thinking>` is treated the same way.
    """
    spans: list[tuple[int, int, int, int]] = []
    first_open = _THINK_OPEN.search(text)
    first_close = _THINK_CLOSE.search(text)
    position = 0
    if first_close and (first_open is None or first_close.start() < first_open.start()):
        spans.append((0, first_close.end(), 0, first_close.start()))
        position = first_close.end()
    while opening := _THINK_OPEN.search(text, position):
        block = _THINK_BLOCK.match(text, opening.start())
        if block is None:
            spans.append((opening.start(), len(text), opening.end(), len(text)))
            break
        spans.append((block.start(), block.end(), block.start(2), block.end(2)))
        position = block.end()
    return spans


def _cut(text: str, spans: Sequence[tuple[int, int]]) -> str:
    pieces, last = [], 0
    for start, end in spans:
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def strip_think(text: str) -> tuple[str, str]:
    """(answer, thinking) with a reasoning model's <think>…</think> removed from `text`
    (several blocks are joined; see think_spans for the forms recognised)."""
    if not text:
        return "", ""
    spans = think_spans(text)
    thoughts = [text[inner_start:inner_end].strip() for _, _, inner_start, inner_end in spans]
    answer = _cut(text, [(start, end) for start, end, _, _ in spans])
    return answer.strip(), "\n\n".join(t for t in thoughts if t)


def strip_think_outside_json(text: str) -> str:
    """`text` without <think> reasoning, where a tag inside a JSON value is text, not a tag.

    A judge explaining that "the response is only a thinking process (marked with <think>)"
    writes the tag inside its JSON explanation; strip_think would take everything after it for
    unterminated reasoning and cut the answer in half.
    """
    if not _THINK_OPEN.search(text) and not _THINK_CLOSE.search(text):
        return text.strip()  # the common case: nothing to mask
    masked = list(text)
    for found in find_json(text, "{["):
        masked[found.start : found.end] = " " * (found.end - found.start)
    spans = think_spans("".join(masked))
    return _cut(text, [(start, end) for start, end, _, _ in spans]).strip()


@dataclass(frozen=True)
class JudgeParse:
    scores: dict[str, int] = field(default_factory=dict)
    overall: float | None = None
    explanation: str = ""
    error: str | None = None  # None when every attribute got a valid score

    @property
    def ok(self) -> bool:
        return self.error is None


# --------------------------------------------------------------------------------------------
# Finding JSON in free text
# --------------------------------------------------------------------------------------------


class JsonObject(dict[str, object]):
    """A decoded JSON object that remembers keys written more than once (case- and
    space-insensitive), which a plain dict would silently collapse to the last value."""

    def __init__(self, pairs: list[tuple[str, object]]) -> None:
        super().__init__()
        self.duplicates: list[tuple[str, str]] = []  # (first spelling, repeated spelling)
        seen: dict[str, str] = {}
        for key, value in pairs:
            norm = str(key).strip().casefold()
            if norm in seen:
                self.duplicates.append((seen[norm], key))
            else:
                seen[norm] = key
                self[key] = value


_DECODER = json.JSONDecoder(object_pairs_hook=JsonObject)


@dataclass(frozen=True)
class FoundJson:
    start: int
    end: int
    value: object


def find_json(text: str, openers: str = "{") -> list[FoundJson]:
    """Every top-level JSON value that starts with one of `openers` and decodes, in order.

    Fenced or not, with prose around it: each candidate is decoded where it stands, and a value
    found inside another one is not reported again. Objects are JsonObject (duplicate keys kept).
    """
    found: list[FoundJson] = []
    pattern = re.compile("[" + re.escape(openers) + "]")
    position = 0
    while match := pattern.search(text, position):
        try:
            value, end = _DECODER.raw_decode(text, match.start())
        except (ValueError, RecursionError):
            position = match.start() + 1
            continue
        found.append(FoundJson(match.start(), end, value))
        position = end
    return found


# --------------------------------------------------------------------------------------------
# Scores
# --------------------------------------------------------------------------------------------


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


def _same(raw: object, scale: tuple[int, int]) -> object:
    """What two statements of one attribute are compared by: the score, else the bare text."""
    score, _ = _to_score(raw, scale)
    if score is not None:
        return score
    return re.sub(r"\s+", "", str(raw)).strip("\"',;").casefold()


_OVERALL = "Overall"


@lru_cache(maxsize=64)
def _stated_pattern(keys: tuple[str, ...]) -> re.Pattern[str]:
    """`Guidance: 4`, `"guidance": "4/5"`, `**Safety**: 5` — an attribute given a number, in JSON,
    broken JSON or prose. Longest names first so that one name inside another is not cut."""
    names = "|".join(re.escape(k) for k in sorted(keys, key=len, reverse=True))
    return re.compile(
        rf"""(?<![A-Za-z0-9_])["'*_]*(?P<key>{names})["'*_]*\s*[:=]\s*["'*_]*"""
        r"""(?P<value>[-+]?\d+(?:\.\d+)?(?:\s*/\s*\d+)?)""",
        re.IGNORECASE,
    )


def _stated(text: str, keys: Sequence[str]) -> dict[str, list[re.Match[str]]]:
    """Every place `text` gives one of `keys` a number, by key as the caller spells it."""
    canonical = {k.casefold(): k for k in keys}
    out: dict[str, list[re.Match[str]]] = {}
    for match in _stated_pattern(tuple(keys)).finditer(text):
        out.setdefault(canonical[match.group("key").casefold()], []).append(match)
    return out


_TERMINATED = re.compile(r"""["'*_]*\s*[,}\n]""")


def _by_key(obj: Mapping[str, object]) -> dict[str, object]:
    return {str(k).strip().casefold(): v for k, v in obj.items()}


def _explanation(by_key: dict[str, object]) -> str:
    value = by_key.get("explanation") or by_key.get("rationale") or ""
    return value if isinstance(value, str) else json.dumps(value)


def _overall(raw: object) -> float | None:
    if raw is None or isinstance(raw, bool):
        return None
    try:
        return float(str(raw).split("/")[0])
    except ValueError:
        return None  # Overall is informational; a bad one does not void the scores


def _conflicts(statements: dict[str, list[object]], scale: tuple[int, int]) -> list[str]:
    """Keys stated with more than one different value, as "Guidance 1 vs 5"."""
    out = []
    for key, values in statements.items():
        if len(values) < 2:
            continue  # said once: nothing to disagree with
        distinct = list(dict.fromkeys(_same(v, scale) for v in values))
        if len(distinct) > 1:
            out.append(f"{key} {' vs '.join(str(v) for v in distinct)}")
    return out if len(out) <= 3 else [*out[:3], f"and {len(out) - 3} more"]


def _scores(
    raw_scores: dict[str, object], attributes: Sequence[str], scale: tuple[int, int]
) -> tuple[dict[str, int], str | None]:
    missing = [a for a in attributes if a not in raw_scores]
    if missing:
        return {}, f"missing {', '.join(missing)}"
    scores: dict[str, int] = {}
    problems: list[str] = []
    for attribute in attributes:
        value, problem = _to_score(raw_scores[attribute], scale)
        if problem or value is None:
            problems.append(f"{attribute}: {problem}")
        else:
            scores[attribute] = value
    return scores, "; ".join(problems) or None


def parse_judge_output(
    text: str | None, attributes: Sequence[str], scale: tuple[int, int] = (1, 5)
) -> JudgeParse:
    """Scores for every attribute, or an error that says what was wrong; never a partial guess,
    never a choice between two answers (see the module docstring for the rule)."""
    if text is None or not str(text).strip():
        return JudgeParse(error="empty output")
    text = strip_think_outside_json(str(text))
    if not text:
        return JudgeParse(error="output held only <think> reasoning, no answer")
    lowered = {a.casefold() for a in attributes}
    answers = [
        f for f in find_json(text) if isinstance(f.value, dict) and lowered & set(_by_key(f.value))
    ]
    if answers:
        return _from_answers(text, answers, attributes, scale)
    return _from_broken(text, attributes, scale)


def _from_answers(
    text: str, answers: list[FoundJson], attributes: Sequence[str], scale: tuple[int, int]
) -> JudgeParse:
    for answer in answers:
        duplicates = getattr(answer.value, "duplicates", [])
        if duplicates:
            first, again = duplicates[0]
            written = f"{first!r} twice" if first == again else f"{first!r} and {again!r}"
            return JudgeParse(error=f"duplicate key: {written} in one answer")
    keys = [*attributes, _OVERALL]
    statements: dict[str, list[object]] = {}
    readings: list[tuple[dict[str, object], dict[str, object]]] = []
    for answer in answers:
        by_key = _by_key(answer.value)  # type: ignore[arg-type]
        raw = {k: by_key[k.casefold()] for k in keys if k.casefold() in by_key}
        readings.append((raw, by_key))
        for key, value in raw.items():
            statements.setdefault(key, []).append(value)
    # Scores said in the prose around the answers (the answers' own text is exact JSON: what
    # their explanations say is free text, not a score).
    prose, last = [], 0
    for answer in answers:
        prose.append(text[last : answer.start])
        last = answer.end
    prose.append(text[last:])
    for key, matches in _stated("\n".join(prose), keys).items():
        statements.setdefault(key, []).extend(m.group("value") for m in matches)
    conflicts = _conflicts(statements, scale)
    if conflicts:
        what = "two answers" if len(answers) > 1 else "two answers (one in the text around it)"
        return JudgeParse(error=f"ambiguous: {what} that disagree: {'; '.join(conflicts)}")
    complete = [r for r in readings if all(a in r[0] for a in attributes)]
    raw, by_key = (complete or sorted(readings, key=lambda r: -len(r[0])))[0]
    explanation = _explanation(by_key)
    scores, problem = _scores(raw, attributes, scale)
    if problem and not complete and len(readings) > 1:
        problem += f" (the scores are split over {len(readings)} JSON objects)"
    if problem:
        return JudgeParse(explanation=explanation, error=problem)
    return JudgeParse(scores=scores, overall=_overall(raw.get(_OVERALL)), explanation=explanation)


def never_closes(text: str, start: int) -> bool:
    """Whether a JSON object opened at or after `text[start]` is still open where the text ends:
    the output stopped inside it.

    Two counts must agree: braces outside strings (so a "}" quoted in an explanation does not
    close the object) and all braces (so a stray unescaped quote, which a judge often leaves in an
    explanation, does not make the rest of a complete object look like an open string). A closed
    but broken object is then left to the repair rules, not called cut off.
    """
    rest = text[start:]
    depth, in_string, escaped = 0, False, False
    for char in rest:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
    return depth > 0 and rest.count("{") > rest.count("}")


def _from_broken(text: str, attributes: Sequence[str], scale: tuple[int, int]) -> JudgeParse:
    """No valid JSON answer: repair, and keep the repair only if it is the one clear answer."""
    start = text.find("{")
    if start == -1:
        return JudgeParse(error="no JSON object with the scores found")
    if never_closes(text, start):
        # Whatever came before the cut, the judge did not finish its answer.
        return JudgeParse(error=f"{CUT_OFF}: the JSON answer never closes")
    keys = [*attributes, _OVERALL]
    stated = _stated(text, keys)
    twice = [f"{k} ({len(stated[k])} times)" for k in attributes if len(stated.get(k, [])) > 1]
    if twice:
        return JudgeParse(
            error=f"ambiguous: not valid JSON and scores given more than once: {', '.join(twice)}"
        )
    try:
        repaired = json_repair.loads(text[start:])
    except (ValueError, RecursionError):
        repaired = None
    if not isinstance(repaired, dict):
        return JudgeParse(error="not valid JSON, and no single object could be repaired from it")
    by_key = _by_key(repaired)
    explanation = _explanation(by_key)
    raw: dict[str, object] = {}
    problems: list[str] = []
    for attribute in attributes:
        if attribute.casefold() not in by_key:
            continue  # reported as missing; a mention inside the explanation is not a key
        matches = stated.get(attribute) or []
        match = matches[0] if len(matches) == 1 else None
        if match is None or match.start() < start:
            problems.append(f"{attribute}: no number written as its value")
            continue
        literal = match.group("value")
        if not _TERMINATED.match(text, match.end()):
            problems.append(f"{attribute}: value {literal!r} is not complete (cut off?)")
            continue
        read = re.sub(r"\s+", "", str(by_key[attribute.casefold()])).strip("\"',;")
        if read != re.sub(r"\s+", "", literal):
            problems.append(
                f"{attribute}: the repair read {read!r} where the text says {literal!r}"
            )
            continue
        raw[attribute] = literal
    if problems:
        return JudgeParse(
            explanation=explanation, error="not valid JSON and " + "; ".join(problems)
        )
    scores, problem = _scores(raw, attributes, scale)
    if problem:
        return JudgeParse(explanation=explanation, error=f"not valid JSON; {problem}")
    overall_matches = stated.get(_OVERALL, [])
    overall = None
    if len({_same(m.group("value"), scale) for m in overall_matches}) > 1:
        return JudgeParse(error="ambiguous: not valid JSON and Overall given twice, differently")
    if overall_matches:
        overall = _overall(overall_matches[0].group("value"))
    return JudgeParse(scores=scores, overall=overall, explanation=explanation)
