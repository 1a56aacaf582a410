from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pandas as pd
from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser

from analysis.judge_assisted import estimator
from analysis.judge_assisted.selectors import (
    DESIGNS,
    JudgeAssistedInputError,
    conversation_external_ids,
    judge_assisted_report,
)
from analysis.management.lookup import study_get_or_error
from annotation.csvsafe import frame_csv

TABLE_COLUMNS = (*estimator.CONTRACT_COLUMNS, "ratings_saved")


def _labelled_ids(path: str, known: set[str]) -> set[str]:
    try:
        text = Path(path).read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandError(f"--labelled {path}: cannot read the file ({exc})") from exc
    ids = [line.strip() for line in text.splitlines()]
    listed = [i for i in ids if i]
    if not listed:
        raise CommandError(f"--labelled {path}: the file lists no conversation id")
    unknown = [(n, i) for n, i in enumerate(ids, start=1) if i and i not in known]
    if unknown:
        shown = ", ".join(f"line {n}: {i!r}" for n, i in unknown[:5])
        more = f" and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        raise CommandError(
            f"--labelled {path}: {len(unknown)} id(s) are not conversations of the study "
            f"({shown}{more})"
        )
    return set(listed)


def _grouped(table: pd.DataFrame, column: str) -> list[str]:
    """One stderr line per cell, or one line for many cells that say the same thing (a study
    of eight conversations would otherwise print seventy identical warnings)."""
    rows = table[table[column] != ""]
    by_text: dict[str, list[str]] = {}
    for row in rows.itertuples(index=False):
        # The same sentence with another count is the same kind of line.
        kind = re.sub(r"\d+", "N", getattr(row, column))
        by_text.setdefault(kind, []).append(f"{row.responder} × {row.attribute}")
    lines = []
    for kind, cells in by_text.items():
        if len(cells) <= 3:
            lines += [
                f"{column}: {cell}: {text}"
                for cell, text in zip(
                    cells,
                    rows[rows[column].str.replace(r"\d+", "N", regex=True) == kind][column],
                    strict=False,
                )
            ]
        else:
            example = rows[rows[column].str.replace(r"\d+", "N", regex=True) == kind][column].iloc[
                0
            ]
            lines.append(
                f"{column}: {len(cells)} cells ({cells[0]}, {cells[1]}, …), e.g.: {example}"
            )
    return lines


class Command(BaseCommand):
    help = (
        "Judge-assisted (PPI++) clinician means per responder × attribute. The estimand is the "
        "clinician mean over the study's responses that clinicians were meant to rate; it is "
        "estimated from clinician ratings on the labelled conversations (the study's stored "
        "clinician sample, else every clinician-rated conversation, or --labelled FILE) and "
        "judge scores on the others, with a Student-t interval beside the clinician-only one. "
        "Responses of labelled conversations that clinicians left unrated are non-response "
        "(counted in n_nonresponse, in neither pool). See docs/judge-assisted.md."
    )

    # The checks of what it relies on, the models: the URL checks import every view of the
    # project (and the LLM SDKs' callers), seconds of start-up for a table it prints.
    requires_system_checks = [Tags.models]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True)
        parser.add_argument("--judge", action="append", required=True, help="repeatable")
        parser.add_argument(
            "--labelled",
            metavar="FILE",
            help="external conversation ids, one per line, whose clinician ratings are used "
            "(default: --design)",
        )
        parser.add_argument(
            "--design",
            choices=DESIGNS,
            default="stored",
            help="without --labelled: 'stored' uses the study's clinician sample drawn on "
            "/manage/ (every clinician-rated conversation if it has none); 'rated' uses every "
            "clinician-rated conversation",
        )
        parser.add_argument("--alpha", default="0.05", help="1 − confidence level (default 0.05)")
        parser.add_argument("--format", choices=("csv", "table"), default="table")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            alpha = float(options["alpha"])
        except ValueError:
            alpha = math.nan
        if not 0.0 < alpha < 1.0:
            raise CommandError(
                f"--alpha must be a number strictly between 0 and 1, got {options['alpha']!r}"
            )
        study = study_get_or_error(options["study"])
        labelled = (
            _labelled_ids(options["labelled"], conversation_external_ids(study=study))
            if options["labelled"]
            else None
        )
        try:
            report = judge_assisted_report(
                study=study,
                judges=options["judge"],
                labelled=labelled,
                alpha=alpha,
                design=options["design"],
            )
        except JudgeAssistedInputError as exc:
            raise CommandError(str(exc)) from exc
        table = report.means
        # On stderr: the CSV on stdout stays the contract's table alone.
        self.stderr.write(f"labelled: {report.design}")
        for line in _grouped(table, "warning") + _grouped(table, "note"):
            self.stderr.write(line)
        if options["format"] == "csv":
            columns = [
                *estimator.CONTRACT_COLUMNS,
                *(c for c in table.columns if c not in estimator.CONTRACT_COLUMNS),
            ]
            # Python's float repr round-trips: full precision, no float_format truncation.
            self.stdout.write(frame_csv(table[columns]), ending="")
        else:
            self.stdout.write(table[list(TABLE_COLUMNS)].round(3).to_string(index=False))
