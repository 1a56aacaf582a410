"""A score must be one of its attribute's levels: composite FK (attribute, value) → level.

Django has no composite foreign keys, so this is SQL, on PostgreSQL only (the SQLite demo relies
on the services' validation). DEFERRABLE like Django's own FKs, so cascading deletes of a rubric
(which remove scores and levels in one transaction) still work.
"""

from django.db import migrations


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(
        "ALTER TABLE annotation_score ADD CONSTRAINT score_value_is_a_level "
        "FOREIGN KEY (attribute_id, value) "
        "REFERENCES annotation_attributelevel (attribute_id, value) "
        "DEFERRABLE INITIALLY DEFERRED"
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
