from django import forms

from .models import Study


class ImportForm(forms.Form):
    KINDS = [
        ("conversations", "Conversations + responses (MentalBench CSV / JSONL)"),
        ("human", "MentalAlign-70k clinicians' workbook (.xlsx)"),
        ("judge", "MentalAlign-70k judge workbook (.xlsx)"),
    ]
    study = forms.ModelChoiceField(
        queryset=Study.objects.all(), required=False, help_text="an existing study…"
    )
    new_study = forms.CharField(required=False, max_length=200, help_text="…or a new study name")
    kind = forms.ChoiceField(choices=KINDS)
    judge_name = forms.CharField(
        required=False, max_length=200, help_text="for a judge workbook, e.g. claude-3.7-sonnet"
    )
    file = forms.FileField()

    def clean(self) -> dict:
        data = super().clean()
        if not data.get("study") and not (data.get("new_study") or "").strip():
            raise forms.ValidationError("Choose a study or name a new one.")
        if data.get("kind") == "judge" and not (data.get("judge_name") or "").strip():
            self.add_error("judge_name", "A judge workbook needs the judge's name.")
        return data
