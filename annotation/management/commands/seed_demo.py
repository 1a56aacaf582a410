from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from accounts.roles import CLINICIAN, RESEARCHER, role_add, role_remove
from annotation.importers.base import file_sha256
from annotation.importers.mentalbench import read_conversations
from annotation.membership import CLINICIAN as MEMBER_CLINICIAN
from annotation.membership import LEAD, MEMBER_RESEARCHER, member_add
from annotation.models import Conversation, ReferenceScore, Study
from annotation.services import (
    assignments_create,
    clinician_rater_get_or_create,
    conversations_import,
    study_get_or_create,
)
from annotation.training import (
    practice_conversations_mark,
    reference_csv_rows,
    reference_scores_set,
)

DEMO_DIR = Path(__file__).resolve().parents[2] / "demo"
DEMO_FILE = DEMO_DIR / "conversations.jsonl"
PRACTICE_FILE = DEMO_DIR / "practice.jsonl"
REFERENCE_FILE = DEMO_DIR / "practice-references.csv"
DISTORTION_FILE = DEMO_DIR / "distortions.jsonl"
DEMO_STUDY = "Demo study"
DEMO_DISTORTION_STUDY = "Demo distortion study"
PRACTICE_ID = "demo-practice"

#: The two demo studies' teams (docs/membership.md): a lead and a researcher each, at different
#: sites, and the three clinicians, who rate the one and label the other.
TEAMS = {
    DEMO_STUDY: [
        ("lead1", LEAD, "North hospital"),
        ("researcher", MEMBER_RESEARCHER, "North hospital"),
        ("clinician1", MEMBER_CLINICIAN, "North hospital"),
        ("clinician2", MEMBER_CLINICIAN, "North hospital"),
        ("clinician3", MEMBER_CLINICIAN, "South hospital"),
    ],
    DEMO_DISTORTION_STUDY: [
        ("lead2", LEAD, "South hospital"),
        ("researcher2", MEMBER_RESEARCHER, "South hospital"),
        ("clinician1", MEMBER_CLINICIAN, "North hospital"),
        ("clinician2", MEMBER_CLINICIAN, "North hospital"),
        ("clinician3", MEMBER_CLINICIAN, "South hospital"),
    ],
}


def _import(study: Study, path: Path) -> dict:
    return conversations_import(
        study=study, records=read_conversations(path), file_name=path.name, sha256=file_sha256(path)
    )


def _practice_set_up(study: Study) -> int:
    """The demo's practice conversation with its reference scores; returns the scores added.

    Marked before anything is assigned (a conversation given as real work cannot become
    practice), and only missing references are written: a second run, or an admin's own
    references, change nothing."""
    _import(study, PRACTICE_FILE)
    practice = Conversation.objects.get(study=study, external_id=PRACTICE_ID)
    if not practice.practice:
        practice_conversations_mark(study=study, external_ids=[PRACTICE_ID])
    stored = set(
        ReferenceScore.objects.filter(response__conversation=practice).values_list(
            "response__responder__key", "attribute__name"
        )
    )
    rows = [
        row
        for row in reference_csv_rows(text=REFERENCE_FILE.read_text(), file=REFERENCE_FILE.name)
        if (row[2], row[3]) not in stored
    ]
    if not rows:
        return 0
    return reference_scores_set(study=study, rows=rows, user=None, file=REFERENCE_FILE.name)


class Command(BaseCommand):
    help = (
        "Load the demo studies and accounts: the demo study (6 conversations × 10 responses "
        "written for this repository, plus a practice conversation with reference scores for "
        "rater training), a demo distortion-labelling study (6 user messages), their teams, and "
        "the accounts admin, clinician1, clinician2, clinician3, lead1, lead2, researcher, "
        "researcher2. Passwords: $DEMO_PASSWORD (default 'mentalbench-demo'). Safe to run "
        "again: a second run changes nothing."
    )

    @transaction.atomic
    def handle(self, *args, **options) -> None:
        password = settings.DEMO_PASSWORD
        study, _ = study_get_or_create(
            name=DEMO_STUDY, description="Fictional conversations written to try the platform."
        )
        summary = _import(study, DEMO_FILE)
        references = _practice_set_up(study)
        labelling, _ = study_get_or_create(
            name=DEMO_DISTORTION_STUDY,
            description="Fictional user messages written to try cognitive-distortion labelling.",
            kind=Study.Kind.DISTORTION_LABELLING,
            label_scheme=Study.LabelScheme.RANKED,
        )
        messages = _import(labelling, DISTORTION_FILE)
        User = get_user_model()
        accounts = [
            ("admin", {"is_staff": True, "is_superuser": True}),
            ("clinician1", {}),
            ("clinician2", {}),
            ("clinician3", {}),
            ("researcher", {}),
            ("researcher2", {}),
            ("lead1", {}),
            ("lead2", {}),
        ]
        clinicians = []
        users = {}
        for username, flags in accounts:
            # Usernames ignore case (a unique index): an "Admin" made by hand is the demo's admin.
            user, created = User.objects.get_or_create(
                username__iexact=username, defaults={"username": username, **flags}
            )
            if created:
                user.set_password(password)
                user.save(update_fields=["password"])
            users[username] = user
            if username == "researcher":
                # The demo's researchers read their own study only: a team member, no
                # platform-wide role (an earlier demo gave one).
                role_remove(user=user, role=RESEARCHER)
            if username.startswith("clinician"):
                role_add(user=user, role=CLINICIAN)
                rater = clinician_rater_get_or_create(name=username)
                if rater.user_id is None:
                    rater.user = user
                    rater.save(update_fields=["user"])
                clinicians.append(rater)
        # The three demo clinicians rate every demo conversation and label every demo message
        # (full overlap: agreement, and the alternative annotator test, which leaves one
        # clinician out at a time and needs others to compare with); the practice conversation
        # waits for an admin to give it (Training and repeats). assignments_create only adds
        # what is missing: idempotent.
        assigned = [
            a
            for each in (study, labelling)
            for a in assignments_create(
                study=each, clinicians=clinicians, overlap=len(clinicians), overlap_fraction=1.0
            )
        ]
        for each in (study, labelling):
            for username, role, site in TEAMS[each.name]:
                member_add(study=each, user=users[username], role=role, site=site)
        self.stdout.write(
            f"demo study {study.name!r}: {summary['conversations_created']} conversations and "
            f"{summary['responses_created']} responses created, {references} practice reference "
            f"scores stored; {labelling.name!r}: {messages['conversations_created']} messages "
            f"created; {len(assigned)} assignments created; accounts: "
            f"{', '.join(name for name, _ in accounts)} (password from $DEMO_PASSWORD, default "
            "'mentalbench-demo')"
        )
