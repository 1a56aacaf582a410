from django import forms

from .models import Rater


class CalibrationSettingsForm(forms.Form):
    pass_mean_abs_diff = forms.FloatField(
        min_value=0, label="Pass: mean absolute difference at most", initial=0.75
    )
    pass_max_diff = forms.IntegerField(
        min_value=1, label="Pass: no score this far or further from the reference", initial=2
    )
    retest_count = forms.IntegerField(
        min_value=0, max_value=100, label="Repeats per clinician (0: none)", initial=0
    )
    retest_gap = forms.IntegerField(
        min_value=1, max_value=1000, label="Other conversations before a repeat", initial=3
    )


class PracticeMarkForm(forms.Form):
    conversations = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="conversation ids in the study, separated by commas or new lines",
    )


class ReferenceCsvForm(forms.Form):
    file = forms.FileField(help_text="CSV with the header conversation,responder,attribute,score")


class ClinicianChoiceForm(forms.Form):
    # Checkboxes, as everywhere on /manage/ (a multiple select needs Ctrl-click).
    clinicians = forms.ModelMultipleChoiceField(
        queryset=Rater.objects.none(), widget=forms.CheckboxSelectMultiple
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["clinicians"].queryset = Rater.objects.filter(
            kind=Rater.Kind.CLINICIAN, user__isnull=False
        ).order_by("name")


class RaterForm(forms.Form):
    rater = forms.ModelChoiceField(queryset=Rater.objects.filter(kind=Rater.Kind.CLINICIAN))
