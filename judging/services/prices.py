"""What an endpoint's tokens cost: its own prices where the admin set them, else the list
prices of known models below, else *unknown* — never a made-up 0.

The table is a starting point, not a price feed: list prices in USD per million tokens as the
providers published them on their pricing pages (OpenAI: https://openai.com/api/pricing/,
Anthropic: https://www.anthropic.com/pricing#api) when PRICES_TAKEN says. Providers change
prices; check a model's page before a large run and set the endpoint's own prices where they
differ (they win over the table). Batch prices are the providers' batch discount: 50% of the
list price at both OpenAI (Batch API) and Anthropic (Message Batches). Prompt caching and long
context surcharges (e.g. Anthropic's above 200K input tokens) are not modelled.

A price of 0 is a real price (a model on your own server); "not set" is NULL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..models import ModelEndpoint

#: When the list prices below were read off the providers' pages (year-month).
PRICES_TAKEN = "2025-10"
PRICES_SOURCE = "openai.com/api/pricing and anthropic.com/pricing"

BATCH_DISCOUNT = 0.5  # OpenAI Batch API and Anthropic Message Batches: half the list price

# (input, output) USD per 1M tokens, immediate (standard tier). Keyed by the model name as the
# API takes it; dated snapshots ("-2024-08-06", "-20250514") and "-latest" aliases resolve to
# their base name unless listed themselves (a snapshot priced differently from its base is).
_OPENAI: dict[str, tuple[float, float]] = {
    "gpt-5": (1.25, 10.00),
    "gpt-5-mini": (0.25, 2.00),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.00, 8.00),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4.1-nano": (0.10, 0.40),
    "gpt-4o": (2.50, 10.00),
    # The first gpt-4o snapshot kept its launch price.
    "gpt-4o-2024-05-13": (5.00, 15.00),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.00, 8.00),
    "o3-mini": (1.10, 4.40),
    "o4-mini": (1.10, 4.40),
    "o1": (15.00, 60.00),
}
_ANTHROPIC: dict[str, tuple[float, float]] = {
    "claude-opus-4-1": (15.00, 75.00),
    "claude-opus-4": (15.00, 75.00),
    "claude-opus-4-0": (15.00, 75.00),
    "claude-sonnet-4-5": (3.00, 15.00),
    "claude-sonnet-4": (3.00, 15.00),
    "claude-sonnet-4-0": (3.00, 15.00),
    "claude-haiku-4-5": (1.00, 5.00),
    "claude-3-7-sonnet": (3.00, 15.00),
    "claude-3-5-sonnet": (3.00, 15.00),
    "claude-3-5-haiku": (0.80, 4.00),
    "claude-3-opus": (15.00, 75.00),
    "claude-3-haiku": (0.25, 1.25),
}
LIST_PRICES: dict[str, dict[str, tuple[float, float]]] = {
    ModelEndpoint.Provider.OPENAI: _OPENAI,
    ModelEndpoint.Provider.ANTHROPIC: _ANTHROPIC,
}

_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|latest)$")


@dataclass(frozen=True)
class ListPrice:
    model: str  # the table's name for it
    input: float
    output: float
    batch_input: float
    batch_output: float

    @property
    def shown(self) -> dict[str, str]:
        return four_prices_shown(price=self)


def four_prices_shown(*, price: ListPrice | Prices) -> dict[str, str]:
    """The four prices as a page shows them ("—" where unknown)."""
    return {
        "input": per_mtok(price=price.input),
        "output": per_mtok(price=price.output),
        "batch_input": per_mtok(price=price.batch_input),
        "batch_output": per_mtok(price=price.batch_output),
    }


def list_price(*, provider: str, model: str) -> ListPrice | None:
    """The table's price of `model` at `provider`, or None when the table does not know it.

    Only OpenAI's and Anthropic's own APIs: an OpenAI-compatible server (a proxy, vLLM) naming
    the same model bills whatever its operator bills.
    """
    table = LIST_PRICES.get(provider, {})
    name = model.strip().lower()
    for candidate in (name, _SNAPSHOT.sub("", name)):
        if candidate in table:
            immediate_in, immediate_out = table[candidate]
            return ListPrice(
                model=candidate,
                input=immediate_in,
                output=immediate_out,
                batch_input=round(immediate_in * BATCH_DISCOUNT, 6),
                batch_output=round(immediate_out * BATCH_DISCOUNT, 6),
            )
    return None


def list_price_table() -> list[dict[str, object]]:
    """The table as the pages show it: provider label and ListPrice, in the table's order."""
    rows: list[dict[str, object]] = []
    for provider, table in LIST_PRICES.items():
        for model in table:
            price = list_price(provider=provider, model=model)
            if price is not None:
                rows.append({"provider": ModelEndpoint.Provider(provider).label, "price": price})
    return rows


@dataclass(frozen=True)
class Prices:
    """USD per million tokens an endpoint's requests cost; None where nobody knows.

    `source` says where the immediate prices come from: "endpoint" (the admin's), "list" (the
    table, as of PRICES_TAKEN) or "unknown". Batch prices fall back on the immediate ones (an
    upper bound) when neither the endpoint nor the table has a batch price.
    """

    input: float | None
    output: float | None
    batch_input: float | None
    batch_output: float | None
    source: str

    @property
    def known(self) -> bool:
        return self.input is not None and self.output is not None

    @property
    def shown(self) -> dict[str, str]:
        return four_prices_shown(price=self)

    @property
    def batch_known(self) -> bool:
        return self.batch_input is not None and self.batch_output is not None

    def cost(self, *, input_tokens: int, output_tokens: int, batch: bool = False) -> float | None:
        """USD for these tokens, or None when a price is unknown."""
        price_in, price_out = (
            (self.batch_input, self.batch_output) if batch else (self.input, self.output)
        )
        if price_in is None or price_out is None:
            return None
        return (input_tokens * price_in + output_tokens * price_out) / 1_000_000


def endpoint_prices(*, endpoint: ModelEndpoint) -> Prices:
    """The endpoint's prices, field by field: its own value, else the list price, else None."""
    listed = list_price(provider=endpoint.provider, model=endpoint.model)

    def pick(own: float | None, table: float | None) -> float | None:
        return own if own is not None else table

    price_in = pick(endpoint.price_input_per_mtok, listed.input if listed else None)
    price_out = pick(endpoint.price_output_per_mtok, listed.output if listed else None)
    batch_in = pick(endpoint.price_batch_input_per_mtok, listed.batch_input if listed else None)
    batch_out = pick(endpoint.price_batch_output_per_mtok, listed.batch_output if listed else None)
    own = endpoint.price_input_per_mtok is not None or endpoint.price_output_per_mtok is not None
    if price_in is None or price_out is None:
        source = "unknown"
    elif own:
        source = "endpoint"
    else:
        source = "list"
    return Prices(
        input=price_in,
        output=price_out,
        batch_input=batch_in if batch_in is not None else price_in,
        batch_output=batch_out if batch_out is not None else price_out,
        source=source,
    )


def usd(*, amount: float | None) -> str:
    """Money as people read it: "price unknown" for None, cents for sums from a dollar up,
    four decimals below (a few requests cost fractions of a cent)."""
    if amount is None:
        return "price unknown"
    if amount == 0:
        return "0 USD"
    if abs(amount) >= 1:
        return f"{amount:,.2f} USD"
    if abs(amount) >= 0.0001:
        return f"{amount:.4f} USD"
    return "< 0.0001 USD"


def per_mtok(*, price: float | None) -> str:
    """A price per million tokens for tables: "—" when unknown."""
    if price is None:
        return "—"
    return f"{price:g}"
