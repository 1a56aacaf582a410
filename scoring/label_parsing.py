"""Parse an LLM's cognitive-distortion answer into canonical labels, without guessing.

Reference: cognitive_distortions_paper.txt ([CD]) — Appendix D (the two output formats the
prompts ask for), §3.2 and Appendix E/Table 6 (out-of-list labels become "Others"), Appendix G
(how "Others" is used later, in analysis/distortions/consensus.py).

What the prompts ask for (Appendix D, verbatim):

- Ranked-Label Prompt (RLP): "provide them as a comma-separated list, with the most dominant
  distortion listed first, followed by a secondary distortion if applicable. At most two
  distortions should be listed. If no distortions are found, return **No Distortion**."
- Multi-Label Prompt (MLP): "If any cognitive distortion(s) are identified, list them as a
  comma-separated list. If no distortion(s) are found, return **No Distortion**."

Models deviate: markdown bold, JSON (fenced or inside prose), numbered or bulleted lists,
"Primary: … / Secondary: …" lines, a short explanation after the list, <think> blocks, British
spelling, the prompt's spelling ("Magnification (Catastrophizing)") instead of Table 1's. We
accept what the model unambiguously said and reject the rest with a reason; the caller keeps the
raw text. A label that is short and label-like but not in the list is kept verbatim and counted
as "Others", as the paper did ("we noticed several instances where LLM generated new or modified
labels ... We reviewed these cases and grouped all such labels under a single category of
'Others'", §3.2). Prose that only *mentions* labels ("this looks like fortune telling, but …") is
an error, never a label: picking labels out of free text would be a guess.

Pure Python, no Django.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Literal

from scoring.distortions import DEFAULT_DISTORTIONS, NO_DISTORTION, OTHERS
from scoring.parsing import find_json, strip_think_outside_json

Scheme = Literal["ranked", "multi"]
LabelSpec = Sequence[Mapping[str, str] | str]

#: The RLP's own limit: "The response must include at most two labels" [CD Appendix D].
RANKED_MAX_LABELS = 2


@dataclass(frozen=True)
class LabelParse:
    """One parsed answer.

    ``labels``: canonical names (Table 1 spelling, "No Distortion", or "Others" standing for all
    out-of-list labels), deduplicated; for the ranked scheme in rank order, dominant first.
    ``others``: the out-of-list labels verbatim. ``raw_labels``: every label as the model wrote
    it (cleaned of markdown), in answer order. ``error``: why nothing could be taken, else None.
    """

    labels: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    raw_labels: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def dominant(self) -> str | None:
        """The first label (the dominant one for the ranked scheme)."""
        return self.labels[0] if self.labels else None


# --------------------------------------------------------------------------------------------
# Label matching
# --------------------------------------------------------------------------------------------

# British -ise/-isation spellings ("catastrophising", "overgeneralisation", "personalisation").
_BRITISH = re.compile(r"is(e|ed|es|ing|ation|ations)\b")


def label_key(text: str) -> str:
    """Case-, spacing-, punctuation- and spelling-insensitive key of a label.

    "All-or-nothing thinking", "All or Nothing Thinking" and "ALL_OR_NOTHING THINKING" share a
    key; so do "'Should' statements" and "Should Statements", "Labelling" and "Labeling",
    "Catastrophising" and "Catastrophizing". A final plural "s" is dropped so that "Should
    Statement" still matches.
    """
    t = unicodedata.normalize("NFKC", text).casefold().replace("&", " and ")
    t = _BRITISH.sub(r"iz\1", t).replace("labell", "label")
    t = re.sub(r"[^a-z0-9]+", "", t)
    return t.removesuffix("s")


_PAREN = re.compile(r"^(?P<head>.*?)\s*\((?P<inner>[^()]*)\)\s*$")

# Said instead of "No Distortion": "None", "No distortions found", "There are no cognitive
# distortions in the user input." The prompt asks for the exact phrase; these say the same.
_NONE_PHRASE = re.compile(
    r"^(?:there\s+(?:are|is)\s+)?no\s+(?:cognitive\s+)?distortions?(?:\(s\))?"
    r"(?:\s+(?:were|was|are|is|has\s+been|have\s+been))?"
    r"(?:\s+(?:found|identified|detected|present))?"
    r"(?:\s+in\s+(?:the\s+)?(?:user\s+)?(?:input|text))?$"
)


@dataclass(frozen=True)
class _Matcher:
    by_key: dict[str, str]
    none_label: str
    patterns: tuple[tuple[str, re.Pattern[str]], ...]  # for naming mentions in an error

    def match(self, segment: str) -> str | None:
        key = label_key(segment)
        if key in self.by_key:
            return self.by_key[key]
        words = " ".join(re.sub(r"[^a-z()]+", " ", segment.casefold()).split())
        if key in ("none", "nodistortion") or _NONE_PHRASE.match(words):
            return self.none_label
        return None

    def mentions(self, text: str) -> list[str]:
        return [name for name, pattern in self.patterns if pattern.search(text)]


def _names(labels: LabelSpec | None) -> list[tuple[str, str]]:
    """(name, prompt_label) pairs of a label set given as dicts (DEFAULT_DISTORTIONS) or str."""
    spec = DEFAULT_DISTORTIONS if labels is None else labels
    pairs: list[tuple[str, str]] = []
    for entry in spec:
        if isinstance(entry, str):
            name, shown = entry.strip(), entry.strip()
        else:
            name = str(entry.get("name") or "").strip()
            shown = str(entry.get("prompt_label") or name).strip()
        if not name:
            raise ValueError("distortion label without a name")
        pairs.append((name, shown))
    if not pairs:
        raise ValueError("the label set is empty")
    return pairs


def _variants(text: str) -> list[str]:
    """Obvious alternative spellings of one label: parenthetical parts, no trailing "Thinking"."""
    out = [text]
    paren = _PAREN.match(text)
    if paren:
        head, inner = paren.group("head"), paren.group("inner")
        # "Magnification (Catastrophizing)" is also written "Magnification",
        # "Catastrophizing", "Catastrophizing (Magnification)" or "Magnification/Catastrophizing"
        # (the last has the same key as the full form).
        out += [head, inner, f"{inner} ({head})"]
    if text.casefold().endswith(" thinking") and len(text.split()) > 2:
        out.append(text[: -len(" thinking")])  # "All or Nothing" for "All or Nothing Thinking"
    return out


@lru_cache(maxsize=32)
def _compile(pairs: tuple[tuple[str, str], ...]) -> _Matcher:
    by_key: dict[str, str] = {}
    # The names and prompt spellings win; derived variants that would point at two different
    # labels of a custom label set are dropped rather than resolved arbitrarily.
    for name, shown in pairs:
        by_key.setdefault(label_key(name), name)
        by_key.setdefault(label_key(shown), name)
    primary = set(by_key)
    derived: dict[str, set[str]] = {}
    for name, shown in pairs:
        for variant in _variants(name) + _variants(shown):
            key = label_key(variant)
            if key and key not in primary:
                derived.setdefault(key, set()).add(name)
    for key, targets in derived.items():
        if len(targets) == 1:
            by_key[key] = next(iter(targets))
    # "No Distortion" is the prompts' answer for no distortion whether or not the label set
    # lists it (judging.prompts names it in the prompt's own sentences).
    none_label = NO_DISTORTION
    by_key.setdefault(label_key(NO_DISTORTION), none_label)
    patterns = []
    for name, shown in pairs:
        for surface in dict.fromkeys([name, shown]):
            words = re.findall(r"[A-Za-z]+", surface)
            if words:
                body = r"[\s\-_]*(?:or|and)?[\s\-_]*".join(map(re.escape, words))
                patterns.append((name, re.compile(rf"\b{body}", re.IGNORECASE)))
    return _Matcher(by_key, none_label, tuple(patterns))


def _matcher(labels: LabelSpec | None) -> _Matcher:
    return _compile(tuple(_names(labels)))


# --------------------------------------------------------------------------------------------
# Segmenting the answer
# --------------------------------------------------------------------------------------------

_LIST_MARKER = re.compile(r"^\s*(?:[-*•·‣▪–—+]|\d{1,2}\s*[.):]|\(\d{1,2}\)|[a-zA-Z][.)])\s+")
_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z0-9 ()/'_\-]{0,60}?)\s*[:=]\s*(?P<value>.*)$")
_RANK_1 = re.compile(r"\b(?:dominant|primary|main|first|most\s+dominant|top)\b", re.I)
_RANK_2 = re.compile(r"\b(?:secondary|second|minor)\b", re.I)
# Keys that introduce something other than labels.
_PROSE_KEY = re.compile(
    r"explan|reason|rational|justif|note|comment|evidence|analys|descri|defin|example|"
    r"confidence|summary|thought|because|user\s*input|text|quote",
    re.I,
)
_ANSWER_KEY = re.compile(
    r"label|distortion|answer|output|result|classif|categor|predict|annotat|final|response", re.I
)
# Keys that say "this is my answer": each one starts a statement of its own, so "Answer: Labeling"
# followed by "Final answer: Mind Reading" is two answers, never a merged ranked pair. Listing keys
# ("Labels:", "Distortions identified:") and rank keys ("Secondary:") continue the current one.
_STATEMENT_KEY = re.compile(r"answer|final|output|result|conclusion|verdict", re.I)
# Words that never occur in a distortion label but do occur in sentences, refusals, headings.
_NOT_A_LABEL_WORD = frozenset(
    """
    is are was were be been being am the this that these those it its i me my you your he she
    they we our their user input text because since which who there here seems seem appears
    appear shows show suggests suggest indicates indicate identified found detected present not
    cannot can't cant unable sorry however but if would could might may will please okay ok sure
    yes answer output result results label labels distortion distortions cognitive analysis
    explanation reasoning note summary unknown unclear insufficient n/a na
    """.split()
)
# Empty slots: "Secondary: None", "secondary: N/A".
_EMPTY_SLOT = frozenset(["", "none", "na", "n/a", "-", "--", "nil", "null", "not applicable"])
_TRIM = " \t\"'`“”‘’*_[]{}<>.,;:!?#"


@dataclass(frozen=True)
class _Segment:
    text: str
    rank: int | None  # 1 dominant, 2 secondary, None unstated


def _clean(text: str) -> str:
    text = text.replace("**", "").replace("__", "")
    text = _LIST_MARKER.sub("", text, count=1)
    return text.strip(_TRIM).strip()


def _rank_of(key: str) -> int | None:
    if _RANK_2.search(key):
        return 2
    if _RANK_1.search(key):
        return 1
    return None


def _label_like(text: str) -> bool:
    """Could `text` be a label the model made up (Table 6: "Paranoid Thinking", "Lack of
    Empathy", "Paranoia (Mind Reading)", "Disregard for Others' Feelings"), not a sentence?"""
    if not re.search(r"[A-Za-z]", text) or len(text) > 60 or re.search(r"[.!?]\s", text):
        return False
    bare = re.sub(r"\([^()]*\)", " ", text)
    words = re.findall(r"[A-Za-z][A-Za-z'/\-]*", bare.casefold())
    if not words or len(words) > 5:
        return False
    return not any(word in _NOT_A_LABEL_WORD for word in words)


def _split_known(text: str, matcher: _Matcher) -> list[str] | None:
    """ "Mind Reading and Fortune Telling", "Labeling/Overgeneralization": split only if every
    part is a known label, so an out-of-list "Delusions and Hallucinations" stays whole."""
    parts = [p.strip(_TRIM) for p in re.split(r"\s+(?:and|&|\+)\s+|\s*/\s*", text)]
    if len(parts) > 1 and all(p and matcher.match(p) for p in parts):
        return parts
    return None


def _segments_of(value: str, rank: int | None, matcher: _Matcher) -> list[_Segment] | None:
    """Segments of one comma-separated value; None if any part is prose."""
    out: list[_Segment] = []
    for piece in re.split(r"[,;|]", value):
        piece = _clean(piece)
        if not piece:
            continue
        piece_rank = rank
        # "Labeling (secondary)", "Emotional Reasoning (dominant)"
        paren = _PAREN.match(piece)
        if paren and _rank_of(paren.group("inner")) and paren.group("head"):
            piece_rank = _rank_of(paren.group("inner"))
            piece = paren.group("head").strip(_TRIM)
        # "Primary: Emotional Reasoning" inside a comma list; "Emotional Reasoning: explanation"
        kv = _KEY_VALUE.match(piece)
        if kv and kv.group("value").strip():
            key, rest = kv.group("key").strip(), kv.group("value").strip()
            if matcher.match(key):
                piece = key
            elif _PROSE_KEY.search(key) and not _rank_of(key):
                return None
            elif _rank_of(key) or _ANSWER_KEY.search(key):
                piece_rank = _rank_of(key) or piece_rank
                piece = _clean(rest)
                if piece.casefold() in _EMPTY_SLOT:
                    continue
            else:
                return None
        # "Emotional Reasoning - assuming feelings are facts"
        dash = re.match(r"^(?P<head>.+?)\s+[-–—]\s+\S", piece)
        if dash and matcher.match(dash.group("head")) and not matcher.match(piece):
            piece = dash.group("head")
        # "Labeling (calls herself stupid)": a known label with a remark in brackets.
        if paren and not matcher.match(piece):
            head = paren.group("head").strip(_TRIM)
            if matcher.match(head) and not matcher.match(paren.group("inner")):
                piece = head
        if matcher.match(piece):
            out.append(_Segment(piece, piece_rank))
            continue
        split = _split_known(piece, matcher)
        if split:
            out += [_Segment(p, piece_rank) for p in split]
        elif _label_like(piece):
            out.append(_Segment(piece, piece_rank))
        else:
            return None
    return out


def _from_text(text: str, matcher: _Matcher) -> list[list[_Segment]]:
    """The answer statements of the text, each a list of segments; prose lines (explanations,
    preambles) are skipped. A fence, an answer heading or an "Answer: …" line starts a new
    statement; list items, rank lines and label lines continue the current one."""
    statements: list[list[_Segment]] = [[]]

    def start() -> None:
        if statements[-1]:
            statements.append([])

    for raw_line in text.splitlines():
        line = raw_line.strip()
        if line.startswith("```"):
            start()
            continue
        if not line or line.startswith("#"):
            continue
        line = _LIST_MARKER.sub("", line.replace("**", "").replace("__", ""), count=1).strip()
        rank: int | None = None
        head, colon, tail = line.partition(":")
        if colon and tail.strip():
            labelled = _segments_of(head, None, matcher)
            if labelled and all(matcher.match(s.text) for s in labelled):
                statements[-1] += labelled  # "Emotional Reasoning: the user assumes …" — a remark
                continue
            short = len(head.split()) <= 4
            if short and _PROSE_KEY.search(head) and not _rank_of(head):
                continue  # "Explanation: …", "Reasoning: …"
            if not (_rank_of(head) or _ANSWER_KEY.search(head)):
                continue  # some other "Key: value" line or a sentence with a colon
            # "Dominant: …", "Labels: …", "The cognitive distortions identified are: …"
            rank = _rank_of(head)
            if rank is None and _STATEMENT_KEY.search(head):
                start()
            line = tail
            if _clean(line).casefold() in _EMPTY_SLOT:
                continue  # "Secondary: None"
        elif colon:
            if _STATEMENT_KEY.search(head) and not _rank_of(head):
                start()  # "Final answer:" heading before a list
            continue  # "Labels:" heading before a list
        segments = _segments_of(line, rank, matcher)
        if segments:
            statements[-1] += segments
    return [s for s in statements if s]


# --------------------------------------------------------------------------------------------
# JSON answers
# --------------------------------------------------------------------------------------------


def _json_values(value: object) -> Iterable[str]:
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str | int | float):
        yield str(value)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, Mapping):
                inner = next(
                    (v for k, v in item.items() if re.search(r"label|name|distortion", str(k))),
                    None,
                )
                yield from _json_values(inner)
            else:
                yield from _json_values(item)


def _from_json(
    obj: Mapping[str, object] | list[object], matcher: _Matcher
) -> tuple[list[_Segment] | None, str | None]:
    """(segments, error). Recognises {"labels": [...]}, {"dominant": …, "secondary": …},
    {"Emotional Reasoning": true, …} and a bare ["…", "…"]."""
    if isinstance(obj, list):
        pairs: list[tuple[int | None, object]] = [(None, obj)]
    else:
        # Keys that are labels themselves ("Labeling": true) are flags, not fields, even when
        # they contain a field word ("label", "reason").
        fields = {str(k).replace("_", " "): v for k, v in obj.items() if not matcher.match(str(k))}
        pairs = [(_rank_of(k), v) for k, v in fields.items() if _rank_of(k)]
        if not pairs:
            pairs = [
                (None, v)
                for k, v in fields.items()
                if _ANSWER_KEY.search(k) and not _PROSE_KEY.search(k)
            ]
        if not pairs:
            flagged = [str(k) for k, v in obj.items() if matcher.match(str(k)) and v is True]
            flagged += [str(k) for k, v in obj.items() if matcher.match(str(k)) and v == 1]
            if flagged or any(matcher.match(str(k)) for k in obj):
                pairs = [(None, list(dict.fromkeys(flagged)))]
        if not pairs:
            keys = ", ".join(map(str, obj)) or "none"
            return None, f"JSON object has no labels field (keys: {keys})"
    segments: list[_Segment] = []
    for rank, value in pairs:
        for text in _json_values(value):
            if rank == 2 and _clean(text).casefold() in _EMPTY_SLOT:
                continue
            part = _segments_of(text, rank, matcher)
            if part is None:
                return None, f"JSON value {text[:80]!r} is prose, not a label list"
            segments += part
    return segments, None


def _may_hold_labels(value: object) -> bool:
    """An object, or a non-empty list of strings/objects: not a "[1]" citation in prose."""
    if isinstance(value, Mapping):
        return True
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, str | Mapping) for item in value)
    )


def _reading(segments: list[_Segment], matcher: _Matcher, scheme: Scheme) -> tuple[str, ...]:
    """What one statement says, for comparing statements: the labels in rank order (ranked
    scheme) or as a set (multi-label scheme)."""
    ordered = segments
    if any(s.rank is not None for s in segments):
        ordered = sorted(segments, key=lambda s: 1.5 if s.rank is None else s.rank)
    labels = tuple(dict.fromkeys(matcher.match(s.text) or s.text for s in ordered))
    return labels if scheme == "ranked" else tuple(sorted(labels))


# --------------------------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------------------------


def parse_label_output(
    text: str | None, labels: LabelSpec | None = None, *, scheme: Scheme
) -> LabelParse:
    """Labels of one RLP or MLP answer [CD Appendix D], or an error with the reason.

    Args:
        text: the model's raw output.
        labels: the label set as dicts with ``name`` and optional ``prompt_label`` (like
            judging.prompts.DEFAULT_DISTORTIONS, the default) or plain names. Both spellings
            and the obvious variants map to ``name``.
        scheme: "ranked" (RLP: dominant first, optional secondary, at most two) or "multi".

    Rules beyond matching:
    - An out-of-list label is kept verbatim in ``others`` and appears as "Others" in
      ``labels`` (§3.2, Appendix E). Appendix G decides later whether it counts.
    - "No Distortion" together with a distortion is an error: the prompts make it the answer
      for *no* distortion, so the pair contradicts itself and either reading would be a guess.
    - Ranked scheme, more than two labels: an error. The RLP says "The response must include at
      most two labels"; an answer with three did not follow the ranked format, so we cannot
      tell whether its order is a ranking at all (it may be a multi-label list in text order),
      and dropping the third label would silently remove a vote from the Appendix G count.
    - "Primary:/Secondary:" keys or "(dominant)/(secondary)" marks order the ranked labels;
      otherwise the written order is the rank order, as the RLP asks.
    """
    if scheme not in ("ranked", "multi"):
        raise ValueError(f"scheme must be 'ranked' or 'multi', got {scheme!r}")
    matcher = _matcher(labels)
    if text is None or not str(text).strip():
        return LabelParse(error="empty output")
    answer = strip_think_outside_json(str(text))
    if not answer:
        return LabelParse(error="output held only <think> reasoning, no answer")

    # Every JSON value in the answer that holds labels is an answer; more than one that
    # disagree is ambiguous, never "the first one".
    statements: list[list[_Segment]] = []
    found = [f for f in find_json(answer, "{[") if _may_hold_labels(f.value)]
    for item in found:
        part, error = _from_json(item.value, matcher)  # type: ignore[arg-type]
        if error and len(found) > 1 and error.startswith("JSON object has no labels field"):
            continue  # another object beside the answer ({"confidence": …})
        if error:
            return LabelParse(error=error)
        statements.append(part or [])
    # The text around the JSON may state labels too ("Final answer: Mind Reading"): that is
    # another answer, compared with the JSON's below.
    outside, last = [], 0
    for item in found:
        outside.append(answer[last : item.start])
        last = item.end
    outside.append(answer[last:])
    statements += _from_text("\n".join(outside), matcher)
    statements = [s for s in statements if s]
    if not statements:
        mentioned = matcher.mentions(answer)
        hint = f" (prose mentions {', '.join(dict.fromkeys(mentioned))})" if mentioned else ""
        return LabelParse(error=f"no label list found in the output{hint}")
    readings = [_reading(s, matcher, scheme) for s in statements]
    if len(set(readings)) > 1:
        said = " | ".join(", ".join(r) for r in dict.fromkeys(readings))
        return LabelParse(error=f"ambiguous: two answers that disagree ({said})")
    segments = statements[0]

    if any(s.rank is not None for s in segments):
        # Python's sort is stable: unranked labels keep their written order between the two.
        segments = sorted(segments, key=lambda s: 1.5 if s.rank is None else s.rank)
    raw = [s.text for s in segments]
    canonical: list[str] = []
    others: list[str] = []
    for segment in segments:
        name = matcher.match(segment.text)
        if name is None:
            if segment.text not in others:
                others.append(segment.text)
            name = OTHERS
        if name not in canonical:
            canonical.append(name)
    distinct = len([c for c in canonical if c != OTHERS]) + len(others)
    if matcher.none_label in canonical and distinct > 1:
        rest = [c for c in raw if matcher.match(c) != matcher.none_label]
        return LabelParse(
            raw_labels=raw,
            error=f"'{matcher.none_label}' given together with distortions ({', '.join(rest)})",
        )
    if scheme == "ranked" and distinct > RANKED_MAX_LABELS:
        return LabelParse(
            raw_labels=raw,
            error=(
                f"ranked scheme allows at most {RANKED_MAX_LABELS} labels (dominant, secondary); "
                f"got {distinct}: {', '.join(dict.fromkeys(raw))}"
            ),
        )
    return LabelParse(labels=canonical, others=others, raw_labels=raw)
