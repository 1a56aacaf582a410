from typing import Any, cast

from django import forms
from django.conf import settings

from analysis.selectors import Filters, ReportParams
from annotation.analysed import FIRST, LATEST

BOOTSTRAP_CHOICES = [(200, "200 (quick look)"), (1000, "1,000 (paper)"), (5000, "5,000")]


class ReportFilterForm(forms.Form):
    """The dashboard's subset and parameters, read from the query string."""

    condition = forms.ChoiceField(required=False)
    source = forms.ChoiceField(required=False)
    clinician = forms.ChoiceField(required=False, help_text="human reference from one clinician")
    judge = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    as_published = forms.BooleanField(
        required=False, label="as published (count the release's 0/6 cells as scores)"
    )
    clinician_ratings = forms.ChoiceField(
        choices=[
            (FIRST, "first (default)"),
            (LATEST, "latest (a test-retest repeat where there is one)"),
        ],
        required=False,
        label="Clinician ratings",
    )
    bootstrap = forms.TypedChoiceField(
        choices=BOOTSTRAP_CHOICES,
        coerce=int,
        required=False,
        # django-stubs types empty_value as str | None; Django returns any value given here.
        empty_value=1000,  # type: ignore[arg-type]
        initial=1000,
    )
    seed = forms.IntegerField(required=False, min_value=0, max_value=2**31 - 1, initial=0)

    def __init__(
        self,
        *args: Any,
        choices: dict[str, list[str]],
        published_reading: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if not published_reading:
            # A switch that cannot change a number on this study is not offered (and an
            # as_published in the query string is ignored, as it would change nothing).
            del self.fields["as_published"]
        every = [("", "all")]
        fields = cast(dict[str, forms.ChoiceField], self.fields)  # the four below are
        fields["condition"].choices = every + [(c, c) for c in choices["conditions"]]
        fields["source"].choices = every + [(s, s) for s in choices["sources"]]
        fields["clinician"].choices = every + [(c, c) for c in choices["clinicians"]]
        fields["judge"].choices = [(j, j) for j in choices["judges"]]

    def filters(self) -> Filters:
        data = self.cleaned_data if self.is_valid() else {}
        return Filters(
            condition=data.get("condition") or None,
            source=data.get("source") or None,
            clinician=data.get("clinician") or None,
            judges=tuple(data["judge"]) if data.get("judge") else None,
            clinician_ratings=data.get("clinician_ratings") or FIRST,
        )

    def params(self) -> ReportParams:
        data = self.cleaned_data if self.is_valid() else {}
        return ReportParams(
            n_boot=data.get("bootstrap") or 1000,
            seed=data.get("seed") or 0,
            as_published=bool(data.get("as_published")),
        )


class ConsensusForm(forms.Form):
    """The distortion dashboard's consensus threshold: labels in at least k of N runs."""

    k = forms.IntegerField(
        required=False, min_value=1, max_value=100, label="k (runs a label needs)"
    )
    seed = forms.IntegerField(required=False, min_value=0, initial=0, label="split seed")


class KappaF1Form(forms.Form):
    KINDS = [
        ("", "detect from the file"),
        ("binary", "binary"),
        ("multiclass", "multi-class"),
        ("multilabel", "multi-label (cells separated by ; or |)"),
    ]
    file = forms.FileField(help_text="CSV with columns `true` and `predicted`")
    kind = forms.ChoiceField(choices=KINDS, required=False)

    def clean_file(self) -> Any:
        """Refuses a file over KAPPA_F1_MAX_FILE_BYTES from its size alone, before a byte of it
        is parsed (rows and labels are limited while reading, `read_predictions_csv`)."""
        upload = self.cleaned_data["file"]
        limit = settings.KAPPA_F1_MAX_FILE_BYTES
        if upload.size > limit:
            raise forms.ValidationError(
                f"{upload.name}: {upload.size:,} bytes, more than the {limit:,} a predictions "
                "file may have"
            )
        return upload

    labels = forms.CharField(
        required=False,
        max_length=2000,
        help_text="optional: the label set, comma-separated (every cell must use it)",
    )
    n_sim = forms.IntegerField(
        min_value=10, max_value=10000, initial=1000, label="simulated random assignments"
    )
    seed = forms.IntegerField(min_value=0, initial=0)

    def label_list(self) -> list[str] | None:
        names = [x.strip() for x in self.cleaned_data.get("labels", "").split(",") if x.strip()]
        return names or None
