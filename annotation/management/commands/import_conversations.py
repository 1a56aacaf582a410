from pathlib import Path

from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from annotation.importers.base import ImportProblem, file_sha256
from annotation.importers.mentalbench import read_conversations
from annotation.services import conversations_import, study_get_or_create


class Command(BaseCommand):
    help = (
        "Import conversations and responses in the MentalBench-100k schema (CSV or JSONL: "
        "context, response, one column per model, optional id/conditions/source). Creates the "
        "study with the default rubric if it does not exist. Re-importing creates nothing twice."
    )
    # The checks of what an import relies on: the models. The URL checks would import every
    # view (and the dashboards' pandas) before a single row is read.
    requires_system_checks = [Tags.models]

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--study", required=True, help="study name")
        parser.add_argument("file", type=Path)

    def handle(self, *args, study: str, file: Path, **options) -> None:
        try:
            records = read_conversations(file)
            # One transaction: a failure leaves no study, conversation or log behind.
            with transaction.atomic():
                study_obj, created = study_get_or_create(name=study)
                summary = conversations_import(
                    study=study_obj,
                    records=records,
                    file_name=str(file),
                    sha256=file_sha256(file),
                )
        except (ImportProblem, ValueError) as exc:
            raise CommandError(str(exc)) from None
        if created:
            self.stdout.write(f"created study {study!r} with the default rubric")
        self.stdout.write(
            f"{file}: {summary['rows']} rows; conversations created "
            f"{summary['conversations_created']}, already present "
            f"{summary['conversations_already_present']}; responses created "
            f"{summary['responses_created']}, texts filled {summary['responses_text_filled']}; "
            f"responders: {', '.join(summary['responders'])}"
        )
