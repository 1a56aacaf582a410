"""Reads for adjudicating distortion labels: which user messages the clinicians disagree on,
one message's adjudication page, and the gold label of every message with its provenance
(docs/adjudication.md, "Distortion labels").

Only study data takes part: clinicians' submitted form labels (run None, repeat 0) of
conversations that are not practice; never an LLM run's. Clinicians reach the adjudicator's
template as "Clinician A", "Clinician B", … only, built here from plain values.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.http import Http404

from scoring.distortions import OTHERS

from .adjudication_selectors import ADJUDICATED, AWAITING, CONSENSUS, SINGLE
from .models import Conversation, DistortionLabel, LabelAdjudication, LabelAnnotation, Rater, Study

__all__ = [
    "ADJUDICATED",
    "AWAITING",
    "CONSENSUS",
    "SINGLE",
    "GoldLabel",
    "clinicians_agreed_labels",
    "gold_labels",
    "is_disputed",
    "label_adjudication_page",
    "label_adjudication_queue",
]


def clinicians_agreed_labels(
    *, label_lists: Sequence[Sequence[str]], scheme: str, names: Sequence[str]
) -> list[str] | None:
    """The labels two or more clinicians agree on, or None when they disagree.

    The rule is the final-label rule of the LLM runs (Appendix G, analysis.distortions.consensus)
    with every clinician as a run and k = the number of clinicians: "Others" is dropped from a
    clinician's labels that also hold a listed label; the labels every clinician gave are the
    agreed ones, in the scheme's order; no label common to all is "no consensus". The ranked
    scheme adds one condition: the clinicians' dominant labels must be the same, since the
    dominant label is the message's class in the multiclass task and a tie between two
    dominants has no principled winner. Pure; tested against consensus_labels."""
    order = {name: j for j, name in enumerate(names)}
    runs = []
    for labels in label_lists:
        run = list(dict.fromkeys(labels))
        if OTHERS in run and any(lab != OTHERS for lab in run):
            run = [lab for lab in run if lab != OTHERS]
        runs.append(run)
    if len(runs) < 2 or not all(runs):
        return None
    common = [lab for lab in runs[0] if all(lab in run for run in runs[1:])]
    if not common:
        return None
    common.sort(key=lambda lab: order.get(lab, len(order)))
    if scheme == Study.LabelScheme.RANKED:
        dominants = {run[0] for run in runs}
        if len(dominants) != 1:
            return None
        (dominant,) = dominants
        common = [dominant] + [lab for lab in common if lab != dominant]
    return common


@dataclass(frozen=True)
class _ClinicianLabels:
    rater_id: int
    labels: list[str]
    others: list[str]


def _clinician_labels(
    study: Study, conversation_id: int | None = None
) -> dict[int, list[_ClinicianLabels]]:
    """{conversation id: the clinicians' submitted labels, in the order they were stored}."""
    rows = LabelAnnotation.objects.filter(
        conversation__study=study,
        conversation__practice=False,
        run__isnull=True,
        repeat=0,
        status=LabelAnnotation.Status.COMPLETE,
        rater__kind=Rater.Kind.CLINICIAN,
    )
    if conversation_id is not None:
        rows = rows.filter(conversation_id=conversation_id)
    out: dict[int, list[_ClinicianLabels]] = defaultdict(list)
    for conversation, rater, labels, others in rows.order_by("conversation_id", "pk").values_list(
        "conversation_id", "rater_id", "labels", "others"
    ):
        if labels:
            out[conversation].append(_ClinicianLabels(rater, list(labels), list(others or [])))
    return out


def _names(study: Study) -> list[str]:
    return list(
        DistortionLabel.objects.filter(study=study)
        .order_by("position")
        .values_list("name", flat=True)
    )


def _disputed(
    by_message: dict[int, list[_ClinicianLabels]], *, scheme: str, names: list[str]
) -> set[int]:
    return {
        cid
        for cid, rows in by_message.items()
        if len(rows) >= 2
        and clinicians_agreed_labels(
            label_lists=[r.labels for r in rows], scheme=scheme, names=names
        )
        is None
    }


@dataclass(frozen=True)
class LabelQueueRow:
    conversation_id: int
    conversation: str
    n_clinicians: int
    adjudicated: bool


def label_adjudication_queue(*, study: Study) -> list[LabelQueueRow]:
    """The user messages an adjudicator settles: two or more clinicians submitted labels and
    they disagree (clinicians_agreed_labels). Open ones first, then in the study's order.
    Four queries whatever the study's size."""
    by_message = _clinician_labels(study)
    disputed = _disputed(by_message, scheme=study.label_scheme, names=_names(study))
    if not disputed:
        return []
    conversations = dict(
        Conversation.objects.filter(pk__in=disputed).values_list("pk", "external_id")
    )
    done = set(
        LabelAdjudication.objects.filter(study=study, conversation_id__in=disputed).values_list(
            "conversation_id", flat=True
        )
    )
    rows = [
        LabelQueueRow(
            conversation_id=cid,
            conversation=conversations[cid],
            n_clinicians=len(by_message[cid]),
            adjudicated=cid in done,
        )
        for cid in disputed
    ]
    rows.sort(key=lambda r: (r.adjudicated, r.conversation_id))
    return rows


def is_disputed(*, study: Study, conversation_id: int) -> bool:
    """Whether an adjudicator may settle this message (see label_adjudication_queue)."""
    by_message = _clinician_labels(study, conversation_id)
    return conversation_id in _disputed(by_message, scheme=study.label_scheme, names=_names(study))


# --- One message's page --------------------------------------------------------------------------


@dataclass(frozen=True)
class ClinicianLabelling:
    label: str  # "Clinician A"
    labels: list[str]
    others: list[str]  # out-of-list labels as written, when "Others" is among the labels


@dataclass(frozen=True)
class LabelOption:
    name: str
    definition: str
    example: str


@dataclass
class LabelAdjudicationPage:
    study_id: int
    study_name: str
    scheme: str
    conversation_id: int
    conversation: str
    context: str
    disputed: bool
    clinicians: list[ClinicianLabelling]
    options: list[LabelOption]
    labels: list[str] = field(default_factory=list)  # the current adjudication's, if any
    reason: str = ""
    reason_text: str = ""
    next_conversation_id: int | None = None
    remaining: int = 0

    @property
    def dominant(self) -> str:
        return self.labels[0] if self.labels else ""

    @property
    def secondary(self) -> str:
        return self.labels[1] if len(self.labels) > 1 else ""


def _letter(n: int) -> str:
    return chr(ord("A") + n) if n < 26 else f"#{n + 1}"


def label_adjudication_page(*, study: Study, conversation_id: int) -> LabelAdjudicationPage:
    """Everything the adjudicator sees of one user message: the message, each clinician's
    labels as Clinician A, B, … (in the order they were stored), the study's label set with
    definitions, and the current adjudication. 404 for a message that is not this study's real
    work."""
    message = (
        Conversation.objects.filter(pk=conversation_id, study=study, practice=False)
        .values("pk", "external_id", "context")
        .first()
    )
    if message is None:
        raise Http404("No such message in this study")
    queue = label_adjudication_queue(study=study)
    clinicians = [
        ClinicianLabelling(
            label=f"Clinician {_letter(n)}",
            labels=row.labels,
            others=row.others if OTHERS in row.labels else [],
        )
        for n, row in enumerate(_clinician_labels(study, conversation_id).get(conversation_id, []))
    ]
    options = [
        LabelOption(name=name, definition=definition, example=example)
        for name, definition, example in DistortionLabel.objects.filter(study=study)
        .order_by("position")
        .values_list("name", "definition", "example")
    ]
    page = LabelAdjudicationPage(
        study_id=study.pk,
        study_name=study.name,
        scheme=study.label_scheme,
        conversation_id=conversation_id,
        conversation=message["external_id"],
        context=message["context"],
        disputed=any(row.conversation_id == conversation_id for row in queue),
        clinicians=clinicians,
        options=options,
    )
    made = LabelAdjudication.objects.filter(conversation_id=conversation_id).first()
    if made is not None:
        page.labels = list(made.labels)
        page.reason, page.reason_text = made.reason, made.reason_text
    open_ids = [row.conversation_id for row in queue if not row.adjudicated]
    page.remaining = len(open_ids)
    page.next_conversation_id = next((cid for cid in open_ids if cid > conversation_id), None) or (
        next((cid for cid in open_ids if cid != conversation_id), None)
    )
    return page


# --- Gold labels and their provenance ------------------------------------------------------------


@dataclass(frozen=True)
class GoldLabel:
    labels: list[str]  # empty while awaiting adjudication
    provenance: str  # one of adjudication_selectors.PROVENANCES
    n_clinicians: int
    reason: str = ""


def gold_labels(*, study: Study, names: Sequence[str] | None = None) -> dict[int, GoldLabel]:
    """{conversation id: gold label} of every message that clinicians labelled or an
    adjudicator settled:

    - ``adjudicated``: the adjudicator's labels (whatever the clinicians said);
    - ``single-clinician``: one clinician labelled it: their labels;
    - ``clinician-consensus``: two or more clinicians agree (clinicians_agreed_labels): the
      labels they agree on;
    - ``awaiting-adjudication``: two or more clinicians disagree and no adjudication yet: no
      gold label.

    Three queries whatever the study's size, two when the caller has the study's label names
    (in the label set's order) at hand."""
    by_message = _clinician_labels(study)
    names = list(names) if names is not None else _names(study)
    adjudicated = {
        cid: (labels, reason)
        for cid, labels, reason in LabelAdjudication.objects.filter(
            study=study, conversation__practice=False
        ).values_list("conversation_id", "labels", "reason")
    }
    out: dict[int, GoldLabel] = {}
    for cid in sorted(set(by_message) | set(adjudicated)):
        rows = by_message.get(cid, [])
        n = len(rows)
        if cid in adjudicated:
            labels, reason = adjudicated[cid]
            out[cid] = GoldLabel(list(labels), ADJUDICATED, n, reason)
        elif n == 1:
            out[cid] = GoldLabel(list(rows[0].labels), SINGLE, n)
        else:
            agreed = clinicians_agreed_labels(
                label_lists=[r.labels for r in rows], scheme=study.label_scheme, names=names
            )
            out[cid] = GoldLabel(agreed or [], CONSENSUS if agreed else AWAITING, n)
    return out
