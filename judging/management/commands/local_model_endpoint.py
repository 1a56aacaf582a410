"""Register the local llama.cpp server (bin/local-model) as model endpoints."""

from django.core.management.base import BaseCommand, CommandError

from judging.local_model import DEFAULT_PORT, MODEL_ALIAS
from judging.services import RunError, local_endpoints_register


class Command(BaseCommand):
    help = (
        "Create or update the endpoints 'local SmolLM2-135M (llama.cpp)' (prompt-only) and "
        "'… (llama.cpp, structured)' pointing at a local llama.cpp server."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--base-url",
            default=f"http://127.0.0.1:{DEFAULT_PORT}/v1",
            help="the server's OpenAI-compatible base URL (default: %(default)s)",
        )
        parser.add_argument("--model", default=MODEL_ALIAS, help="model name sent to the server")

    def handle(self, *args, base_url: str, model: str, **options) -> None:
        try:
            endpoints = local_endpoints_register(base_url=base_url, model=model)
        except RunError as exc:
            raise CommandError(str(exc)) from None
        for endpoint in endpoints:
            self.stdout.write(f"endpoint {endpoint.name!r} → {endpoint.base_url}")
