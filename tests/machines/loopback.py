"""Servers on loopback that speak the documented shapes of EspoCRM's REST API, ClickUp's API v2,
a Mistral-style chat completions API and SMTP, for testing the real adapters through their real
clients (httpx, smtplib). State is in memory; ``fail(times, status, headers)`` makes the next
answers fail; ``delay_s`` makes answers slow; every request is recorded."""

from __future__ import annotations

import contextlib
import json
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Seen:
    """One request as the server saw it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class FakeApi:
    """The three HTTP APIs' state and failure switches."""

    api_key: str = "espo-key"
    clickup_token: str = "pk_clickup"
    mistral_key: str = "mistral-key"
    stages: list[str] = field(
        default_factory=lambda: ["Prospecting", "Proposal", "Negotiation", "Closed Won"]
    )
    deals: dict[str, dict[str, Any]] = field(default_factory=dict)
    emails: list[dict[str, Any]] = field(default_factory=list)
    tasks: list[dict[str, Any]] = field(default_factory=list)
    answer: str = "Pricing agreed.\nNext step: send the contract (Ann)."
    seen: list[Seen] = field(default_factory=list)
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    delay_s: float = 0.0

    def fail(
        self, times: int = 1, status: int = 503, headers: dict[str, str] | None = None
    ) -> None:
        """The next ``times`` requests answer ``status`` with ``headers``."""
        self.failures.extend([(status, headers or {})] * times)

    # -- EspoCRM ------------------------------------------------------------------------------
    def espo(
        self, method: str, parts: list[str], query: dict[str, list[str]], headers: dict[str, str]
    ) -> tuple[int, Any]:
        if headers.get("x-api-key") != self.api_key:
            return 401, {"message": "Unauthorized"}
        if parts == ["Metadata"]:
            return 200, {
                "entityDefs": {
                    "Opportunity": {"fields": {"stage": {"type": "enum", "options": self.stages}}}
                }
            }
        if parts[:1] == ["Opportunity"] and len(parts) == 2:
            deal = self.deals.get(parts[1])
            return (200, deal) if deal else (404, {"message": "Not Found"})
        if parts == ["Opportunity"]:
            return 200, self._page(list(self.deals.values()), query)
        if parts == ["Email"]:
            return 200, self._page(self.emails, query)
        return 404, {"message": "no such endpoint"}

    def _page(self, rows: list[dict[str, Any]], query: dict[str, list[str]]) -> dict[str, Any]:
        for i in range(10):
            kind = query.get(f"where[{i}][type]", [None])[0]
            if kind is None:
                break
            attribute = query[f"where[{i}][attribute]"][0]
            if kind == "in":
                wanted = set(query.get(f"where[{i}][value][]", []))
                rows = [r for r in rows if r.get(attribute) in wanted]
            elif kind == "equals":
                rows = [r for r in rows if r.get(attribute) == query[f"where[{i}][value]"][0]]
            elif kind == "after":
                rows = [r for r in rows if str(r.get(attribute)) > query[f"where[{i}][value]"][0]]
        offset = int(query.get("offset", ["0"])[0])
        size = int(query.get("maxSize", ["20"])[0])
        return {"total": len(rows), "list": rows[offset : offset + size]}

    # -- ClickUp ------------------------------------------------------------------------------
    def clickup(
        self,
        method: str,
        parts: list[str],
        query: dict[str, list[str]],
        headers: dict[str, str],
        body: Any,
    ) -> tuple[int, Any]:
        if headers.get("authorization") != self.clickup_token:
            return 401, {"err": "Token invalid", "ECODE": "OAUTH_025"}
        if len(parts) != 3 or parts[0] != "list" or parts[2] != "task":
            return 404, {"err": "Route not found"}
        if method == "POST":
            task = {"id": f"86a{len(self.tasks) + 1:04d}", "list": parts[1], **body}
            self.tasks.append(task)
            return 200, {"id": task["id"], "name": task["name"]}
        [wanted] = json.loads(query["custom_fields"][0])
        found = [
            t
            for t in self.tasks
            if t["list"] == parts[1]
            and any(
                f["id"] == wanted["field_id"] and f["value"] == wanted["value"]
                for f in t.get("custom_fields", [])
            )
        ]
        return 200, {"tasks": [{"id": t["id"], "name": t["name"]} for t in found]}

    # -- Mistral ------------------------------------------------------------------------------
    def chat(self, headers: dict[str, str], body: Any) -> tuple[int, Any]:
        if headers.get("authorization") != f"Bearer {self.mistral_key}":
            return 401, {"message": "Unauthorized", "request_id": "x"}
        if not body.get("model") or not body.get("messages"):
            return 422, {"object": "error", "message": "model and messages are required"}
        return 200, {
            "id": "cmpl-1",
            "object": "chat.completion",
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": self.answer},
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20},
        }


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            url = urlsplit(self.path)
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            headers = {k.lower(): v for k, v in self.headers.items()}
            query = parse_qs(url.query)
            api.seen.append(Seen(self.command, url.path, query, headers, body))
            if api.delay_s:
                time.sleep(api.delay_s)
            extra: dict[str, str] = {}
            if api.failures:
                status, extra = api.failures.pop(0)
                answer: Any = {"message": "failing on purpose"}
            else:
                parts = [p for p in url.path.split("/") if p]
                if parts[:2] == ["api", "v1"]:
                    status, answer = api.espo(self.command, parts[2:], query, headers)
                elif parts[:2] == ["api", "v2"]:
                    status, answer = api.clickup(self.command, parts[2:], query, headers, body)
                elif parts == ["v1", "chat", "completions"]:
                    status, answer = api.chat(headers, body)
                else:
                    status, answer = 404, {"message": "not found"}
            data = json.dumps(answer).encode()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._answer(status, extra, data)  # unless the client timed out and left

        def _answer(self, status: int, extra: dict[str, str], data: bytes) -> None:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in extra.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _serve

    return Handler


@contextmanager
def http_server(api: FakeApi) -> Iterator[str]:
    """Serve ``api`` on 127.0.0.1 (a free port); yields the base URL; shut down after."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


# -- SMTP ----------------------------------------------------------------------------------------


@dataclass
class FakeSmtp:
    """A mail server's received messages; ``refuse`` answers ``RCPT TO`` with that reply."""

    messages: list[str] = field(default_factory=list)
    refuse: str | None = None


def _smtp_handler(smtp: FakeSmtp) -> type[socketserver.StreamRequestHandler]:
    class Handler(socketserver.StreamRequestHandler):
        timeout = 5

        def reply(self, line: str) -> None:
            self.wfile.write(line.encode() + b"\r\n")

        def handle(self) -> None:
            self.reply("220 loopback ESMTP")
            while True:
                line = self.rfile.readline().decode(errors="replace").rstrip("\r\n")
                if not line:
                    return
                verb = line.split(" ", 1)[0].upper()
                if verb in ("EHLO", "HELO"):
                    self.reply("250 loopback")
                elif verb == "MAIL":
                    self.reply("250 OK")
                elif verb == "RCPT":
                    self.reply(smtp.refuse or "250 OK")
                elif verb == "DATA":
                    self.reply("354 end with <CRLF>.<CRLF>")
                    lines = []
                    while (data := self.rfile.readline().decode(errors="replace")) not in (
                        ".\r\n",
                        "",
                    ):
                        lines.append(data)
                    smtp.messages.append("".join(lines))
                    self.reply("250 queued")
                elif verb == "QUIT":
                    self.reply("221 bye")
                    return
                else:
                    self.reply("250 OK")

    return Handler


@contextmanager
def smtp_server(smtp: FakeSmtp) -> Iterator[int]:
    """Serve SMTP for ``smtp`` on 127.0.0.1; yields the port."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _smtp_handler(smtp))
    server.daemon_threads = True
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
