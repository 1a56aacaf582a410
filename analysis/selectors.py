"""Reads for the analysis: a study's scores as the long DataFrame that analysis.reports
expects (docs/architecture.md), plus coverage, exclusions and a cheap "ratings version" that
keys cached reports.

Scores come from complete ratings only (a clinician's form rating becomes complete on submit;
an unparseable judge output or an out-of-range imported cell is invalid and has no scores).
``as_published=True`` reads every *imported* cell (clinicians' and judges') the way the
MentalAlign-70k authors' script read the release (`published_cell_scores`): that counts the 33
all-zero "not rated" clinician cells and a few 6s our importer rejects, and drops the judge cells
that are not plain JSON, which our parser recovers. See docs/analysis.md, "Reproducing the paper".
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
from django.core.cache import cache
from django.db.models import Count, Max, Q, QuerySet
from django.utils import timezone

from analysis import reports, rouge
from analysis.adjudicated import judges_against_final
from analysis.copy_read import RatingScores, packed_rating_scores, plain_columns
from analysis.pseudonyms import RaterLabels
from annotation.adjudication_selectors import ADJUDICATED, final_scores
from annotation.analysed import FIRST, analysed_ratings_q
from annotation.models import (
    Attribute,
    ClinicianSample,
    Conversation,
    Rater,
    RaterCode,
    Rating,
    Responder,
    Response,
    Rubric,
    Score,
    Study,
)

FRAME_COLUMNS = (
    "conversation",
    "responder",
    "responder_family",
    "rater",
    "rater_kind",
    "attribute",
    "score",
    "source",
    "conditions",
)


@dataclass(frozen=True)
class Filters:
    """A subset of a study: conversations with a condition label / from a source dataset, one
    clinician (by study code) as the human reference, some judges. None means "all"."""

    condition: str | None = None
    source: str | None = None
    clinician: str | None = None
    judges: tuple[str, ...] | None = None
    # A clinician's first rating of a response (default) or their latest, where a test-retest
    # repeat exists (annotation/analysed.py).
    clinician_ratings: str = FIRST

    def key(self) -> str:
        """A digest of the subset for cache keys: the names are anyone's text (an API query
        may hold "|" or 4 KB of them), so they are encoded unambiguously and hashed."""
        judges = sorted(self.judges) if self.judges else None
        subset = [self.condition, self.source, self.clinician, judges, self.clinician_ratings]
        return hashlib.sha256(json.dumps(subset).encode()).hexdigest()


def attribute_names(*, study: Study) -> list[str]:
    return list(study.rubric.attributes.order_by("position").values_list("name", flat=True))


def exclusions_for(*, study: Study) -> dict[str, set[str]]:
    """Judge name → responder keys it is not scored on (self-preference exclusion)."""
    return {
        name: set(excluded or ())
        for name, excluded in _raters_in(study)
        .filter(kind=Rater.Kind.JUDGE)
        .values_list("name", "excluded_responders")
    }


def _raters_in(study: Study) -> QuerySet[Rater]:
    return Rater.objects.filter(ratings__response__conversation__study=study).distinct()


def _rating_filter(study: Study, filters: Filters, prefix: str = "") -> Q:
    """The ratings of a study subset; `prefix` ("rating__") applies it from Score."""
    p = prefix
    # Never practice ratings, and one rating per clinician and response.
    q = Q(**{f"{p}response__conversation__study": study}) & analysed_ratings_q(
        p, clinician_ratings=filters.clinician_ratings
    )
    if filters.condition:
        q &= Q(**{f"{p}response__conversation__conditions__has_element": filters.condition})
    if filters.source:
        q &= Q(**{f"{p}response__conversation__source": filters.source})
    if filters.clinician:
        coded = RaterCode.objects.filter(study=study, code=filters.clinician).values("rater_id")
        q &= Q(**{f"{p}rater__kind": Rater.Kind.JUDGE}) | Q(**{f"{p}rater_id__in": coded})
    if filters.judges:
        q &= Q(**{f"{p}rater__kind": Rater.Kind.CLINICIAN}) | Q(
            **{f"{p}rater__name__in": list(filters.judges)}
        )
    return q


def scores_frame(
    *,
    study: Study,
    filters: Filters | None = None,
    as_published: bool = False,
) -> pd.DataFrame:
    """The study's scores, one row per score, in the long format of analysis.reports.

    Integer ids, not one row per score joined to its rating, response and conversation: on
    PostgreSQL one row per rating with its scores packed beside its ids
    (analysis/copy_read.py); elsewhere the ratings, then their scores, matched by id in numpy.
    At paper scale (2.9 million scores) the per-score joins cost PostgreSQL twice as long, and
    every row that reaches Python costs about a microsecond; names come from small lookup
    tables, once per rating.
    """
    filters = filters or Filters()
    complete = Rating.objects.filter(_rating_filter(study, filters), status=Rating.Status.COMPLETE)
    if as_published:
        complete = complete.exclude(source=Rating.Source.IMPORT)  # read below instead
    attributes = dict(study.rubric.attributes.values_list("id", "name"))
    read = packed_rating_scores(complete, per_rating=len(attributes))
    if read is None:
        read = plain_rating_scores(ratings=complete)
    (conversation, responder, rater), at = read.rating_columns, read.at
    attribute, score = read.attribute, read.value.astype(np.float64)
    if as_published:
        extra_ids, extra_score = _published_cells(study, _rating_filter(study, filters))
        # Each published cell score as a rating of its own: the frame is built the same way.
        at = np.concatenate([at, len(rater) + np.arange(len(extra_ids))])
        conversation, responder, rater = (
            np.concatenate([column, extra_ids[:, i]])
            for i, column in enumerate((conversation, responder, rater))
        )
        attribute = np.concatenate([attribute, extra_ids[:, 3]])
        score = np.concatenate([score, extra_score])
    return _frame(study, (conversation, responder, rater), at, attribute, score, attributes)


def plain_rating_scores(*, ratings: QuerySet[Rating]) -> RatingScores:
    """The plain read (SQLite, or scores that cannot be packed): the ratings, then their
    scores, matched by rating id; the same arrays as `copy_read.packed_rating_scores`."""
    rating_id, conversation, responder, rater = plain_columns(
        ratings.values_list(
            "id", "response__conversation_id", "response__responder_id", "rater_id"
        ),
        4,
    )
    score_rating, attribute, value = plain_columns(
        Score.objects.filter(rating__in=ratings.values("id"))
        .order_by("rating_id", "pk")  # the packed read's order: ratings by id
        .values_list("rating_id", "attribute_id", "value"),
        3,
    )
    order = np.argsort(rating_id, kind="stable")
    at = order[
        np.minimum(np.searchsorted(rating_id, score_rating, sorter=order), max(len(order) - 1, 0))
    ]
    # A rating completed between the two reads has scores but no row in the first: left out,
    # as if the report had been read a moment earlier.
    found = rating_id[at] == score_rating if len(rating_id) else np.zeros(len(score_rating), bool)
    return RatingScores((conversation, responder, rater), at[found], attribute[found], value[found])


def published_cell_scores(*, raw: str | None, attributes: Sequence[str]) -> dict[str, float]:
    """One released cell read exactly as the MentalAlign-70k authors' analysis script did.

    Their `_parse_rating`: strip; if the cell starts with "```json", delete every "```json" and
    "```"; `json.loads`; then per attribute `data.get(attribute)` (exact key), None or "" is
    missing, anything else goes through `float()`; any exception makes the attribute missing.
    So prose before the JSON, an unescaped quote or any other broken JSON loses the whole cell,
    0 and 6 count, "4" counts as 4.0 and "4/5" is missing; NaN is missing (their pairing skips
    it). This is the reading of the paper's numbers, not a rule for storing scores.
    """
    if raw is None:
        return {}
    text = str(raw).strip()
    if not text:
        return {}
    if text.startswith("```json"):
        text = text.replace("```json", "").replace("```", "").strip()
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict):
        return {}  # `.get` raised inside their try: every attribute missing
    out: dict[str, float] = {}
    for attribute in attributes:
        value = data.get(attribute)
        if value is None or value == "":
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if not math.isnan(number):
            out[attribute] = number
    return out


def _published_cells(study: Study, q: Q) -> tuple[np.ndarray, np.ndarray]:
    """Every imported cell (complete or invalid, clinician or judge) read with the authors'
    rule; ratings from forms and judge runs are not part of the release and are read as usual."""
    attributes = {name: pk for pk, name in study.rubric.attributes.values_list("id", "name")}
    rows = Rating.objects.filter(q, source=Rating.Source.IMPORT).values_list(
        "response__conversation_id", "response__responder_id", "rater_id", "raw_output"
    )
    ids: list[tuple[int, int, int, int]] = []
    values: list[float] = []
    for conversation, responder, rater, raw in rows.iterator(chunk_size=2000):
        for name, value in published_cell_scores(raw=raw, attributes=list(attributes)).items():
            ids.append((conversation, responder, rater, attributes[name]))
            values.append(value)
    return np.array(ids, dtype=np.int64).reshape(len(ids), 4), np.array(values, dtype=np.float64)


def _lookup(codes: np.ndarray, table: Mapping[int, str]) -> pd.Categorical:
    """Map integer ids to labels with one vectorised take (no Python loop over rows).

    A categorical whose categories are the labels in use, sorted: grouping, sorting and
    comparing then work on small integer codes (turning 2.9 million labels into strings took
    longer than the statistics), and ``groupby(sort=True)`` orders groups exactly as it would
    plain strings. pandas groups categoricals by the observed values only (its default since
    3.0), so a subset of the frame never brings back groups it does not hold.
    """
    keys = np.sort(pd.unique(codes))  # the ids in use, sorted (hashing, not sorting, them all)
    names = np.array([str(table[k]) for k in keys.tolist()], dtype=object)
    categories, key_code = np.unique(names, return_inverse=True)
    if not keys.size:
        return pd.Categorical.from_codes(np.empty(0, dtype=np.int64), categories=[])
    return pd.Categorical.from_codes(key_code[np.searchsorted(keys, codes)], categories=categories)


def _frame(
    study: Study,
    rating_columns: tuple[np.ndarray, np.ndarray, np.ndarray],
    at: np.ndarray,
    attribute: np.ndarray,
    score: np.ndarray,
    attributes: Mapping[int, str],
) -> pd.DataFrame:
    """The long frame: labels are looked up once per rating (a seventh of the scores) and
    then taken for every score by its rating's index ``at``; ``attributes``: id → name."""
    conv, resp, rater = rating_columns
    conversations = {
        pk: (ext, source, ";".join(conditions or []))
        for pk, ext, source, conditions in Conversation.objects.filter(study=study).values_list(
            "id", "external_id", "source", "conditions"
        )
    }
    responders = {
        pk: (key, family, is_reference)
        for pk, key, family, is_reference in Responder.objects.filter(
            pk__in=np.unique(resp).tolist()
        ).values_list("id", "key", "family", "is_reference")
    }
    # Clinicians by their study code from here on: every report, chart and table built from
    # this frame is pseudonymous (analysis/pseudonyms.py).
    labels = RaterLabels()
    raters = {
        pk: (labels.label(study_id=study.pk, rater_id=pk, name=name, kind=kind), kind)
        for pk, name, kind in Rater.objects.filter(pk__in=np.unique(rater).tolist()).values_list(
            "id", "name", "kind"
        )
    }

    # One canonical row order instead of the order the ratings were stored in: pandas and the
    # reports number conversations, responders and judges in order of first appearance, and a
    # bootstrap resamples by those numbers, so the same ratings stored in another order (a
    # study re-imported from its release) would otherwise give other intervals. Conversations
    # as created, the human reference first and then responders by key, raters by kind and
    # label; ratings that tie keep their stored order.
    order = _canonical_order(
        at,
        (
            conv,
            _ranks(
                resp, sorted(responders, key=lambda k: (not responders[k][2], responders[k][0]))
            ),
            _ranks(rater, sorted(raters, key=lambda k: (raters[k][1], raters[k][0]))),
        ),
    )
    at, attribute, score = at[order], attribute[order], score[order]

    def per_score(ids: np.ndarray, table: Mapping[int, str]) -> pd.Categorical:
        labels = _lookup(ids, table)
        return pd.Categorical.from_codes(labels.codes[at], dtype=labels.dtype)

    return pd.DataFrame(
        {
            "conversation": per_score(conv, {k: v[0] for k, v in conversations.items()}),
            "responder": per_score(resp, {k: v[0] for k, v in responders.items()}),
            "responder_family": per_score(resp, {k: v[1] for k, v in responders.items()}),
            "rater": per_score(rater, {k: v[0] for k, v in raters.items()}),
            "rater_kind": per_score(rater, {k: v[1] for k, v in raters.items()}),
            "attribute": _lookup(attribute, attributes),
            "score": score,
            "source": per_score(conv, {k: v[1] for k, v in conversations.items()}),
            "conditions": per_score(conv, {k: v[2] for k, v in conversations.items()}),
        },
        columns=list(FRAME_COLUMNS),
    )


def _ranks(ids: np.ndarray, ordered: Sequence[int]) -> np.ndarray:
    """Each id's position in `ordered` (which holds every id in use)."""
    if not len(ordered):
        return np.zeros(len(ids), dtype=np.int64)
    keys = np.asarray(ordered, dtype=np.int64)
    sorter = np.argsort(keys)
    return sorter[np.searchsorted(keys, ids, sorter=sorter)].astype(np.int64)


def _canonical_order(at: np.ndarray, keys: tuple[np.ndarray, ...]) -> np.ndarray:
    """The score rows' order when their ratings are sorted by `keys` (most significant first,
    one value per rating; stable). Scores stored rating by rating (`at` non-decreasing, as
    both reads give them) are moved as blocks, without sorting the scores themselves."""
    n = len(keys[0])
    if not len(at) or not n:
        return np.arange(len(at))
    perm = np.lexsort(tuple(reversed(keys)))  # np.lexsort: last key primary; stable
    counts = np.bincount(at, minlength=n)
    if bool(np.all(at[1:] >= at[:-1])):
        starts = np.cumsum(counts) - counts
        moved = counts[perm]
        return np.repeat(starts[perm] - (np.cumsum(moved) - moved), moved) + np.arange(len(at))
    rank = np.empty(n, dtype=np.int64)
    rank[perm] = np.arange(n)
    return np.argsort(rank[at], kind="stable")


def invalid_clinician_cells(*, study: Study) -> dict[str, int]:
    """How many imported clinician cells are invalid, and how many of those are all zeros."""
    rows = Rating.objects.filter(
        response__conversation__study=study,
        status=Rating.Status.INVALID,
        source=Rating.Source.IMPORT,
        rater__kind=Rater.Kind.CLINICIAN,
    ).values_list("raw_output", flat=True)
    attributes = attribute_names(study=study)
    total = zeros = 0
    for raw in rows.iterator(chunk_size=2000):
        total += 1
        numbers = published_cell_scores(raw=raw, attributes=attributes).values()
        if numbers and all(v == 0 for v in numbers):
            zeros += 1
    return {"invalid": total, "all_zero": zeros}


def has_published_reading(*, study: Study) -> bool:
    """Whether the "as published" reading can differ from the default on this study: only
    imported cells are read the authors' way, and only an invalid imported cell (a 0 or 6)
    or an imported judge cell (prose around its JSON) can be read differently. A study rated
    on the platform, or imported with valid clinician scores only, has nothing to switch."""
    return Rating.objects.filter(
        Q(status=Rating.Status.INVALID) | Q(rater__kind=Rater.Kind.JUDGE),
        response__conversation__study=study,
        source=Rating.Source.IMPORT,
    ).exists()


def judge_cells_published_drops(*, study: Study) -> int:
    """Imported judge cells our parser read but the authors' plain json.loads rejects."""
    rows = Rating.objects.filter(
        response__conversation__study=study,
        status=Rating.Status.COMPLETE,
        source=Rating.Source.IMPORT,
        rater__kind=Rater.Kind.JUDGE,
    ).values_list("raw_output", flat=True)
    attributes = attribute_names(study=study)
    return sum(
        len(published_cell_scores(raw=raw, attributes=attributes)) < len(attributes)
        for raw in rows.iterator(chunk_size=2000)
    )


def ratings_version(*, study: Study) -> str:
    """Changes whenever a rating of the study is added, removed, edited or changes status.

    Score edits go through the rating services, which save the rating (updated_at).
    """
    agg = Rating.objects.filter(response__conversation__study=study).aggregate(
        last=Max("updated_at"), n=Count("id")
    )
    last = agg["last"].isoformat() if agg["last"] else "-"
    return f"{agg['n']}:{last}"


def study_version(*, study: Study) -> str:
    """What the study's cached analyses (dashboard, judge-assisted page, release datasheet) are
    kept with: the ratings_version, and a digest of the small tables that shape and name them.

    A judge's self-preference exclusions changed by a re-import or in the admin, a judge or a
    responder renamed, the study's description or rubric edited, a new clinician sample drawn:
    none of these changes a rating, and each changes what those pages show. The tables are
    small (a study, its rubric, every judge and responder), so the digest costs a few
    milliseconds; whole tables rather than the study's share of them, because finding that share
    would read every rating.
    """
    rubric = Rubric.objects.filter(pk=study.rubric_id).values_list("name", "scale_min", "scale_max")
    shape = [
        [study.name, study.description, study.kind, study.label_scheme, list(rubric)],
        list(
            Attribute.objects.filter(rubric_id=study.rubric_id)
            .order_by("position", "pk")
            .values_list("name", "group", "description", "position")
        ),
        list(
            Rater.objects.filter(kind=Rater.Kind.JUDGE)
            .order_by("pk")
            .values_list("pk", "name", "model", "family", "excluded_responders")
        ),
        list(
            Responder.objects.order_by("pk").values_list(
                "pk", "key", "name", "family", "is_reference"
            )
        ),
        list(
            ClinicianSample.objects.filter(study=study)
            .order_by("-created_at", "-id")
            .values_list("pk", flat=True)[:1]
        ),
    ]
    digest = hashlib.sha256(json.dumps(shape, default=str).encode()).hexdigest()[:16]
    return f"{ratings_version(study=study)}:{digest}"


def ratings_stamp(*, study: Study) -> str:
    """What researchers are told of the ratings' state (the API's `ratings_version`): the number
    of submitted ratings and the day the latest of them changed, "<n>:<YYYY-MM-DD>".

    Drafts are left out and the time of day too: researchers see submitted ratings dated to the
    day, so a stamp that moved with every autosave, at microsecond resolution, would tell them
    when each clinician was working. (`ratings_version`, which also counts drafts, stays inside
    the cache keys, through study_version, and is never shown.)
    """
    agg = Rating.objects.filter(
        response__conversation__study=study, status=Rating.Status.COMPLETE
    ).aggregate(last=Max("updated_at"), n=Count("id"))
    day = timezone.localdate(agg["last"]).isoformat() if agg["last"] else "-"
    return f"{agg['n']}:{day}"


def coverage(*, study: Study, filters: Filters | None = None) -> dict[str, object]:
    """How much of the study is rated: conversations with a clinician rating, overlap, judges."""
    filters = filters or Filters()
    conversations = Conversation.objects.filter(study=study, practice=False)
    if filters.condition:
        conversations = conversations.filter(conditions__has_element=filters.condition)
    if filters.source:
        conversations = conversations.filter(source=filters.source)
    complete = Rating.objects.filter(_rating_filter(study, filters), status=Rating.Status.COMPLETE)
    per_conv = (
        complete.filter(rater__kind=Rater.Kind.CLINICIAN)
        .values("response__conversation_id")
        .annotate(n=Count("rater_id", distinct=True))
        .values_list("n", flat=True)
    )
    counts = list(per_conv)
    by_rater = list(
        complete.values("rater_id", "rater__name", "rater__kind")
        .annotate(ratings=Count("id"), conversations=Count("response__conversation", distinct=True))
        .order_by("rater__kind", "rater__name")
    )
    labels = RaterLabels()
    for r in by_rater:
        r["rater__name"] = labels.label(
            study_id=study.pk, rater_id=r["rater_id"], name=r["rater__name"], kind=r["rater__kind"]
        )
    by_rater.sort(key=lambda r: (r["rater__kind"], r["rater__name"]))
    return {
        "conversations": conversations.count(),
        "responses": Response.objects.filter(conversation__in=conversations).count(),
        "with_clinician": len(counts),
        "with_two_clinicians": sum(n >= 2 for n in counts),
        "raters": [
            {
                "rater": r["rater__name"],
                "kind": r["rater__kind"],
                "ratings": r["ratings"],
                "conversations": r["conversations"],
            }
            for r in by_rater
        ],
    }


def filter_choices(*, study: Study) -> dict[str, list[str]]:
    """Values offered by the dashboard's filters."""
    conditions: set[str] = set()
    sources: set[str] = set()
    for labels, source in Conversation.objects.filter(study=study).values_list(
        "conditions", "source"
    ):
        conditions.update(labels or [])
        if source:
            sources.add(source)
    raters = _raters_in(study).values_list("id", "name", "kind")
    labels = RaterLabels()
    return {
        "conditions": sorted(conditions),
        "sources": sorted(sources),
        "clinicians": sorted(
            labels.label(study_id=study.pk, rater_id=pk, name=n, kind=k)
            for pk, n, k in raters
            if k == Rater.Kind.CLINICIAN
        ),
        "judges": sorted(n for _, n, k in raters if k == Rater.Kind.JUDGE),
    }


def response_texts(*, study: Study) -> pd.DataFrame:
    """conversation, responder, text, is_reference for every response with a text."""
    # Practice conversations are clinicians' training material, not study data.
    rows = Response.objects.filter(conversation__study=study, conversation__practice=False).exclude(
        text=""
    )
    return pd.DataFrame(
        list(
            rows.values_list(
                "conversation__external_id", "responder__key", "text", "responder__is_reference"
            )
        ),
        columns=["conversation", "responder", "text", "is_reference"],
    )


def final_scores_frame(*, study: Study) -> pd.DataFrame:
    """The study's final scores with their provenance (annotation.adjudication_selectors), one
    row per response and attribute: the columns of FINAL_SCORE_COLUMNS."""
    return pd.DataFrame(
        [
            (
                row.conversation,
                row.response_id,
                row.responder,
                row.attribute,
                row.final_score,
                row.provenance,
                row.reason,
                row.rubric_needs_change,
                row.n_clinicians,
            )
            for row in final_scores(study=study)
        ],
        columns=list(FINAL_SCORE_COLUMNS),
    )


FINAL_SCORE_COLUMNS = (
    "conversation",
    "response",
    "responder",
    "attribute",
    "final_score",
    "provenance",
    "reason",
    "rubric_needs_change",
    "n_clinicians",
)


@dataclass(frozen=True)
class AgainstAdjudicated:
    """The judges against the study's adjudicated consensus: ICC (analysis.adjudicated) and the
    alt-test with the adjudicator's scores as its reference (reports.alt_test_table)."""

    icc: pd.DataFrame
    alt_test: pd.DataFrame


def against_adjudicated(*, study: Study) -> AgainstAdjudicated | None:
    """Both tables from one read of the study's scores and final scores, or None when no
    response of the study is adjudicated yet (the dashboard's own tables say the rest).

    The alt-test: on an adjudicated response the clinician left out and the judge are compared
    with the adjudicator's score, elsewhere with the remaining clinicians as in the plain test."""
    if not study.adjudications.exists():
        return None
    final = final_scores_frame(study=study)
    frame = scores_frame(study=study)
    attributes = attribute_names(study=study)
    exclusions = exclusions_for(study=study)
    judged = frame[frame["rater_kind"] == Rater.Kind.JUDGE]
    judges = pd.DataFrame(
        {
            "judge": judged["rater"].astype(str),
            "conversation": judged["conversation"].astype(str),
            "responder": judged["responder"].astype(str),
            "attribute": judged["attribute"].astype(str),
            "score": judged["score"],
        }
    )
    return AgainstAdjudicated(
        icc=judges_against_final(final, judges, attributes=attributes, exclusions=exclusions),
        alt_test=reports.alt_test_table(
            frame,
            attributes=attributes,
            exclusions=exclusions,
            reference=final[final["provenance"] == ADJUDICATED],
        ),
    )


def alt_test_against_adjudicated(*, study: Study) -> pd.DataFrame | None:
    """The alt-test per judge × attribute against the adjudicated consensus (against_adjudicated),
    or None when nothing of the study is adjudicated yet."""
    tables = against_adjudicated(study=study)
    return None if tables is None else tables.alt_test


def judges_against_adjudicated(*, study: Study) -> pd.DataFrame | None:
    """Each judge's ICC against the study's final scores (against_adjudicated), or None when no
    response of the study is adjudicated yet."""
    tables = against_adjudicated(study=study)
    return None if tables is None else tables.icc


def data_notes(
    *, study: Study, as_published: bool, switch: str = "the “as published” switch"
) -> list[str]:
    """What a reader must know about which ratings went in (the MentalAlign sentinel cells, and
    the judge cells the authors' reading drops). `switch` names the as-published reading where
    the reader is: the dashboard's switch in words, or the command's flag on the command line."""
    notes: list[str] = []
    cells = invalid_clinician_cells(study=study)
    kinds = f"{cells['all_zero']} all-zero 'not rated' markers, plus 6s/nulls"
    if cells["invalid"] and as_published:
        notes.append(
            f"as published: {cells['invalid']} invalid imported clinician cells ({kinds}) are "
            "read as scores, as the MentalAlign-70k paper's code did; in that release the "
            "published Safety ICCs depend on them (gpt-4o Safety ICC(C,1) 0.48 with them, "
            "~0.37 without)."
        )
    elif cells["invalid"]:
        notes.append(
            f"valid scores only: {cells['invalid']} invalid imported clinician cells ({kinds}) "
            f"are left out; the paper counted them as scores. Turn on {switch} to reproduce "
            "its tables."
        )
    dropped = judge_cells_published_drops(study=study) if as_published else 0
    if dropped:
        notes.append(
            f"as published: {dropped} imported judge cells that are not plain JSON (prose "
            "around it, an unescaped quote) are left out, as the authors' json.loads did; the "
            "default reading recovers them."
        )
    return notes


@dataclass(frozen=True)
class ReportParams:
    n_boot: int = 1000
    seed: int = 0
    as_published: bool = False
    two_stage: bool = False


@dataclass
class StudyReport:
    """Every table of the dashboard for one study, subset and parameter set."""

    study_id: int
    version: str
    params: ReportParams
    filters: Filters
    attributes: list[str]
    reliability: pd.DataFrame
    human_means: pd.DataFrame
    ranking: pd.DataFrame
    interrater: pd.DataFrame
    calibration: pd.DataFrame
    rouge: pd.DataFrame | None  # per responder; None when the study has no response texts
    rouge_correlation: pd.DataFrame | None
    coverage: dict[str, object]
    notes: list[str]
    n_scores: int
    #: Per judge × attribute: may the judge replace the clinicians (the alt-test).
    alt_test: pd.DataFrame
    #: Per judge × attribute: the share of clinician ratings judge-assisted estimates could save.
    worth: pd.DataFrame
    #: The researcher's answer first: the four questions per judge × attribute, with reasons.
    answer: pd.DataFrame

    TABLES = (
        "answer",
        "reliability",
        "alt_test",
        "worth",
        "human_means",
        "ranking",
        "interrater",
        "calibration",
        "rouge",
        "rouge_correlation",
    )

    def table(self, name: str) -> pd.DataFrame | None:
        if name not in self.TABLES:
            raise KeyError(name)
        return getattr(self, name)


def study_report(
    *,
    study: Study,
    filters: Filters | None = None,
    params: ReportParams | None = None,
    progress: Callable[[float, str], None] | None = None,
) -> StudyReport:
    """The dashboard's tables, recomputed from Postgres only when the study changed.

    The cache key holds the study_version (the count and latest update of the study's ratings,
    and a digest of its judges, responders, rubric and description), so a new or edited rating
    or a judge's changed exclusions make the next request recompute; stale entries expire.
    ``progress`` (a background job's) is told (fraction, what) while the report is computed.
    """
    filters, params = filters or Filters(), params or ReportParams()
    version = study_version(study=study)
    key = _report_key(study=study, filters=filters, params=params, version=version)
    report: StudyReport | None = cache.get(key)
    if report is None:
        report = study_report_build(
            study=study, filters=filters, params=params, version=version, progress=progress
        )
        cache.set(key, report, timeout=REPORT_CACHE_SECONDS)
    return report


def study_report_cached(
    *, study: Study, filters: Filters, params: ReportParams
) -> StudyReport | None:
    """The report `study_report` would answer if it is in the cache now, else None: nothing is
    computed (the dashboard asks before it sends a long bootstrap to a background job)."""
    version = study_version(study=study)
    report: StudyReport | None = cache.get(
        _report_key(study=study, filters=filters, params=params, version=version)
    )
    return report


def _report_key(*, study: Study, filters: Filters, params: ReportParams, version: str) -> str:
    # "coded": reports show clinicians by study code; entries cached before codes existed
    # (keyed without it) held names and must never be served again. "answer": entries cached
    # before the answer table existed lack it.
    return "analysis:report:coded:answer:" + ":".join(
        map(str, (study.pk, version, filters.key(), *astuple_params(params=params)))
    )


REPORT_CACHE_SECONDS = 24 * 3600


def astuple_params(*, params: ReportParams) -> tuple[int, int, bool, bool]:
    return (params.n_boot, params.seed, params.as_published, params.two_stage)


def study_report_build(
    *,
    study: Study,
    filters: Filters,
    params: ReportParams,
    version: str,
    progress: Callable[[float, str], None] | None = None,
) -> StudyReport:
    """The dashboard's whole report of a study, computed now (`study_report` caches it under
    `version`); benchmarks time it uncached. ``progress``: reading the ratings is the first
    tenth, the reliability table's bootstrap up to nine tenths, the other tables the rest."""
    tell = progress or (lambda fraction, message: None)
    tell(0.0, "reading the ratings")
    df = scores_frame(study=study, filters=filters, as_published=params.as_published)
    attributes = attribute_names(study=study)
    exclusions = exclusions_for(study=study)
    rouge, rouge_corr = rouge_tables(study=study, df=df, attributes=attributes)
    human_means = reports.human_means_table(df, attributes)
    human_means.index.name = "responder"
    cells = reports.paired_cells(df, attributes=attributes, exclusions=exclusions)
    tell(0.1, f"bootstrapping ({params.n_boot:,} resamples)")
    reliability = reports.reliability_table(
        df,
        attributes=attributes,
        exclusions=exclusions,
        n_boot=params.n_boot,
        seed=params.seed,
        two_stage=params.two_stage,
        cells=cells,
        progress=lambda done: tell(0.1 + 0.8 * done, f"bootstrapping ({done:.0%})"),
    )
    tell(0.9, "the other tables")
    alt = reports.alt_test_table(df, attributes=attributes, exclusions=exclusions)
    worth = reports.judge_worth_table(cells)
    return StudyReport(
        study_id=study.pk,
        version=version,
        params=params,
        filters=filters,
        attributes=attributes,
        reliability=reliability,
        human_means=human_means.reset_index(),
        ranking=reports.ranking_table(df, attributes=attributes),
        interrater=reports.interrater_table(df, attributes=attributes),
        calibration=reports.calibration_table(
            df, attributes=attributes, exclusions=exclusions, seed=params.seed, cells=cells
        ),
        rouge=rouge,
        rouge_correlation=rouge_corr,
        coverage=coverage(study=study, filters=filters),
        notes=data_notes(study=study, as_published=params.as_published),
        n_scores=len(df),
        alt_test=alt,
        worth=worth,
        answer=reports.answer_table(reliability, alt, worth),
    )


def studies_with_sizes(*, studies: QuerySet[Study]) -> list[Study]:
    """The ``studies`` by name, each with its number of conversations (``n_conversations``)."""
    return list(studies.annotate(n_conversations=Count("conversations")).order_by("name"))


def rouge_tables(
    *, study: Study, df: pd.DataFrame, attributes: list[str]
) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """ROUGE-L of each response against its conversation's human reference, beside the
    clinicians' scores: per responder means, and the correlation per attribute (MB10 §1: a
    lexical overlap score says little about therapeutic quality)."""
    texts = response_texts(study=study)
    if texts.empty:
        return None, None
    refs = texts[texts["is_reference"].astype(bool)].set_index("conversation")["text"]
    if refs.empty:
        return None, None
    models = texts[~texts["is_reference"] & texts["conversation"].isin(refs.index)].copy()
    models["rouge_l"] = rouge.rouge_l(
        models["text"].tolist(), refs.loc[models["conversation"]].tolist()
    )
    human = reports.human_reference(df, attributes=attributes)
    if human.empty:
        return None, None
    wide = human.pivot_table(
        index=["conversation", "responder"], columns="attribute", values="score", observed=True
    ).reindex(columns=attributes)
    wide["Avg"] = wide.mean(axis=1)
    joined = models.merge(wide.reset_index(), on=["conversation", "responder"], how="inner")
    if joined.empty:
        return None, None
    by_responder = (
        joined.groupby("responder")[["rouge_l", "Avg"]]
        .mean()
        .rename(columns={"Avg": "clinician_avg"})
        .sort_values("clinician_avg", ascending=False)
        .reset_index()
    )
    rows = []
    for column in [*attributes, "Avg"]:
        res = rouge.correlation(joined["rouge_l"].to_numpy(), joined[column].to_numpy())
        rows.append(
            {
                "attribute": column,
                "n": res.n,
                "pearson_r": res.pearson_r,
                "pearson_p": res.pearson_p,
                "spearman_rho": res.spearman_rho,
                "spearman_p": res.spearman_p,
                "reason": res.reason,
            }
        )
    return by_responder, pd.DataFrame(rows)
