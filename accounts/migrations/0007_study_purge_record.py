import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0006_erasure_record"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="StudyPurgeRecord",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "study_id",
                    models.PositiveIntegerField(help_text="the purged study's number"),
                ),
                ("study_name", models.CharField(max_length=200)),
                ("purged_at", models.DateTimeField(auto_now_add=True)),
                (
                    "reason",
                    models.CharField(
                        blank=True, help_text="e.g. the request's reference", max_length=200
                    ),
                ),
                (
                    "removed",
                    models.JSONField(default=dict, help_text="what was deleted, by kind: counts"),
                ),
                (
                    "purged_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["-purged_at", "-id"],
            },
        ),
    ]
