"""Accounts: the username rule, creating an invited account, and set-password links.

Every app asks here (an invitation from annotation's admin or team pages, Django's user admin,
an account made by single sign-on), so this module imports no app: what an invitation adds
around the account (the clinician's Rater, a study membership, the e-mail) is annotation's
(`annotation.services.clinician_invite`).
"""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.contrib.auth.validators import UnicodeUsernameValidator
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from .roles import role_add, user_can_manage
from .tokens import password_token_generator
from .usernames import username_normalised, usernames_look_alike


def username_clean(*, username: str, renaming: int | None = None) -> str:
    """`username` stripped and checked, or ValueError saying why it cannot be a new account's.

    NFKC-normalised first (full-width letters and ligatures become plain ones: the name is
    stored so). Django's username rule (letters, digits and @ . + - _ only: no spaces, tabs or
    formula syntax), a letter or digit first (a name is shown in CSVs and admin lists, where a
    leading = + - @ is how a spreadsheet formula starts), at most 150 characters, unique without
    regard to case ("Admin" beside "admin" would be a second account that reads as the first),
    and not a look-alike of an existing name (accounts.usernames: "аdmin" with a Cyrillic
    "а", "clinicianl" beside "clinician1").
    `renaming` is the id of an account being renamed, which may keep its own name.
    """
    username = username_normalised(username)
    if not username:
        raise ValueError("a username is needed")
    User = get_user_model()
    max_length = 150  # auth.User.username
    if len(username) > max_length:
        raise ValueError(f"a username has at most {max_length} characters")
    try:
        UnicodeUsernameValidator()(username)
    except ValidationError:
        raise ValueError(
            f"the username {username!r} may hold only letters, digits and @ . + - _"
        ) from None
    if not username[0].isalnum():
        raise ValueError(f"the username {username!r} must start with a letter or a digit")
    same = User.objects.filter(**{f"{User.USERNAME_FIELD}__iexact": username})
    clash = (same if renaming is None else same.exclude(pk=renaming)).first()
    if clash is not None:
        taken = clash.get_username()
        raise ValueError(
            f"the username {username!r} is taken"
            + ("" if taken == username else f" (as {taken!r}: usernames ignore case)")
        )
    others = User.objects.all() if renaming is None else User.objects.exclude(pk=renaming)
    for other in others.values_list(User.USERNAME_FIELD, flat=True).iterator():
        if usernames_look_alike(username, other):
            raise ValueError(
                f"the username {username!r} reads like the existing username {other!r} "
                "(look-alike letters from another script, or digits that pass for letters)"
            )
    return username


@transaction.atomic
def user_create(*, username: str, email: str = "", role: str) -> User:
    """An invited account: `username` checked by `username_clean`, no usable password (the
    invitation's set-password link sets it), holding the platform-wide `role`."""
    username = username_clean(username=username)
    user = get_user_model()(username=username, email=email.strip())
    user.set_unusable_password()
    try:
        with transaction.atomic():
            user.save()
    except IntegrityError:
        # Another invite took the name (in any case) between the look above and this insert:
        # the database's unique index on LOWER(username) refused the second.
        raise ValueError(f"the username {username!r} was just taken") from None
    role_add(user=user, role=role)
    return user


def user_password_token_issue(*, actor: User, user: User) -> tuple[str, str]:
    """The (uidb64, token) pair of a one-time set-password link for `user`, issued by `actor`.

    Whoever holds the link can take the account over, so it is issued only for accounts the
    actor may manage (`roles.manageable_users`): an admin-group member never gets one for staff,
    a superuser or another admin. Issuing changes nothing yet; the token stops working once the
    password is set, after PASSWORD_RESET_TIMEOUT, and as soon as the account's rights change
    (`accounts.tokens`), so a link issued for a researcher cannot take over the account once it
    has been promoted.
    """
    if not user_can_manage(actor=actor, target=user):
        raise PermissionDenied(
            f"you may not issue a password link for {user.get_username()!r}: admin pages act only "
            "on accounts with fewer rights than your own"
        )
    return urlsafe_base64_encode(force_bytes(user.pk)), password_token_generator.make_token(user)
