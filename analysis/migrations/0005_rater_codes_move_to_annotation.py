"""Clinicians' study codes move to annotation, which hands them out when a clinician joins a
study (annotation/rater_codes.py); analysis only reads them now.

No row moves: the table keeps its name (annotation.RaterCode has db_table "analysis_ratercode")
and only Django's idea of which app owns the model changes (annotation's 0021 takes it over).
The permission to see clinicians' identities stays analysis's (analysis.view_clinician_identities)
and moves to the export log, which audits its use; its row is re-pointed rather than recreated,
so every grant of it stays. The model's content type is renamed to annotation's, so its admin
permissions and the admin log keep pointing at it.
"""

from django.db import migrations

PERMISSION = "view_clinician_identities"


def codes_handed_over(apps, schema_editor):
    db = schema_editor.connection.alias
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    old = ContentType.objects.using(db).filter(app_label="analysis", model="ratercode").first()
    if old is None:
        return  # a new database: post_migrate creates the content types and permissions
    log, _ = ContentType.objects.using(db).get_or_create(app_label="analysis", model="exportlog")
    Permission.objects.using(db).filter(content_type=old, codename=PERMISSION).update(
        content_type=log
    )
    if not ContentType.objects.using(db).filter(app_label="annotation", model="ratercode").exists():
        old.app_label = "annotation"
        old.save(update_fields=["app_label"])


def codes_handed_back(apps, schema_editor):
    db = schema_editor.connection.alias
    ContentType = apps.get_model("contenttypes", "ContentType")
    Permission = apps.get_model("auth", "Permission")
    moved = ContentType.objects.using(db).filter(app_label="annotation", model="ratercode").first()
    if moved is None:
        return
    if not ContentType.objects.using(db).filter(app_label="analysis", model="ratercode").exists():
        moved.app_label = "analysis"
        moved.save(update_fields=["app_label"])
    Permission.objects.using(db).filter(
        content_type__app_label="analysis", content_type__model="exportlog", codename=PERMISSION
    ).update(content_type=moved)


class Migration(migrations.Migration):
    dependencies = [
        ("analysis", "0004_job_kind_report"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="exportlog",
            options={
                "ordering": ["-created_at"],
                "permissions": [
                    (
                        "view_clinician_identities",
                        "Can see clinicians' names, drafts and exact times (audited)",
                    )
                ],
            },
        ),
        migrations.RunPython(codes_handed_over, codes_handed_back),
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="RaterCode")],
            database_operations=[],
        ),
    ]
