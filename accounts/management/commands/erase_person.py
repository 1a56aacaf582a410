"""Erase a person's personal data on request (accounts.services.person_erase): their name,
e-mail, password, second factors, SSO links, API tokens and sign-in log go; their ratings stay
under their pseudonymous study codes. Recorded as an ErasureRecord."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from accounts.services import ErasureError, person_erase


class Command(BaseCommand):
    help = "Erase a person's personal data; their ratings stay under their study codes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", required=True, help="the account to erase")
        parser.add_argument("--reason", default="", help="e.g. the request's reference")
        parser.add_argument(
            "--yes", action="store_true", help="do it (without: say what would be erased)"
        )

    def handle(self, *args, username: str, reason: str, yes: bool, **options) -> None:
        user = get_user_model().objects.filter(username__iexact=username).first()
        if user is None:
            raise CommandError(f"no account named {username!r}")
        if not yes:
            self.stdout.write(
                f"Would erase account {user.pk} ({user.get_username()}): name, e-mail, "
                "password, second factors, SSO links, API tokens, sign-in log; its ratings "
                "stay under its study codes. Run again with --yes to erase."
            )
            return
        try:
            record = person_erase(user_id=user.pk, reason=reason)
        except ErasureError as exc:
            raise CommandError(str(exc)) from None
        removed = ", ".join(f"{n} {kind}" for kind, n in record.removed.items()) or "nothing else"
        self.stdout.write(f"Erased account {record.account_id}: {removed}.")
