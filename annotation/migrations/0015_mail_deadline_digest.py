from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("annotation", "0014_study_members"),
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
                ],
                max_length=16,
            ),
        ),
    ]
