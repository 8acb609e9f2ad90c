"""The fake CRM's webhooks over HTTP: the webhook ingress (`persistence.ingress`) served by
uvicorn on loopback in a thread, and the sender the CRM posts with, signing each body with
the shared secret as real CRMs sign theirs (hex HMAC-SHA256 of the raw body)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any

import orjson

from persistence.runtime import Runtime

HEADER = "X-CRM-Signature"
"""The header the fake CRM puts its signature in."""


class LoopbackIngress:
    """The ingress over `runtime` on 127.0.0.1 (a free port), requiring the CRM's signature
    on `signed` workflows; `close()` stops it."""

    def __init__(self, runtime: Runtime, secret: str, signed: tuple[str, ...]) -> None:
        import uvicorn

        from persistence.ingress import Signature, create_api
        from persistence.serving import config

        self.signature = Signature(secret, HEADER)
        app = create_api(runtime, signatures={name: self.signature for name in signed})
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(
            config(app, "127.0.0.1", port, log_level="warning", access_log=False)
        )
        self.thread = threading.Thread(target=self.server.run, name="ingress", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the webhook ingress did not start")
            time.sleep(0.01)

    def post(self, path: str, body: bytes, *, signed: bool = True) -> tuple[int, Any]:
        """POST `body` as the CRM does (signed unless told otherwise): (status, JSON answer)."""
        headers = {"Content-Type": "application/json"}
        if signed:
            headers[HEADER] = self.signature.sign(body)
        request = urllib.request.Request(self.url + path, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return answer.status, orjson.loads(answer.read())
        except urllib.error.HTTPError as refused:
            return refused.code, orjson.loads(refused.read() or b"null")

    def close(self) -> None:
        """Stop the server and wait for its thread."""
        self.server.should_exit = True
        self.thread.join(10)
