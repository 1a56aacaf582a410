from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from analysis import reports
from analysis.management.lookup import study_get_or_error
from analysis.pseudonyms import rater_codes
from analysis.selectors import (
    Filters,
    attribute_names,
    data_notes,
    exclusions_for,
    scores_frame,
)
from annotation.csvsafe import frame_csv
from annotation.models import Rater, Study

#: The columns DESIGN.md promises first, in this order; the rest of reports.RELIABILITY_COLUMNS
#: follow in the CSV.
CONTRACT_COLUMNS = (
    "judge",
    "attribute",
    "n_models",
    "icc_c1",
    "ci_low",
    "ci_high",
    "icc_a1",
    "ci_width",
    "status",
    "human_mean",
    "judge_mean",
    "bias",
    "mse",
)
TABLE_COLUMNS = (*CONTRACT_COLUMNS, "n_pairs", "estimable", "verdict")


def _clinician_code(study: Study, value: str | None) -> str | None:
    """The study code of a clinician given by code or by name (whoever runs a management
    command has the database anyway; researchers' pages and the API take codes only)."""
    if not value:
        return None
    codes = rater_codes(study_id=study.pk)
    names = dict(Rater.objects.filter(pk__in=codes).values_list("name", "id"))
    if value in codes.values():
        return value
    if value in names:
        return codes[names[value]]
    known = ", ".join(sorted(codes.values())) or "none"
    raise CommandError(f"--clinician {value!r}: no such clinician in the study (codes: {known})")


class Command(BaseCommand):
    help = (
        "Reliability of each LLM judge against the clinicians: one row per judge × attribute "
        "with ICC(C,1) and its bootstrap CI, ICC(A,1), status (GR/MR/PR), bias and MSE "
        "(MentalAlign-70k paper §5, Tables 3–4). Notes about the data go to stderr in CSV mode."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True)
        parser.add_argument("--format", choices=("csv", "table"), default="table")
        parser.add_argument("--bootstrap", type=int, default=1000, metavar="N")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument(
            "--two-stage",
            action="store_true",
            help="bootstrap responders, then conversations within them",
        )
        parser.add_argument(
            "--as-published",
            action="store_true",
            help="also read the numbers in invalid imported clinician cells (0s, 6s), as the "
            "paper did",
        )
        parser.add_argument("--condition", help="only conversations with this condition label")
        parser.add_argument("--source", help="only conversations from this source dataset")
        parser.add_argument(
            "--clinician",
            metavar="CODE_OR_NAME",
            help="only this clinician as the human reference: their study code (C01, as on the "
            "dashboard) or, from this shell, their name",
        )
        parser.add_argument("--judge", action="append", help="only this judge (repeatable)")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["bootstrap"] < 1:
            raise CommandError(f"--bootstrap must be ≥ 1, got {options['bootstrap']}")
        study = study_get_or_error(options["study"])
        filters = Filters(
            condition=options["condition"],
            source=options["source"],
            clinician=_clinician_code(study, options["clinician"]),
            judges=tuple(options["judge"]) if options["judge"] else None,
        )
        df = scores_frame(study=study, filters=filters, as_published=options["as_published"])
        table = reports.reliability_table(
            df,
            attributes=attribute_names(study=study),
            exclusions=exclusions_for(study=study),
            n_boot=options["bootstrap"],
            seed=options["seed"],
            two_stage=options["two_stage"],
        )
        if table.empty:
            raise CommandError(
                f"study {study.name!r} has no judge scores paired with clinician scores"
                + (" in this subset" if filters != Filters() else "")
            )
        notes = data_notes(
            study=study, as_published=options["as_published"], switch="--as-published"
        )
        if options["format"] == "csv":
            columns = [*CONTRACT_COLUMNS, *(c for c in table.columns if c not in CONTRACT_COLUMNS)]
            self.stdout.write(frame_csv(table[columns]), ending="")
            for note in notes:
                self.stderr.write(f"note: {note}")
        else:
            shown = table[list(TABLE_COLUMNS)].round(3)
            self.stdout.write(shown.to_string(index=False))
            for row in table[~table["estimable"]].itertuples(index=False):
                self.stdout.write(f"{row.judge} × {row.attribute}: {row.reason}")
            for note in notes:
                self.stdout.write(f"note: {note}")
