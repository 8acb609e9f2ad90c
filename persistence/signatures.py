"""Webhook signatures as the providers make them, checked by the ingress (`persistence.ingress`).

A `Signature` says how one workflow's webhooks are signed: an HMAC-SHA256 under a shared secret
of the raw body, and, for the providers that sign one, of a timestamp, which must lie within a
replay window (`tolerance_s`, 300 s as Stripe, Slack and Standard Webhooks use). The presets
follow each provider's documented convention:

- `Signature(secret)`: `X-Signature-256: sha256=<hex>` of the body; with `timestamp_header`,
  of `<t>.<body>` within the window; a delivery id where `delivery_header`/`delivery_field` say.
- `Signature.github(secret)`: `X-Hub-Signature-256: sha256=<hex>` of the body. GitHub signs no
  time, so there is no replay window: a replay is caught only by its delivery id,
  `X-GitHub-Delivery` (a header GitHub does not sign).
- `Signature.stripe(secret)`: `Stripe-Signature: t=<t>,v1=<hex>` of `<t>.<body>`, 300 s window;
  delivery id: the event's `id` (`evt_...`, in the signed body).
- `Signature.slack(secret)`: `X-Slack-Signature: v0=<hex>` of `v0:<t>:<body>`, the time in
  `X-Slack-Request-Timestamp`, 300 s window; delivery id: the Events API's `event_id`.
- `Signature.standard(secret)` (Standard Webhooks, Svix): `webhook-signature: v1,<base64>` of
  `<webhook-id>.<webhook-timestamp>.<body>` under the base64 secret after `whsec_`, 300 s
  window; delivery id: `webhook-id` (signed).

Timestamps are Unix seconds; one further than `tolerance_s` from the ingress's clock, in the
past or the future, is refused. Signatures are compared in constant time; several offered at
once (Stripe's `v1=` list, Standard Webhooks' space-separated list, sent while a secret is
rolled) are each tried. An empty secret is refused: anyone can compute an HMAC under it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

Scheme = Literal["hmac", "stripe", "slack", "standard"]
"""How the signed content and the header are laid out (see the module docstring)."""

DEFAULT_TOLERANCE_S = 300
"""The replay window in seconds: Stripe's, Slack's and Standard Webhooks' default."""

_MAX_TIMESTAMP_DIGITS = 12


class SignatureError(ValueError):
    """Why a request's signature was refused (answered `401` by the ingress)."""


@dataclass(frozen=True, slots=True)
class Verified:
    """A request whose signature checked out. `delivery`: the id in `delivery_header` (None
    without one), `delivery_signed` when the signature covers that header (Standard Webhooks'
    `webhook-id`); `digest`: SHA-256 of the expected signature, so of everything signed (the
    body, and the timestamp where one is signed): the same for a replay of the request however
    its signature header is dressed (one of several offered, reordered), another for any other
    request the sender signs."""

    delivery: str | None
    delivery_signed: bool
    digest: str


@dataclass(frozen=True, slots=True)
class Signature:
    """How one workflow's webhooks are signed. The default, `scheme="hmac"`, puts `prefix` + the
    hex HMAC-SHA256 of the raw body under `secret` in `header`; with `timestamp_header`, the
    signed content is `<timestamp>.<body>` and the timestamp must be within `tolerance_s` of
    now. `delivery_header` or `delivery_field` names where each event's delivery id is (the
    ingress applies an event once per run and delivery id). Use the presets for providers."""

    secret: str
    header: str = "X-Signature-256"
    prefix: str = "sha256="
    timestamp_header: str | None = None
    tolerance_s: int = DEFAULT_TOLERANCE_S
    delivery_header: str | None = None
    delivery_field: str | None = None
    scheme: Scheme = "hmac"

    def __post_init__(self) -> None:
        if not isinstance(self.secret, str) or not self.secret.strip():
            raise ValueError(
                "Signature: the secret is empty; anyone can compute an HMAC under "
                "an empty key (give the provider's signing secret)"
            )
        if self.scheme not in ("hmac", "stripe", "slack", "standard"):
            raise ValueError(f"Signature: unknown scheme {self.scheme!r}")
        if (
            isinstance(self.tolerance_s, bool)
            or not isinstance(self.tolerance_s, int)
            or self.tolerance_s < 1
        ):
            raise ValueError(
                f"Signature: tolerance_s must be a whole number of seconds of at "
                f"least 1, got {self.tolerance_s!r}"
            )
        if self.scheme in ("slack", "standard") and not self.timestamp_header:
            raise ValueError(f"Signature: the {self.scheme} scheme needs a timestamp_header")
        if self.scheme == "standard":
            self._key()  # a secret that is not base64 is refused here, not at the first request

    # -- presets ---------------------------------------------------------------------------
    @classmethod
    def github(cls, secret: str) -> Signature:
        """GitHub's `X-Hub-Signature-256: sha256=<hex>` of the body; no timestamp (no replay
        window), events deduplicated by `X-GitHub-Delivery` (a header GitHub does not sign)."""
        return cls(secret, "X-Hub-Signature-256", "sha256=", delivery_header="X-GitHub-Delivery")

    @classmethod
    def stripe(cls, secret: str, tolerance_s: int = DEFAULT_TOLERANCE_S) -> Signature:
        """Stripe's `Stripe-Signature: t=<t>,v1=<hex>` of `<t>.<body>`; the event's `id`
        (`evt_...`, in the signed body) is its delivery id."""
        return cls(
            secret,
            "Stripe-Signature",
            "",
            tolerance_s=tolerance_s,
            delivery_field="id",
            scheme="stripe",
        )

    @classmethod
    def slack(cls, secret: str, tolerance_s: int = DEFAULT_TOLERANCE_S) -> Signature:
        """Slack's `X-Slack-Signature: v0=<hex>` of `v0:<t>:<body>` with the time in
        `X-Slack-Request-Timestamp`; the Events API's `event_id` is the delivery id."""
        return cls(
            secret,
            "X-Slack-Signature",
            "v0=",
            "X-Slack-Request-Timestamp",
            tolerance_s,
            delivery_field="event_id",
            scheme="slack",
        )

    @classmethod
    def standard(cls, secret: str, tolerance_s: int = DEFAULT_TOLERANCE_S) -> Signature:
        """Standard Webhooks (Svix and others): `webhook-signature: v1,<base64>` of
        `<webhook-id>.<webhook-timestamp>.<body>` under the base64 secret (`whsec_...`);
        `webhook-id` is the delivery id (and signed)."""
        return cls(
            secret,
            "webhook-signature",
            "v1,",
            "webhook-timestamp",
            tolerance_s,
            delivery_header="webhook-id",
            scheme="standard",
        )

    # -- signing ---------------------------------------------------------------------------
    def sign(self, body: bytes, timestamp: int | None = None, delivery_id: str = "") -> str:
        """The signature header's value a sender puts on `body` (sent at `timestamp`, Unix
        seconds, for the schemes that sign one; `delivery_id` for Standard Webhooks)."""
        if self.scheme == "stripe":
            return f"t={timestamp},v1={self._hex(f'{timestamp}.'.encode() + body)}"
        if self.scheme == "slack":
            return self.prefix + self._hex(f"v0:{timestamp}:".encode() + body)
        if self.scheme == "standard":
            content = f"{delivery_id}.{timestamp}.".encode() + body
            digest = hmac.new(self._key(), content, hashlib.sha256).digest()
            return self.prefix + base64.b64encode(digest).decode()
        signed = body if self.timestamp_header is None else f"{timestamp}.".encode() + body
        return self.prefix + self._hex(signed)

    def headers(self, body: bytes, timestamp: int, delivery_id: str = "") -> dict[str, str]:
        """Every header a sender of `body` at `timestamp` sets: the signature, the timestamp
        header and the delivery header where the scheme has them."""
        found = {self.header: self.sign(body, timestamp, delivery_id)}
        if self.timestamp_header:
            found[self.timestamp_header] = str(timestamp)
        if self.delivery_header and delivery_id:
            found[self.delivery_header] = delivery_id
        return found

    def accepts(self, body: bytes, offered: str | None) -> bool:
        """True when `offered` is the signature of `body`, for a signature without a timestamp
        (`verify` checks the others, with their headers)."""
        if self.scheme != "hmac" or self.timestamp_header is not None:
            raise TypeError(f"a {self.scheme} signature signs a timestamp: use verify()")
        return offered is not None and _same(offered, self.sign(body))

    # -- checking --------------------------------------------------------------------------
    def verify(self, body: bytes, headers: Mapping[str, str], now_ms: int) -> str | None:
        """Check a request's signature; `SignatureError` naming what is wrong. Returns the
        delivery id from `delivery_header` (None without one). `headers` is looked up
        case-insensitively."""
        return self.check(body, headers, now_ms).delivery

    def check(self, body: bytes, headers: Mapping[str, str], now_ms: int) -> Verified:
        """`verify`, answering what the ingress keeps of a signed request (`Verified`)."""
        get = {name.lower(): value for name, value in headers.items()}.get
        offered = get(self.header.lower())
        if not offered:
            raise SignatureError(f"missing {self.header} signature")
        delivery = get(self.delivery_header.lower()) if self.delivery_header else None
        if self.scheme == "stripe":
            parts = [p.partition("=") for p in offered.split(",")]
            stamps = [v.strip() for k, _, v in parts if k.strip() == "t"]
            candidates = [v.strip() for k, _, v in parts if k.strip() == "v1"]
            timestamp = self._timestamp(stamps[0] if len(stamps) == 1 else None, now_ms)
            expected = self.sign(body, timestamp).rpartition("v1=")[2]
        else:
            timestamp = None
            if self.timestamp_header is not None:
                timestamp = self._timestamp(get(self.timestamp_header.lower()), now_ms)
            if self.scheme == "standard" and not delivery:
                raise SignatureError(f"missing {self.delivery_header} header (it is signed)")
            candidates = offered.split(" ") if self.scheme == "standard" else [offered]
            expected = self.sign(body, timestamp, delivery or "")
        # every candidate compared, in constant time each: no early exit on the first
        if not sum(_same(c, expected) for c in candidates):
            raise SignatureError(f"wrong {self.header} signature")
        return Verified(
            delivery, self.scheme == "standard", hashlib.sha256(expected.encode()).hexdigest()
        )

    def _timestamp(self, raw: str | None, now_ms: int) -> int:
        """The signed timestamp, checked against the replay window."""
        where = self.timestamp_header or f"{self.header} t="
        if raw is None or not raw.isdigit() or len(raw) > _MAX_TIMESTAMP_DIGITS:
            raise SignatureError(f"missing or malformed timestamp in {where} (Unix seconds)")
        timestamp = int(raw)
        off = timestamp - now_ms // 1000
        if abs(off) > self.tolerance_s:
            when = f"{-off} s old" if off < 0 else f"{off} s in the future"
            raise SignatureError(
                f"timestamp in {where} is {when}, outside the {self.tolerance_s} s replay window"
            )
        return timestamp

    def _hex(self, content: bytes) -> str:
        return hmac.new(self.secret.encode(), content, hashlib.sha256).hexdigest()

    def _key(self) -> bytes:
        """Standard Webhooks' key: the base64 after `whsec_`."""
        encoded = self.secret.removeprefix("whsec_")
        try:
            key = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError(
                "Signature.standard: the secret must be base64 (after an optional "
                "'whsec_' prefix), as Standard Webhooks issues it"
            ) from exc
        if not key:
            raise ValueError("Signature.standard: the secret is empty")
        return key

    def __repr__(self) -> str:  # never the secret: reprs end up in logs
        return f"Signature(scheme={self.scheme!r}, header={self.header!r}, secret=<hidden>)"


def _same(offered: str, expected: str) -> bool:
    """Constant-time comparison of two header values (any text: compared as UTF-8)."""
    return hmac.compare_digest(offered.encode("utf-8", "surrogateescape"), expected.encode())
