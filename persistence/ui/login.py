"""Logging in to the operator UI with its access token (a session cookie holding an HMAC of
the token, `persistence.web.access`) and logging out. Without a token set, both just go home.
"""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from persistence.ui.security import csrf_ok
from persistence.ui.site import Site
from persistence.web.access import SESSION_COOKIE, same_token, session_value

log = logging.getLogger("statecharts.ui")
router = APIRouter(include_in_schema=False)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, ui: Site) -> Response:
    """The form asking for the token."""
    return ui.page(request, "login.html", {"next": "/", "failed": False, "plain": True})


@router.post("/login")
def login(
    request: Request,
    ui: Site,
    token: Annotated[str, Form()],
    csrf_token: Annotated[str, Form()] = "",
    next_path: Annotated[str, Form(alias="next")] = "/",
) -> Response:
    """With the right token, the session cookie and on to `next` (a path on this server)."""
    # Only a path on this server: never an open redirect to another site.
    safe = next_path.startswith("/") and not next_path.startswith(("//", "/\\"))
    target = next_path if safe else "/"
    if not ui.token:
        return RedirectResponse("/", status_code=303)
    if not csrf_ok(request, csrf_token):
        return ui.page(request, "login.html", {"next": target, "failed": True, "plain": True}, 403)
    if not same_token(token, ui.token):
        log.warning("ui: failed login from %s", request.client.host if request.client else "?")
        return ui.page(request, "login.html", {"next": target, "failed": True, "plain": True}, 401)
    response = RedirectResponse(target, status_code=303)
    response.set_cookie(
        SESSION_COOKIE,
        session_value(ui.token),
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
def logout(request: Request, ui: Site, csrf_token: Annotated[str, Form()] = "") -> Response:
    """Drop the session cookie (a cross-site post changes nothing)."""
    response = RedirectResponse("/login" if ui.token else "/", status_code=303)
    if csrf_ok(request, csrf_token):
        response.delete_cookie(SESSION_COOKIE)
    return response
