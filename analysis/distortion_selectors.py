"""Reads for the distortion dashboards: LabelAnnotations → arrays → analysis.distortions.

One selector loads a study's labelling runs and clinician labels with a few queries and hands
plain lists to the pure functions of analysis/distortions/ (statistics stay pure: see
docs/architecture.md). A *configuration* is one labelling run (endpoint × temperature × the
study's prompt scheme, N repeats).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import cast

import pandas as pd

from analysis.distortions.consensus import Consensus, consensus_for_items, label_distribution_table
from analysis.distortions.consistency import (
    PerLabelFleiss,
    RepetitionDistribution,
    fleiss_table,
    max_repetition_distribution,
    per_label_fleiss,
)
from analysis.distortions.evaluation import (
    ClinicianAgreement,
    KappaF1Report,
    clinician_agreement,
    kappa_f1_report,
)
from analysis.distortions.labels import AMBIGUOUS_LABELS, DEFAULT_K, DEFAULT_N, Scheme
from analysis.distortions.splits import stratified_split
from analysis.pseudonyms import RaterLabels
from annotation.label_adjudication_selectors import GoldLabel, gold_labels
from annotation.models import Conversation, LabelAnnotation, Rater, Study
from annotation.selectors import study_distortion_labels
from judging.models import Run


def study_label_spec(*, study: Study) -> list[dict[str, str]]:
    return study_distortion_labels(study_id=study.pk)


def labelling_runs(*, study: Study) -> list[Run]:
    return list(
        Run.objects.filter(study=study, kind=Run.Kind.LABELLING)
        .select_related("endpoint")
        .order_by("id")
    )


def config_name(*, run: Run) -> str:
    temperature = "default" if run.temperature is None else f"{run.temperature:g}"
    return f"#{run.pk} {run.endpoint.name} T={temperature}"


def default_k(*, n: int) -> int:
    """4 of 5 as in the paper (§4.1); the same share, rounded up, for another N."""
    return DEFAULT_K if n == DEFAULT_N else max(1, math.ceil(0.8 * n))


@dataclass
class Configuration:
    run: Run
    name: str
    n: int
    k: int
    conversation_ids: list[int]
    runs_by_item: list[list[list[str] | None]]
    others_verbatim: dict[str, int]
    repetition: RepetitionDistribution | None = None
    fleiss: PerLabelFleiss | None = None
    consensus: list[Consensus] = field(default_factory=list)


def _runs_by_item(
    run: Run, conversation_ids: list[int]
) -> tuple[list[list[list[str] | None]], dict[str, int]]:
    """Per conversation, the N runs' labels in repeat order; None for a failed (invalid) or
    missing repeat, so an unfinished run counts as runs without labels."""
    stored: dict[tuple[int, int], list[str] | None] = {}
    others: dict[str, int] = {}
    for conversation_id, repeat, status, labels, verbatim in LabelAnnotation.objects.filter(
        run=run
    ).values_list("conversation_id", "repeat", "status", "labels", "others"):
        complete = status == LabelAnnotation.Status.COMPLETE
        stored[(conversation_id, repeat)] = list(labels) if complete else None
        for text in verbatim if complete else []:
            others[text] = others.get(text, 0) + 1
    return [[stored.get((c, r)) for r in range(run.repeats)] for c in conversation_ids], others


def clinician_labels(*, study: Study) -> dict[str, dict[int, list[str]]]:
    """{clinician study code: {conversation id: labels}} from submitted (complete) form labels;
    codes, not names, because every table built from this goes to researchers."""
    raters = RaterLabels()
    out: dict[str, dict[int, list[str]]] = {}
    for rater_id, name, conversation_id, labels in (
        LabelAnnotation.objects.filter(
            conversation__study=study,
            run__isnull=True,
            status=LabelAnnotation.Status.COMPLETE,
            rater__kind=Rater.Kind.CLINICIAN,
        )
        .order_by("rater_id", "conversation_id")
        .values_list("rater_id", "rater__name", "conversation_id", "labels")
    ):
        code = raters.label(
            study_id=study.pk, rater_id=rater_id, name=name, kind=Rater.Kind.CLINICIAN
        )
        out.setdefault(code, {})[conversation_id] = list(labels)
    return dict(sorted(out.items()))


@dataclass
class DistortionReport:
    study: Study
    labels: list[dict[str, str]]
    conversations: list[tuple[int, str, str]]  # (id, external id, context)
    configurations: list[Configuration]
    clinicians: dict[str, dict[int, list[str]]]
    error: str = ""
    # The clinicians' gold label per conversation id, with its provenance (adjudicated,
    # clinician consensus, single clinician, awaiting adjudication): annotation's gold_labels.
    gold: dict[int, GoldLabel] = field(default_factory=dict)

    def configuration(self, run_id: int) -> Configuration | None:
        return next((c for c in self.configurations if c.run.pk == run_id), None)

    # ----------------------------------------------------------------- tables (DataFrames)

    def table(self, name: str) -> pd.DataFrame:
        return getattr(self, f"_table_{name}")()

    def _table_repetition(self) -> pd.DataFrame:
        rows = [
            {
                "configuration": c.name,
                "max_repetition": r,
                "items": c.repetition.counts[r],
                "proportion": c.repetition.proportions[r],
                "at_least": c.repetition.at_least[r],
            }
            for c in self.configurations
            if c.repetition is not None
            for r in sorted(c.repetition.counts)
        ]
        columns = ["configuration", "max_repetition", "items", "proportion", "at_least"]
        return pd.DataFrame(rows, columns=columns)

    def _table_fleiss(self) -> pd.DataFrame:
        results = {c.name: c.fleiss for c in self.configurations if c.fleiss is not None}
        if not results:
            return pd.DataFrame(columns=["label"])
        table = fleiss_table(results)
        return table.rename_axis("label").reset_index()

    def _table_consensus(self) -> pd.DataFrame:
        rows = []
        for index, (_, external_id, context) in enumerate(self.conversations):
            row: dict[str, object] = {"item": external_id, "message": context[:160]}
            for c in self.configurations:
                if c.consensus:
                    row[f"{c.name}: labels"] = "; ".join(c.consensus[index].labels)
                    row[f"{c.name}: rule"] = c.consensus[index].rule
            rows.append(row)
        return pd.DataFrame(rows)

    def _table_distribution(self) -> pd.DataFrame:
        final = {c.name: c.consensus for c in self.configurations if c.consensus}
        if not final:
            return pd.DataFrame(columns=["label"])
        table = label_distribution_table(final, labels=self.labels)
        table.columns = [f"{config} {value}" for config, value in table.columns]
        return table.rename_axis("label").reset_index()

    def _agreements(
        self,
    ) -> Iterator[tuple[Configuration, str, ClinicianAgreement]]:
        for c in self.configurations:
            if not c.consensus:
                continue
            for clinician, by_item in self.clinicians.items():
                theirs = [by_item.get(cid) for cid in c.conversation_ids]
                if not any(t is not None for t in theirs):
                    continue
                yield (
                    c,
                    clinician,
                    clinician_agreement(c.consensus, theirs, labels=self.labels),
                )

    def _table_agreement(self) -> pd.DataFrame:
        rows = [
            {
                "configuration": c.name,
                "clinician": clinician,
                "n_items": a.n_items,
                "n_excluded": a.n_excluded,
                "mean_cohen_kappa": a.mean_kappa,
                "joint_exact": a.exact,
                "joint_dominant": a.dominant,
                "joint_overlap": a.overlap,
            }
            for c, clinician, a in self._agreements()
        ]
        columns = [
            "configuration", "clinician", "n_items", "n_excluded", "mean_cohen_kappa",
            "joint_exact", "joint_dominant", "joint_overlap",
        ]  # fmt: skip
        return pd.DataFrame(rows, columns=columns)

    def _table_agreement_labels(self) -> pd.DataFrame:
        frames = []
        for c, clinician, a in self._agreements():
            frame = a.per_label.rename_axis("label").reset_index()
            frame.insert(0, "clinician", clinician)
            frame.insert(0, "configuration", c.name)
            frames.append(frame)
        if not frames:
            return pd.DataFrame(columns=["configuration", "clinician", "label"])
        return pd.concat(frames, ignore_index=True)

    def _table_gold(self) -> pd.DataFrame:
        columns = ["item", "message", "gold_labels", "dominant", "provenance", "n_clinicians"]
        rows = [
            [
                external_id,
                context[:160],
                "; ".join(gold.labels),
                gold.labels[0] if gold.labels else "",
                gold.provenance,
                gold.n_clinicians,
            ]
            for cid, external_id, context in self.conversations
            if (gold := self.gold.get(cid)) is not None
        ]
        return pd.DataFrame(rows, columns=columns)

    def gold_kappa_f1(self, config: Configuration) -> tuple[KappaF1Report | None, int]:
        """κ_F1 of one configuration's final labels against the clinicians' gold: the dominant
        label as a multiclass task for the ranked scheme, the label sets as a multilabel task
        for the multi-label one. Items: a gold label (not awaiting adjudication) and an
        unambiguous final label. Returns (report or None when no item qualifies, items left
        out)."""
        truth: list[list[str]] = []
        predicted: list[list[str]] = []
        for cid, final in zip(config.conversation_ids, config.consensus, strict=True):
            gold = self.gold.get(cid)
            if gold is None or not gold.labels:
                continue
            if final.ambiguous or not final.labels or set(final.labels) & set(AMBIGUOUS_LABELS):
                continue
            truth.append(gold.labels)
            predicted.append(final.labels)
        left_out = len(self.gold) - len(truth)
        if not truth:
            return None, left_out
        if self.study.label_scheme == Study.LabelScheme.RANKED:
            report = kappa_f1_report(
                [t[0] for t in truth], [p[0] for p in predicted], kind="multiclass"
            )
        else:
            report = kappa_f1_report(truth, predicted, kind="multilabel")
        return report, left_out

    def _table_gold_kappa_f1(self) -> pd.DataFrame:
        columns = [
            "configuration", "task", "n_items", "n_left_out", "f1", "f1_random", "kappa_f1",
            "reason",
        ]  # fmt: skip
        rows = []
        for c in self.configurations:
            if not c.consensus:
                continue
            report, left_out = self.gold_kappa_f1(c)
            rows.append(
                {
                    "configuration": c.name,
                    "task": report.kind if report else "",
                    "n_items": report.n_items if report else 0,
                    "n_left_out": left_out,
                    "f1": report.f1 if report else math.nan,
                    "f1_random": report.f1_random if report else math.nan,
                    "kappa_f1": report.kappa_f1 if report else math.nan,
                    "reason": (report.reason or "") if report else "no message with both labels",
                }
            )
        return pd.DataFrame(rows, columns=columns)

    def _table_others(self) -> pd.DataFrame:
        rows = [
            {"configuration": c.name, "label_as_written": text, "occurrences": count}
            for c in self.configurations
            for text, count in sorted(c.others_verbatim.items(), key=lambda kv: (-kv[1], kv[0]))
        ]
        return pd.DataFrame(rows, columns=["configuration", "label_as_written", "occurrences"])


def distortion_report(*, study: Study, k: int | None = None) -> DistortionReport:
    """Everything the distortion dashboard shows; `k` is the consensus threshold (default
    `default_k(N)` per run). A k above a run's N is capped at N."""
    labels = study_label_spec(study=study)
    conversations = list(
        Conversation.objects.filter(study=study)
        .order_by("id")
        .values_list("id", "external_id", "context")
    )
    ids = [c[0] for c in conversations]
    report = DistortionReport(
        study=study,
        labels=labels,
        conversations=conversations,
        configurations=[],
        clinicians=clinician_labels(study=study),
        gold=gold_labels(study=study, names=[label["name"] for label in labels]),
    )
    # The field's choices are exactly the values of analysis.distortions.labels.Scheme.
    scheme = cast(Scheme, study.label_scheme)
    for run in labelling_runs(study=study):
        runs_by_item, others = _runs_by_item(run, ids)
        n = run.repeats
        config = Configuration(
            run=run,
            name=config_name(run=run),
            n=n,
            k=min(n, k) if k else default_k(n=n),
            conversation_ids=ids,
            runs_by_item=runs_by_item,
            others_verbatim=others,
        )
        if ids:
            config.repetition = max_repetition_distribution(runs_by_item)
            config.fleiss = per_label_fleiss(runs_by_item, labels=labels)
            config.consensus = consensus_for_items(
                runs_by_item, k=config.k, n=n, labels=labels, scheme=scheme
            )
        report.configurations.append(config)
    return report


def consensus_export_rows(
    *, report: DistortionReport, run_id: int, seed: int = 0
) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of one configuration's final labels with a fixed, stratified 70/15/15
    split column (§4.2): stratified on the dominant final label, seeded."""
    config = report.configuration(run_id)
    if config is None:
        raise ValueError("no such labelling run in this study")
    finals = [c.labels for c in config.consensus]
    splits = stratified_split(finals, seed=seed) if finals else []
    header = ["item", "text", "labels", "dominant", "rule", "ambiguous", "split"]
    header += ["gold_labels", "gold_provenance"]
    rows = [
        [
            external_id,
            context,
            "; ".join(final.labels),
            final.labels[0] if final.labels else "",
            final.rule,
            "1" if any(x in AMBIGUOUS_LABELS for x in final.labels) else "0",
            split,
            "; ".join(gold.labels) if (gold := report.gold.get(cid)) else "",
            gold.provenance if gold else "",
        ]
        for (cid, external_id, context), final, split in zip(
            report.conversations, config.consensus, splits, strict=True
        )
    ]
    return header, rows
