from .reencrypt_secrets import Command as ReencryptSecrets


class Command(ReencryptSecrets):
    # The command's first name, kept so scripts and runbooks that call it still work.
    help = "The same as `manage.py reencrypt_secrets` (its former name). " + ReencryptSecrets.help
