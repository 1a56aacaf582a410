from allauth.account.adapter import get_adapter
from allauth.account.forms import ResetPasswordForm
from django import forms
from django.conf import settings
from django.http import HttpRequest


def _day_choices() -> list[tuple[int, str]]:
    days = sorted({7, 30, 90, 365, settings.API_TOKEN_DAYS} - {0})
    return [(d, f"{d} days") for d in days if d <= settings.API_TOKEN_MAX_DAYS]


class TokenCreateForm(forms.Form):
    name = forms.CharField(
        max_length=64,
        required=False,
        label="Name",
        help_text="What the token is for, e.g. “analysis notebook”: shown in your list of tokens.",
    )
    days = forms.TypedChoiceField(coerce=int, label="Valid for", choices=_day_choices)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["days"].initial = settings.API_TOKEN_DAYS


class PasswordResetRequestForm(ResetPasswordForm):
    """The "Forgot password?" form: the address only, handed to a task (ACCOUNT_FORMS).

    allauth's form looked the address up while the browser waited and sent the e-mail (a link,
    or "no such account") from the request, so a known address was answered measurably later
    than an unknown one. This one does the same, constant work for every address: it queues
    accounts.tasks.password_reset_mail_send, where a worker looks the account up and sends.
    """

    def clean_email(self) -> str:
        email: str = get_adapter().clean_email(self.cleaned_data["email"].strip().lower())
        return email

    def save(self, request: HttpRequest, **kwargs) -> str:
        from .tasks import password_reset_mail_send

        email: str = self.cleaned_data["email"]
        # Sent at once, not on commit: the request writes nothing a worker would need to see.
        password_reset_mail_send.delay(email=email)
        return email
