"""The UI's guards: the access token checked on every request, CSRF protection for the
actions, and the security headers of every response.

- Token (`STATECHARTS_UI_TOKEN`): when set, every request must carry it, either as
  `Authorization: Bearer <token>` / `X-Statecharts-Token: <token>`, or as the session cookie set
  by logging in with it at `/login` (checked as the ingress checks it: `persistence.web.access`).
  The cookie holds an HMAC of the token, never the token. Requests without it get 401 (a login
  page for browsers).
- CSRF: every form carries a random per-browser value that must equal the `statecharts_csrf`
  cookie (double submit; the cookie is SameSite=Strict), and a cross-site `Origin` or
  `Sec-Fetch-Site` is refused outright.
- Headers: a Content-Security-Policy that allows only this server's own scripts and styles (an
  injected `<script>` could not run even if it reached a page), no framing, no referrer.
"""

from __future__ import annotations

import hmac
import secrets
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import Response

from persistence.web.access import has_token

CSRF_COOKIE = "statecharts_csrf"
CSRF_FIELD = "csrf_token"
OPEN_PATHS = frozenset({"/login", "/static/ui.css"})
"""Paths served without the token: the login form and its stylesheet (no run data)."""

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

Handler = Callable[[Request], Awaitable[Response]]


def csrf_value(request: Request) -> str:
    """This browser's CSRF value (the cookie's, or a new one the response will set)."""
    existing = request.cookies.get(CSRF_COOKIE, "")
    if len(existing) >= 32:
        return existing
    fresh: str = getattr(request.state, "new_csrf", "") or secrets.token_urlsafe(32)
    request.state.new_csrf = fresh
    return fresh


def csrf_ok(request: Request, submitted: str) -> bool:
    """True when a form's CSRF value matches the cookie and the request is not cross-site."""
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlsplit(origin).netloc != request.headers.get("host", ""):
        return False
    cookie = request.cookies.get(CSRF_COOKIE, "")
    return len(cookie) >= 32 and hmac.compare_digest(cookie.encode(), submitted.encode())


class Guard(BaseHTTPMiddleware):
    """Token check on every request (if a token is set) and security headers on every response."""

    def __init__(
        self, app: object, token: str | None, unauthorized: Callable[[Request], Response]
    ) -> None:
        super().__init__(app)  # type: ignore[arg-type]
        self.token = token
        self.unauthorized = unauthorized

    async def dispatch(self, request: Request, call_next: Handler) -> Response:
        """Refuse requests without the token; add headers and a new CSRF cookie."""
        if self.token and request.url.path not in OPEN_PATHS and not has_token(request, self.token):
            response = self.unauthorized(request)
        else:
            response = await call_next(request)
        new_csrf = getattr(request.state, "new_csrf", None)
        if new_csrf:
            response.set_cookie(
                CSRF_COOKIE,
                new_csrf,
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response
