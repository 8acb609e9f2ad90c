"""``SmtpMailer``: the ``Mailer`` of both example workflows on a real SMTP server (smtplib).

Each message carries a ``Message-ID`` derived from its key, the id ``send`` returns, so a
resend of the same message is recognisable downstream. Connection errors, timeouts and
refusals are ``MailUnavailable`` (the machines' declared name: retried, behind the ``smtp``
breaker); a 421/45x reply is a transient refusal like any other.
"""

from __future__ import annotations

import hashlib
import smtplib
import ssl
from email.message import EmailMessage

from machines.mail import MailUnavailable


class SmtpMailer:
    """Sends through ``host:port`` as ``sender``; ``starttls`` and ``username``/``password``
    when the server wants them; ``timeout_s`` bounds every socket operation."""

    def __init__(
        self,
        host: str,
        port: int = 587,
        sender: str = "followup@localhost",
        *,
        username: str | None = None,
        password: str | None = None,
        starttls: bool = False,
        timeout_s: float = 10.0,
    ) -> None:
        self.host, self.port, self.sender = host, port, sender
        self.username, self.password = username, password
        self.starttls, self.timeout_s = starttls, timeout_s

    def message_id(self, key: str) -> str:
        """The Message-ID of the message with ``key``."""
        domain = self.sender.rpartition("@")[2] or "localhost"
        return f"<{hashlib.sha256(key.encode()).hexdigest()[:24]}@{domain}>"

    def send(self, recipient: str, subject: str, body: str, *, key: str) -> str:
        """Send one plain-text message; its Message-ID."""
        message = EmailMessage()
        message["From"], message["To"], message["Subject"] = self.sender, recipient, subject
        message["Message-ID"] = self.message_id(key)
        message.set_content(body)
        try:
            with smtplib.SMTP(self.host, self.port, timeout=self.timeout_s) as server:
                if self.starttls:
                    server.starttls(context=ssl.create_default_context())
                if self.username is not None:
                    server.login(self.username, self.password or "")
                server.send_message(message)
        except smtplib.SMTPRecipientsRefused as exc:
            refused = "; ".join(
                f"{who}: {code} {_text(reply)}" for who, (code, reply) in exc.recipients.items()
            )
            raise MailUnavailable(f"smtp {self.host}:{self.port}: refused {refused}") from exc
        except smtplib.SMTPResponseException as exc:
            raise MailUnavailable(
                f"smtp {self.host}:{self.port}: {exc.smtp_code} {_text(exc.smtp_error)}"
            ) from exc
        except (smtplib.SMTPException, OSError) as exc:
            raise MailUnavailable(
                f"smtp {self.host}:{self.port}: {type(exc).__name__}: {exc}"
            ) from exc
        return str(message["Message-ID"])


def _text(reply: bytes | str) -> str:
    """A server reply as text, trimmed."""
    text = reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)
    return text[:200]
