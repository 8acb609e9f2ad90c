"""Sending e-mail: the small interface both example workflows use, and its fake."""

from __future__ import annotations

import hashlib
from typing import Protocol

from machines.fakes import FakeWorld


class MailUnavailable(Exception):
    """The mail server refused or did not answer (retryable)."""


class Mailer(Protocol):
    """Sends one message; returns the server's message id."""

    def send(self, recipient: str, subject: str, body: str, *, key: str) -> str:
        """Send; ``key`` identifies the message so a resend of the same one is recognised."""
        ...


class FakeMailer:
    """A mail server in the fake world: keeps every message; fails on demand (target "mail").

    Like servers that honour a Message-ID, a message sent twice with the same ``key`` is kept
    once.
    """

    target = "mail"

    def __init__(self, world: FakeWorld) -> None:
        self.world = world

    def send(self, recipient: str, subject: str, body: str, *, key: str) -> str:
        """Store the message, or raise ``MailUnavailable`` if a failure is injected."""
        failure = self.world.trip(self.target)
        if failure is not None:
            raise MailUnavailable(f"smtp: {failure}")
        message_id = "msg-" + hashlib.sha256(key.encode()).hexdigest()[:12]
        with self.world.transaction() as tx:
            tx.execute(
                "insert into mails (id, recipient, subject, body) values (?, ?, ?, ?) "
                "on conflict (id) do nothing",
                (message_id, recipient, subject, body),
            )
        return message_id

    def sent(self) -> list[dict[str, str]]:
        """Every message kept, oldest first."""
        return [
            {k: str(v) for k, v in row.items()}
            for row in self.world.rows("select * from mails order by rowid")
        ]
