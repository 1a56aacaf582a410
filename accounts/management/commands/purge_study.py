"""Delete a whole study and everything recorded in it (accounts.services.study_purge), in one
transaction; shared judge raters, clinicians, responders and the rubric stay. Without --yes it
only says what would go. Recorded as a StudyPurgeRecord."""

from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import StudyPurgeError, study_purge


class Command(BaseCommand):
    help = "Delete a study entirely (dry run unless --yes); recorded as a StudyPurgeRecord."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the study's exact name")
        parser.add_argument("--reason", default="", help="e.g. the request's reference")
        parser.add_argument(
            "--yes", action="store_true", help="do it (without: say what would be deleted)"
        )

    def handle(self, *args, name: str, reason: str, yes: bool, **options) -> None:
        try:
            purge = study_purge(name=name, reason=reason, dry_run=not yes)
        except StudyPurgeError as exc:
            raise CommandError(str(exc)) from None
        counts = "\n".join(f"  {label}: {n}" for label, n in purge.removed.items()) or "  nothing"
        if not yes:
            self.stdout.write(
                f"Would delete study {purge.study_id} ({purge.study_name!r}):\n{counts}\n"
                "Nothing was deleted. Run again with --yes to delete."
            )
            return
        self.stdout.write(f"Deleted study {purge.study_id} ({purge.study_name!r}):\n{counts}")
