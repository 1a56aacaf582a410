from pathlib import Path

from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from annotation.csvsafe import safe_dict_writer
from annotation.importers.base import ImportProblem, file_sha256
from annotation.importers.mentalalign import Workbook, read_workbook
from annotation.services import (
    WorkbookSource,
    human_workbook_sources,
    judge_rater_get_or_create,
    mentalalign_import,
    study_get_or_create,
)

SHOWN_PROBLEMS = 50


def _pairs(values: list[str], flag: str, *, empty: bool = False) -> list[tuple[str, str]]:
    """NAME=VALUE pairs; with `empty`, NAME= (nothing after the sign) is allowed too."""
    pairs = []
    for value in values:
        name, sep, rest = value.partition("=")
        if not sep or not name.strip() or (not rest.strip() and not empty):
            raise CommandError(f"{flag} {value!r}: expected NAME=VALUE")
        pairs.append((name.strip(), rest.strip()))
    return pairs


class Command(BaseCommand):
    help = (
        "Import the released MentalAlign-70k workbooks: clinicians' ratings (--human) and LLM "
        "judges' raw outputs (--judge NAME=FILE). Every parseable cell is stored as a rating "
        "with its raw text; every unparseable cell is stored as an invalid rating (raw text and "
        "reason, no scores) and reported; empty cells are counted and reported. Judges named like "
        "claude / gpt-4o / gemini / o4-mini get the paper's self-exclusions unless --exclude "
        "(NAME= for none)."
    )
    # The checks of what an import relies on: the models. The URL checks would import every
    # view (and the dashboards' pandas) before a single row is read.
    requires_system_checks = [Tags.models]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True)
        parser.add_argument("--human", type=Path, help="Human_judge.xlsx")
        parser.add_argument(
            "--human-rater",
            default="MentalAlign-70k clinicians",
            help="rater name for the clinicians' workbook (a released study's workbook, with a "
            "Clinician column, names each clinician '<study> <code>' instead)",
        )
        parser.add_argument("--judge", action="append", default=[], metavar="NAME=FILE")
        parser.add_argument(
            "--exclude",
            action="append",
            default=[],
            metavar="NAME=KEY[,KEY]",
            help="responder keys a judge must not be compared on (NAME= for none, overriding "
            "the paper's self-exclusion for a judge named like one of its judges)",
        )
        parser.add_argument(
            "--strict",
            action="store_true",
            help="abort (writing nothing) at the first unusable cell",
        )
        parser.add_argument(
            "--report",
            type=Path,
            help="write every unusable cell to this CSV (file,row,column,...)",
        )

    def handle(self, *args, **options) -> None:
        judges = _pairs(options["judge"], "--judge")
        exclusions = {
            name: [k.strip() for k in keys.split(",") if k.strip()]
            for name, keys in _pairs(options["exclude"], "--exclude", empty=True)
        }
        unknown = set(exclusions) - {name for name, _ in judges}
        if unknown:
            raise CommandError(f"--exclude names no --judge: {', '.join(sorted(unknown))}")
        if not options["human"] and not judges:
            raise CommandError("nothing to import: give --human FILE and/or --judge NAME=FILE")
        try:
            # Read and validate every file before touching the database.
            books: list[tuple[str | None, Path, Workbook]] = []
            if options["human"]:
                books.append(
                    (None, options["human"], read_workbook(options["human"], kind="human"))
                )
            for name, file in judges:
                books.append((name, Path(file), read_workbook(Path(file), kind="judge")))
            # One transaction: a failure leaves no study, rater, rating or log behind.
            with transaction.atomic():
                study, created = study_get_or_create(name=options["study"])
                sources: list[WorkbookSource] = []
                for judge, path, book in books:
                    if judge is None:
                        sources += human_workbook_sources(
                            study=study,
                            workbook=book,
                            sha256=file_sha256(path),
                            rater_name=options["human_rater"],
                        )
                        continue
                    rater = judge_rater_get_or_create(name=judge, excluded=exclusions.get(judge))
                    sources.append(
                        WorkbookSource(workbook=book, rater=rater, sha256=file_sha256(path))
                    )
                summaries = mentalalign_import(
                    study=study, sources=sources, strict=options["strict"]
                )
        except (ImportProblem, ValueError) as exc:
            raise CommandError(str(exc)) from None
        if created:
            self.stdout.write(f"created study {study.name!r} with the default rubric")
        problems = [p for s in summaries for p in s["problems"]]
        for s in summaries:
            self.stdout.write(
                f"{s['file']} ({s['rater']}): {s['cells']} cells = {s['stored']} stored + "
                f"{s['invalid']} unparseable (kept as invalid, raw text stored"
                + (
                    f"; {s['all_zero']} of them all-zero 'not rated' cells"
                    if s.get("all_zero")
                    else ""
                )
                + f") + {s['empty']} empty + "
                + (f"{s['not_rated']} marked not rated + " if s["not_rated"] else "")
                + (f"{s['flagged']} marked flagged + " if s["flagged"] else "")
                + f"{s['already_present']} already imported"
                + (
                    f" ({s['changed_since_import']} differ from the stored import)"
                    if s["changed_since_import"]
                    else ""
                )
                + (
                    f"; {s['context_mismatches']} contexts differ from the stored ones"
                    if s["context_mismatches"]
                    else ""
                )
            )
        for p in problems[:SHOWN_PROBLEMS]:
            self.stdout.write(
                f"  {p['file']}, row {p['row']}, column {p['column']!r}: {p['reason']}"
            )
        if len(problems) > SHOWN_PROBLEMS:
            self.stdout.write(
                f"  … {len(problems) - SHOWN_PROBLEMS} more (use --report FILE; "
                "all are kept in the import log in the admin)"
            )
        if options["report"]:
            with options["report"].open("w", newline="") as handle:
                writer = safe_dict_writer(
                    handle,
                    fieldnames=["file", "row", "column", "conversation", "responder", "reason"],
                )
                writer.writeheader()
                writer.writerows(problems)
