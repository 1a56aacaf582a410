"""Django's createsuperuser, refusing a username that differs from a taken one only in case.

Usernames are unique without regard to case (an index on LOWER(username)); Django's own check
looks for the exact name only, so "Admin" beside "admin" passed it and then failed inside the
database with a bare IntegrityError. Here it gets the same answer as an exact clash: asked again
at the prompt, or a clear error with --noinput.
"""

from django.contrib.auth.management.commands import createsuperuser


class Command(createsuperuser.Command):
    def _validate_username(self, username, verbose_field_name, database):
        error = super()._validate_username(username, verbose_field_name, database)
        if error or not username:
            return error
        manager = self.UserModel._default_manager.db_manager(database)
        field = self.UserModel.USERNAME_FIELD
        taken = manager.filter(**{f"{field}__iexact": username}).values_list(field, flat=True)
        if taken:
            return f"Error: that {verbose_field_name} is already taken (as {taken[0]!r})."
        return None
