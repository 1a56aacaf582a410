from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Create the first admin (a superuser) from MENTALBENCH_ADMIN_USERNAME and "
        "MENTALBENCH_ADMIN_PASSWORD (optional MENTALBENCH_ADMIN_EMAIL). Does nothing when they are "
        "unset or the account exists; never changes an existing account's password. For an "
        "interactive prompt use `manage.py createsuperuser`."
    )

    def handle(self, *args, **options) -> None:
        username = settings.MENTALBENCH_ADMIN_USERNAME
        password = settings.MENTALBENCH_ADMIN_PASSWORD
        if not username and not password:
            self.stdout.write(
                "no first admin configured (MENTALBENCH_ADMIN_USERNAME/_PASSWORD unset); "
                "create one with: manage.py createsuperuser"
            )
            return
        if not username or not password:
            raise CommandError(
                "set both MENTALBENCH_ADMIN_USERNAME and MENTALBENCH_ADMIN_PASSWORD, or neither"
            )
        User = get_user_model()
        # Usernames are unique without regard to case (a database index): "Admin" is "admin".
        existing = User.objects.filter(username__iexact=username).first()
        if existing is not None:
            taken = existing.get_username()
            shown = repr(username) if taken == username else f"{username!r} (as {taken!r})"
            self.stdout.write(f"admin {shown} exists; left as it is")
            return
        user = User(username=username, email=settings.MENTALBENCH_ADMIN_EMAIL)
        try:
            # The same rules as every other password: a weak first admin is the easiest way in.
            validate_password(password, user)
        except ValidationError as error:
            raise CommandError(
                "MENTALBENCH_ADMIN_PASSWORD refused: " + " ".join(error.messages)
            ) from None
        user.is_staff = user.is_superuser = True
        user.set_password(password)
        user.save()
        self.stdout.write(f"created admin {username!r}")
