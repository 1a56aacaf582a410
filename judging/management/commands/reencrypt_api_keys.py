from django.core.management.base import BaseCommand, CommandError

from judging.api_keys import ApiKeyError, endpoint_api_keys_reencrypt


class Command(BaseCommand):
    help = (
        "Re-encrypt every API key stored on a model endpoint with the first key of "
        "MENTALBENCH_ENCRYPTION_KEYS (the last step of a key rotation; also encrypts a key "
        "written in plain text around the platform). All or nothing."
    )

    def handle(self, *args, **options) -> None:
        try:
            count = endpoint_api_keys_reencrypt()
        except ApiKeyError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"re-encrypted {count} stored API key(s) with the first key of "
            "MENTALBENCH_ENCRYPTION_KEYS; older keys can now be removed from it"
        )
