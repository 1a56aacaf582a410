from pathlib import Path
from typing import Any

from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser

from analysis.management.lookup import study_get_or_error
from analysis.models import ExportLog
from analysis.release import ReleaseProblem, release_write
from analysis.services import export_log_create, export_log_finish


class Command(BaseCommand):
    help = (
        "Publish a study as a dataset in DIR: conversations.csv (the import_conversations "
        "schema), Human_judge.xlsx and one <judge>_llm_judge.xlsx per judge (the "
        "import_mentalalign layouts), datasheet.md and SHA256SUMS; --format parquet adds the "
        "long table as ratings.parquet. Clinicians appear as study codes; no names, e-mail "
        "addresses, times or drafts. Re-importing DIR reproduces reliability_report. See "
        "docs/release.md."
    )

    # The checks of what a release relies on: the models (the URL checks would import every
    # view first).
    requires_system_checks = [Tags.models]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True)
        parser.add_argument(
            "--out", required=True, type=Path, help="directory to create (or an empty one)"
        )
        parser.add_argument(
            "--include-text",
            action="store_true",
            default=True,
            help="put the response texts into conversations.csv (the default)",
        )
        parser.add_argument(
            "--no-text",
            dest="include_text",
            action="store_false",
            help="leave the response texts out (contexts stay: the workbooks need them)",
        )
        parser.add_argument(
            "--format",
            choices=("xlsx", "parquet"),
            default="xlsx",
            help="parquet: also ratings.parquet, one row per score (needs pyarrow)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        study = study_get_or_error(options["study"])
        out: Path = options["out"]
        params = {
            "out": str(out),
            "include_text": options["include_text"],
            "format": options["format"],
        }
        # Logged as it starts, like every export, so an interrupted release is in the log too.
        log = export_log_create(
            user=None, study=study, channel=ExportLog.Channel.COMMAND, what="release", params=params
        )
        try:
            summary = release_write(
                study=study,
                out=out,
                include_text=options["include_text"],
                parquet=options["format"] == "parquet",
            )
        except ReleaseProblem as exc:
            raise CommandError(str(exc)) from None
        export_log_finish(log=log, rows=summary.counts.get("conversations", 0))
        self.stdout.write(f"wrote {', '.join(summary.files)} to {out}")
