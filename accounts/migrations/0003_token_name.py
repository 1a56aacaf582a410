import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0002_sign_in_log"),
        ("knox", "0009_extend_authtoken_field"),
    ]

    operations = [
        migrations.CreateModel(
            name="TokenName",
            fields=[
                (
                    "token",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="token_name",
                        serialize=False,
                        to="knox.authtoken",
                    ),
                ),
                ("name", models.CharField(max_length=64)),
            ],
        ),
    ]
