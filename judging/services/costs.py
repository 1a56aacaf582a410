"""What a run would cost, estimated before it is launched: the launch form shows it and the run
keeps the estimate the admin confirmed, beside what the run actually cost.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from annotation.selectors import study_distortion_labels, study_rubric

from .. import providers
from ..models import ModelEndpoint, Run
from ..prompts import labelling_messages
from ..providers import batch_api
from .engine import JUDGE_MAX_TOKENS
from .launch import LABELLING_MAX_TOKENS, endpoint_config, judge_targets
from .prices import PRICES_TAKEN, endpoint_prices, usd

if TYPE_CHECKING:
    import anthropic

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class CostEstimate:
    """Input tokens of the run's requests and what they and the answers would cost.

    Output tokens are not known before the run: `output_tokens` assumes every request uses its
    full token limit, so the costs are upper bounds for the output side. A cost is None when
    the endpoint's price is unknown (no price of its own and not in the list-price table):
    never 0 for a model that is not free.
    """

    requests: int
    input_tokens: int
    output_tokens: int
    method: str  # "count_tokens" (the provider counted) or "chars/4"
    immediate_usd: float | None
    batch_usd: float | None
    price_source: str = "unknown"  # prices.Prices.source: "endpoint", "list" or "unknown"

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "input_tokens": self.input_tokens,
            "output_tokens_max": self.output_tokens,
            "method": self.method,
            "immediate_usd": _rounded(self.immediate_usd),
            "batch_usd": _rounded(self.batch_usd),
            "price_source": self.price_source,
        }


def _rounded(amount: float | None) -> float | None:
    return None if amount is None else round(amount, 4)


def estimate_display(*, estimate: dict[str, Any]) -> dict[str, str]:
    """An estimate (as kept on the run) in words for the pages: integers with thousands
    separators, money in USD or "price unknown" (estimates kept before prices could be unset
    hold 0.0 for "no price": shown as unknown too, since nobody set them to 0)."""
    legacy = "price_source" not in estimate

    def money(key: str) -> str:
        amount = estimate.get(key)
        if legacy and not amount:
            amount = None
        return usd(amount=amount)

    def count(key: str) -> str:
        value = estimate.get(key)
        return f"{int(value):,}" if isinstance(value, int | float) else "—"

    return {
        "requests": count("requests"),
        "input_tokens": count("input_tokens"),
        "output_tokens_max": count("output_tokens_max"),
        "method": str(estimate.get("method", "")),
        "immediate": money("immediate_usd"),
        "batch": money("batch_usd"),
        # Empty when no price is known: the pages say so in a sentence of their own ("priced at
        # no price known" read as nonsense).
        "price_source": {
            "endpoint": "the endpoint's own prices",
            "list": f"list prices as of {PRICES_TAKEN}",
        }.get(estimate.get("price_source", ""), ""),
    }


def cost_estimate(
    *,
    endpoint: ModelEndpoint,
    prompts: Iterable[tuple[str, str]],
    repeats: int,
    max_tokens: int,
    sample_for_count: int = 20,
) -> CostEstimate:
    """Estimate a run's cost from its prompts (system, user), before it is launched.

    Anthropic endpoints count the first `sample_for_count` distinct prompts with the
    token-counting endpoint and scale the character count of all prompts by the ratio (one
    request per prompt would cost minutes on a 100,000-item run); elsewhere chars/4.
    """
    chars = 0
    count = 0
    sample: list[tuple[str, str]] = []
    for system, user in prompts:
        chars += len(system) + len(user)
        count += 1
        if len(sample) < sample_for_count:
            sample.append((system, user))
    tokens = math.ceil(chars / 4)
    method = "chars/4"
    if endpoint.provider == ModelEndpoint.Provider.ANTHROPIC and sample:
        config = endpoint_config(endpoint=endpoint)
        try:
            # An Anthropic endpoint's client.
            sdk = cast("anthropic.Anthropic", batch_api.client(config))
            spec = batch_api.RequestSpec(
                temperature=None, max_tokens=max_tokens, json_mode=False, schema=None
            )
            counted = sum(
                batch_api.count_input_tokens(sdk, config, system=s, user=u, spec=spec)
                for s, u in sample
            )
            sdk.close()
            sample_chars = sum(len(s) + len(u) for s, u in sample)
            tokens = math.ceil(chars * counted / max(1, sample_chars))
            method = "count_tokens"
        except providers.ProviderError as exc:
            logger.info("token counting failed, using chars/4: %s", exc)
    input_tokens = tokens * repeats
    output_tokens = count * repeats * max_tokens
    price = endpoint_prices(endpoint=endpoint)
    return CostEstimate(
        requests=count * repeats,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        method=method,
        immediate_usd=price.cost(input_tokens=input_tokens, output_tokens=output_tokens),
        batch_usd=price.cost(input_tokens=input_tokens, output_tokens=output_tokens, batch=True),
        price_source=price.source,
    )


def launch_estimate(
    *,
    kind: str,
    study_id: int,
    endpoint: ModelEndpoint,
    subset: str,
    sample_size: int | None,
    sample_seed: int,
    repeats: int,
    max_tokens: int | None,
) -> CostEstimate:
    """The cost estimate the launch form shows for a judge or labelling run, before launching.

    Builds every prompt the run would send (streamed; only their lengths are kept).
    """
    from annotation.models import Conversation, Response

    from ..prompts import judge_messages

    if kind == Run.Kind.JUDGE:
        rubric = study_rubric(study_id=study_id)
        rater = _estimate_rater(endpoint)
        ids = judge_targets(
            study_id=study_id,
            rater=rater,
            subset=subset,
            sample_size=sample_size,
            sample_seed=sample_seed,
        )
        responses = Response.objects.filter(id__in=ids).select_related("conversation")
        prompts: Iterable[tuple[str, str]] = (
            judge_messages(r.conversation.context, r.text, rubric)
            for r in responses.iterator(chunk_size=2000)
        )
        limit = max_tokens or JUDGE_MAX_TOKENS
    else:
        labels = study_distortion_labels(study_id=study_id)
        from annotation.models import Study

        scheme = Study.objects.get(id=study_id).label_scheme
        conversations = Conversation.objects.filter(study_id=study_id).order_by("id")
        if subset == Run.Subset.SAMPLE and sample_size:
            import random

            ids = list(conversations.values_list("id", flat=True))
            if sample_size < len(ids):
                ids = sorted(random.Random(sample_seed).sample(ids, sample_size))
            conversations = conversations.filter(id__in=ids)
        prompts = (
            labelling_messages(c.context, labels=labels, scheme=scheme)
            for c in conversations.iterator(chunk_size=2000)
        )
        limit = max_tokens or LABELLING_MAX_TOKENS
    return cost_estimate(endpoint=endpoint, prompts=prompts, repeats=repeats, max_tokens=limit)


def run_record_estimate(*, run_id: int, estimate: dict[str, Any]) -> None:
    """Keep the estimate the admin confirmed on the run, beside what it actually cost."""
    Run.objects.filter(id=run_id).update(cost_estimate=estimate)


def _estimate_rater(endpoint: ModelEndpoint) -> Any:
    """The endpoint's judge rater, or the one its launch would create (unsaved: an estimate
    writes nothing)."""
    from annotation.models import Rater, Responder
    from annotation.responders import paper_judge_defaults

    rater = Rater.objects.filter(name=endpoint.name).first()
    if rater is not None:
        return rater
    excluded = paper_judge_defaults(endpoint.name).get("excluded")
    if excluded is None:
        excluded = sorted(
            Responder.objects.filter(family=endpoint.family).values_list("key", flat=True)
        )
    return Rater(kind=Rater.Kind.JUDGE, name=endpoint.name, excluded_responders=excluded)
