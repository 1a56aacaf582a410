from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from annotation.importers.base import file_sha256
from annotation.importers.mentalbench import read_conversations
from annotation.roles import CLINICIAN, RESEARCHER, role_add
from annotation.services import (
    assignments_create,
    clinician_rater_get_or_create,
    conversations_import,
    study_get_or_create,
)

DEMO_FILE = Path(__file__).resolve().parents[2] / "demo" / "conversations.jsonl"
DEMO_STUDY = "Demo study"


class Command(BaseCommand):
    help = (
        "Load the demo study (6 conversations × 10 responses written for this repository) and "
        "demo accounts: admin, clinician1, clinician2, researcher. Passwords: $DEMO_PASSWORD "
        "(default 'mentalbench-demo'). Safe to run again."
    )

    @transaction.atomic
    def handle(self, *args, **options) -> None:
        password = settings.DEMO_PASSWORD
        study, _ = study_get_or_create(
            name=DEMO_STUDY, description="Fictional conversations written to try the platform."
        )
        summary = conversations_import(
            study=study,
            records=read_conversations(DEMO_FILE),
            file_name=DEMO_FILE.name,
            sha256=file_sha256(DEMO_FILE),
        )
        User = get_user_model()
        accounts = [
            ("admin", {"is_staff": True, "is_superuser": True}),
            ("clinician1", {}),
            ("clinician2", {}),
            ("researcher", {}),
        ]
        clinicians = []
        for username, flags in accounts:
            user, created = User.objects.get_or_create(username=username, defaults=flags)
            if created:
                user.set_password(password)
                user.save(update_fields=["password"])
            if username == "researcher":
                role_add(user=user, role=RESEARCHER)
            if username.startswith("clinician"):
                role_add(user=user, role=CLINICIAN)
                rater = clinician_rater_get_or_create(name=username)
                if rater.user_id is None:
                    rater.user = user
                    rater.save(update_fields=["user"])
                clinicians.append(rater)
        # Both demo clinicians rate every demo conversation (full overlap, for agreement);
        # assignments_create only adds what is missing, so this stays idempotent.
        assigned = assignments_create(
            study=study, clinicians=clinicians, overlap=len(clinicians), overlap_fraction=1.0
        )
        self.stdout.write(
            f"demo study {study.name!r}: {summary['conversations_created']} conversations and "
            f"{summary['responses_created']} responses created, {len(assigned)} assignments "
            "created; accounts: "
            f"{', '.join(name for name, _ in accounts)} (password from $DEMO_PASSWORD, default "
            "'mentalbench-demo')"
        )
