"""Webhook ingress: an ASGI app (FastAPI, the `ui` extra) that turns HTTP requests into starts
and events of durable runs, addressed by run id or by the key a run was started with.

- `POST /api/workflows/{name}/runs` `{"key": ..., "input": ...}`: start, idempotent by key
  (`201` created, `200` with the same body when the key's run already existed, or
  `{"id", "workflow_name", "key", "status": "purged", "purged_at"}` when it was purged within
  the key window: persistence/lifecycle.py); a signed start without a key is keyed by its
  signed delivery id or signed content (`start_key`), so a replay answers the first run;
- `POST /api/workflows/{name}/runs/{key}/events` and `POST /api/runs/{run_id}/events` with an
  event object: queue it (`202`; `200` with `"duplicate": true` for a delivery id already
  queued for the run); `404` unknown run or key, `409` ended run, `422` (with the offending
  path) for a value no store holds, an event type no state of the machine accepts, or an input
  the workflow cannot start from. With `?wait=SECONDS` (or `Prefer: wait=SECONDS`, up to 60)
  the answer waits for the event's step: `200` with the run after the event (`outcome`
  "applied", `applied_step`, `applied_state`), or `202` with the run as it is when the wait
  elapsed (`outcome` "queued"); `409` if the run ended before applying it;
- `GET /api/runs/{run_id}`, `GET /api/workflows/{name}/runs/{key}`: the run with its context,
  timers, retries, queued events, recent effects and journal, the same JSON as the operator
  UI's `GET /api/runs/{run_id}` (`persistence.web.responses.RunDetailOut`).

With a token every request must carry it (`Authorization: Bearer`, as the UI), except a signed
workflow's starts and events, which its signature authenticates. A workflow may require a
signature (`persistence.signatures.Signature`: an HMAC-SHA256 of the raw body under a shared
secret, and of a timestamp within a replay window for the providers that sign one; presets for
GitHub, Stripe, Slack and Standard Webhooks). Once any workflow requires one, the ingress is in
secure mode: an unsigned start or event, and every read, needs the token (`allow_unsigned=True`
opts out). An event with a delivery id (the signature's delivery header or field, else an
`Idempotency-Key` header) is queued once per run and delivery id, durably: posted again, it is
answered `200` and queues nothing. Bodies over `max_body` bytes get `413`. No request a client
can send answers 500: what the client got wrong is a 4xx naming it, an unreachable store 503.
Serve it with `statecharts api` or mount `create_api(runtime)` into your own FastAPI app.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import Field
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from persistence.capacity import LimitKeyError
from persistence.runtime import InvalidKeyError, Runtime, UnknownWorkflowError, check_key
from persistence.signatures import Signature, SignatureError, Verified
from persistence.stores import (
    RunFinishedError,
    RunNotFoundError,
    RunPurgedError,
    RunRecord,
    StoreEncodingError,
    StoreUnavailableError,
)
from persistence.waiting import Answer
from persistence.web.access import document_token, has_token
from persistence.web.inbound import RESERVED_PREFIXES, client_gone
from persistence.web.responses import RunDetailOut, RunSummary, run_out, summary
from statecharts.errors import ContextError, StatechartError
from statecharts.frozen import freeze, text_problem, thaw
from statecharts.tracing import valid_traceparent

__all__ = [
    "MAX_BODY",
    "Incoming",
    "Queued",
    "Refused",
    "Signature",
    "create_api",
    "invalid",
    "start_key",
]

MAX_BODY = 1_048_576
"""Default request body limit in bytes (1 MiB)."""

OPEN_PATHS = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})
"""Served without the token: the API's description, no run data."""

DELIVERY_HEADER = "Idempotency-Key"
"""Where an event's delivery id is when its workflow's signature names no other place."""

MAX_DELIVERY_ID = 200
"""The longest delivery id taken, in characters."""

WRITES = re.compile(r"^/api/(workflows/[^/]+/runs(/[^/]+/events)?|runs/[^/]+/events)$")
"""The starts and events: what a signature, instead of the token, may authenticate."""

RETRY_AFTER_S = "5"
"""The `Retry-After` of a 503 (the store could not answer)."""

T = TypeVar("T")


def _inside(request: Request) -> str:
    """The request's path inside this app (without the prefix it is mounted under)."""
    path: str = request.scope["path"]
    root: str = request.scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class Refused(Exception):
    """A request answered with an error status and JSON detail."""

    def __init__(self, status: int, detail: Any, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.headers = dict(headers or {})


def invalid(path: str, message: str, root: str = "body") -> Refused:
    """A 422 naming the offending place in the body (FastAPI's validation error shape)."""
    loc = [root, *[part for part in path.split(".") if part]] if path != "<root>" else [root]
    return Refused(422, [{"loc": loc, "msg": message, "type": "value_error"}])


def unauthorized(message: str) -> Refused:
    """A 401 asking for the token."""
    return Refused(401, message, {"WWW-Authenticate": "Bearer"})


START_EXAMPLE = {"key": "deal-42", "input": {"email": "ann@example.com", "source": "crm"}}
EVENT_EXAMPLE = {"type": "REPLIED", "message_id": "m-17"}
RUN_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "no or wrong token, or a bad signature"},
    404: {"description": "no such workflow, run or key"},
    413: {"description": "request body over the size limit"},
    422: {
        "description": "not a JSON object, a value no store holds, or an event no state "
        "accepts; `detail[0].loc` names the place"
    },
}


def _body_doc(example: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": dict(schema),
                    "examples": {"webhook": {"value": dict(example)}},
                }
            },
        }
    }


START_SCHEMA = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "description": "the caller's handle; idempotent by it"},
        "input": {"description": "the run's input (any JSON value)"},
    },
}
EVENT_SCHEMA = {
    "type": "object",
    "required": ["type"],
    "properties": {"type": {"type": "string"}},
    "additionalProperties": True,
}


class Queued(RunSummary):
    """The event was queued for the run; a worker applies it. With a wait (`?wait=SECONDS` or
    `Prefer: wait=SECONDS`), the run as read once the event was applied (`200`) or once the
    wait elapsed (`202`, `outcome` "queued")."""

    inbox_id: int
    duplicate: bool = Field(
        False,
        description="the delivery id was queued for the run before: this request queued nothing",
    )
    outcome: str | None = Field(
        None,
        description="with a wait: applied, or queued (the wait "
        "elapsed first; a worker applies it later)",
    )
    applied_step: int | None = Field(
        None, description="with a wait: the run version (step) that applied the event"
    )
    applied_state: str | None = Field(
        None,
        description="with a wait: the run's active leaves "
        "right after the event (later steps may have moved it)",
    )


MAX_WAIT_S = 60.0
"""The longest wait a request may ask for (`?wait=` or `Prefer: wait=`), in seconds."""

_PREFER_WAIT = re.compile(r"(?:^|[,;])\s*wait\s*=\s*([0-9]+(?:\.[0-9]+)?)\s*(?:$|[,;])", re.I)


def requested_wait(request: Request) -> float | None:
    """The seconds a send asks to wait for its event's step: `?wait=` (which wins) or the
    `Prefer: wait=` header (RFC 7240); None for no wait. `422` naming the parameter for a
    value that is not a number of seconds from 0 to `MAX_WAIT_S`."""
    given = request.query_params.get("wait")
    where, root = "wait", "query"
    if given is None:
        found = _PREFER_WAIT.search(request.headers.get("prefer", ""))
        if found is None:
            return None
        given, where, root = found.group(1), "Prefer", "header"
    try:
        seconds = float(given.removesuffix("s"))
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds <= MAX_WAIT_S:
        raise invalid(where, f"wait must be seconds from 0 to {MAX_WAIT_S:g}, got {given!r}", root)
    return seconds


def create_api(
    runtime: Runtime,
    *,
    token: str | None = None,
    signatures: Mapping[str, Signature] | None = None,
    max_body: int = MAX_BODY,
    allow_unsigned: bool = False,
) -> FastAPI:
    """The ingress app over `runtime` (see the module docstring). With `signatures`, requests
    without the token are refused except the signed workflows' starts and events (secure
    mode), unless `allow_unsigned`."""
    signed = dict(signatures or {})
    secure = bool(signed) and not allow_unsigned
    app = FastAPI(
        title="statecharts webhook ingress",
        version="1",
        description=__doc__,
        responses=RUN_RESPONSES,
    )

    app.add_exception_handler(ClientDisconnect, client_gone)

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> Response:
        return JSONResponse({"detail": exc.detail}, exc.status, headers=exc.headers or None)

    @app.middleware("http")
    async def guard(request: Request, call_next: Callable[[Request], Any]) -> Response:
        path = _inside(request)
        if (
            token
            and path not in OPEN_PATHS
            and not has_token(request, token)
            and not (signed and request.method == "POST" and WRITES.match(path))
        ):  # a signed workflow's write is let through: its handler checks the signature
            return JSONResponse(
                {"detail": "missing or wrong token"}, 401, headers={"WWW-Authenticate": "Bearer"}
            )
        response: Response = await call_next(request)
        return response

    def authenticated(request: Request) -> bool:
        return token is not None and has_token(request, token)

    def check_read(request: Request) -> None:
        if secure and not authenticated(request):
            raise unauthorized(
                "reads need the API token once webhook signatures are configured "
                "(secure mode; see allow_unsigned)"
            )

    def check_unsigned(request: Request, workflow: str) -> None:
        """A request to a workflow without a signature: the token, in secure mode."""
        if (token or secure) and not authenticated(request):
            raise unauthorized(
                f"workflow {workflow!r} takes no signature here, and unsigned "
                "requests need the API token once webhook signatures are "
                "configured (secure mode; see allow_unsigned)"
            )

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body:
            raise Refused(413, f"body over {max_body} bytes")
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > max_body:
                raise Refused(413, f"body over {max_body} bytes")
        return raw

    async def body_of(request: Request, workflow: str) -> Incoming:
        """The request's JSON object, its signature checked, and its delivery id if any."""
        signature = signed.get(workflow)
        if signature is None:
            check_unsigned(request, workflow)
        raw = await read_body(request)
        verified = None
        if signature is not None:
            try:
                verified = signature.check(raw, request.headers, runtime.clock.now())
            except SignatureError as exc:
                raise Refused(401, str(exc)) from exc
        data = parse(raw)
        delivery = verified.delivery if verified is not None else None
        field = signature.delivery_field if signature is not None else None
        in_body = False  # (a field of the body: signed with it)
        if delivery is None and field is not None and field in data:
            delivery, in_body = delivery_id(data[field], field), True
        if delivery is None and DELIVERY_HEADER in request.headers:
            delivery = delivery_id(request.headers[DELIVERY_HEADER], DELIVERY_HEADER, "header")
        return Incoming(data, delivery, start_key(verified, delivery, in_body))

    async def call(fn: Callable[[], T], input_path: str = "input") -> T:
        """`fn` in a thread, its errors answered as what they are (never a 500 for input)."""
        try:
            return await run_in_threadpool(fn)
        except (RunNotFoundError, UnknownWorkflowError) as exc:
            raise Refused(404, str(exc).strip('"')) from exc
        except RunFinishedError as exc:
            raise Refused(409, str(exc)) from exc
        except InvalidKeyError as exc:
            raise invalid("key", str(exc)) from exc
        except ContextError as exc:
            raise invalid(exc.path, str(exc)) from exc
        except (StatechartError, StoreEncodingError) as exc:
            raise invalid(input_path, f"{type(exc).__name__}: {exc}") from exc
        except LimitKeyError as exc:  # (a start without the key of its per-key limit)
            raise invalid(input_path, str(exc)) from exc
        except StoreUnavailableError as exc:
            raise Refused(
                503,
                "the run store could not answer; try again shortly",
                {"Retry-After": RETRY_AFTER_S},
            ) from exc

    def queue(
        run: RunRecord,
        event: Mapping[str, Any],
        delivery: str | None,
        traceparent: str | None,
        wait: float | None = None,
    ) -> Response:
        kind = event.get("type")
        if not isinstance(kind, str) or not kind:
            raise invalid("type", "an event needs a non-empty string type")
        if kind.startswith(RESERVED_PREFIXES):
            raise invalid("type", f"{kind!r} is reserved for the engine")
        if run.terminal and delivery is None:
            raise Refused(409, f"run {run.id} has ended ({run.status})")
        refusal = runtime.refuses_event(run, kind)
        if refusal is not None:
            raise invalid("type", refusal)
        fresh = True
        if delivery is None and wait is not None:
            return waited(runtime.send(run.id, event, traceparent=traceparent, wait=wait), False)
        if delivery is None:
            inbox_id = runtime.send(run.id, event, traceparent=traceparent)
        else:
            inbox_id, fresh = runtime.deliver(run.id, event, delivery, traceparent=traceparent)
        if wait is not None:
            return waited(runtime.wait_for_event(run.id, inbox_id, wait), not fresh)
        answer = Queued(**summary(run).model_dump(), inbox_id=inbox_id, duplicate=not fresh)
        return JSONResponse(answer.model_dump(), 202 if fresh else 200)

    def waited(answer: Answer, duplicate: bool) -> Response:
        """A send's answer after its wait: `200` applied, `202` still queued, `409` dead."""
        if answer.status == "dead":
            raise Refused(
                409, f"run {answer.run_id} ended before applying the event: {answer.reason}"
            )
        body = Queued(
            **summary(answer.run).model_dump(),
            inbox_id=answer.inbox_id,
            duplicate=duplicate,
            outcome=answer.status,
            applied_step=answer.step,
            applied_state=answer.state,
        )
        return JSONResponse(body.model_dump(), 200 if answer.status == "applied" else 202)

    @app.post(
        "/api/workflows/{name}/runs",
        response_model=RunSummary,
        status_code=201,
        openapi_extra=_body_doc(START_EXAMPLE, START_SCHEMA),
        responses={
            200: {
                "model": RunSummary,
                "description": "the key's existing run "
                "(or, once it was purged, its id with status 'purged')",
            }
        },
    )
    async def start(name: str, request: Request) -> Response:
        """Start a run of workflow `name`; idempotent by `key`: a second request with the same
        key answers `200` with the existing run (active or ended) and starts nothing. A start
        without a key that is signed, or carries an `Idempotency-Key`, is keyed by what
        identifies the request (`start_key`), so that a replay or a retry answers the first
        run."""
        body, _, replay_key = await body_of(request, name)
        key = body.get("key")
        key = replay_key if key is None else key
        if key is not None and not isinstance(key, str):
            raise invalid("key", "the key must be a string")
        traceparent = valid_traceparent(request.headers.get("traceparent"))  # the caller's
        try:
            run, created = await call(
                lambda: runtime.start_run(name, body.get("input"), key, traceparent=traceparent)
            )
        except RunPurgedError as exc:  # the key's run ended and was purged: started already
            purged = exc.tombstone
            return JSONResponse(
                {
                    "id": purged.run_id,
                    "workflow_name": name,
                    "key": key,
                    "status": "purged",
                    "purged_at": purged.purged_at,
                },
                200,
            )
        return JSONResponse(summary(run).model_dump(), 201 if created else 200)

    @app.post(
        "/api/workflows/{name}/runs/{key}/events",
        status_code=202,
        response_model=Queued,
        openapi_extra=_body_doc(EVENT_EXAMPLE, EVENT_SCHEMA),
        responses={409: {"description": "the key's run has ended"}},
    )
    async def send_by_key(name: str, key: str, request: Request) -> Response:
        """Queue an event for the newest run of `name` started with `key`; with `?wait=` (or
        `Prefer: wait=`) seconds, answer once its step has committed (`200`, the run after
        the event) or the wait elapsed (`202`, the run as it is, the event still queued)."""
        wait = requested_wait(request)
        event, delivery, _ = await body_of(request, name)
        traceparent = valid_traceparent(request.headers.get("traceparent"))
        return await call(
            lambda: queue(runtime.get_by_key(name, key), event, delivery, traceparent, wait), ""
        )

    @app.post(
        "/api/runs/{run_id}/events",
        status_code=202,
        response_model=Queued,
        openapi_extra=_body_doc(EVENT_EXAMPLE, EVENT_SCHEMA),
        responses={409: {"description": "the run has ended"}},
    )
    async def send_by_id(run_id: str, request: Request) -> Response:
        """Queue an event for the run with this id (signed as its workflow's webhooks are);
        `?wait=` as for an event by key."""
        wait = requested_wait(request)
        run = await call(lambda: runtime.get(run_id))
        event, delivery, _ = await body_of(request, run.workflow_name)
        traceparent = valid_traceparent(request.headers.get("traceparent"))
        return await call(lambda: queue(run, event, delivery, traceparent, wait), "")

    @app.get("/api/runs/{run_id}", response_model=RunDetailOut)
    async def get_run(run_id: str, request: Request) -> RunDetailOut:
        """The run with this id, as the operator UI's `/api/runs/{run_id}` answers it: where
        it is, its context (secret-looking keys hidden), pending timers, retries, queued
        events, recent effects and its journal, newest first."""
        check_read(request)
        return await call(lambda: run_out(runtime.store, run_id))

    @app.get("/api/workflows/{name}/runs/{key}", response_model=RunDetailOut)
    async def get_by_key(name: str, key: str, request: Request) -> RunDetailOut:
        """The newest run of `name` started with `key`, as `GET /api/runs/{run_id}` answers
        it."""
        check_read(request)
        return await call(lambda: run_out(runtime.store, runtime.get_by_key(name, key).id))

    if token:
        document_token(app, "STATECHARTS_API_TOKEN")
    return app


class Incoming(NamedTuple):
    """A request's body as read by the ingress: its JSON object, its delivery id (None
    without one) and the key a start without one takes (`start_key`)."""

    data: dict[str, Any]
    delivery: str | None
    replay_key: str | None


def start_key(verified: Verified | None, delivery: str | None, in_signed_body: bool) -> str | None:
    """The key of a start that names none, so that posting it again starts nothing: a signed
    start's is its delivery id where the signature covers it (a field of the signed body,
    Standard Webhooks' `webhook-id`), else the digest of what is signed (body and timestamp:
    a replay within the window has the same); an unsigned start's is its `Idempotency-Key`;
    None (a new run each time) for an unsigned start without one. An id no key can hold (a
    `/`, over the key's bytes) is taken by its SHA-256."""
    if verified is not None and not (in_signed_body or verified.delivery_signed):
        return f"signed:{verified.digest[:32]}"
    if delivery is None:
        return None
    key = f"delivery:{delivery}"
    try:
        return check_key(key)
    except InvalidKeyError:
        return f"delivery:sha256:{hashlib.sha256(delivery.encode()).hexdigest()}"


def parse(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object of values every store holds, or a 422 naming the place
    (nesting included: deeper than the stores write is refused, not a 500)."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise invalid("<root>", f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise invalid("<root>", "expected a JSON object")
    try:
        frozen: dict[str, Any] = thaw(freeze(data, "", ContextError))
    except ContextError as exc:
        raise invalid(exc.path, str(exc)) from exc
    return frozen


def delivery_id(value: Any, where: str, root: str = "body") -> str:
    """A delivery id as given (a header's or a body field's value), or a 422 naming `where`."""
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_DELIVERY_ID:
        raise invalid(
            where,
            f"a delivery id is a non-empty string of at most {MAX_DELIVERY_ID} characters",
            root,
        )
    problem = text_problem(value)
    if problem is not None:
        raise invalid(where, f"delivery id: {problem}", root)
    return value
