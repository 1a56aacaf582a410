"""The datasheet of a released study, under the headings of *Datasheets for Datasets* (Gebru et
al.) that apply to it: what the study is, the rubric, what the files hold, how ratings were
collected, what was left out, the reliability table, the software, and a licence for the
authors to fill in. Pseudonymous like the rest of the release: clinicians by study code only.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
from django.db.models import Count

from analysis import reports
from analysis.selectors import attribute_names, coverage, exclusions_for, scores_frame
from annotation.models import Adjudication, AttributeThreshold, Rater, Rating, Responder, Study
from annotation.selectors import SMALL_CELL, clinicians_summary
from scoring.rubric import DEFAULT_RUBRIC_NAME

#: The reliability table as `reliability_report` computes it by default.
N_BOOT = 1000
SEED = 0
TABLE_COLUMNS = (
    "judge",
    "attribute",
    "n_models",
    "icc_c1",
    "ci_low",
    "ci_high",
    "icc_a1",
    "status",
    "human_mean",
    "judge_mean",
    "bias",
    "mse",
)
LICENCE_PLACEHOLDER = "*To be filled in by the authors before publication.*"


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.3f}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def reliability_for_datasheet(*, study: Study) -> pd.DataFrame:
    """The study's reliability table with the reliability report's defaults."""
    return reports.reliability_table(
        scores_frame(study=study),
        attributes=attribute_names(study=study),
        exclusions=exclusions_for(study=study),
        n_boot=N_BOOT,
        seed=SEED,
    )


def datasheet_markdown(
    *,
    study: Study,
    counts: Mapping[str, Any],
    files: Sequence[str],
    judges: Mapping[str, str],
    clinician_codes: Sequence[str],
    include_text: bool,
    version: tuple[str, str] | None = None,
) -> str:
    """The datasheet as Markdown; `judges` maps each judge's name to its workbook."""
    from analysis.release import software_version

    version = version or software_version()
    exclusions = exclusions_for(study=study)
    out: list[str] = [f"# Datasheet: {study.name}", ""]
    out += _motivation(study=study)
    out += _composition(study=study, counts=counts, clinician_codes=clinician_codes)
    out += _rubric(study=study)
    out += _collection_process(study=study, counts=counts)
    out += clinicians_section(study)
    out += _exclusions(judges=judges, exclusions=exclusions)
    out += _preprocessing()
    out += adjudication_section(study, counts.get("adjudication"))
    out += _reliability(study=study)
    out += _files_and_reimport(
        study=study, files=files, judges=judges, exclusions=exclusions, include_text=include_text
    )
    out += ["## Distribution", "", f"Licence: {LICENCE_PLACEHOLDER}", ""]
    out += [
        "## Maintenance",
        "",
        f"Written by MentalBench {version[0]} (commit {version[1]}).",
        "",
    ]
    return "\n".join(out)


def _motivation(*, study: Study) -> list[str]:
    return [
        "## Motivation",
        "",
        study.description.strip() or "*No description was given for this study.*",
        "",
        "Clinicians rated responses to mental-health conversations on the rubric below; LLM "
        "judges rated the same responses, so that each judge's agreement with the clinicians "
        "can be measured (the reliability table below).",
        "",
    ]


def _composition(
    *, study: Study, counts: Mapping[str, Any], clinician_codes: Sequence[str]
) -> list[str]:
    """What the release holds, in counts, and who wrote each response."""
    human = counts.get("clinicians", {})
    out = ["## Composition", ""]
    responders = Responder.objects.filter(key__in=counts.get("responder_keys", [])).order_by(
        "-is_reference", "key"
    )
    rows: list[tuple[object, ...]] = [
        ("conversations", counts.get("conversations", 0)),
        ("responses with their text in conversations.csv", counts.get("response_texts", 0)),
        ("responders", len(responders)),
        ("clinicians (study codes)", f"{len(clinician_codes)}: {', '.join(clinician_codes)}"),
        ("clinician ratings, valid (scored)", human.get("complete", 0)),
        ("clinician ratings, invalid imported cells (raw text kept)", human.get("invalid", 0)),
        ("clinician cells not rated", human.get("not_rated", 0)),
        ("clinician cells in flagged conversations", human.get("flagged", 0)),
    ]
    for name, judge in counts.get("judges", {}).items():
        rows.append(
            (f"judge {name}: outputs valid / invalid", f"{judge['complete']} / {judge['invalid']}")
        )
    out += _table(("what", "count"), rows)
    out += ["", "Responders (who wrote each response):", ""]
    out += _table(
        ("key", "name", "family", "human reference"),
        [(r.key, r.name, r.family, "yes" if r.is_reference else "") for r in responders],
    )
    out.append("")
    return out


def _rubric(*, study: Study) -> list[str]:
    """The rubric's attributes with their anchors, and whether re-importing needs it created."""
    rubric = study.rubric
    attributes = list(rubric.attributes.order_by("position").prefetch_related("levels"))
    out = ["### Rubric and anchors", ""]
    out.append(
        f"Rubric *{rubric.name}*, scores {rubric.scale_min}–{rubric.scale_max}."
        + (
            ""
            if rubric.name == DEFAULT_RUBRIC_NAME
            else " It is not the platform's default rubric: create the study with this rubric "
            "before re-importing the release."
        )
    )
    out.append("")
    for attribute in attributes:
        out.append(f"- **{attribute.name}** ({attribute.group}): {attribute.description}")
        for level in sorted(attribute.levels.all(), key=lambda lv: lv.value):
            out.append(f"  - {level.value}: {level.anchor}")
    out.append("")
    return out


def _collection_process(*, study: Study, counts: Mapping[str, Any]) -> list[str]:
    """Who rated how much, what was left out, and how the clinicians' sample was drawn."""
    cover = coverage(study=study)
    raters: list[dict[str, Any]] = cover["raters"]  # type: ignore[assignment]
    kinds = Counter(r["kind"] for r in raters)
    out = [
        "## Collection process",
        "",
        f"- {cover['with_clinician']} of {cover['conversations']} conversations have a "
        f"clinician rating; {cover['with_two_clinicians']} have two or more (the overlap on "
        "which agreement among clinicians is measured). "
        f"{kinds.get('clinician', 0)} clinicians and {kinds.get('judge', 0)} judges rated.",
        *_collection(study),
        "- Only submitted ratings are released, and each clinician's first rating of a response "
        "(a test-retest repeat is not). Practice conversations, drafts, flag reasons, names, "
        "e-mail addresses and times are not released.",
        "- Judges rated every response of the conversations in their workbook, except where a "
        "cell is marked `[not rated]`.",
        "",
    ]

    sample = counts.get("clinician_sample")
    if sample:
        from analysis.release import SAMPLE

        out += [
            "### Sampling design",
            "",
            f"Clinicians were sent a random sample drawn on the platform: {sample['size']} of "
            f"{sample['population']} conversations, {sample['method']}, seed {sample['seed']}. "
            f"`{SAMPLE}` lists them; judge-assisted estimates of this study used them as the "
            f"labelled conversations (`manage.py judge_assisted --labelled {SAMPLE}` on the "
            "re-imported study gives the same estimates).",
            "",
        ]
    else:
        out += [
            "### Sampling design",
            "",
            "No clinician sample was drawn on the platform: the conversations clinicians rated "
            "are whatever they were assigned, and judge-assisted estimates treat every "
            "clinician-rated conversation as labelled.",
            "",
        ]
    return out


def _exclusions(*, judges: Mapping[str, str], exclusions: Mapping[str, set[str]]) -> list[str]:
    out = ["### Self-preference exclusions", ""]
    out.append("A judge is not compared with the clinicians on responses by its own model family:")
    out.append("")
    out += _table(
        ("judge", "responders left out"),
        [(name, ", ".join(sorted(exclusions.get(name, ()))) or "none") for name in judges],
    )
    out.append("")
    return out


def _preprocessing() -> list[str]:
    return [
        "## Preprocessing and labelling",
        "",
        "- A clinician's cell holds their scores as JSON (with their rationale as "
        "`Explanation`), or an imported cell's text exactly as it was imported; `[not rated]` "
        "marks a response the clinician gave no submitted rating, `[flagged]` a conversation "
        "they set aside. The importer reads a marker as exactly that, never as a score.",
        "- A judge's cell holds its raw output exactly as stored; invalid outputs (no single "
        "complete answer) are kept raw and listed with their reason on the workbook's second "
        "sheet. The importer parses every cell again with the same rule and gets the same "
        "ratings (the release is refused otherwise).",
        "- Cells of conversations.csv that a spreadsheet would run as a formula start with an "
        "apostrophe, which the importer removes.",
        "",
    ]


def _reliability(*, study: Study) -> list[str]:
    out = ["## Reliability", ""]
    table = reliability_for_datasheet(study=study)
    if table.empty:
        out.append("No judge scores are paired with clinician scores in this study.")
    else:
        out.append(
            f"ICC(C,1) with its bootstrap interval ({N_BOOT} resamples, seed {SEED}), ICC(A,1), "
            "status, means, bias and MSE per judge and attribute, as `reliability_report "
            f"--bootstrap {N_BOOT} --seed {SEED}` prints them (rounded here; re-import the "
            "release and run it for every digit)."
        )
        out.append("")
        out += _table(TABLE_COLUMNS, table[list(TABLE_COLUMNS)].itertuples(index=False))
    out.append("")
    return out


def _files_and_reimport(
    *,
    study: Study,
    files: Sequence[str],
    judges: Mapping[str, str],
    exclusions: Mapping[str, set[str]],
    include_text: bool,
) -> list[str]:
    """What each file holds, and the commands that import the release into a new study."""
    from analysis.release import (
        ADJUDICATIONS,
        CHECKSUMS,
        CONVERSATIONS,
        FINAL_SCORES,
        HUMAN,
        PARQUET,
    )

    out = ["## Files and re-import", ""]
    described = {
        CONVERSATIONS: "conversations and responses in the MentalBench-100k schema"
        + ("" if include_text else " (response texts left out of this release)"),
        HUMAN: "clinicians' ratings (MentalAlign-70k layout with a `Clinician` column)",
        PARQUET: "every score as one long table (pandas / datasets)",
        FINAL_SCORES: "the final score of every response and attribute with its provenance",
        ADJUDICATIONS: "the adjudications behind the adjudicated final scores (adjudicators "
        "as codes)",
        CHECKSUMS: "SHA-256 of every other file (`sha256sum -c SHA256SUMS`)",
        "datasheet.md": "this datasheet",
    }
    for name in [*files, "datasheet.md", CHECKSUMS]:
        judge = next((j for j, f in judges.items() if f == name), None)
        what = f"judge {judge}: raw outputs" if judge else described.get(name, "")
        out.append(f"- `{name}` — {what}")
    out += ["", "```"]
    out.append(f'python manage.py import_conversations --study "NEW STUDY" {CONVERSATIONS}')
    command = 'python manage.py import_mentalalign --study "NEW STUDY"'
    if HUMAN in files:
        command += f" --human {HUMAN}"
    for name, file in judges.items():
        command += f' --judge "{name}={file}"'
        # Always given, even when empty: without it a judge named like one of the paper's
        # would get the paper's self-exclusion.
        command += f' --exclude "{name}={",".join(sorted(exclusions.get(name, ())))}"'
    out.append(command)
    if ADJUDICATIONS in files:
        out.append(
            'python manage.py import_adjudications --study "NEW STUDY" '
            + " ".join(f'--threshold "{t}"' for t in threshold_arguments(study))
            + f" --expect {FINAL_SCORES} {ADJUDICATIONS}"
        )
    out += ["```", ""]
    return out


def threshold_arguments(study: Study) -> list[str]:
    """The study's adjudication thresholds as `import_adjudications --threshold` values: the
    study's (N), then each attribute's own (ATTRIBUTE=N), in rubric order."""
    own = AttributeThreshold.objects.filter(study=study).order_by("attribute__position")
    return [
        str(study.adjudication_threshold),
        *(f"{name}={points}" for name, points in own.values_list("attribute__name", "points")),
    ]


def adjudication_section(study: Study, counts: Mapping[str, Any] | None) -> list[str]:
    """How final scores were settled: the thresholds, the final scores by provenance, and the
    adjudications by reason. Nothing when the release holds no clinician ratings."""
    if not counts:
        return []
    from analysis.release import ADJUDICATIONS, FINAL_SCORES

    own = list(
        AttributeThreshold.objects.filter(study=study)
        .order_by("attribute__position")
        .values_list("attribute__name", "points")
    )
    out = ["### Adjudication and final scores", ""]
    out.append(
        "Where two or more clinicians scored a response on an attribute "
        f"{study.adjudication_threshold} points apart or more (the study's adjudication threshold"
        + (
            "; per attribute: " + ", ".join(f"{name} {points}" for name, points in own)
            if own
            else ""
        )
        + "), or a clinician flagged the conversation, a senior clinician (an adjudicator, "
        "blinded to the clinicians' identities and to which system wrote the response) could "
        f"set the final score. `{FINAL_SCORES}` gives every response and attribute's final "
        "score and its provenance: `adjudicated` (the adjudicator's score), `single-clinician` "
        "(the one clinician's score), `clinician-consensus` (the mean of clinicians within the "
        "threshold), `awaiting-adjudication` (no final score yet)."
    )
    out.append("")
    provenance = counts.get("provenance", {})
    out += _table(
        ("provenance", "final scores"),
        [
            (name, provenance.get(name, 0))
            for name in ("adjudicated", "clinician-consensus", "single-clinician",
                         "awaiting-adjudication")
        ],
    )  # fmt: skip
    out.append("")
    reasons = counts.get("reasons", {})
    labels = dict(Adjudication.Reason.choices)
    out.append(
        f"{counts.get('adjudications', 0)} scores were adjudicated by "
        f"{counts.get('adjudicators', 0)} adjudicators (codes A01, … in `{ADJUDICATIONS}`); "
        f"{counts.get('rubric_needs_change', 0)} were marked *the rubric needs a change*. By "
        "reason:"
    )
    out.append("")
    out += _table(
        ("reason", "adjudicated scores"),
        [(labels[value], reasons.get(value, 0)) for value in Adjudication.Reason.values]
        + [("none given", reasons.get("", 0))],
    )
    out.append("")
    return out


def _collection(study: Study) -> list[str]:
    """How the clinicians' ratings came to be, as far as the platform knows it."""
    from analysis.release import released_ratings

    by_source = dict(
        released_ratings(study)
        .filter(rater__kind=Rater.Kind.CLINICIAN)
        .values_list("source")
        .annotate(n=Count("id"))
        .values_list("source", "n")
    )
    lines = []
    if by_source.get(Rating.Source.FORM):
        lines.append(
            f"- {by_source[Rating.Source.FORM]} clinician ratings were made on this platform: "
            "each clinician saw a conversation's responses blinded (no system names) and in an "
            "order drawn for them; the orders are not part of the release."
        )
    if by_source.get(Rating.Source.IMPORT):
        lines.append(
            f"- {by_source[Rating.Source.IMPORT]} clinician ratings were imported from files; "
            "how they were collected is not recorded on the platform."
        )
    return lines


def clinicians_section(study: Study) -> list[str]:
    """Who rated, in counts (credentials as the clinicians or admins entered them) and their
    consent: no name, and a count under SMALL_CELL shown only as "fewer than" it."""
    summary = clinicians_summary(study=study)
    out = [
        "### The clinicians: credentials and consent",
        "",
        f"{summary.clinicians} clinicians rated. Counts under {SMALL_CELL} are shown as "
        f"'fewer than {SMALL_CELL}' so that no clinician can be singled out.",
        "",
    ]
    out += _table(("specialty", "clinicians"), summary.specialties)
    out.append("")
    out += _table(("years in practice", "clinicians"), summary.years)
    out.append("")
    if summary.consents:
        out += _table(
            ("consent text version", "accepted", "withdrawn"),
            [(f"v{v}", accepted, withdrawn) for v, accepted, withdrawn in summary.consents],
        )
    else:
        out.append("The study asked for no consent on the platform.")
    out.append("")
    return out


def datasheet_blocks(markdown: str) -> list[dict[str, Any]]:
    """The datasheet (the Markdown this module writes) as blocks a template renders with
    autoescaping: headings, paragraphs, lists, tables and code. Only the constructs written
    above are recognised; any other line is a paragraph of its own text."""
    blocks: list[dict[str, Any]] = []
    lines = markdown.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            end = len(lines) if end is None else end
            blocks.append({"kind": "code", "text": "\n".join(lines[i + 1 : end])})
            i = end + 1
        elif line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            blocks.append(
                {"kind": "heading", "level": min(level + 1, 6), "text": line[level:].strip()}
            )
            i += 1
        elif line.startswith("|"):
            rows = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [
                    c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", lines[i])[1:-1]
                ]
                if not all(set(c) <= {"-"} and c for c in cells):  # the |---| separator
                    rows.append(cells)
                i += 1
            blocks.append({"kind": "table", "header": rows[0], "rows": rows[1:]})
        elif line.lstrip().startswith("- "):
            items: list[str] = []
            while i < len(lines) and lines[i].lstrip().startswith("- "):
                items.append(lines[i].lstrip()[2:])
                i += 1
            blocks.append({"kind": "list", "items": items})
        else:
            blocks.append({"kind": "paragraph", "text": line})
            i += 1
    return blocks
