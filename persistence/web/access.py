"""Who may reach the two web apps (the operator UI and the webhook ingress), checked alike:

- the access token, carried as `Authorization: Bearer <token>`, in the `X-Statecharts-Token`
  header, or as the UI's session cookie (an HMAC of the token, never the token), compared in
  constant time (`has_token`);
- the OpenAPI schema saying so (`document_token`);
- the refusal to listen beyond this machine without a token (`check_bind`), for
  `statecharts ui` and `statecharts api`.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (imported for types only: the CLI checks `check_bind` without the extra)
    from fastapi import FastAPI
    from starlette.requests import Request

SESSION_COOKIE = "statecharts_ui_session"
TOKEN_HEADER = "x-statecharts-token"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def session_value(token: str) -> str:
    """The session cookie's value for `token` (an HMAC, so the cookie never holds the token)."""
    return hmac.new(token.encode(), b"statecharts-ui-session", hashlib.sha256).hexdigest()


def same_token(offered: str, token: str) -> bool:
    """Constant-time comparison of an offered token with the real one."""
    return hmac.compare_digest(offered.encode(), token.encode())


def has_token(request: Request, token: str) -> bool:
    """True when the request carries `token` in a header or a valid session cookie."""
    offered = request.headers.get(TOKEN_HEADER)
    auth = request.headers.get("authorization", "")
    if offered is None and auth.lower().startswith("bearer "):
        offered = auth[7:].strip()
    if offered is not None:
        return same_token(offered, token)
    cookie = request.cookies.get(SESSION_COOKIE, "")
    return hmac.compare_digest(cookie.encode(), session_value(token).encode())


def document_token(app: FastAPI, variable: str) -> None:
    """Say in the OpenAPI schema that every call needs the access token (the server's
    `variable`), as a bearer token or in the X-Statecharts-Token header."""
    make_schema = app.openapi

    def schema() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = make_schema()
            document.setdefault("components", {})["securitySchemes"] = {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": f"the server's {variable}",
                },
                "header": {"type": "apiKey", "in": "header", "name": "X-Statecharts-Token"},
            }
            document["security"] = [{"bearer": []}, {"header": []}]
            app.openapi_schema = document
        return app.openapi_schema

    app.openapi = schema  # type: ignore[method-assign]


class TokenRequired(SystemExit):
    """Refusal to serve on a non-loopback address without a token."""


def check_bind(host: str, token: str | None, variable: str) -> None:
    """Refuse to listen beyond this machine without an access token (in `variable`)."""
    if host not in LOOPBACK_HOSTS and not token:
        raise TokenRequired(
            f"--host {host}: listening beyond 127.0.0.1 needs an access token; set "
            f"{variable} (for example to the output of `python -c 'import secrets; "
            "print(secrets.token_urlsafe(32))'`)"
        )
