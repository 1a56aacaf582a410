"""Time on task: active seconds per conversation (measured) and per response (estimated).

Per conversation, `Assignment.active_seconds` is measured while the page is open and in use
(autosaves and heartbeats, capped gaps; see services.rating.assignment_touch). Per response
there is no direct measure, so the conversation's active time is shared out over its responses
in proportion to the time between consecutive edits in the audit trail (RatingChange): the gap
before an edit counts towards the response edited, gaps longer than GAP_CAP_SECONDS count as
GAP_CAP_SECONDS (a pause, not work). The shares sum to the conversation's active time.
"""

from __future__ import annotations

import numpy as np
from django.db.models import Q

from .models import Assignment, RatingChange

GAP_CAP_SECONDS = 120.0


def edit_time_shares(
    assignment: np.ndarray,
    response: np.ndarray,
    seconds: np.ndarray,
    *,
    cap: float = GAP_CAP_SECONDS,
) -> dict[tuple[int, int], float]:
    """(assignment, response) → share of the assignment's edit time, from edit events sorted by
    (assignment, time). The first edit of an assignment has no gap; where an assignment has no
    gap at all (one edit), its edited responses share equally."""
    assignment = np.asarray(assignment, dtype=np.int64)
    response = np.asarray(response, dtype=np.int64)
    seconds = np.asarray(seconds, dtype=np.float64)
    if assignment.size == 0:
        return {}
    gaps = np.zeros(assignment.size)
    same = np.r_[False, assignment[1:] == assignment[:-1]]
    gaps[1:] = np.minimum(np.diff(seconds), cap)
    gaps[~same] = 0.0
    keys = np.stack([assignment, response], axis=1)
    pairs, index = np.unique(keys, axis=0, return_inverse=True)
    per_pair = np.bincount(index.ravel(), weights=gaps, minlength=len(pairs))
    owner, owner_index = np.unique(pairs[:, 0], return_inverse=True)
    totals = np.bincount(owner_index, weights=per_pair)
    counts = np.bincount(owner_index)
    share = np.where(
        totals[owner_index] > 0,
        per_pair / np.where(totals[owner_index] > 0, totals[owner_index], 1.0),
        1.0 / counts[owner_index],
    )
    return {(int(a), int(r)): float(s) for (a, r), s in zip(pairs, share, strict=True)}


def response_active_seconds(*, assignments: Q) -> dict[tuple[int, int], float]:
    """(assignment id, response id) → estimated active seconds, for the assignments matching
    `assignments` (a Q on Assignment)."""
    chosen = Assignment.objects.filter(assignments)
    rows = (
        RatingChange.objects.filter(rating__assignment__in=chosen, field__in=("score", "rationale"))
        .order_by("rating__assignment_id", "changed_at", "id")
        .values_list("rating__assignment_id", "rating__response_id", "changed_at")
    )
    events = list(rows)
    if not events:
        return {}
    a = np.fromiter((e[0] for e in events), dtype=np.int64, count=len(events))
    r = np.fromiter((e[1] for e in events), dtype=np.int64, count=len(events))
    t = np.fromiter((e[2].timestamp() for e in events), dtype=np.float64, count=len(events))
    shares = edit_time_shares(a, r, t)
    active = dict(chosen.filter(pk__in=np.unique(a).tolist()).values_list("id", "active_seconds"))
    return {(ai, ri): round(share * active.get(ai, 0), 1) for (ai, ri), share in shares.items()}
