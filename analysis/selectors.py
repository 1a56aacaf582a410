"""Reads for the analysis: one query turns a study's scores into the long DataFrame that
analysis.reports expects (STYLE.md item 7), plus coverage, exclusions and a cheap "ratings
version" that keys cached reports.

Scores come from complete ratings only (a clinician's form rating becomes complete on submit;
an unparseable judge output or an out-of-range imported cell is invalid and has no scores).
``as_published=True`` adds what the MentalAlign-70k paper's pandas code read from the release:
the numbers inside *imported clinician* cells that our importer rejected (33 all-zero "not
rated" cells, a few 6s; nulls skipped). See docs/analysis.md, "Reproducing the paper".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from django.core.cache import cache
from django.db.models import Count, Max, Q, QuerySet

from analysis import reports, stats
from annotation.models import Conversation, Rater, Rating, Responder, Response, Score, Study
from judging.parsing import _load_object  # the one JSON-cell reader (fences, prose around it)

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
    clinician as the human reference, some judges. None means "all"."""

    condition: str | None = None
    source: str | None = None
    clinician: str | None = None
    judges: tuple[str, ...] | None = None

    def key(self) -> str:
        judges = ",".join(sorted(self.judges)) if self.judges else ""
        return f"{self.condition or ''}|{self.source or ''}|{self.clinician or ''}|{judges}"


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
    q = Q(**{f"{p}response__conversation__study": study})
    if filters.condition:
        q &= Q(**{f"{p}response__conversation__conditions__has_element": filters.condition})
    if filters.source:
        q &= Q(**{f"{p}response__conversation__source": filters.source})
    if filters.clinician:
        q &= Q(**{f"{p}rater__kind": Rater.Kind.JUDGE}) | Q(
            **{f"{p}rater__name": filters.clinician}
        )
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

    One query returns integer ids only (half the time of fetching the names through joins,
    measured on 357k scores); names come from small lookup tables mapped with numpy.
    """
    filters = filters or Filters()
    rows = Score.objects.filter(
        _rating_filter(study, filters, prefix="rating__"), rating__status=Rating.Status.COMPLETE
    ).values_list(
        "rating__response__conversation_id",
        "rating__response__responder_id",
        "rating__rater_id",
        "attribute_id",
        "value",
    )
    ids = np.array(list(rows), dtype=np.int64).reshape(-1, 5)
    score = ids[:, 4].astype(np.float64)
    ids = ids[:, :4]
    if as_published:
        extra_ids, extra_score = _published_extras(study, _rating_filter(study, filters))
        ids = np.vstack([ids, extra_ids])
        score = np.concatenate([score, extra_score])
    return _frame_from_ids(study, ids, score)


def _published_extras(study: Study, q: Q) -> tuple[np.ndarray, np.ndarray]:
    """Numbers inside invalid imported clinician cells, read the way the paper's code did."""
    attributes = dict(
        (name.lower(), pk) for pk, name in study.rubric.attributes.values_list("id", "name")
    )
    rows = Rating.objects.filter(
        q,
        status=Rating.Status.INVALID,
        source=Rating.Source.IMPORT,
        rater__kind=Rater.Kind.CLINICIAN,
    ).values_list("response__conversation_id", "response__responder_id", "rater_id", "raw_output")
    ids: list[tuple[int, int, int, int]] = []
    values: list[float] = []
    for conversation, responder, rater, raw in rows.iterator(chunk_size=2000):
        obj = _load_object(raw or "")
        if obj is None:
            continue
        for key, value in obj.items():
            attribute = attributes.get(str(key).strip().lower())
            if attribute is None or isinstance(value, bool) or not isinstance(value, int | float):
                continue  # nulls, strings and unknown keys: the paper skipped them as well
            ids.append((conversation, responder, rater, attribute))
            values.append(float(value))
    return np.array(ids, dtype=np.int64).reshape(len(ids), 4), np.array(values, dtype=np.float64)


def _lookup(codes: np.ndarray, table: dict[int, object]) -> np.ndarray:
    """Map integer ids to labels with one vectorised take (no Python loop over rows).

    Plain object columns rather than categoricals: reports.py groups by these columns and
    categoricals would bring unobserved groups back.
    """
    keys = np.array(sorted(table), dtype=np.int64)
    labels = np.empty(len(keys), dtype=object)
    labels[:] = [table[k] for k in keys]
    if not keys.size:
        return np.empty(len(codes), dtype=object)
    return labels[np.searchsorted(keys, codes)]


def _frame_from_ids(study: Study, ids: np.ndarray, score: np.ndarray) -> pd.DataFrame:
    conv, resp, rater, attr = ids.T if len(ids) else (np.empty(0, np.int64),) * 4
    conversations = {
        pk: (ext, source, ";".join(conditions or []))
        for pk, ext, source, conditions in Conversation.objects.filter(
            pk__in=np.unique(conv).tolist()
        ).values_list("id", "external_id", "source", "conditions")
    }
    responders = {
        pk: (key, family)
        for pk, key, family in Responder.objects.filter(
            pk__in=np.unique(resp).tolist()
        ).values_list("id", "key", "family")
    }
    raters = {
        pk: (name, kind)
        for pk, name, kind in Rater.objects.filter(pk__in=np.unique(rater).tolist()).values_list(
            "id", "name", "kind"
        )
    }
    attributes = dict(study.rubric.attributes.values_list("id", "name"))
    return pd.DataFrame(
        {
            "conversation": _lookup(conv, {k: v[0] for k, v in conversations.items()}),
            "responder": _lookup(resp, {k: v[0] for k, v in responders.items()}),
            "responder_family": _lookup(resp, {k: v[1] for k, v in responders.items()}),
            "rater": _lookup(rater, {k: v[0] for k, v in raters.items()}),
            "rater_kind": _lookup(rater, {k: v[1] for k, v in raters.items()}),
            "attribute": _lookup(attr, attributes),
            "score": score,
            "source": _lookup(conv, {k: v[1] for k, v in conversations.items()}),
            "conditions": _lookup(conv, {k: v[2] for k, v in conversations.items()}),
        },
        columns=list(FRAME_COLUMNS),
    )


def invalid_clinician_cells(*, study: Study) -> dict[str, int]:
    """How many imported clinician cells are invalid, and how many of those are all zeros."""
    rows = Rating.objects.filter(
        response__conversation__study=study,
        status=Rating.Status.INVALID,
        source=Rating.Source.IMPORT,
        rater__kind=Rater.Kind.CLINICIAN,
    ).values_list("raw_output", flat=True)
    total = zeros = 0
    for raw in rows.iterator(chunk_size=2000):
        total += 1
        obj = _load_object(raw or "") or {}
        numbers = [
            v for v in obj.values() if isinstance(v, int | float) and not isinstance(v, bool)
        ]
        if numbers and all(v == 0 for v in numbers):
            zeros += 1
    return {"invalid": total, "all_zero": zeros}


def ratings_version(*, study: Study) -> str:
    """Changes whenever a rating of the study is added, removed, edited or changes status.

    Score edits go through the rating services, which save the rating (updated_at).
    """
    agg = Rating.objects.filter(response__conversation__study=study).aggregate(
        last=Max("updated_at"), n=Count("id")
    )
    last = agg["last"].isoformat() if agg["last"] else "-"
    return f"{agg['n']}:{last}"


def coverage(*, study: Study, filters: Filters | None = None) -> dict[str, object]:
    """How much of the study is rated: conversations with a clinician rating, overlap, judges."""
    filters = filters or Filters()
    conversations = Conversation.objects.filter(study=study)
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
        complete.values("rater__name", "rater__kind")
        .annotate(ratings=Count("id"), conversations=Count("response__conversation", distinct=True))
        .order_by("rater__kind", "rater__name")
    )
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
    raters = _raters_in(study).order_by("name").values_list("name", "kind")
    return {
        "conditions": sorted(conditions),
        "sources": sorted(sources),
        "clinicians": [n for n, k in raters if k == Rater.Kind.CLINICIAN],
        "judges": [n for n, k in raters if k == Rater.Kind.JUDGE],
    }


def response_texts(*, study: Study) -> pd.DataFrame:
    """conversation, responder, text, is_reference for every response with a text."""
    rows = Response.objects.filter(conversation__study=study).exclude(text="")
    return pd.DataFrame(
        list(
            rows.values_list(
                "conversation__external_id", "responder__key", "text", "responder__is_reference"
            )
        ),
        columns=["conversation", "responder", "text", "is_reference"],
    )


def data_notes(*, study: Study, as_published: bool) -> list[str]:
    """What a reader must know about which ratings went in (the MentalAlign sentinel cells)."""
    cells = invalid_clinician_cells(study=study)
    if not cells["invalid"]:
        return []
    kinds = f"{cells['all_zero']} all-zero 'not rated' markers, plus 6s/nulls"
    if as_published:
        return [
            f"as published: {cells['invalid']} invalid imported clinician cells ({kinds}) are "
            "read as scores, as the MentalAlign-70k paper's code did; in that release the "
            "published Safety ICCs depend on them (gpt-4o Safety ICC(C,1) 0.48 with them, "
            "~0.37 without)."
        ]
    return [
        f"valid scores only: {cells['invalid']} invalid imported clinician cells ({kinds}) are "
        "left out; the paper counted them as scores. Use --as-published (the dashboard's "
        "'as published' switch) to reproduce its tables."
    ]


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
    coverage: dict
    notes: list[str]
    n_scores: int

    TABLES = (
        "reliability",
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
    *, study: Study, filters: Filters | None = None, params: ReportParams | None = None
) -> StudyReport:
    """The dashboard's tables, recomputed from Postgres only when the study's ratings changed.

    The cache key holds the ratings version (count and latest update of the study's ratings),
    so a new or edited rating makes the next request recompute; stale entries simply expire.
    """
    filters, params = filters or Filters(), params or ReportParams()
    version = ratings_version(study=study)
    key = "analysis:report:" + ":".join(
        map(str, (study.pk, version, filters.key(), *astuple_params(params)))
    )
    report = cache.get(key)
    if report is None:
        report = _study_report_build(study, filters, params, version)
        cache.set(key, report, timeout=REPORT_CACHE_SECONDS)
    return report


REPORT_CACHE_SECONDS = 24 * 3600


def astuple_params(params: ReportParams) -> tuple:
    return (params.n_boot, params.seed, params.as_published, params.two_stage)


def _study_report_build(
    study: Study, filters: Filters, params: ReportParams, version: str
) -> StudyReport:
    df = scores_frame(study=study, filters=filters, as_published=params.as_published)
    attributes = attribute_names(study=study)
    exclusions = exclusions_for(study=study)
    rouge, rouge_corr = rouge_tables(study=study, df=df, attributes=attributes)
    human_means = reports.human_means_table(df, attributes)
    human_means.index.name = "responder"
    return StudyReport(
        study_id=study.pk,
        version=version,
        params=params,
        filters=filters,
        attributes=attributes,
        reliability=reports.reliability_table(
            df,
            attributes=attributes,
            exclusions=exclusions,
            n_boot=params.n_boot,
            seed=params.seed,
            two_stage=params.two_stage,
        ),
        human_means=human_means.reset_index(),
        ranking=reports.ranking_table(df, attributes=attributes),
        interrater=reports.interrater_table(df, attributes=attributes),
        calibration=reports.calibration_table(
            df, attributes=attributes, exclusions=exclusions, seed=params.seed
        ),
        rouge=rouge,
        rouge_correlation=rouge_corr,
        coverage=coverage(study=study, filters=filters),
        notes=data_notes(study=study, as_published=params.as_published),
        n_scores=len(df),
    )


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
    models["rouge_l"] = stats.rouge_l(
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
        res = stats.correlation(joined["rouge_l"].to_numpy(), joined[column].to_numpy())
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
