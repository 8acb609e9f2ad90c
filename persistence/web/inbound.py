"""What the two web apps (the operator UI and the webhook ingress) do alike with what a caller
sends: refuse the event types only the engine and the runtime send, and answer a client that
stopped sending its body.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

RESERVED_PREFIXES = ("xstate.", "statecharts.")
"""Event types only the engine (actor results, timers) and the runtime (cancel, resume, fork,
reset) send; refused from outside."""


async def client_gone(request: Request, exc: Exception) -> Response:
    """The answer to a request whose client stopped sending its body (it disconnected, or the
    server's body timeout cut it off: `persistence.serving`): 408, never logged as an error
    (nobody reads the answer; an exception handler for `ClientDisconnect`)."""
    return Response("request body not received", 408, media_type="text/plain")
