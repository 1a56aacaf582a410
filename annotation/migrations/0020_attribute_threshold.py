"""A study's adjudication threshold per attribute (docs/adjudication.md), in place of the
study-wide one where the lead sets it."""

import django.core.validators
import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0019_labeladjudication"),
    ]

    operations = [
        migrations.CreateModel(
            name="AttributeThreshold",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "points",
                    models.PositiveSmallIntegerField(
                        help_text="Scores this many points apart or more on this attribute go "
                        "to an adjudicator; empty the row to use the study's threshold.",
                        validators=[django.core.validators.MinValueValidator(1)],
                    ),
                ),
                (
                    "attribute",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="annotation.attribute",
                    ),
                ),
                (
                    "study",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="attribute_thresholds",
                        to="annotation.study",
                    ),
                ),
            ],
            options={
                "ordering": ["study", "attribute__position"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("study", "attribute"), name="attribute_threshold_once_per_study"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("points__gte", 1)),
                        name="attribute_threshold_at_least_one",
                    ),
                ],
            },
        ),
    ]
