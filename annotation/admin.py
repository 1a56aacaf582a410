from typing import Any, cast

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from .models import (
    Adjudication,
    Assignment,
    AssignmentChange,
    AssignmentItem,
    Attribute,
    AttributeLevel,
    AttributeThreshold,
    CalibrationSettings,
    ClinicianCredentials,
    ClinicianSample,
    ConsentRecord,
    ConsentText,
    Conversation,
    DistortionLabel,
    Escalation,
    ImportLog,
    LabelAdjudication,
    LabelAnnotation,
    LabelChange,
    MailPreference,
    MailSent,
    Rater,
    RaterCode,
    Rating,
    RatingChange,
    ReferenceScore,
    Responder,
    Response,
    Rubric,
    Score,
    Study,
    StudyMember,
    TrainingOutcome,
    Webhook,
    WebhookDelivery,
)
from .selectors import (
    conversation_has_work,
    rater_has_work,
    responder_has_responses,
    rubric_in_use,
    study_has_work,
)
from .services.consent import consent_text_publish


class ViewOnlyAdmin(admin.ModelAdmin):
    """Shown, never edited here: ratings, labels and assignments change only through the
    services (autosave, submit, judge runs, imports, /manage/), which lock the assignment and
    write the audit trail — an edit in the admin would do neither; audit logs are append-only."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class ViewOnlyInline(admin.TabularInline):
    extra = 0
    can_delete = False

    def get_readonly_fields(self, request, obj=None) -> list[str]:
        # Every field is shown read-only, so a listed field Django cannot put in a form (an
        # auto_now_add time such as changed_at) is displayed instead of failing the page.
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class _LockedOnceUsed:
    """`locked` fields shown read-only once `used(obj)`: what stored ratings and labels were
    given on (a response's text, a rater's account, a rubric's scale) is no longer edited."""

    locked: tuple[str, ...] = ()

    def used(self, obj) -> bool:
        raise NotImplementedError

    def get_readonly_fields(self, request, obj=None):
        fields = list(cast(Any, super()).get_readonly_fields(request, obj))
        return [*fields, *self.locked] if obj is not None and self.used(obj) else fields


class _FixedOnceUsed(_LockedOnceUsed):
    """Also, once `used(obj)`, not deleted and, for an inline (whose obj is the page's parent),
    no row added: ratings cascade with a response, so deleting a rated one would delete them
    too, and a new response or attribute would change what was rated. A model admin's own add
    page has no object yet to ask; where that matters its form checks (AttributeAdminForm)."""

    def has_add_permission(self, request, obj=None) -> bool:
        parent = cast(Any, super())
        if not isinstance(self, admin.options.InlineModelAdmin):
            return bool(parent.has_add_permission(request))
        if obj is not None and self.used(obj):
            return False
        return bool(parent.has_add_permission(request, obj))

    def has_delete_permission(self, request, obj=None) -> bool:
        if obj is not None and self.used(obj):
            return False
        return bool(cast(Any, super()).has_delete_permission(request, obj))


class _NoBulkDelete:
    """No "delete selected" action: it asks each object's has_delete_permission nothing, so a
    locked object (rated, in use) would go with the others. One at a time, each is asked."""

    def get_actions(self, request):
        actions = cast(Any, super()).get_actions(request)
        actions.pop("delete_selected", None)
        return actions


# A rubric in use (scores exist on it) keeps its meaning: its name, scale, attributes (name,
# group, position) and level values are shown read-only, none is added or deleted; descriptions
# and anchor texts may still be corrected. A changed rubric is a new rubric. annotation.selectors
# .rubric_in_use says why.


def _in_use(rubric: Rubric | None) -> bool:
    return rubric is not None and rubric_in_use(rubric_id=rubric.pk)


class _LockedWhenInUse(_FixedOnceUsed):
    """For an admin (or inline) of a rubric's parts: `locked` fields read-only, no add or
    delete, once the rubric is in use. `rubric_of(obj)` finds the rubric from the page's object."""

    def rubric_of(self, obj) -> Rubric | None:
        raise NotImplementedError

    def used(self, obj) -> bool:
        return _in_use(self.rubric_of(obj))


class AttributeLevelInline(_LockedWhenInUse, admin.TabularInline):
    model = AttributeLevel
    extra = 0
    locked = ("value",)

    def rubric_of(self, obj: Attribute | None) -> Rubric | None:
        return obj.rubric if obj is not None else None


class AttributeAdminForm(forms.ModelForm):
    def clean_rubric(self) -> Rubric:
        rubric = self.cleaned_data["rubric"]
        if self.instance.pk is None and _in_use(rubric):
            raise forms.ValidationError(
                f"Rubric {rubric.name!r} has scores: its attributes are fixed. Create a new "
                "rubric for a study that needs another attribute."
            )
        return rubric


@admin.register(Attribute)
class AttributeAdmin(_NoBulkDelete, _LockedWhenInUse, admin.ModelAdmin):
    list_display = ["name", "rubric", "group", "position"]
    list_filter = ["rubric", "group"]
    inlines = [AttributeLevelInline]
    form = AttributeAdminForm
    locked = ("rubric", "name", "group", "position")

    def rubric_of(self, obj: Attribute | None) -> Rubric | None:
        return obj.rubric if obj is not None else None


class AttributeInline(_LockedWhenInUse, admin.TabularInline):
    model = Attribute
    extra = 0
    show_change_link = True
    locked = ("name", "group", "position")

    def rubric_of(self, obj: Rubric | None) -> Rubric | None:
        return obj


@admin.register(Rubric)
class RubricAdmin(_LockedWhenInUse, admin.ModelAdmin):
    list_display = ["name", "scale_min", "scale_max", "created_at"]
    inlines = [AttributeInline]
    locked = ("name", "scale_min", "scale_max")

    def rubric_of(self, obj: Rubric | None) -> Rubric | None:
        return obj


class DistortionLabelInline(ViewOnlyInline):
    """Shown, not edited here: stored labels name these entries (see distortion_labels_set)."""

    model = DistortionLabel
    fields = ["position", "name", "prompt_label", "definition", "example"]


class StudyMemberInline(admin.TabularInline):
    """The study's team: who holds which role in it, and at which site (docs/membership.md)."""

    model = StudyMember
    extra = 0
    fields = ["user", "role", "site", "created_at"]
    readonly_fields = ["created_at"]
    autocomplete_fields = ["user"]


class AttributeThresholdInline(admin.TabularInline):
    """The study's adjudication threshold per attribute, where one differs from the study's
    (docs/adjudication.md); only the study's own rubric's attributes can be chosen."""

    model = AttributeThreshold
    extra = 0
    fields = ["attribute", "points"]
    verbose_name = "adjudication threshold of one attribute"
    verbose_name_plural = "adjudication thresholds per attribute (others use the study's)"

    def get_formset(self, request: HttpRequest, obj: Study | None = None, **kwargs: Any) -> Any:
        self._study = obj
        return super().get_formset(request, obj, **kwargs)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "attribute":
            study = getattr(self, "_study", None)
            kwargs["queryset"] = (
                Attribute.objects.filter(rubric_id=study.rubric_id)
                if study is not None
                else Attribute.objects.none()
            )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(Study)
class StudyAdmin(_LockedOnceUsed, admin.ModelAdmin):
    list_display = [
        "name", "kind", "label_scheme", "rubric", "text_policy", "created_at", "import_link",
    ]  # fmt: skip
    list_filter = ["kind"]
    search_fields = ["name"]
    inlines = [StudyMemberInline, AttributeThresholdInline, DistortionLabelInline]

    # Scores and labels were given on this rubric and kind of study: switching either under
    # them would make the analyses read them against another rubric or scheme.
    locked = ("kind", "label_scheme", "rubric")

    def used(self, obj: Study) -> bool:
        return study_has_work(study_id=obj.pk)

    @admin.display(description="import")
    def import_link(self, obj: Study) -> str:
        return format_html(
            '<a href="{}?study={}">Import data…</a>', reverse("annotation:import_upload"), obj.pk
        )


class ResponseInline(_FixedOnceUsed, admin.TabularInline):
    """On a conversation with ratings or labels the responses are what was rated: shown, not
    edited, added or deleted (deleting one would delete its ratings with it)."""

    model = Response
    extra = 0
    fields = ["responder", "text", "truncated"]
    raw_id_fields = ["responder"]
    locked = ("responder", "text", "truncated")

    def used(self, obj: Conversation) -> bool:
        return conversation_has_work(conversation_id=obj.pk)


@admin.register(Conversation)
class ConversationAdmin(_NoBulkDelete, _FixedOnceUsed, admin.ModelAdmin):
    list_display = ["external_id", "study", "source", "conditions", "created_at"]
    list_filter = ["study", "source"]
    search_fields = ["external_id", "context"]
    list_select_related = ["study"]
    inlines = [ResponseInline]
    # What clinicians read and whether it counted: fixed once rated. Conditions and source
    # (metadata for filters) stay editable.
    locked = ("study", "external_id", "context", "practice")

    def used(self, obj: Conversation) -> bool:
        return conversation_has_work(conversation_id=obj.pk)


@admin.register(Responder)
class ResponderAdmin(_LockedOnceUsed, admin.ModelAdmin):
    list_display = ["key", "name", "family", "is_reference"]
    list_editable = ["family"]
    search_fields = ["key", "name", "family"]
    # Judges' exclusions, exports and re-imports name responders by key.
    locked = ("key", "is_reference")

    def used(self, obj: Responder) -> bool:
        return responder_has_responses(responder_id=obj.pk)


@admin.register(Response)
class ResponseAdmin(_NoBulkDelete, _FixedOnceUsed, admin.ModelAdmin):
    list_display = ["id", "conversation", "responder", "truncated", "created_at"]
    list_filter = ["responder", "truncated", "conversation__study"]
    raw_id_fields = ["conversation"]
    list_select_related = ["conversation__study", "responder"]
    locked = ("conversation", "responder", "text", "truncated")

    def used(self, obj: Response) -> bool:
        return conversation_has_work(conversation_id=obj.conversation_id)


@admin.register(Rater)
class RaterAdmin(_LockedOnceUsed, admin.ModelAdmin):
    list_display = ["name", "kind", "user", "model", "family", "excluded_responders"]
    list_filter = ["kind"]
    search_fields = ["name", "model"]
    # A rater's work stays theirs: another account, or a clinician turned judge, would own it.
    locked = ("kind", "user")

    def used(self, obj: Rater) -> bool:
        return rater_has_work(rater_id=obj.pk)


@admin.register(RaterCode)
class RaterCodeAdmin(ViewOnlyAdmin):
    """Which clinician is behind which study code (staff only: Django's admin admits no one
    else). Codes are given when a clinician joins a study and never edited: they stay stable."""

    list_display = ["study", "code", "rater"]
    list_filter = ["study"]
    search_fields = ["code", "rater__name", "study__name"]
    list_select_related = ["study", "rater"]


class AssignmentItemInline(ViewOnlyInline):
    model = AssignmentItem


@admin.register(Assignment)
class AssignmentAdmin(ViewOnlyAdmin):
    """Assign, reassign and reclaim at /manage/ (they keep started work from moving silently)."""

    list_display = [
        "id",
        "rater",
        "conversation",
        "kind",
        "part",
        "status",
        "active_seconds",
        "last_activity_at",
        "submitted_at",
    ]
    list_filter = ["status", "kind", "conversation__study", "rater"]
    list_select_related = ["rater", "conversation__study"]
    inlines = [AssignmentItemInline]


class ScoreInline(ViewOnlyInline):
    model = Score


class RatingChangeInline(ViewOnlyInline):
    model = RatingChange


@admin.register(Rating)
class RatingAdmin(ViewOnlyAdmin):
    list_display = ["id", "rater", "response", "run", "repeat", "status", "source", "updated_at"]
    list_filter = ["status", "source", "rater"]
    list_select_related = ["rater", "response__conversation__study", "response__responder"]
    inlines = [ScoreInline, RatingChangeInline]


@admin.register(RatingChange)
class RatingChangeAdmin(ViewOnlyAdmin):
    list_display = [
        "rating",
        "attribute",
        "field",
        "old_value",
        "new_value",
        "changed_by",
        "changed_at",
    ]
    list_filter = ["field"]


class LabelChangeInline(ViewOnlyInline):
    model = LabelChange
    fields = ["field", "old_value", "new_value", "changed_by", "changed_at"]


@admin.register(LabelAnnotation)
class LabelAnnotationAdmin(ViewOnlyAdmin):
    list_display = [
        "id", "rater", "conversation", "run", "repeat", "status", "source", "labels", "updated_at",
    ]  # fmt: skip
    list_filter = ["status", "source", "rater"]
    list_select_related = ["rater", "conversation__study"]
    inlines = [LabelChangeInline]


@admin.register(ImportLog)
class ImportLogAdmin(ViewOnlyAdmin):
    list_display = ["created_at", "study", "kind", "file_name", "summary", "created_by"]
    list_filter = ["kind", "study"]


# Training, repeats and top-ups change through /manage/training/ and /manage/top-up/ (services
# validate reference scores against the scale and audit what they change): view-only here.
@admin.register(CalibrationSettings)
class CalibrationSettingsAdmin(ViewOnlyAdmin):
    list_display = ["study", "pass_mean_abs_diff", "pass_max_diff", "retest_count", "retest_gap"]


@admin.register(ReferenceScore)
class ReferenceScoreAdmin(ViewOnlyAdmin):
    list_display = ["response", "attribute", "value", "set_by", "set_at"]
    list_select_related = ["response__conversation__study", "response__responder", "attribute"]


@admin.register(Adjudication)
class AdjudicationAdmin(ViewOnlyAdmin):
    # Written on the adjudication pages only, where the responder is never shown; here, as for
    # every stored score, admins see the record whole.
    list_display = ["study", "response", "attribute", "final_score", "reason", "adjudicator"]
    list_filter = ["study", "reason", "rubric_needs_change"]
    list_select_related = [
        "study",
        "response__conversation__study",
        "response__responder",
        "attribute",
        "adjudicator",
    ]


@admin.register(Escalation)
class EscalationAdmin(ViewOnlyAdmin):
    # Written on the rating and adjudication pages only (with their locks and audit trail).
    list_display = ["study", "response", "rater", "status", "decision", "created_at"]
    list_filter = ["study", "status", "decision"]
    list_select_related = [
        "study",
        "response__conversation__study",
        "response__responder",
        "rater",
    ]


@admin.register(TrainingOutcome)
class TrainingOutcomeAdmin(ViewOnlyAdmin):
    list_display = ["study", "rater", "passed", "mean_abs_diff", "max_diff", "decided_by"]
    list_filter = ["study", "passed"]


@admin.register(AssignmentChange)
class AssignmentChangeAdmin(ViewOnlyAdmin):
    list_display = ["assignment", "field", "old_value", "new_value", "changed_by", "changed_at"]
    list_select_related = ["assignment__rater", "assignment__conversation__study", "changed_by"]


# The clinicians' sample is drawn on /manage/ (the service records its seed and population):
# view-only here, so a stored design is never edited after estimates were made with it.
@admin.register(ClinicianSample)
class ClinicianSampleAdmin(ViewOnlyAdmin):
    list_display = ["study", "method", "size", "population", "seed", "created_by", "created_at"]
    list_filter = ["study", "method"]
    exclude = ["conversations"]  # hundreds of ids; the release and the page list them


# E-mail is sent by the upkeep worker and recorded once; a person's answer to the unsubscribe
# link is theirs: both view-only here.
@admin.register(MailSent)
class MailSentAdmin(ViewOnlyAdmin):
    list_display = ["sent_at", "kind", "user", "study", "subject"]
    list_filter = ["kind", "study"]


@admin.register(MailPreference)
class MailPreferenceAdmin(ViewOnlyAdmin):
    list_display = ["user", "unsubscribed_at"]


# A published consent text is what clinicians agreed to: never edited or deleted here. A new
# version is added (numbered by consent_text_publish) and every clinician accepts it again.
@admin.register(ConsentText)
class ConsentTextAdmin(admin.ModelAdmin):
    list_display = ["study", "version", "on_withdrawal", "created_at"]
    list_filter = ["study"]
    fields = ["study", "text", "on_withdrawal"]

    def has_change_permission(self, request, obj=None) -> bool:
        return obj is None and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def save_model(self, request, obj, form, change) -> None:
        published = consent_text_publish(
            study=obj.study, text=obj.text, on_withdrawal=obj.on_withdrawal, actor=request.user
        )
        obj.pk, obj.version, obj.created_at = published.pk, published.version, published.created_at


@admin.register(ConsentRecord)
class ConsentRecordAdmin(ViewOnlyAdmin):
    list_display = ["consent_text", "rater", "accepted_at", "withdrawn_at", "ratings_removed"]
    list_filter = ["consent_text__study"]


@admin.register(ClinicianCredentials)
class ClinicianCredentialsAdmin(admin.ModelAdmin):
    """Entered by the clinician (/rate/credentials/) or here by an admin."""

    list_display = ["rater", "specialty", "years_in_practice", "updated_at"]
    raw_id_fields = ["rater"]


@admin.register(Webhook)
class WebhookAdmin(ViewOnlyAdmin):
    """Registered and changed on /manage/webhooks/ (the secret is shown once there, never here)."""

    list_display = ["url", "study", "enabled", "created_by", "created_at"]
    exclude = ["secret"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ViewOnlyAdmin):
    list_display = ["created_at", "event", "webhook", "status", "attempts", "last_status_code"]
    list_filter = ["status", "event"]


@admin.register(LabelAdjudication)
class LabelAdjudicationAdmin(ViewOnlyAdmin):
    # Written on the label adjudication pages only (the labelling rules and the dispute check
    # live in the service): view-only here.
    list_display = ["study", "conversation", "labels", "reason", "adjudicator", "updated_at"]
    list_filter = ["study", "reason"]
    list_select_related = ["study", "conversation__study", "adjudicator"]
