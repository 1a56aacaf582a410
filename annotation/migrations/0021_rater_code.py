"""annotation.RaterCode: clinicians' study codes, now handed out when a clinician joins a study
(annotation/rater_codes.py) instead of the first time a page showed the study's data.

The model takes over the table analysis created (analysis 0002), under its old name, with no
row moved (analysis 0005 gave the model up). Then every clinician who is part of a study and has
no code there yet gets one, so that reading any study never needs to write: the clinicians of a
study's ratings, label annotations and assignments (practice included) and its clinician team
members with a rater, numbered after the study's highest code in a random order, as
annotation.rater_codes.rater_codes_assign numbers them.
"""

import secrets
from collections import defaultdict

import django.db.models.deletion
from django.db import migrations, models

CLINICIAN = "clinician"


def codes_backfilled(apps, schema_editor):
    db = schema_editor.connection.alias
    Rater = apps.get_model("annotation", "Rater")
    RaterCode = apps.get_model("annotation", "RaterCode")
    members: dict[int, set[int]] = defaultdict(set)
    for model, study in (
        ("Rating", "response__conversation__study_id"),
        ("LabelAnnotation", "conversation__study_id"),
        ("Assignment", "conversation__study_id"),
    ):
        rows = (
            apps.get_model("annotation", model)
            .objects.using(db)
            .filter(rater__kind=CLINICIAN)
            .values_list(study, "rater_id")
            .distinct()
        )
        for study_id, rater_id in rows:
            members[study_id].add(rater_id)
    rater_of_user = dict(
        Rater.objects.using(db)
        .filter(kind=CLINICIAN, user__isnull=False)
        .values_list("user_id", "pk")
    )
    team = apps.get_model("annotation", "StudyMember").objects.using(db).filter(role=CLINICIAN)
    for study_id, user_id in team.values_list("study_id", "user_id"):
        if user_id in rater_of_user:
            members[study_id].add(rater_of_user[user_id])
    existing: dict[int, dict[int, int]] = defaultdict(dict)
    for study_id, rater_id, number in RaterCode.objects.using(db).values_list(
        "study_id", "rater_id", "number"
    ):
        existing[study_id][rater_id] = number
    new = []
    for study_id, raters in sorted(members.items()):
        missing = sorted(raters - set(existing[study_id]))
        secrets.SystemRandom().shuffle(missing)
        start = max(existing[study_id].values(), default=0)
        new.extend(
            RaterCode(study_id=study_id, rater_id=r, number=n, code=f"C{n:02d}")
            for n, r in enumerate(missing, start=start + 1)
        )
    RaterCode.objects.using(db).bulk_create(new, batch_size=1000)


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0020_attribute_threshold"),
        ("analysis", "0005_rater_codes_move_to_annotation"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="RaterCode",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("number", models.PositiveIntegerField()),
                        ("code", models.CharField(max_length=16)),
                        (
                            "rater",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="codes",
                                to="annotation.rater",
                            ),
                        ),
                        (
                            "study",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="+",
                                to="annotation.study",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "analysis_ratercode",
                        "ordering": ["study", "number"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("study", "rater"), name="rater_code_once_per_study"
                            ),
                            models.UniqueConstraint(
                                fields=("study", "number"), name="rater_code_unique_in_study"
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(codes_backfilled, migrations.RunPython.noop),
    ]
