"""Usernames are unique without regard to case, in the database too.

The invite form already refused "Tess" beside "tess" (so do allauth and Django's admin form), but
only by looking first: two invites at the same moment could both pass the look and create both.
An index on LOWER(username) makes the second one fail. LOWER is the same function on PostgreSQL
and SQLite (the embedded default), so one statement serves both.
"""

from django.db import migrations
from django.db.models import Count
from django.db.models.functions import Lower

INDEX = "accounts_username_lower_uniq"


def refuse_existing_clashes(apps, schema_editor):
    """Stop with the clashing names rather than a bare IntegrityError from CREATE INDEX."""
    User = apps.get_model("auth", "User")
    clashes = (
        User.objects.annotate(folded=Lower("username"))
        .values("folded")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .values_list("folded", flat=True)
    )
    groups = [
        sorted(User.objects.filter(username__iexact=folded).values_list("username", flat=True))
        for folded in clashes
    ]
    if groups:
        names = "; ".join(" / ".join(repr(name) for name in group) for group in groups)
        raise RuntimeError(
            f"usernames that differ only in case exist: {names}. Rename all but one of each "
            "(Django admin → Users) and run migrate again."
        )


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0003_token_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
    ]

    operations = [
        migrations.RunPython(refuse_existing_clashes, migrations.RunPython.noop),
        migrations.RunSQL(
            f"CREATE UNIQUE INDEX {INDEX} ON auth_user (LOWER(username))",
            f"DROP INDEX {INDEX}",
        ),
    ]
