"""Serving the ingress and the UI with uvicorn, with the timeouts uvicorn lacks.

uvicorn closes an idle kept-alive connection, but not one that sends its request slowly: a
client sending a byte a second holds a connection (and its slot under `limit_concurrency`)
for as long as it likes, and a few hundred of them stop a server (slowloris). `TimedH11` is
uvicorn's h11 protocol with two deadlines: the request line and headers must arrive within
`HEADER_TIMEOUT_S` of the connection opening (or of the previous response), the body within
`BODY_TIMEOUT_S` of the headers. A request that misses one is answered
`408 Request Timeout` and its connection closed. `config(app, ...)` builds a uvicorn config
using it; `statecharts api` and `statecharts ui` serve through it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT_S = 10.0
"""Seconds a client has to send its request line and headers."""

BODY_TIMEOUT_S = 30.0
"""Seconds a client has to send its body once the headers are in (1 MiB at 35 KB/s)."""

_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 16\r\nconnection: close\r\n\r\nrequest too slow"
)


class TimedH11(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and a body deadline (module docstring).
    The deadlines are class attributes; `config` makes a subclass with the ones asked for."""

    header_timeout_s = HEADER_TIMEOUT_S
    body_timeout_s = BODY_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_for: Any = None  # the h11 state the deadline is for

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _watch(self) -> None:
        """Keep the deadline of what the client is sending now: a request's headers (from the
        connection's opening or the previous response on), or its body; none while the app
        answers. Data arriving never moves a deadline: a byte a second does not buy time."""
        state = self.conn.their_state
        if state is h11.IDLE or state is h11.SEND_BODY:
            if self._waiting_for is not state:
                seconds = self.header_timeout_s if state is h11.IDLE else self.body_timeout_s
                self._arm(state, seconds)
        else:
            self._disarm()

    def _arm(self, state: Any, seconds: float) -> None:
        self._disarm()
        self._waiting_for = state
        self._deadline = self.loop.call_later(seconds, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        self._deadline, self._waiting_for = None, None

    def _too_slow(self) -> None:
        """The deadline passed: answer 408 unless a response has begun, and close."""
        self._deadline = None
        if self.transport.is_closing():
            return
        if self.cycle is None or not self.cycle.response_started or self.cycle.response_complete:
            self.transport.write(_TIMED_OUT)
        self.transport.close()


def config(
    app: Any,
    host: str,
    port: int,
    *,
    log_level: str = "info",
    header_timeout_s: float = HEADER_TIMEOUT_S,
    body_timeout_s: float = BODY_TIMEOUT_S,
    **options: Any,
) -> uvicorn.Config:
    """A uvicorn config serving `app` with `TimedH11` (no `Server` header)."""
    protocol = type(
        "TimedH11",
        (TimedH11,),
        {"header_timeout_s": header_timeout_s, "body_timeout_s": body_timeout_s},
    )
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        http=protocol,
        server_header=False,
        **options,
    )


def serve(app: Any, host: str, port: int, *, log_level: str = "info") -> None:
    """Serve `app` until interrupted (`config`'s defaults)."""
    uvicorn.Server(config(app, host, port, log_level=log_level)).run()
