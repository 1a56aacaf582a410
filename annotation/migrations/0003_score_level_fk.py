"""A score must be one of its attribute's levels: composite FK (attribute, value) → level.

Django has no composite foreign keys, so this is SQL, on PostgreSQL only (the SQLite demo relies
on the services' validation). Checked per statement, so a bad score fails where it is written;
DEFERRABLE leaves a migration the option of deferring it.
"""

from django.db import migrations


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "ALTER TABLE annotation_score ADD CONSTRAINT score_value_is_a_level "
        "FOREIGN KEY (attribute_id, value) "
        "REFERENCES annotation_attributelevel (attribute_id, value) "
        "DEFERRABLE INITIALLY IMMEDIATE"
    )


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "ALTER TABLE annotation_score DROP CONSTRAINT IF EXISTS score_value_is_a_level"
    )


class Migration(migrations.Migration):
    dependencies = [("annotation", "0002_initial")]

    operations = [migrations.RunPython(forwards, backwards)]
