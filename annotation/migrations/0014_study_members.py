"""Per-study membership (docs/membership.md), and a study's deadline.

Release note: nobody loses access by this migration. Every existing study gets as members
- every active member of the *researcher* group, as researcher;
- every active member of the *admin* group who is not staff, as lead;
- every clinician who holds work in it, as clinician.
The platform-wide groups stay as they were (a platform-wide researcher still reads every study):
an instance that now hosts several teams removes people from the groups once their studies'
teams are set, and they keep exactly the studies they are members of.
"""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def members_from_global_roles(apps, schema_editor):
    Study = apps.get_model("annotation", "Study")
    StudyMember = apps.get_model("annotation", "StudyMember")
    Assignment = apps.get_model("annotation", "Assignment")
    User = apps.get_model(*settings.AUTH_USER_MODEL.split("."))
    studies = list(Study.objects.values_list("pk", flat=True))
    researchers = list(
        User.objects.filter(is_active=True, groups__name="researcher").values_list("pk", flat=True)
    )
    leads = list(
        User.objects.filter(is_active=True, is_staff=False, groups__name="admin").values_list(
            "pk", flat=True
        )
    )
    rows = [
        StudyMember(study_id=study, user_id=user, role=role)
        for study in studies
        for role, users in (("researcher", researchers), ("lead", leads))
        for user in users
    ]
    rows += [
        StudyMember(study_id=study, user_id=user, role="clinician")
        for study, user in Assignment.objects.filter(rater__user__isnull=False)
        .values_list("conversation__study_id", "rater__user_id")
        .distinct()
    ]
    StudyMember.objects.bulk_create(rows, batch_size=1000, ignore_conflicts=True)


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0013_webhooks"),
        ("auth", "0012_alter_user_first_name_max_length"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="study",
            name="deadline",
            field=models.DateField(
                blank=True, help_text="the day assigned work is due; empty: no deadline", null=True
            ),
        ),
        migrations.CreateModel(
            name="StudyMember",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "role",
                    models.CharField(
                        choices=[
                            ("lead", "lead (manages the study)"),
                            ("clinician", "clinician (rates)"),
                            ("researcher", "researcher (reads results)"),
                            ("adjudicator", "adjudicator (settles disagreements)"),
                        ],
                        max_length=16,
                    ),
                ),
                (
                    "site",
                    models.CharField(
                        blank=True,
                        help_text="hospital or site, for progress per site",
                        max_length=200,
                    ),
                ),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "study",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="members",
                        to="annotation.study",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="study_memberships",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["study", "role", "user"],
                "indexes": [models.Index(fields=["user", "role"], name="study_member_user_role")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("study", "user", "role"), name="study_member_once_per_role"
                    )
                ],
            },
        ),
        migrations.RunPython(members_from_global_roles, migrations.RunPython.noop),
    ]
