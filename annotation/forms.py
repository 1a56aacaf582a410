from typing import Any, cast

from django import forms
from django.http import QueryDict

from mentalbench import encryption

from .models import (
    Adjudication,
    ClinicianCredentials,
    ClinicianSample,
    Escalation,
    Rater,
    Study,
    StudyMember,
    Webhook,
)


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
    new_study_kind = forms.ChoiceField(
        choices=Study.Kind.choices,
        required=False,
        initial=Study.Kind.RESPONSE_RATING,
        label="New study kind",
        help_text="for a new study: distortion labelling needs only a `context` column",
    )
    label_scheme = forms.ChoiceField(
        choices=Study.LabelScheme.choices,
        required=False,
        initial=Study.LabelScheme.RANKED,
        help_text="for a new distortion study (the paper's ranked or multi-label prompt)",
    )
    kind = forms.ChoiceField(choices=KINDS)
    judge_name = forms.CharField(
        required=False, max_length=200, help_text="for a judge workbook, e.g. claude-3.7-sonnet"
    )
    file = forms.FileField()

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())  # Form.clean returns cleaned_data
        if not data.get("study") and not (data.get("new_study") or "").strip():
            raise forms.ValidationError("Choose a study or name a new one.")
        if data.get("kind") == "judge" and not (data.get("judge_name") or "").strip():
            self.add_error("judge_name", "A judge workbook needs the judge's name.")
        return data


class ScoreSaveForm(forms.Form):
    """One autosave from the rating page: a score or the rationale of one response."""

    item = forms.CharField(max_length=32)
    attribute = forms.IntegerField(required=False)
    score = forms.IntegerField(required=False)
    rationale = forms.CharField(required=False, max_length=2000, strip=False)
    edited_ms = forms.IntegerField(required=False, min_value=0)

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())  # Form.clean returns cleaned_data
        if data.get("attribute") is not None and data.get("score") is None:
            raise forms.ValidationError("a score needs a value")
        if data.get("attribute") is None and "rationale" not in self.data:
            raise forms.ValidationError("send a score or a rationale")
        return data


class AdjudicationReasonForm(forms.Form):
    """An adjudication's reason, a code (Adjudication.Reason, or none yet) and words: the same
    on the score and the label adjudication pages."""

    reason = forms.CharField(required=False, max_length=32)
    reason_text = forms.CharField(required=False, max_length=2000)

    def clean_reason(self) -> str:
        reason = self.cleaned_data["reason"]
        if reason and reason not in Adjudication.Reason.values:
            raise forms.ValidationError(
                f"unknown reason {reason!r}; choose one of " + ", ".join(Adjudication.Reason.values)
            )
        return reason


class AdjudicationSaveForm(AdjudicationReasonForm):
    """One attribute's adjudication, as the adjudication page posts it (autosave or the form's
    own button). The score's range is the attribute's scale, which the service checks."""

    attribute = forms.IntegerField(min_value=1)
    score = forms.IntegerField(error_messages={"required": "choose a final score"})
    rubric_needs_change = forms.BooleanField(required=False)


class UnsafeForm(forms.Form):
    """A clinician's mark that one response is unsafe, or its withdrawal (the rating page's
    per-response form). The reason's emptiness is the service's to refuse, with its message."""

    item = forms.CharField(max_length=32)
    action = forms.ChoiceField(choices=[("mark", "mark"), ("withdraw", "withdraw")], required=False)
    reason = forms.CharField(required=False, max_length=2000)


class EscalationDecisionForm(forms.Form):
    """An adjudicator's decision on one escalation."""

    decision = forms.ChoiceField(
        choices=Escalation.Decision.choices,
        error_messages={"required": "choose a decision: confirmed unsafe or not unsafe"},
    )
    note = forms.CharField(max_length=2000, error_messages={"required": "say why, in the note"})


class LabelSaveForm(forms.Form):
    """One autosave from the labelling page: the whole selection (ranked or multi)."""

    dominant = forms.CharField(required=False, max_length=100)
    secondary = forms.CharField(required=False, max_length=100)
    edited_ms = forms.IntegerField(required=False, min_value=0)

    def __init__(self, *args, scheme: str, **kwargs):
        super().__init__(*args, **kwargs)
        self.scheme = scheme

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())  # Form.clean returns cleaned_data
        if self.scheme == Study.LabelScheme.RANKED:
            dominant, secondary = data.get("dominant") or "", data.get("secondary") or ""
            if secondary and not dominant:
                raise forms.ValidationError("choose the dominant label first")
            data["labels"] = [x for x in (dominant, secondary) if x]
        else:
            posted = cast(QueryDict, self.data)  # request.POST
            data["labels"] = [x for x in posted.getlist("labels") if x][:100]
        return data


class LabelAdjudicationForm(LabelSaveForm, AdjudicationReasonForm):
    """The label adjudication page's post (autosave or its own button): the labels as the
    labelling page posts them (ranked: dominant, secondary; multi: labels), a reason code and
    words. The labels' rules are the service's (labels_check)."""


class FlagForm(forms.Form):
    reason = forms.CharField(
        max_length=2000,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="e.g. distressing content, broken or empty responses",
    )


class AssignForm(forms.Form):
    study = forms.ModelChoiceField(queryset=Study.objects.all())
    clinicians: "forms.ModelMultipleChoiceField[Rater]" = forms.ModelMultipleChoiceField(
        queryset=None, widget=forms.CheckboxSelectMultiple
    )
    overlap = forms.IntegerField(
        min_value=1, initial=1, help_text="clinicians per overlapping conversation (e.g. 3)"
    )
    overlap_percent = forms.IntegerField(
        min_value=0,
        max_value=100,
        initial=0,
        help_text="% of conversations that get that many clinicians (100 = all)",
    )
    sample_only = forms.BooleanField(
        required=False,
        label="Only the study's clinician sample",
        help_text="assign just the conversations drawn below (the study's design)",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["clinicians"].queryset = Rater.objects.filter(
            kind=Rater.Kind.CLINICIAN, user__isnull=False
        )


class RaterChoiceForm(forms.Form):
    rater: "forms.ModelChoiceField[Rater]" = forms.ModelChoiceField(queryset=None)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["rater"].queryset = Rater.objects.filter(
            kind=Rater.Kind.CLINICIAN, user__isnull=False
        )


class InviteForm(forms.Form):
    username = forms.CharField(max_length=150)
    email = forms.EmailField(required=False)


class MemberAddForm(forms.Form):
    """The team page's form: an existing account, the role it gets in the study, its site."""

    username = forms.CharField(max_length=150, help_text="an existing account's username")
    role = forms.ChoiceField(choices=StudyMember.Role.choices, initial=StudyMember.Role.CLINICIAN)
    site = forms.CharField(
        max_length=200, required=False, help_text="hospital or site, for progress per site"
    )


class MemberInviteForm(forms.Form):
    """The team page's invitation: a new clinician account, e-mailed a set-password link."""

    username = forms.CharField(max_length=150, help_text="letters, digits and @/./+/-/_ only")
    email = forms.EmailField(help_text="the invitation goes here")
    site = forms.CharField(
        max_length=200, required=False, help_text="hospital or site, for progress per site"
    )

    def __init__(self, *args, **kwargs) -> None:
        # It shares the team page with MemberAddForm: ids of its own, one per element.
        kwargs.setdefault("auto_id", "id_invite_%s")
        super().__init__(*args, **kwargs)


class ThresholdsForm(forms.Form):
    """The team page's adjudication thresholds: the study's, and each attribute's own (blank: the
    study's). The range is the service's to check, so its message names the attribute."""

    study_threshold = forms.IntegerField(
        label="The study's threshold (points apart)",
        help_text="clinicians' scores this many points apart or more go to an adjudicator",
    )

    def __init__(self, *args, study: Study, **kwargs) -> None:
        kwargs.setdefault("auto_id", "id_threshold_%s")
        super().__init__(*args, **kwargs)
        own = dict(study.attribute_thresholds.values_list("attribute_id", "points"))
        self.fields["study_threshold"].initial = study.adjudication_threshold
        self.attribute_fields: list[tuple[int, str]] = []
        for attribute in study.rubric.attributes.order_by("position"):
            name = f"attribute_{attribute.pk}"
            self.fields[name] = forms.IntegerField(
                label=attribute.name, required=False, initial=own.get(attribute.pk)
            )
            self.attribute_fields.append((attribute.pk, name))

    def per_attribute(self) -> dict[int, int | None]:
        return {pk: self.cleaned_data.get(name) for pk, name in self.attribute_fields}


class ClinicianSampleForm(forms.Form):
    study = forms.ModelChoiceField(queryset=Study.objects.all(), widget=forms.HiddenInput)
    size = forms.IntegerField(
        min_value=1, help_text="conversations for clinicians to rate (e.g. 100 of 1,000)"
    )
    method = forms.ChoiceField(choices=ClinicianSample.Method.choices, initial="uniform")
    seed = forms.IntegerField(
        required=False,
        min_value=0,
        max_value=2**63 - 1,
        help_text="leave empty for a fresh random seed; it is stored with the sample",
    )


class AuditFilterForm(forms.Form):
    """The audit trail's filters (GET): every field optional; the page and its CSV downloads
    show the same changes."""

    study = forms.ModelChoiceField(
        queryset=Study.objects.all(), required=False, empty_label="all studies"
    )
    clinician: "forms.ModelChoiceField[Rater]" = forms.ModelChoiceField(
        queryset=None, required=False, empty_label="all clinicians"
    )
    conversation = forms.CharField(
        required=False, max_length=200, help_text="its id in the study, e.g. demo-3"
    )
    date_from = forms.DateField(
        required=False, label="From", widget=forms.DateInput(attrs={"type": "date"})
    )
    date_to = forms.DateField(
        required=False, label="To", widget=forms.DateInput(attrs={"type": "date"})
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["clinician"].queryset = Rater.objects.filter(
            kind=Rater.Kind.CLINICIAN
        ).order_by("name")

    def clean(self) -> dict[str, Any]:
        data = cast(dict[str, Any], super().clean())
        start, end = data.get("date_from"), data.get("date_to")
        if start and end and end < start:
            self.add_error("date_to", "The last day comes before the first.")
        data["conversation"] = (data.get("conversation") or "").strip()
        return data


class CredentialsForm(forms.ModelForm):
    class Meta:
        model = ClinicianCredentials
        fields = ["specialty", "years_in_practice", "licence", "conflicts_of_interest"]
        widgets = {"conflicts_of_interest": forms.Textarea(attrs={"rows": 3})}


class WebhookForm(forms.Form):
    url = forms.URLField(
        max_length=500,
        assume_scheme="https",
        help_text="where each event is POSTed as JSON (https in production)",
    )
    events = forms.MultipleChoiceField(
        choices=Webhook.Event.choices, widget=forms.CheckboxSelectMultiple
    )
    study = forms.ModelChoiceField(
        queryset=Study.objects.order_by("name"),
        required=False,
        empty_label="every study",
        help_text="only this study's events",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not encryption.encryption_configured():
            # Refused here rather than failing on save: the secret is never stored in plaintext.
            raise forms.ValidationError(
                "Webhook secrets are stored encrypted, but MENTALBENCH_ENCRYPTION_KEYS is not "
                "set on this server: set it (docs/security.md, Where secrets live) and register "
                "the webhook again."
            )
        return data
