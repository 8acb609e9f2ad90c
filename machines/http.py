"""The HTTP edge of the real adapters: one ``httpx`` client per adapter, with timeouts, and
every failure mapped onto the error name the machine declares for that system.

A 429 or 503 answer's ``Retry-After`` (seconds or an HTTP date; ClickUp's
``X-RateLimit-Reset`` epoch seconds too) becomes the error's ``retry_after`` in milliseconds,
which ``statecharts.retry_policy`` waits instead of its own backoff. Messages name the method,
the path and the status, never a header (the API keys stay out of logs).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

DEFAULT_TIMEOUT_S = 10.0


def retry_after_ms(headers: Mapping[str, str], now_s: float | None = None) -> int | None:
    """The wait a server asked for, in ms: ``Retry-After`` (seconds or HTTP date), else
    ``X-RateLimit-Reset`` (epoch seconds); None if neither is usable."""
    now = time.time() if now_s is None else now_s
    value = headers.get("retry-after")
    if value is not None:
        text = value.strip()
        if text.isdigit():
            return int(text) * 1000
        try:
            when = parsedate_to_datetime(text).timestamp()
        except (TypeError, ValueError):
            return None
        return max(0, int((when - now) * 1000))
    reset = headers.get("x-ratelimit-reset")
    if reset is not None and reset.strip().isdigit():
        return max(0, int((int(reset.strip()) - now) * 1000))
    return None


class ApiClient:
    """JSON over HTTP to ``base_url`` with fixed ``headers``; failures raise ``error``
    (the machine's declared name for this system) with ``status`` and ``retry_after``."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        error: type[Exception],
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.error = error
        self._client = httpx.Client(
            base_url=base_url.rstrip("/") + "/",
            headers=dict(headers),
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Any = None,
        json: Any = None,
        missing_ok: bool = False,
    ) -> Any:
        """The decoded JSON answer (None for a 404 when ``missing_ok``)."""
        try:
            response = self._client.request(method, path.lstrip("/"), params=params, json=json)
        except httpx.TimeoutException as exc:
            raise self._fail(f"{method} {path}: timed out ({type(exc).__name__})") from exc
        except httpx.HTTPError as exc:
            raise self._fail(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if missing_ok and response.status_code == 404:
            return None
        if response.status_code >= 400:
            wait = retry_after_ms(response.headers) if response.status_code in (429, 503) else None
            raise self._fail(
                f"{method} {path}: HTTP {response.status_code} {response.text[:200]!r}",
                response.status_code,
                wait,
            )
        try:
            return response.json()
        except ValueError as exc:
            raise self._fail(
                f"{method} {path}: the answer is not JSON: {response.text[:200]!r}",
                response.status_code,
            ) from exc

    def _fail(
        self, message: str, status: int | None = None, retry_after: int | None = None
    ) -> Exception:
        error = self.error(message)
        error.status = status  # type: ignore[attr-defined]
        if retry_after is not None:
            error.retry_after = retry_after  # type: ignore[attr-defined]
        return error

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()
