from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0007_study_rationale_rule"),
    ]

    operations = [
        migrations.AddField(
            model_name="assignment",
            name="part",
            field=models.PositiveSmallIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="assignmentitem",
            name="earlier",
            field=models.BooleanField(default=False),
        ),
        migrations.RemoveConstraint(
            model_name="assignment",
            name="assignment_unique_rater_conversation_kind",
        ),
        migrations.AddConstraint(
            model_name="assignment",
            constraint=models.UniqueConstraint(
                fields=("rater", "conversation", "kind", "part"),
                name="assignment_unique_rater_conversation_kind_part",
            ),
        ),
    ]
