"""Escalation of unsafe responses (docs/adjudication.md, *Escalation*): a clinician's mark with
its reason, open until an adjudicator decides it, and the leads' e-mail about it."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0017_webhook_secret_encrypted"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AlterField(
            model_name="mailsent",
            name="kind",
            field=models.CharField(
                choices=[
                    ("invitation", "Invitation"),
                    ("reminder", "Reminder"),
                    ("deadline", "Deadline reminder"),
                    ("deadline_passed", "Deadline passed"),
                    ("digest", "Weekly digest to a lead"),
                    ("escalation", "A response marked unsafe, to a lead"),
                ],
                max_length=16,
            ),
        ),
        migrations.CreateModel(
            name="Escalation",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("reason", models.TextField()),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("open", "Open"),
                            ("withdrawn", "Withdrawn by the clinician"),
                            ("resolved", "Decided by an adjudicator"),
                        ],
                        default="open",
                        max_length=16,
                    ),
                ),
                (
                    "decision",
                    models.CharField(
                        blank=True,
                        choices=[
                            ("confirmed_unsafe", "Confirmed unsafe"),
                            ("not_unsafe", "Not unsafe"),
                        ],
                        default="",
                        max_length=16,
                    ),
                ),
                ("decision_note", models.TextField(blank=True)),
                ("decided_at", models.DateTimeField(blank=True, null=True)),
                ("withdrawn_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                ("updated_at", models.DateTimeField(auto_now=True)),
                (
                    "assignment",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="escalations",
                        to="annotation.assignment",
                    ),
                ),
                (
                    "decided_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "rater",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="escalations",
                        to="annotation.rater",
                    ),
                ),
                (
                    "response",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="escalations",
                        to="annotation.response",
                    ),
                ),
                (
                    "study",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="escalations",
                        to="annotation.study",
                    ),
                ),
            ],
            options={
                "ordering": ["study", "-created_at", "-id"],
                "indexes": [
                    models.Index(fields=["study", "status"], name="escalation_study_status")
                ],
                "constraints": [
                    models.UniqueConstraint(
                        condition=models.Q(("status", "open")),
                        fields=("rater", "response"),
                        name="escalation_open_once",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(
                                ("status", "resolved"), models.Q(("decision", ""), _negated=True)
                            ),
                            models.Q(
                                models.Q(("status", "resolved"), _negated=True), ("decision", "")
                            ),
                            _connector="OR",
                        ),
                        name="escalation_decided_when_resolved",
                    ),
                ],
            },
        ),
    ]
