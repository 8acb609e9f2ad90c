"""Webhook ingress: an ASGI app (FastAPI, the `ui` extra) that turns HTTP requests into starts
and events of durable runs, addressed by run id or by the key a run was started with.

- `POST /api/workflows/{name}/runs` `{"key": ..., "input": ...}`: start, idempotent by key
  (`201` created, `200` with the same body when the key's run already existed);
- `POST /api/workflows/{name}/runs/{key}/events` and `POST /api/runs/{run_id}/events` with an
  event object: queue it (`202`); `404` unknown run or key, `409` ended run, `422` (with the
  offending path) for a value no store holds or an event type no state of the machine accepts;
- `GET /api/runs/{run_id}`, `GET /api/workflows/{name}/runs/{key}`: the run.

With a token every request must carry it (`Authorization: Bearer`, as the UI). A workflow may
also require a signature: the hex HMAC-SHA256 of the raw request body in a header (GitHub's
`X-Hub-Signature-256: sha256=<hex>` style; header, prefix and secret configurable), compared in
constant time. Bodies over `max_body` bytes get `413`. Serve it with `statecharts api` or mount
`create_api(runtime)` into your own FastAPI app.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.concurrency import run_in_threadpool

from persistence.runtime import Runtime, UnknownWorkflowError
from persistence.stores import RunFinishedError, RunNotFoundError, RunRecord
from persistence.ui.api import RunSummary, summary
from persistence.ui.app import document_token
from persistence.ui.security import has_token
from statecharts.errors import ContextError
from statecharts.frozen import freeze, thaw
from statecharts.tracing import valid_traceparent

MAX_BODY = 1_048_576
"""Default request body limit in bytes (1 MiB)."""

RESERVED_PREFIXES = ("xstate.", "statecharts.")
"""Event types only the engine sends; refused from outside."""

OPEN_PATHS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
"""Served without the token: the API's description, no run data."""

T = TypeVar("T")


def _inside(request: Request) -> str:
    """The request's path inside this app (without the prefix it is mounted under)."""
    path: str = request.scope["path"]
    root: str = request.scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


@dataclass(frozen=True, slots=True)
class Signature:
    """How one workflow's webhooks are signed: `header` holds `prefix` + the hex HMAC-SHA256
    of the raw body under `secret`."""

    secret: str
    header: str = "X-Signature-256"
    prefix: str = "sha256="

    def sign(self, body: bytes) -> str:
        """The header value a sender puts on `body`."""
        return self.prefix + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()

    def accepts(self, body: bytes, offered: str | None) -> bool:
        """True when `offered` is the signature of `body` (constant-time comparison)."""
        expected = self.sign(body).encode()
        return offered is not None and hmac.compare_digest(offered.encode(), expected)


class Refused(Exception):
    """A request answered with an error status and JSON detail."""

    def __init__(self, status: int, detail: Any) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


def invalid(path: str, message: str) -> Refused:
    """A 422 naming the offending place in the body (FastAPI's validation error shape)."""
    loc = ["body", *[part for part in path.split(".") if part]] if path != "<root>" else ["body"]
    return Refused(422, [{"loc": loc, "msg": message, "type": "value_error"}])


START_EXAMPLE = {"key": "deal-42", "input": {"email": "ann@example.com", "source": "crm"}}
EVENT_EXAMPLE = {"type": "REPLIED", "message_id": "m-17"}
RUN_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "no or wrong token, or a bad signature"},
    404: {"description": "no such workflow, run or key"},
    413: {"description": "request body over the size limit"},
    422: {"description": "not a JSON object, a value no store holds, or an event no state "
                         "accepts; `detail[0].loc` names the place"},
}


def _body_doc(example: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": dict(schema), "examples": {"webhook": {"value": dict(example)}}}}}}  # fmt: skip


START_SCHEMA = {"type": "object", "properties": {
    "key": {"type": "string", "description": "the caller's handle; idempotent by it"},
    "input": {"description": "the run's input (any JSON value)"}}}  # fmt: skip
EVENT_SCHEMA = {"type": "object", "required": ["type"],
                "properties": {"type": {"type": "string"}}, "additionalProperties": True}


class Queued(RunSummary):
    """The event was queued for the run; a worker applies it."""

    inbox_id: int


def create_api(runtime: Runtime, *, token: str | None = None,
               signatures: Mapping[str, Signature] | None = None,
               max_body: int = MAX_BODY) -> FastAPI:  # fmt: skip
    """The ingress app over `runtime` (see the module docstring)."""
    signed = dict(signatures or {})
    app = FastAPI(title="statecharts webhook ingress", version="1",
                  description=__doc__, responses=RUN_RESPONSES)  # fmt: skip

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse({"detail": exc.detail}, exc.status, headers=headers)

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Any]) -> Response:
        if token and _inside(request) not in OPEN_PATHS and not has_token(request, token):
            return JSONResponse({"detail": "missing or wrong token"}, 401,
                                headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
        response: Response = await call_next(request)
        return response

    async def body_of(request: Request, workflow: str) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body:
            raise Refused(413, f"body over {max_body} bytes")
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > max_body:
                raise Refused(413, f"body over {max_body} bytes")
        signature = signed.get(workflow)
        offered = None if signature is None else request.headers.get(signature.header)
        if signature is not None and not signature.accepts(raw, offered):
            raise Refused(401, f"missing or wrong {signature.header} signature")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise invalid("<root>", f"not JSON: {exc}") from exc
        if not isinstance(data, dict):
            raise invalid("<root>", "expected a JSON object")
        try:
            return thaw(freeze(data, "", ContextError))
        except ContextError as exc:
            raise invalid(exc.path, str(exc)) from exc

    async def call(fn: Callable[[], T]) -> T:
        try:
            return await run_in_threadpool(fn)
        except (RunNotFoundError, UnknownWorkflowError) as exc:
            raise Refused(404, str(exc)) from exc
        except RunFinishedError as exc:
            raise Refused(409, str(exc)) from exc

    def queue(run: RunRecord, event: Mapping[str, Any], traceparent: str | None) -> Response:
        kind = event.get("type")
        if not isinstance(kind, str) or not kind:
            raise invalid("type", "an event needs a non-empty string type")
        if kind.startswith(RESERVED_PREFIXES):
            raise invalid("type", f"{kind!r} is reserved for the engine")
        if run.terminal:
            raise Refused(409, f"run {run.id} has ended ({run.status})")
        refusal = runtime.refuses_event(run, kind)
        if refusal is not None:
            raise invalid("type", refusal)
        inbox_id = runtime.send(run.id, event, traceparent=traceparent)
        return JSONResponse(Queued(**summary(run).model_dump(), inbox_id=inbox_id).model_dump(),
                            202)  # fmt: skip

    @app.post("/api/workflows/{name}/runs", response_model=RunSummary, status_code=201,
              openapi_extra=_body_doc(START_EXAMPLE, START_SCHEMA),
              responses={200: {"model": RunSummary, "description": "the key's existing run"}})
    async def start(name: str, request: Request) -> Response:
        """Start a run of workflow `name`; idempotent by `key`: a second request with the same
        key answers `200` with the existing run (active or ended) and starts nothing."""
        body = await body_of(request, name)
        key = body.get("key")
        if key is not None and not isinstance(key, str):
            raise invalid("key", "the key must be a string")
        traceparent = valid_traceparent(request.headers.get("traceparent"))  # the caller's
        run, created = await call(lambda: runtime.start_run(name, body.get("input"), key,
                                                            traceparent=traceparent))
        return JSONResponse(summary(run).model_dump(), 201 if created else 200)

    @app.post("/api/workflows/{name}/runs/{key}/events", status_code=202,
              response_model=Queued, openapi_extra=_body_doc(EVENT_EXAMPLE, EVENT_SCHEMA),
              responses={409: {"description": "the key's run has ended"}})
    async def send_by_key(name: str, key: str, request: Request) -> Response:
        """Queue an event for the newest run of `name` started with `key`."""
        event = await body_of(request, name)
        traceparent = valid_traceparent(request.headers.get("traceparent"))
        return await call(lambda: queue(runtime.get_by_key(name, key), event, traceparent))

    @app.post("/api/runs/{run_id}/events", status_code=202, response_model=Queued,
              openapi_extra=_body_doc(EVENT_EXAMPLE, EVENT_SCHEMA),
              responses={409: {"description": "the run has ended"}})
    async def send_by_id(run_id: str, request: Request) -> Response:
        """Queue an event for the run with this id (signed as its workflow's webhooks are)."""
        run = await call(lambda: runtime.get(run_id))
        event = await body_of(request, run.workflow_name)
        traceparent = valid_traceparent(request.headers.get("traceparent"))
        return await call(lambda: queue(run, event, traceparent))

    @app.get("/api/runs/{run_id}", response_model=RunSummary)
    async def get_run(run_id: str) -> RunSummary:
        """The run with this id."""
        return summary(await call(lambda: runtime.get(run_id)))

    @app.get("/api/workflows/{name}/runs/{key}", response_model=RunSummary)
    async def get_by_key(name: str, key: str) -> RunSummary:
        """The newest run of `name` started with `key`."""
        return summary(await call(lambda: runtime.get_by_key(name, key)))

    if token:
        document_token(app, "STATECHARTS_API_TOKEN")
    return app

