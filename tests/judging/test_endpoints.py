"""Endpoints managed in /judging/: create, edit, disable, test the connection over real HTTP
(the fake OpenAI and Anthropic servers, through the official SDKs); list prices and "price
unknown" in cost estimates; who may do what."""

from __future__ import annotations

import socket
import uuid

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from judging import services
from judging.forms import JudgeRunForm
from judging.models import ModelEndpoint, Run, RunItem
from judging.services import costs, endpoints, prices
from tests.factories import endpoint_make, study_make
from tests.fakes.llm_server import FakeLLMServer

GOOD_KEY = "sk-proj-the-right-key-0123456789abcdefghij"
WRONG_KEY = "sk-proj-a-wrong-key-9876543210zyxwvutsrqp"


@pytest.fixture(scope="module")
def strict_llm():
    """A fake provider that checks the key and knows two models, answering with their dated
    names as OpenAI and Anthropic do."""
    models = {"gpt-4o": "gpt-4o-2024-08-06", "claude-haiku-4-5": "claude-haiku-4-5-20251001"}
    with FakeLLMServer(api_key=GOOD_KEY, models=models) as server:
        yield server


def strict_endpoint(server: FakeLLMServer, provider: str = "openai", **overrides):
    base_url = server.anthropic_base_url if provider == "anthropic" else server.openai_base_url
    model = "claude-haiku-4-5" if provider == "anthropic" else "gpt-4o"
    options = {"model": model, "api_key": GOOD_KEY, **overrides}
    return endpoint_make(base_url=base_url, provider=provider, **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------------------ list prices


@pytest.mark.parametrize(
    ("provider", "model", "expected"),
    [
        ("openai", "gpt-4o", (2.5, 10.0, 1.25, 5.0)),
        ("openai", "gpt-4o-2024-08-06", (2.5, 10.0, 1.25, 5.0)),
        ("openai", "gpt-4o-2024-05-13", (5.0, 15.0, 2.5, 7.5)),  # the launch snapshot
        ("openai", "gpt-4o-mini-2024-07-18", (0.15, 0.6, 0.075, 0.3)),
        ("openai", "gpt-4.1-nano", (0.1, 0.4, 0.05, 0.2)),
        ("anthropic", "claude-sonnet-4-20250514", (3.0, 15.0, 1.5, 7.5)),
        ("anthropic", "claude-3-5-haiku-latest", (0.8, 4.0, 0.4, 2.0)),
        ("anthropic", "claude-opus-4-1-20250805", (15.0, 75.0, 7.5, 37.5)),
    ],
)
def test_list_prices_of_known_models_and_their_snapshots(provider, model, expected):
    price = prices.list_price(provider=provider, model=model)
    assert price is not None
    assert (price.input, price.output, price.batch_input, price.batch_output) == pytest.approx(
        expected
    )


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        ("openai", "gpt-4o-audio-preview"),  # not a snapshot of gpt-4o: not guessed
        ("openai", "my-finetune"),
        ("openai_compatible", "gpt-4o"),  # a proxy bills what its operator bills
        ("anthropic", "gpt-4o"),
        ("vllm_offline", "meta-llama/Llama-3.1-8B-Instruct"),
    ],
)
def test_models_the_table_does_not_know_have_no_price(provider, model):
    assert prices.list_price(provider=provider, model=model) is None


def test_the_endpoints_own_prices_win_field_by_field(db):
    endpoint = ModelEndpoint(provider="openai", model="gpt-4o", price_input_per_mtok=2.0)
    price = prices.endpoint_prices(endpoint=endpoint)
    assert (price.input, price.output, price.batch_input, price.batch_output) == (
        2.0,
        10.0,
        1.25,
        5.0,
    )
    assert price.source == "endpoint"
    listed = prices.endpoint_prices(
        endpoint=ModelEndpoint(provider="anthropic", model="claude-haiku-4-5")
    )
    assert (listed.input, listed.source) == (1.0, "list")
    # Unknown model, immediate prices set: batch falls back on them (an upper bound).
    own = prices.endpoint_prices(
        endpoint=ModelEndpoint(
            provider="openai_compatible",
            model="llama",
            price_input_per_mtok=0.2,
            price_output_per_mtok=0.4,
        )
    )
    assert (own.batch_input, own.batch_output) == (0.2, 0.4)
    free = prices.endpoint_prices(
        endpoint=ModelEndpoint(provider="openai_compatible", model="x", price_input_per_mtok=0.0,
                      price_output_per_mtok=0.0)
    )  # fmt: skip
    assert free.known and free.cost(input_tokens=10**6, output_tokens=10**6) == 0.0
    unknown = prices.endpoint_prices(
        endpoint=ModelEndpoint(provider="openai_compatible", model="x")
    )
    assert not unknown.known and unknown.source == "unknown"
    assert unknown.cost(input_tokens=1, output_tokens=1) is None
    assert unknown.cost(input_tokens=1, output_tokens=1, batch=True) is None


@pytest.mark.parametrize(
    ("amount", "text"),
    [
        (None, "price unknown"),
        (0, "0 USD"),
        (0.0016, "0.0016 USD"),
        (0.00001, "< 0.0001 USD"),
        (12.3456, "12.35 USD"),
        (1234.5, "1,234.50 USD"),
    ],
)
def test_money_reads_as_people_read_it(amount, text):
    assert prices.usd(amount=amount) == text


# ------------------------------------------------------------------------------ estimates


def test_an_estimate_without_a_price_says_price_unknown_never_zero(db):
    endpoint = endpoint_make(
        base_url="http://127.0.0.1:9/v1",
        provider="openai_compatible",
        model="my-llama",
        price_input_per_mtok=None,
        price_output_per_mtok=None,
    )
    estimate = costs.cost_estimate(
        endpoint=endpoint, prompts=[("system", "user " * 100)] * 3, repeats=2, max_tokens=50
    )
    assert estimate.requests == 6 and estimate.input_tokens > 0
    assert estimate.immediate_usd is None and estimate.batch_usd is None
    shown = costs.estimate_display(estimate=estimate.as_dict())
    assert shown["immediate"] == shown["batch"] == "price unknown"
    assert shown["price_source"] == ""  # the page says it in a sentence of its own
    assert shown["requests"] == "6" and shown["method"] == "chars/4"


def test_an_estimate_of_a_listed_model_uses_the_list_price(db):
    endpoint = endpoint_make(
        base_url="http://127.0.0.1:9/v1",
        model="gpt-4o",
        price_input_per_mtok=None,
        price_output_per_mtok=None,
    )
    estimate = costs.cost_estimate(
        endpoint=endpoint, prompts=[("", "x" * 4_000_000)], repeats=1, max_tokens=100_000
    )
    assert estimate.input_tokens == 1_000_000
    assert estimate.immediate_usd == pytest.approx(2.5 + 0.1 * 10.0)
    assert estimate.batch_usd == pytest.approx(1.25 + 0.1 * 5.0)
    shown = costs.estimate_display(estimate=estimate.as_dict())
    assert shown["immediate"] == "3.50 USD" and shown["input_tokens"] == "1,000,000"
    assert shown["price_source"] == f"list prices as of {prices.PRICES_TAKEN}"


def test_an_estimate_kept_before_prices_could_be_unset_shows_its_zero_as_unknown():
    legacy = {"requests": 4, "input_tokens": 900, "output_tokens_max": 4096}
    shown = costs.estimate_display(estimate={**legacy, "immediate_usd": 0.0, "batch_usd": 0.0})
    assert shown["immediate"] == "price unknown"
    priced = costs.estimate_display(
        estimate={**legacy, "immediate_usd": 0.0123, "batch_usd": 0.0062}
    )
    assert priced["immediate"] == "0.0123 USD"
    free = costs.estimate_display(
        estimate={**legacy, "immediate_usd": 0.0, "batch_usd": 0.0, "price_source": "endpoint"}
    )
    assert free["immediate"] == "0 USD"  # set to 0 on purpose: a real price


def test_the_launch_page_says_price_unknown_and_the_run_page_too(staff_client, study):
    endpoint = endpoint_make(
        base_url="http://127.0.0.1:9/v1",
        provider="openai_compatible",
        model="my-llama",
        price_input_per_mtok=None,
        price_output_per_mtok=None,
    )
    form = {
        "study": study.pk,
        "endpoint": endpoint.pk,
        "subset": "all",
        "sample_seed": 0,
        "repeats": 1,
        "max_tokens": 1024,
        "max_output_attempts": 3,
        "concurrency": 8,
        "parallel_tasks": 1,
    }
    listed = staff_client.get(reverse("judging:judge_new")).content.decode()
    usable = listed[listed.index('id="usable-endpoints"') :]
    assert "my-llama" in usable and "price unknown" in usable
    # The estimate as the form is filled in (htmx), before the one Launch.
    page = staff_client.get(reverse("judging:run_estimate", args=["judge"]), form).content.decode()
    assert '<td id="estimate-immediate">price unknown</td>' in page
    assert "0.0 USD" not in page and "0.0</td>" not in page
    assert "6 requests" in page and "Priced at" not in page
    assert "No price is known for this endpoint's model" in page
    assert not Run.objects.exists()  # an estimate launches nothing
    staff_client.post(reverse("judging:judge_new"), form)
    run = Run.objects.get()
    assert run.cost_estimate["immediate_usd"] is None
    page = staff_client.get(reverse("judging:run", args=[run.pk])).content.decode()
    assert "estimated price unknown immediate, price unknown batch" in page
    assert "cost so far price unknown" in page


# ------------------------------------------------------------------------------ services


def test_an_endpoint_is_created_edited_and_validated_as_a_whole(db):
    endpoint = endpoints.endpoint_save(
        name="gpt", provider="openai", model="gpt-4o", family="openai", api_key=GOOD_KEY
    )
    assert endpoint.api_key.startswith("fernet:") and GOOD_KEY not in endpoint.api_key
    assert endpoint.enabled and endpoint.price_input_per_mtok is None
    edited = endpoints.endpoint_save(endpoint=endpoint, model="gpt-4.1", price_input_per_mtok=1.5)
    assert (edited.model, edited.price_input_per_mtok) == ("gpt-4.1", 1.5)
    with pytest.raises(ValidationError, match="DATABASE_URL"):
        endpoints.endpoint_save(endpoint=endpoint, api_key_env="DATABASE_URL")
    with pytest.raises(ValidationError, match="anthropic_tool"):
        endpoints.endpoint_save(endpoint=endpoint, structured_output="anthropic_tool")
    endpoint.refresh_from_db()
    assert endpoint.api_key_env == "" and endpoint.model == "gpt-4.1"  # nothing half-written
    with pytest.raises(ValueError, match="not endpoint fields"):
        endpoints.endpoint_save(endpoint=endpoint, runs=[])


def test_an_endpoint_with_runs_keeps_its_provider_and_model(db):
    """Its runs (a resumed or retried one too) call the endpoint as it is now: another model
    would answer the rest under the same judge. Other fields stay editable."""
    endpoint = endpoints.endpoint_save(
        name="gpt", provider="openai", model="gpt-4o", family="openai", api_key=GOOD_KEY
    )
    Run.objects.create(study=study_make(), endpoint=endpoint, kind="judge")
    with pytest.raises(
        ValidationError, match="1 run\\(s\\) used this endpoint with openai model 'gpt-4o'"
    ):
        endpoints.endpoint_save(endpoint=endpoint, model="gpt-4.1")
    with pytest.raises(ValidationError, match="Add a new endpoint"):
        endpoints.endpoint_save(endpoint=endpoint, provider="anthropic")
    endpoint.refresh_from_db()
    assert (endpoint.provider, endpoint.model) == ("openai", "gpt-4o")
    edited = endpoints.endpoint_save(endpoint=endpoint, price_input_per_mtok=2.5, timeout_s=30)
    assert edited.price_input_per_mtok == 2.5 and edited.model == "gpt-4o"


def test_a_disabled_endpoint_is_not_offered_for_new_runs_and_its_runs_keep_it(
    db, study, endpoint_factory
):
    endpoint = endpoint_factory()
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint)
    RunItem.objects.filter(run=run).update(status="failed", last_error="HTTP 503")
    Run.objects.filter(pk=run.pk).update(status=Run.Status.DONE)
    endpoints.endpoint_set_enabled(endpoint_id=endpoint.pk, enabled=False)
    for kind in Run.Kind.values:
        assert endpoint not in endpoints.endpoints_for_launch(kind=kind)
    form = JudgeRunForm(
        {"study": study.pk, "endpoint": endpoint.pk, "subset": "all", "sample_seed": 0,
         "repeats": 1, "max_output_attempts": 3, "concurrency": 1, "parallel_tasks": 1}
    )  # fmt: skip
    assert not form.is_valid() and "endpoint" in form.errors
    # The run keeps its endpoint: its failures can still be retried.
    services.run_retry_failures(run_id=run.pk)
    run.refresh_from_db()
    assert run.endpoint_id == endpoint.pk and run.status == Run.Status.RUNNING
    endpoints.endpoint_set_enabled(endpoint_id=endpoint.pk, enabled=True)
    assert endpoint in endpoints.endpoints_for_launch(kind=Run.Kind.JUDGE)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_connection_test_succeeds_with_latency_and_the_model_the_server_named(
    db, strict_llm, provider
):
    endpoint = strict_endpoint(strict_llm, provider)
    result = endpoints.endpoint_test_connection(endpoint=endpoint)
    assert result.ok, result.message
    expected = "claude-haiku-4-5-20251001" if provider == "anthropic" else "gpt-4o-2024-08-06"
    assert result.model == expected
    assert result.latency_s is not None and result.latency_s > 0
    assert result.latency_ms is not None and f"{result.latency_ms} ms" in result.message
    sent = strict_llm.requests[-1]
    # One tiny request, its token limit in the field this provider's API expects.
    limit = "max_tokens" if provider == "anthropic" else "max_completion_tokens"
    assert sent.body[limit] == endpoints.TEST_MAX_TOKENS


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_connection_test_with_a_wrong_key_says_authentication_and_never_shows_the_key(
    db, strict_llm, provider
):
    endpoint = strict_endpoint(strict_llm, provider, api_key=WRONG_KEY)
    result = endpoints.endpoint_test_connection(endpoint=endpoint)
    assert not result.ok and result.problem == "auth"
    assert "HTTP 401" in result.message and "refused the API key" in result.message
    assert WRONG_KEY not in result.message and WRONG_KEY[:10] not in result.message


def test_connection_test_of_an_unknown_model_says_so(db, strict_llm):
    endpoint = strict_endpoint(strict_llm, model="gpt-4o-typo")
    result = endpoints.endpoint_test_connection(endpoint=endpoint)
    assert not result.ok and result.problem == "model"
    assert "HTTP 404" in result.message and "'gpt-4o-typo'" in result.message


def test_connection_refused_is_named(db):
    port = free_port()
    endpoint = endpoint_make(base_url=f"http://127.0.0.1:{port}/v1", api_key=GOOD_KEY)
    result = endpoints.endpoint_test_connection(endpoint=endpoint)
    assert not result.ok and result.problem == "connection"
    assert result.message.startswith(f"Connection refused at http://127.0.0.1:{port}/v1")
    assert GOOD_KEY not in result.message


@pytest.fixture
def silent_server():
    """A TCP server that takes connections (the kernel's backlog completes them) and never
    answers: a hung or overloaded server, as the client sees one."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def test_a_server_that_does_not_answer_times_out(db, silent_server):
    endpoint = endpoint_make(base_url=silent_server, api_key=GOOD_KEY, timeout_s=0.5)
    result = endpoints.endpoint_test_connection(endpoint=endpoint)
    assert not result.ok and result.problem == "timeout", result
    assert "did not answer within 0.5 s" in result.message


def test_a_long_endpoint_timeout_is_capped_for_the_test(db, silent_server, monkeypatch):
    monkeypatch.setattr(endpoints, "TEST_TIMEOUT_S", 0.5)
    endpoint = endpoint_make(base_url=silent_server, api_key=GOOD_KEY, timeout_s=600)
    result = endpoints.endpoint_test_connection(endpoint=endpoint)
    assert result.problem == "timeout" and "0.5 s" in result.message, result


def test_a_missing_key_is_named_before_anything_is_sent(db, strict_llm):
    before = len(strict_llm.requests)
    no_key = strict_endpoint(strict_llm, api_key="")
    result = endpoints.endpoint_test_connection(endpoint=no_key)
    assert result.problem == "key" and "No API key" in result.message
    unset = strict_endpoint(strict_llm, api_key="", api_key_env="MENTALBENCH_KEY_NOT_SET_HERE")
    result = endpoints.endpoint_test_connection(endpoint=unset)
    assert result.problem == "key" and "MENTALBENCH_KEY_NOT_SET_HERE" in result.message
    assert len(strict_llm.requests) == before


def test_an_offline_endpoint_has_nothing_to_connect_to(db):
    endpoint = endpoint_make(base_url="", provider="vllm_offline", api_key="")
    result = endpoints.endpoint_test_connection(endpoint=endpoint)
    assert not result.ok and result.problem == "offline"


# ------------------------------------------------------------------------------ pages


def endpoint_post(**overrides: str) -> dict[str, str]:
    data = {
        "name": f"typed-{uuid.uuid4().hex[:6]}",
        "provider": "openai",
        "model": "gpt-4o",
        "family": "openai",
        "base_url": "",
        "api_key_env": "",
        "api_key": "",
        "default_params": "",
        "json_mode": "on",
        "structured_output": "off",
        "supports_temperature": "on",
        "timeout_s": "60",
        "responder_key": "",
        "price_input_per_mtok": "",
        "price_output_per_mtok": "",
        "price_batch_input_per_mtok": "",
        "price_batch_output_per_mtok": "",
        "enabled": "on",
    }
    data.update(overrides)
    return data


@pytest.fixture
def superuser_client(client, db):
    client.force_login(get_user_model().objects.create_superuser("root", password="pw-123456"))
    return client


def test_an_admin_adds_an_endpoint_whose_key_is_never_shown_back(superuser_client):
    answer = superuser_client.post(
        reverse("judging:endpoint_new"), endpoint_post(name="gpt-4o judge", api_key=GOOD_KEY)
    )
    endpoint = ModelEndpoint.objects.get(name="gpt-4o judge")
    assert answer.status_code == 302
    assert answer.url == f"{reverse('judging:endpoints')}#endpoint-{endpoint.pk}"
    assert endpoint.api_key.startswith("fernet:") and endpoint.default_params == {}
    assert endpoint.price_input_per_mtok is None  # blank: the list price applies
    listing = superuser_client.get(reverse("judging:endpoints")).content.decode()
    edit = superuser_client.get(reverse("judging:endpoint_edit", args=[endpoint.pk]))
    for page in (listing, edit.content.decode()):
        assert GOOD_KEY not in page and endpoint.api_key not in page
    assert "stored (encrypted)" in listing and "list price as of" in listing
    assert "immediate 2.5 / 10" in listing
    # Editing without typing a key keeps it; "remove" removes it.
    stored = endpoint.api_key
    superuser_client.post(
        reverse("judging:endpoint_edit", args=[endpoint.pk]),
        endpoint_post(name=endpoint.name, price_input_per_mtok="2"),
    )
    endpoint.refresh_from_db()
    assert endpoint.api_key == stored and endpoint.price_input_per_mtok == 2.0
    superuser_client.post(
        reverse("judging:endpoint_edit", args=[endpoint.pk]),
        endpoint_post(name=endpoint.name, clear_api_key="on", api_key_env="OPENAI_API_KEY"),
    )
    endpoint.refresh_from_db()
    assert endpoint.api_key == "" and endpoint.api_key_env == "OPENAI_API_KEY"


def test_the_endpoint_page_refuses_another_model_for_an_endpoint_with_runs(superuser_client):
    superuser_client.post(reverse("judging:endpoint_new"), endpoint_post(name="used judge"))
    endpoint = ModelEndpoint.objects.get(name="used judge")
    Run.objects.create(study=study_make(), endpoint=endpoint, kind="judge")
    url = reverse("judging:endpoint_edit", args=[endpoint.pk])
    page = superuser_client.post(url, endpoint_post(name="used judge", model="gpt-4.1"))
    assert page.status_code == 200  # the form again, with the error at the model field
    assert "Add a new endpoint for another model" in page.content.decode()
    endpoint.refresh_from_db()
    assert endpoint.model == "gpt-4o"


def test_a_bad_endpoint_form_says_what_and_where_and_saves_nothing(superuser_client):
    page = superuser_client.post(
        reverse("judging:endpoint_new"),
        endpoint_post(api_key_env="SECRET_KEY", default_params="[1, 2]", timeout_s="x"),
    ).content.decode()
    assert "SECRET_KEY holds one of the platform&#x27;s own secrets" in page
    assert "Default parameters are a JSON object" in page
    assert ModelEndpoint.objects.count() == 0


def test_disable_and_enable_from_the_list(superuser_client, study, endpoint_factory):
    endpoint = endpoint_factory()
    url = reverse("judging:endpoint_enabled", args=[endpoint.pk])
    superuser_client.post(url, {"enabled": "0"})
    endpoint.refresh_from_db()
    assert not endpoint.enabled
    launch = superuser_client.get(reverse("judging:judge_new")).content.decode()
    assert 'id="no-endpoints"' in launch and "1 endpoint is disabled" in launch
    assert reverse("judging:endpoint_new") in launch
    superuser_client.post(url, {"enabled": "1"})
    endpoint.refresh_from_db()
    assert endpoint.enabled
    launch = superuser_client.get(reverse("judging:judge_new")).content.decode()
    assert 'id="no-endpoints"' not in launch and endpoint.name in launch


def test_the_launch_page_without_endpoints_points_to_adding_one(admin_member_client, db):
    page = admin_member_client.get(reverse("judging:generation_new")).content.decode()
    assert "No endpoint can run this yet" in page
    # An admin without the endpoint permissions is told whom to ask, not given a dead link.
    assert reverse("judging:endpoint_new") not in page
    assert "Ask an administrator" in page


def test_the_connection_test_button_answers_htmx_with_a_fragment(admin_member_client, strict_llm):
    endpoint = strict_endpoint(strict_llm)
    url = reverse("judging:endpoint_test", args=[endpoint.pk])
    fragment = admin_member_client.post(url, HTTP_HX_REQUEST="true").content.decode()
    assert "<code>gpt-4o-2024-08-06</code> answered in" in fragment and " ms" in fragment
    assert "<html" not in fragment
    page = admin_member_client.post(url).content.decode()
    assert "Connection test: " in page and "gpt-4o-2024-08-06" in page
    wrong = strict_endpoint(strict_llm, api_key=WRONG_KEY)
    failed = admin_member_client.post(
        reverse("judging:endpoint_test", args=[wrong.pk]), HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "Failed (auth)" in failed and WRONG_KEY not in failed


def test_who_may_manage_endpoints(client, admin_member, staff_user, endpoint_factory):
    endpoint = endpoint_factory()
    new, edit = (
        reverse("judging:endpoint_new"),
        reverse("judging:endpoint_edit", args=[endpoint.pk]),
    )
    toggle = reverse("judging:endpoint_enabled", args=[endpoint.pk])
    for user in (admin_member, staff_user):
        client.force_login(user)
        listing = client.get(reverse("judging:endpoints"))
        assert listing.status_code == 200 and "Add an endpoint" not in listing.content.decode()
        assert client.get(new).status_code == 403
        assert client.get(edit).status_code == 403
        assert client.post(toggle, {"enabled": "0"}).status_code == 403
    endpoint.refresh_from_db()
    assert endpoint.enabled
    # Django's model permissions open it, as they open Django's admin to staff.
    staff_user.user_permissions.add(
        *Permission.objects.filter(codename__in=["add_modelendpoint", "change_modelendpoint"])
    )
    staff = get_user_model().objects.get(pk=staff_user.pk)
    client.force_login(staff)
    assert client.get(new).status_code == 200
    assert client.post(toggle, {"enabled": "0"}).status_code == 302
    endpoint.refresh_from_db()
    assert not endpoint.enabled


def test_the_runs_list_shows_how_many_items_failed(staff_client, study, endpoint_factory):
    run = services.judge_run_create(study_id=study.id, endpoint=endpoint_factory())
    items = list(RunItem.objects.filter(run=run).order_by("id"))
    RunItem.objects.filter(pk__in=[i.pk for i in items[:4]]).update(status="failed")
    RunItem.objects.filter(pk__in=[i.pk for i in items[4:]]).update(status="done")
    Run.objects.filter(pk=run.pk).update(status=Run.Status.DONE)
    page = staff_client.get(reverse("judging:runs")).content.decode()
    assert 'Done</span><span class="error"> — 4 of 6 failed' in page


# ------------------------------------------------------------------------------ migration


@pytest.mark.django_db(transaction=True)
def test_the_migration_turns_the_old_zero_prices_into_unset():
    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    before = ("judging", "0006_batch_mode_and_prices")
    try:
        executor.migrate([before])
        old_model = (
            MigrationExecutor(connection)
            .loader.project_state([before])
            .apps.get_model("judging", "ModelEndpoint")
        )
        old_model.objects.create(name="unpriced", provider="openai", model="m", family="f")
        old_model.objects.create(
            name="priced", provider="openai", model="m", family="f",
            price_input_per_mtok=2.5, price_output_per_mtok=10.0,
        )  # fmt: skip
        MigrationExecutor(connection).migrate(leaves)
        unpriced = ModelEndpoint.objects.get(name="unpriced")
        priced = ModelEndpoint.objects.get(name="priced")
        assert unpriced.enabled and priced.enabled
        assert unpriced.price_input_per_mtok is None and unpriced.price_output_per_mtok is None
        assert (priced.price_input_per_mtok, priced.price_output_per_mtok) == (2.5, 10.0)
        assert priced.price_batch_input_per_mtok is None  # 0 meant "not set" there too
    finally:
        MigrationExecutor(connection).migrate(leaves)
        ModelEndpoint.objects.all().delete()


def test_the_docs_show_the_same_price_table_and_date():
    """docs/endpoints.md repeats the table for operators: it must not drift from the code."""
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[2] / "docs" / "endpoints.md").read_text()
    assert f"Taken in **{prices.PRICES_TAKEN}**" in docs
    table = [line for line in docs.splitlines() if line.startswith(("| OpenAI", "| Anthropic"))]
    rows = prices.list_price_table()
    assert len(rows) == sum(len(models) for models in prices.LIST_PRICES.values())
    for row in rows:
        price = row["price"]
        assert isinstance(price, prices.ListPrice)
        line = next(
            (ln for ln in table if f" {price.model} " in ln or f" {price.model}," in ln), None
        )
        assert line is not None, f"{price.model} is not in docs/endpoints.md"
        assert f"| {price.input:.2f} | {price.output:.2f} |" in line, line


@pytest.mark.django_db(transaction=True)
def test_the_migration_fails_done_runs_that_never_succeeded():
    from annotation.models import Response

    executor = MigrationExecutor(connection)
    leaves = executor.loader.graph.leaf_nodes()
    before = ("judging", "0007_endpoint_enabled_and_unknown_prices")
    endpoint = endpoint_make(name="old runs", base_url="http://127.0.0.1:9/v1")
    study = study_make(name="old runs", conversations=1, responders=("a", "b"))
    response_ids = list(
        Response.objects.filter(conversation__study=study).values_list("id", flat=True)
    )
    try:
        executor.migrate([before])
        old = MigrationExecutor(connection).loader.project_state([before]).apps
        OldRun, OldItem = old.get_model("judging", "Run"), old.get_model("judging", "RunItem")

        def run_make(name: str, statuses: list[str]) -> int:
            run = OldRun.objects.create(
                study_id=study.pk, endpoint_id=endpoint.pk, kind="judge", status="done",
                error=name,
            )  # fmt: skip
            OldItem.objects.bulk_create(
                OldItem(run=run, response_id=rid, status=status, last_error=f"{name} {i}")
                for i, (rid, status) in enumerate(zip(response_ids, statuses, strict=False))
            )
            return run.pk

        all_failed = run_make("all failed", ["failed", "failed"])
        one_done = run_make("one done", ["done", "failed"])
        empty = run_make("empty", [])
        still_open = run_make("open", ["failed", "pending"])
        MigrationExecutor(connection).migrate(leaves)
        runs = {run.pk: run for run in Run.objects.all()}
        assert runs[all_failed].status == Run.Status.FAILED
        assert runs[all_failed].error == "every item failed (2 of 2); the first: all failed 0"
        assert (runs[one_done].status, runs[one_done].error) == (Run.Status.DONE, "one done")
        assert runs[empty].status == Run.Status.FAILED and "no item" in runs[empty].error
        assert runs[still_open].status == Run.Status.DONE
    finally:
        MigrationExecutor(connection).migrate(leaves)
