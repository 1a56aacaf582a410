"""Start-up cost: the LLM SDKs and scipy.stats are imported where they are used, not by every
process (management commands, web and worker processes all load the apps' modules)."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # each test starts `manage.py` processes

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("openai", "anthropic", "scipy")

PROBE = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mentalbench.settings")
import django
django.setup()
from django.core.management import call_command
call_command("check")
import judging.providers, analysis.stats, analysis.ppi, analysis.views  # noqa: E401
print("loaded:", *(m for m in {heavy!r} if m in sys.modules))
"""


def test_check_imports_no_llm_sdk_nor_scipy():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    loaded = result.stdout.splitlines()[-1].split()[1:]
    assert loaded == [], f"`manage.py check` imported {loaded}: import them where they are used"


def test_probe_sees_an_imported_module():
    """The probe above can fail: a module the check does import shows up in its output."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    result = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=("django", "numpy"))],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "loaded: django numpy"


EXPORT_PROBE = """
import os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mentalbench.settings")
import django
django.setup()
from django.core.management import call_command
try:  # the checks run and the command's modules load before it reads anything
    call_command({command!r}, *{args!r}, skip_checks=False)
except Exception:
    pass
print("loaded:", *(m for m in ("pandas", *{heavy!r}) if m in sys.modules))
"""


@pytest.mark.parametrize(
    "command, args",
    [
        ("export_ratings", ("--study", "no such study", "--out", "-")),
        ("import_conversations", ("--study", "s", "/no/such/file.csv")),
        ("import_mentalalign", ("--study", "s", "/no/such/dir")),
    ],
)
def test_data_commands_load_no_dashboard_code(command, args):
    """Exports and imports check what they rely on (the models): the URL checks would import
    every view, and pandas with the dashboards, for work that streams rows."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    result = subprocess.run(
        [sys.executable, "-c", EXPORT_PROBE.format(heavy=HEAVY, command=command, args=args)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "loaded:", result.stdout


def test_judge_assisted_checks_only_the_models():
    """The judge-assisted command needs pandas, but not every view the URL checks would
    import (the dashboards, the judging pages and the SDKs behind them)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    probe = EXPORT_PROBE.format(
        heavy=("analysis.views", "judging.views", "openai", "anthropic", "scipy.stats"),
        command="judge_assisted",
        args=("--study", "no such study", "--judge", "j"),
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "loaded: pandas", result.stdout


def test_a_clean_start_on_the_embedded_sqlite_default_warns_about_nothing(tmp_path):
    """The checks `migrate` runs on the embedded default (SQLite): Django's models.W047 said on
    every start that SQLite builds no NULLS NOT DISTINCT constraint, which a newcomer reads as
    trouble; what keeps a rating single there is written in docs/sqlite.md instead."""
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
    }
    env.setdefault("SECRET_KEY", secrets.token_urlsafe(50))
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--database", "default"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "W047" not in result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
