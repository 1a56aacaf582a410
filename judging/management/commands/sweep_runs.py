"""`manage.py sweep_runs [--every SECONDS]`: move on runs whose workers are gone.

Celery beat sends the same sweep (judging.tasks.runs_sweep) wherever bin/up or docker compose
run; this command is for a shell, e.g. to move runs on at once after a restart. A run it
restarts goes to the workers, like every run.
"""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import close_old_connections

from judging import services


class Command(BaseCommand):
    help = "Finalize or restart runs whose workers died (once, or every N seconds)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--every",
            type=float,
            default=None,
            metavar="SECONDS",
            help="keep sweeping every SECONDS (default: sweep once and exit); "
            f"bin/up uses JUDGING_SWEEP_SECONDS ({settings.JUDGING_SWEEP_SECONDS})",
        )

    def handle(self, *args: Any, every: float | None = None, **options: Any) -> None:
        if every is not None and every <= 0:
            raise CommandError(f"--every must be a positive number of seconds, got {every:g}")
        while True:
            swept = services.runs_sweep()
            if options["verbosity"] > 1 or any(swept.values()):
                self.stdout.write(
                    f"finalized runs {swept['finalized'] or '—'}; "
                    f"restarted runs {swept['restarted'] or '—'}"
                )
            if every is None:
                return
            close_old_connections()
            time.sleep(every)
