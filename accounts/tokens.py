"""The one token generator for every link that sets a password (an admin's set-password link,
"Forgot password" by e-mail).

Django's password-reset token is invalidated by a new password, a sign-in and a changed e-mail,
but not by a change of rights: a link issued for a researcher would still set the password after
a superuser made that researcher staff, handing the holder of an old link a staff account. So the
hash here also covers what the account may do (staff, superuser, active, its groups and direct
permissions, and its study roles beyond rating: lead, researcher, adjudicator): any change of
rights voids every link issued before it. Joining a study as a clinician is not such a change
(giving work does it), so an invitation's link survives the first assignment.

It imports no app (annotation issues links through it): the study roles are read through the
user's reverse relation to annotation's StudyMember, `study_memberships`.
"""

from django.contrib.auth.tokens import PasswordResetTokenGenerator

#: The study role that rates (annotation's StudyMember.Role.CLINICIAN): it grants no rights.
RATING_STUDY_ROLE = "clinician"


def privileges_fingerprint(user) -> str:
    """What the account may do, as text that changes whenever its rights change."""
    groups = sorted(user.groups.values_list("pk", flat=True))
    permissions = sorted(user.user_permissions.values_list("pk", flat=True))
    study_roles = sorted(
        user.study_memberships.exclude(role=RATING_STUDY_ROLE).values_list("study_id", "role")
    )
    return (
        f"staff={int(user.is_staff)};superuser={int(user.is_superuser)};"
        f"active={int(user.is_active)};groups={groups};permissions={permissions};"
        f"study_roles={study_roles}"
    )


class PrivilegeBoundTokenGenerator(PasswordResetTokenGenerator):
    # The salt names the module it was first defined in: changing it would void every link
    # already issued (invitations in flight included).
    key_salt = "mentalbench.annotation.tokens.PrivilegeBoundTokenGenerator"

    def _make_hash_value(self, user, timestamp: int) -> str:
        return super()._make_hash_value(user, timestamp) + "|" + privileges_fingerprint(user)


password_token_generator = PrivilegeBoundTokenGenerator()
