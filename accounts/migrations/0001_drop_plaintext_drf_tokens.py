"""API tokens used to be DRF's authtoken rows, which keep the raw token in the database. They are
now knox tokens (only a SHA-512 digest is stored); the old table and every raw token in it go.
Researchers create new tokens on their tokens page."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("knox", "0009_extend_authtoken_field")]

    operations = [
        migrations.RunSQL("DROP TABLE IF EXISTS authtoken_token", migrations.RunSQL.noop),
    ]
