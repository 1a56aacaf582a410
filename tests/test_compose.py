"""docker-compose.yml is valid Compose and secure by default (no Docker engine runs here, so the
file is checked as data: against the Compose Specification's models, and for what it promises)."""

import re
from pathlib import Path

import pytest
import yaml
from compose_pydantic.models import ComposeSpecification

ROOT = Path(__file__).resolve().parents[1]
APP_SERVICES = ("migrate", "web", "worker", "upkeep", "beat")


def without_extensions(compose: dict) -> dict:
    return {key: value for key, value in compose.items() if not key.startswith("x-")}


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_valid_against_the_compose_specification(compose):
    # The spec admits top-level `x-` extension fields (patternProperties "^x-"), which the
    # generated models do not express; everything else must validate, unknown keys refused.
    ComposeSpecification.model_validate(without_extensions(compose))


def test_the_validation_is_not_vacuous(compose):
    broken = without_extensions(compose)
    web = {**broken["services"]["web"], "helthcheck": {}}
    broken["services"] = {**broken["services"], "web": web}
    with pytest.raises(ValueError, match="helthcheck"):
        ComposeSpecification.model_validate(broken)


def test_no_default_credentials_anywhere(compose):
    text = (ROOT / "docker-compose.yml").read_text()
    assert "mentalbench-demo" not in text
    for name in ("SECRET_KEY", "POSTGRES_PASSWORD", "ALLOWED_HOSTS"):
        # `${NAME:?…}`: compose refuses to start while the variable is unset.
        assert re.search(r"\$\{" + name + r":\?", text), name
    env = compose["services"]["postgres"]["environment"]
    assert env["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD:?")


def test_demo_data_only_on_explicit_opt_in(compose):
    for name, service in compose["services"].items():
        command = service.get("command") or []
        text = command if isinstance(command, str) else " ".join(command)
        if "seed_demo" in text:
            assert name == "migrate"
            assert 'if [ "$$MENTALBENCH_DEMO" = 1 ]' in text
            assert "DEMO_PASSWORD" in text
    migrate_env = compose["services"]["migrate"]["environment"]
    assert migrate_env["MENTALBENCH_DEMO"] == "${MENTALBENCH_DEMO:-0}"


def test_migrations_run_once_before_the_app(compose):
    services = compose["services"]
    assert "migrate --noinput" in " ".join(services["migrate"]["command"])
    assert services["migrate"]["restart"] == "no"
    for name in ("web", "worker", "upkeep", "beat"):
        assert services[name]["depends_on"]["migrate"] == {
            "condition": "service_completed_successfully"
        }
        assert "migrate" not in " ".join(services[name].get("command") or [])


def test_one_image_built_once(compose):
    services = compose["services"]
    built = [name for name, service in services.items() if "build" in service]
    assert built == ["migrate"]
    assert {services[name]["image"] for name in APP_SERVICES} == {"mentalbench:local"}


def test_images_are_pinned(compose):
    for name, service in compose["services"].items():
        image = service["image"]
        tag = image.rsplit(":", 1)[1] if ":" in image else ""
        assert tag and tag != "latest", f"{name}: {image} is not pinned"
        if not image.startswith("mentalbench:"):
            assert re.search(r"\d", tag), f"{name}: {image} names no version"
    assert re.search(r"^FROM \S+:\d[\w.-]*$", (ROOT / "Dockerfile").read_text(), re.M)


def test_healthchecks_restarts_and_persistence(compose):
    services = compose["services"]
    for name in ("postgres", "redis", "web", "worker", "upkeep"):
        assert services[name]["healthcheck"]["test"], name
    assert "/healthz" in " ".join(services["web"]["healthcheck"]["test"])
    for name in ("postgres", "redis", "web", "worker", "upkeep", "beat"):
        assert services[name]["restart"] == "unless-stopped", name
    assert "--appendonly" in services["redis"]["command"]
    assert any(v.endswith(":/data") for v in services["redis"]["volumes"])
    assert "beat" in services["beat"]["command"]


def test_runs_and_upkeep_have_workers_of_their_own(compose):
    """Long runs (and background jobs, which share their queue) never hold the sweepers, the
    batch polls, a webhook delivery or an e-mail (forgot password, invitation, an escalation,
    reminders): each queue has its own worker."""
    from django.conf import settings

    services = compose["services"]
    queues = {name: services[name]["command"] for name in ("worker", "upkeep")}
    assert queues["worker"][queues["worker"].index("-Q") + 1] == "runs"
    assert queues["upkeep"][queues["upkeep"].index("-Q") + 1] == "upkeep"
    routed = {name for name, route in settings.CELERY_TASK_ROUTES.items() if route["queue"]}
    assert routed == {
        "accounts.tasks.password_reset_mail_send",
        "judging.tasks.runs_sweep",
        "judging.tasks.batch_submit",
        "judging.tasks.batches_poll",
        "judging.tasks.batch_poll",
        "judging.tasks.batch_cancel",
        "analysis.tasks.jobs_sweep",
        "annotation.tasks.webhook_deliver",
        "annotation.tasks.webhooks_deliver_due",
        "annotation.tasks.invitation_mail_send",
        "annotation.tasks.escalation_mail_send",
        "annotation.tasks.reminders_send",
    }
    assert settings.CELERY_TASK_DEFAULT_QUEUE == "runs"


def test_web_port_is_not_published_on_every_interface(compose):
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name}: {port}"
    for name in ("postgres", "redis"):
        assert "ports" not in compose["services"][name]


def test_image_runs_as_non_root_and_ships_no_secrets():
    dockerfile = (ROOT / "Dockerfile").read_text()
    users = re.findall(r"^USER (\S+)", dockerfile, re.M)
    assert users and users[-1] not in {"root", "0"}
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".secret_key", ".encryption-key", ".env", "db.sqlite3*"} <= ignored
