import csv
from pathlib import Path

from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser

from annotation.adjudication_selectors import RELEASE_FINAL_COLUMNS
from annotation.csvsafe import cell_unescaped
from annotation.importers.adjudications import read_adjudications
from annotation.importers.base import ImportProblem, require_readable
from annotation.models import Study
from annotation.services.adjudication_import import adjudications_import


def _threshold(value: str) -> tuple[str | None, int]:
    """``N`` (the study's threshold) or ``ATTRIBUTE=N`` (one attribute's)."""
    name, sep, points = value.rpartition("=")
    try:
        number = int(points)
    except ValueError:
        raise CommandError(
            f"--threshold {value!r}: expected N or ATTRIBUTE=N with N a whole number"
        ) from None
    return (name.strip() if sep else None), number


def _expected(path: Path) -> list[tuple[str, ...]]:
    """The rows of a release's final_scores.csv, as text."""
    require_readable(path)
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = [[cell_unescaped(c) for c in row] for row in csv.reader(handle) if row]
    if not rows or tuple(rows[0]) != RELEASE_FINAL_COLUMNS:
        raise ImportProblem(
            f"the header is not {','.join(RELEASE_FINAL_COLUMNS)}", file=str(path), row=1
        )
    return [tuple(row) for row in rows[1:]]


class Command(BaseCommand):
    help = (
        "Import a released study's adjudications (adjudications.csv) and adjudication "
        "thresholds into the study its ratings were imported into, so that its final scores "
        "and their provenance are the released ones. Re-importing changes nothing."
    )
    requires_system_checks = [Tags.models]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True, help="study name (it must exist)")
        parser.add_argument(
            "--threshold",
            action="append",
            default=[],
            metavar="N|ATTRIBUTE=N",
            help="the study's adjudication threshold (N), or one attribute's (ATTRIBUTE=N); "
            "repeat for each attribute; the datasheet prints the release's",
        )
        parser.add_argument(
            "--expect",
            type=Path,
            metavar="FINAL_SCORES_CSV",
            help="a release's final_scores.csv: refuse, writing nothing, unless the study's "
            "final scores afterwards are exactly these",
        )
        parser.add_argument("file", type=Path)

    def handle(self, *args, study: str, file: Path, threshold: list[str], **options) -> None:
        # A refused import writes nothing: the service checks first and writes in one
        # transaction.
        found = Study.objects.select_related("rubric").filter(name=study).first()
        if found is None:
            raise CommandError(
                f"no study named {study!r}; import the release's conversations and ratings first"
            )
        overall: int | None = None
        per_attribute: dict[str, int] = {}
        for value in threshold:
            name, points = _threshold(value)
            if name is None:
                overall = points
            else:
                per_attribute[name] = points
        try:
            records = read_adjudications(file)
            expected = _expected(options["expect"]) if options.get("expect") else None
            summary = adjudications_import(
                study=found,
                records=records,
                file_name=str(file),
                threshold=overall,
                attribute_thresholds=per_attribute,
                expected=expected,
            )
        except ImportProblem as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"{file}: {summary['rows']} adjudications; created {summary['created']}, "
            f"updated {summary['updated']}"
            + (f"; final scores as in {options['expect']}" if expected is not None else "")
        )
