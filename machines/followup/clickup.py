"""``ClickUpTasks``: the follow-up machine's task tool on ClickUp's API v2.

Tasks go to one list; our key is kept in a text custom field of that list, so ``find_task``
asks ClickUp for the list's tasks whose field equals the key (closed ones included) before
``create_task`` makes one: a retried step never makes a second task. ClickUp's rate limit
(429 with ``X-RateLimit-Reset``) is handed to the retry policy. Failures are
``TaskToolUnavailable``.
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime

import httpx

from machines.followup.adapters import TaskToolUnavailable
from machines.http import DEFAULT_TIMEOUT_S, ApiClient

CLICKUP_API = "https://api.clickup.com/api/v2"


class ClickUpTasks:
    """Tasks in ClickUp list ``list_id``, our key in custom field ``key_field_id``."""

    def __init__(
        self,
        token: str,
        list_id: str,
        key_field_id: str,
        base_url: str = CLICKUP_API,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.list_id, self.key_field_id = list_id, key_field_id
        self.api = ApiClient(
            base_url, {"Authorization": token}, TaskToolUnavailable, timeout_s, transport
        )

    def find_task(self, external_key: str) -> str | None:
        """The first task of the list whose key field is ``external_key``."""
        answer = self.api.request(
            "GET",
            f"list/{self.list_id}/task",
            params={
                "include_closed": "true",
                "custom_fields": json.dumps(
                    [{"field_id": self.key_field_id, "operator": "=", "value": external_key}]
                ),
            },
        )
        tasks = answer.get("tasks") if isinstance(answer, dict) else None
        if not isinstance(tasks, list):
            raise TaskToolUnavailable(f"ClickUp answered without 'tasks': {str(answer)[:200]}")
        return str(tasks[0]["id"]) if tasks else None

    def create_task(self, external_key: str, title: str, body: str, due_on: str) -> str:
        """A new task due at the start of ``due_on`` (UTC); its id."""
        day = date.fromisoformat(due_on)
        due = int(datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp() * 1000)
        answer = self.api.request(
            "POST",
            f"list/{self.list_id}/task",
            json={
                "name": title,
                "description": body,
                "due_date": due,
                "due_date_time": False,
                "custom_fields": [{"id": self.key_field_id, "value": external_key}],
            },
        )
        if not isinstance(answer, dict) or "id" not in answer:
            raise TaskToolUnavailable(f"ClickUp answered without an id: {str(answer)[:200]}")
        return str(answer["id"])

    def close(self) -> None:
        """Close the HTTP client."""
        self.api.close()
