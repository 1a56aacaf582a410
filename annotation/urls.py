from django.urls import path

from . import (
    adjudication_views,
    admin_views,
    calibration_views,
    label_adjudication_views,
    team_views,
    views,
    webhook_views,
)

app_name = "annotation"

urlpatterns = [
    path("imports/", views.import_upload, name="import_upload"),
    # Clinicians: everything is addressed by the assignment's opaque token.
    path("rate/", views.queue, name="queue"),
    path("rate/guidelines/", views.guidelines, name="guidelines"),  # before the token route
    path("rate/consent/<int:study_id>/", views.consent_page, name="consent"),
    path("rate/credentials/", views.credentials, name="credentials"),
    path("rate/adjudicated/", views.adjudication_feedback_page, name="adjudication_feedback"),
    path("rate/<str:token>/", views.rate, name="rate"),
    path("rate/<str:token>/save", views.save, name="save"),
    path("rate/<str:token>/labels", views.save_labels, name="save_labels"),
    path("rate/<str:token>/submit", views.submit, name="submit"),
    path("rate/<str:token>/flag", views.flag, name="flag"),
    path("rate/<str:token>/unsafe", views.unsafe, name="unsafe"),
    path("rate/<str:token>/heartbeat", views.heartbeat, name="heartbeat"),
    path("rate/<str:token>/feedback", calibration_views.feedback, name="practice_feedback"),
    # Adjudicators (of a study) and admins.
    path("adjudicate/", adjudication_views.index, name="adjudicate_index"),
    path("adjudicate/<int:study_id>/", adjudication_views.queue, name="adjudicate_queue"),
    path(
        "adjudicate/<int:study_id>/<int:response_id>/",
        adjudication_views.response_page,
        name="adjudicate",
    ),
    path(
        "adjudicate/<int:study_id>/escalations/<int:escalation_id>/",
        adjudication_views.escalation_decision,
        name="adjudicate_escalation",
    ),
    path(
        "adjudicate/<int:study_id>/labels/",
        label_adjudication_views.queue,
        name="adjudicate_labels_queue",
    ),
    path(
        "adjudicate/<int:study_id>/labels/<int:conversation_id>/",
        label_adjudication_views.message_page,
        name="adjudicate_labels",
    ),
    # Admins.
    path("manage/", admin_views.overview, name="manage"),
    path("manage/assign", admin_views.assign, name="manage_assign"),
    path("manage/sample", admin_views.sample_draw, name="manage_sample"),
    path("manage/assignments/<int:pk>/reassign", admin_views.reassign, name="manage_reassign"),
    path("manage/assignments/<int:pk>/reclaim", admin_views.reclaim, name="manage_reclaim"),
    path("manage/invite", admin_views.invite, name="manage_invite"),
    path("manage/users/<int:pk>/reset-link", admin_views.reset_link, name="manage_reset_link"),
    path("manage/audit/", admin_views.audit, name="manage_audit"),
    # A study's team: its platform admins and its leads.
    path("manage/studies/<int:study_id>/team/", team_views.team, name="manage_team"),
    path(
        "manage/studies/<int:study_id>/team/thresholds",
        team_views.thresholds,
        name="manage_team_thresholds",
    ),
    path(
        "manage/studies/<int:study_id>/team/invite",
        team_views.invite,
        name="manage_team_invite",
    ),
    path(
        "manage/studies/<int:study_id>/team/<int:member_id>/remove",
        team_views.member_remove,
        name="manage_team_remove",
    ),
    path("manage/training/", calibration_views.training, name="manage_training"),
    path("manage/top-up/", calibration_views.topup, name="manage_topup"),
    path("manage/time-on-task/", calibration_views.time_on_task, name="manage_time_on_task"),
    path("manage/webhooks/", webhook_views.webhooks, name="manage_webhooks"),
    path("manage/webhooks/<int:pk>/", webhook_views.webhook_detail, name="manage_webhook"),
    path(
        "manage/webhooks/<int:pk>/toggle",
        webhook_views.webhook_toggle,
        name="manage_webhook_toggle",
    ),
    path(
        "manage/webhooks/<int:pk>/delete",
        webhook_views.webhook_remove,
        name="manage_webhook_delete",
    ),
    # Invite and admin-issued reset links both land here to set a password.
    path(
        "accounts/set-password/<uidb64>/<token>/",
        admin_views.PasswordSetView.as_view(),
        name="password_set",
    ),
    path("accounts/set-password/done/", admin_views.password_set_done, name="password_set_done"),
    # In every e-mail the platform sends: stop them, without signing in.
    path("mail/unsubscribe/<str:token>/", views.unsubscribe, name="unsubscribe"),
]
