"""Endpoints can be disabled; prices may be unset (NULL) instead of a made-up 0.

Until now a price field could not be empty, so 0.0 stood for "not set" (the batch prices said
so in their help text, and every endpoint created without prices held 0.0). Those zeros become
NULL: the estimate then uses the model's list price or says "price unknown", never "0.0 USD"
for a model that is not free. An admin whose model really is free sets 0 again.
"""

from django.db import migrations, models

PRICE_FIELDS = (
    "price_input_per_mtok",
    "price_output_per_mtok",
    "price_batch_input_per_mtok",
    "price_batch_output_per_mtok",
)


def zeros_to_unset(apps, schema_editor):
    ModelEndpoint = apps.get_model("judging", "ModelEndpoint")
    for name in PRICE_FIELDS:
        ModelEndpoint.objects.filter(**{name: 0.0}).update(**{name: None})


def unset_to_zeros(apps, schema_editor):
    ModelEndpoint = apps.get_model("judging", "ModelEndpoint")
    for name in PRICE_FIELDS:
        ModelEndpoint.objects.filter(**{f"{name}__isnull": True}).update(**{name: 0.0})


class Migration(migrations.Migration):
    dependencies = [
        ("judging", "0006_batch_mode_and_prices"),
    ]

    operations = [
        migrations.AddField(
            model_name="modelendpoint",
            name="enabled",
            field=models.BooleanField(
                default=True,
                help_text="offered for new runs (runs already launched keep their endpoint)",
            ),
        ),
        migrations.AlterField(
            model_name="modelendpoint",
            name="price_input_per_mtok",
            field=models.FloatField(
                blank=True,
                help_text="USD per 1M input tokens (blank: the list price, if known)",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="modelendpoint",
            name="price_output_per_mtok",
            field=models.FloatField(
                blank=True,
                help_text="USD per 1M output tokens (blank: the list price, if known)",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="modelendpoint",
            name="price_batch_input_per_mtok",
            field=models.FloatField(
                blank=True, help_text="USD per 1M input tokens in batch mode", null=True
            ),
        ),
        migrations.AlterField(
            model_name="modelendpoint",
            name="price_batch_output_per_mtok",
            field=models.FloatField(
                blank=True, help_text="USD per 1M output tokens in batch mode", null=True
            ),
        ),
        # Reversing writes 0.0 back where a price is unset (the old columns cannot hold NULL).
        migrations.RunPython(zeros_to_unset, unset_to_zeros),
    ]
