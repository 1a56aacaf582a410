import os
import tempfile
from pathlib import Path
from typing import Any

from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser

from analysis.export import ExportCount, long_csv, wide_csv
from analysis.management.lookup import study_get_or_error
from analysis.models import ExportLog
from analysis.services import export_log_create, export_log_finish


class Command(BaseCommand):
    help = (
        "Write every score of a study as CSV: long (one row per score: study, conversation, "
        "response, responder, rater, run, repeat, attribute, score, rationale, presentation "
        "position, timestamps) or --wide (one row per conversation × rating, one column per "
        "responder × attribute, the MentalBench-100k layout). Streams in constant memory. "
        "Clinicians appear as their study code (C01, …) and timestamps as days unless "
        "--identified."
    )
    # The checks of what an export relies on: the models. Django's default runs every check,
    # and the URL checks import every view, the dashboards' pandas with them: more than
    # half of this command's start-up time and memory, for nothing it uses.
    requires_system_checks = [Tags.models]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True)
        parser.add_argument(
            "--out", required=True, type=Path, help="CSV file to write ('-' = stdout)"
        )
        parser.add_argument(
            "--wide", action="store_true", help="one column per responder × attribute"
        )
        parser.add_argument(
            "--identified",
            action="store_true",
            help="clinicians' names and exact timestamps instead of study codes and days "
            "(recorded in the export audit log)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_get_or_error(options["study"])
        out: Path = options["out"]
        what = "ratings-wide" if options["wide"] else "ratings-long"
        count = ExportCount()
        identified = options["identified"]
        generator = (wide_csv if options["wide"] else long_csv)(
            study=study, count=count, identified=identified
        )
        if str(out) == "-":
            for chunk in generator:
                self.stdout.write(chunk, ending="")
        else:
            directory = out.resolve().parent
            if not directory.is_dir():
                raise CommandError(f"--out {out}: directory {directory} does not exist")
            # Write beside the target and rename at the end: a failed export leaves no partial file.
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{out.name}.", suffix=".part")
            try:
                with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
                    for chunk in generator:
                        handle.write(chunk)
                os.replace(tmp, out)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        # Logged once the file is complete: a failed run exported nothing.
        log = export_log_create(
            user=None,
            study=study,
            channel=ExportLog.Channel.COMMAND,
            what=what,
            params={"out": str(out), "identified": identified},
        )
        export_log_finish(log=log, rows=count.rows)
        if str(out) != "-":
            self.stdout.write(f"wrote {count.rows} rows to {out}")
