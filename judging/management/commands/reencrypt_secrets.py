from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from annotation.services.webhooks import webhook_secrets_reencrypt
from judging.api_keys import endpoint_api_keys_reencrypt
from mentalbench.encryption import EncryptionError

# Lives in judging because judging may import annotation and not the other way round
# (pyproject.toml, import contracts): this one command re-encrypts both apps' secrets.


class Command(BaseCommand):
    help = (
        "Re-encrypt every secret stored in the database (model endpoints' API keys, webhooks' "
        "signing secrets) with the first key of MENTALBENCH_ENCRYPTION_KEYS: the last step of a "
        "key rotation; also encrypts a value stored in plain text (written around the platform, "
        "or a webhook secret migrated while no key was set). All or nothing."
    )

    def handle(self, *args, **options) -> None:
        problems: list[str] = []
        counts = {"keys": 0, "hooks": 0}
        try:
            # One transaction: when either kind cannot be read, neither is written.
            with transaction.atomic():
                for kind, reencrypt in (
                    ("keys", endpoint_api_keys_reencrypt),
                    ("hooks", webhook_secrets_reencrypt),
                ):
                    try:
                        counts[kind] = reencrypt()
                    except EncryptionError as exc:
                        problems.append(str(exc))
                if problems:
                    raise EncryptionError("; ".join(dict.fromkeys(problems)))
        except EncryptionError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            f"re-encrypted {counts['keys']} stored API key(s) and {counts['hooks']} webhook "
            "secret(s) with the first key of MENTALBENCH_ENCRYPTION_KEYS; older keys can now be "
            "removed from it"
        )
