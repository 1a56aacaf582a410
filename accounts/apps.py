from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts, sign-in log and API tokens"

    def ready(self) -> None:
        from . import signals  # noqa: F401  (registers the sign-in log's receivers)
