"""When two usernames are one name to a reader.

A username is shown in admin lists, audit trails, CSVs and the top bar. `аdmin` (Cyrillic а),
`ａdmin2` (full-width letters) and `staﬀ` (the ff ligature) read as `admin`, `admin2` and
`staff`: an invite or a rename that makes such a name beside the real one lets one person pass
for another. Two steps, both from Unicode:

- NFKC normalisation (what Django's `normalize_username` does on save): full-width letters,
  ligatures and other compatibility forms become the plain letters; the name is stored so.
- The confusable skeleton of Unicode Technical Standard #39: every character replaced by the
  prototype it is confusable with (Cyrillic а → a, ӏ → l, the digit 1 and capital I → l,
  m → rn, …). Two names with the same skeleton look the same.

The confusables come from `confusable-homoglyphs` (Unicode's confusables.txt, as data; its own
checks answer "is this string mixed-script", not "does it look like that one"). It lists each
source character with its prototype and each prototype with its sources, both ways; the
direction is recovered here: a character with one entry maps to it unless that entry is a lone
character that maps back to it alone (a pair), where either choice gives the same skeleton.
"""

from __future__ import annotations

import unicodedata
from functools import cache

# Bidirectional marks the data file puts around right-to-left characters for display.
_DISPLAY_MARKS = str.maketrans("", "", "\u200e\u200f")


def username_normalised(username: str) -> str:
    """The name as it is stored: NFKC, surrounding spaces removed."""
    return unicodedata.normalize("NFKC", username).strip()


@cache
def _prototypes() -> dict[str, str]:
    from confusable_homoglyphs.confusables import confusables_data

    entries = {
        key: [str(e["c"]).translate(_DISPLAY_MARKS) for e in value]
        for key, value in confusables_data.items()
    }
    prototypes = {}
    for key, targets in entries.items():
        if len(key) != 1 or len(targets) != 1:
            continue  # a prototype (it lists its sources), or a sequence: maps to itself
        (target,) = targets
        if len(target) != 1 or len(entries.get(target, [])) > 1:
            prototypes[key] = target  # the one prototype of a source character
        else:
            prototypes[key] = min(key, target)  # a pair: one side, the same for both
    return prototypes


def username_skeleton(username: str) -> str:
    """UTS #39's skeleton: NFD, each character to its prototype, NFD again."""
    prototypes = _prototypes()
    mapped = "".join(prototypes.get(c, c) for c in unicodedata.normalize("NFD", username))
    return unicodedata.normalize("NFD", mapped)


def usernames_look_alike(first: str, second: str) -> bool:
    """Whether a reader could take one name for the other: the same skeleton, with or without
    case (Django's usernames are compared without regard to case here)."""
    a, b = username_normalised(first), username_normalised(second)
    return username_skeleton(a) == username_skeleton(b) or username_skeleton(
        a.casefold()
    ) == username_skeleton(b.casefold())
