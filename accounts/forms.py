from django import forms
from django.conf import settings


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
