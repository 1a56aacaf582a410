"""Adjudication of clinicians' disagreements (docs/adjudication.md): a study's threshold and
the adjudicators' final scores."""

import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0015_mail_deadline_digest"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="study",
            name="adjudication_threshold",
            field=models.PositiveSmallIntegerField(
                default=2,
                validators=[django.core.validators.MinValueValidator(1)],
                help_text="Scores this many points apart or more go to an adjudicator; "
                "closer ones stand as the clinicians' consensus.",
            ),
        ),
        migrations.CreateModel(
            name="Adjudication",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("final_score", models.SmallIntegerField()),
                (
                    "reason",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("ambiguous_response", "Ambiguous response"),
                            ("rubric_gap", "Rubric gap (the rubric does not cover the case)"),
                            ("rater_error", "Rater error"),
                            ("other", "Other"),
                        ],
                        max_length=32,
                    ),
                ),
                ("reason_text", models.TextField(blank=True)),
                ("rubric_needs_change", models.BooleanField(default=False)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "adjudicator",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "attribute",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="annotation.attribute",
                    ),
                ),
                (
                    "response",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="adjudications",
                        to="annotation.response",
                    ),
                ),
                (
                    "study",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="adjudications",
                        to="annotation.study",
                    ),
                ),
            ],
            options={
                "ordering": ["study", "response", "attribute"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("response", "attribute"), name="adjudication_once_per_attribute"
                    )
                ],
            },
        ),
    ]
