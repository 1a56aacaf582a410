"""Runs stored as *done* before a run whose every item failed was marked *failed* keep saying
"Done" on their pages. They get the status and reason a run ending today would get: every item
failed (with the first reason), or the run had no item at all (such a run is refused at launch
now). A done run with at least one item done is left as it is.
"""

from django.db import migrations
from django.db.models import Count, Q


def done_without_success_to_failed(apps, schema_editor):
    Run = apps.get_model("judging", "Run")
    RunItem = apps.get_model("judging", "RunItem")
    runs = Run.objects.filter(status="done").annotate(
        done=Count("items", filter=Q(items__status="done")),
        failed=Count("items", filter=Q(items__status="failed")),
        total=Count("items"),
    )
    for run in runs.filter(done=0):
        if run.total and run.failed == run.total:
            first = (
                RunItem.objects.filter(run_id=run.pk, status="failed")
                .order_by("id")
                .values_list("last_error", flat=True)
                .first()
            )
            error = f"every item failed ({run.failed} of {run.total}); the first: {first}"
        elif not run.total:
            error = "the run had no item to work on (launched before such runs were refused)"
        else:
            continue  # items still open: not a settled run, nothing to correct
        Run.objects.filter(pk=run.pk).update(status="failed", error=error[:2000])


class Migration(migrations.Migration):
    dependencies = [
        ("judging", "0007_endpoint_enabled_and_unknown_prices"),
    ]

    operations = [
        # Backwards: the failed runs stay failed; that is what they were.
        migrations.RunPython(done_without_success_to_failed, migrations.RunPython.noop),
    ]
