"""How a webhook delivery is signed, and how a receiver checks it (pure, no Django).

The header is ``MentalBench-Signature: t=<unix seconds>,v1=<hex>``, where the hex is
HMAC-SHA256 with the hook's secret over ``"<t>.<body>"`` — the scheme Stripe uses: the
timestamp is signed with the body, so a receiver that refuses old timestamps refuses a replayed
delivery too. docs/webhooks.md has the same check for receivers to copy.
"""

from __future__ import annotations

import hashlib
import hmac
import time

SIGNATURE_HEADER = "MentalBench-Signature"
EVENT_HEADER = "MentalBench-Event"
DELIVERY_HEADER = "MentalBench-Delivery"
# How old a signature a receiver should accept, by default.
TOLERANCE_SECONDS = 300


def signature_header(*, secret: str, body: bytes, timestamp: int) -> str:
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def signature_verify(
    *,
    secret: str,
    body: bytes,
    header: str,
    now: float | None = None,
    tolerance: int = TOLERANCE_SECONDS,
) -> bool:
    """Whether `header` signs `body` with `secret` within `tolerance` seconds of `now`."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
        given = parts["v1"]
    except (KeyError, ValueError):
        return False
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = signature_header(secret=secret, body=body, timestamp=timestamp).split("v1=")[1]
    return hmac.compare_digest(expected, given)
