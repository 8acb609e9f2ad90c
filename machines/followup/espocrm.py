"""``EspoCrm``: the follow-up machine's CRM on EspoCRM's REST API (``/api/v1``, API-key auth).

Deals are ``Opportunity`` records; their stage names are the ``stage`` field's options in the
metadata; e-mails are ``Email`` records whose parent is the opportunity. Every failure is a
``CrmUnavailable`` (retried, then the item is skipped), with ``Retry-After`` honoured.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import httpx

from machines.followup.adapters import CrmUnavailable
from machines.http import DEFAULT_TIMEOUT_S, ApiClient

PAGE = 200
_SENT = "%Y-%m-%d %H:%M:%S"  # EspoCRM's datetime format, UTC


def _where(*conditions: tuple[str, str, Any]) -> dict[str, Any]:
    """EspoCRM's ``where[i][type|attribute|value]`` query parameters."""
    params: dict[str, Any] = {}
    for i, (kind, attribute, value) in enumerate(conditions):
        params[f"where[{i}][type]"] = kind
        params[f"where[{i}][attribute]"] = attribute
        if isinstance(value, list | tuple):
            params[f"where[{i}][value][]"] = list(value)
        else:
            params[f"where[{i}][value]"] = value
    return params


class EspoCrm:
    """The CRM at ``url`` (e.g. ``https://crm.example.com``) with API key ``api_key``."""

    def __init__(
        self,
        url: str,
        api_key: str,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        page_size: int = PAGE,
    ) -> None:
        self.page_size = page_size
        self.api = ApiClient(
            url.rstrip("/") + "/api/v1",
            {"X-Api-Key": api_key},
            CrmUnavailable,
            timeout_s,
            transport,
        )

    def _list(self, entity: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        while True:
            page = self.api.request(
                "GET", entity, params={**params, "offset": len(found), "maxSize": self.page_size}
            )
            rows = self._field(page, "list")
            found.extend(rows)
            if not rows or len(found) >= int(self._field(page, "total")):
                return found

    def _field(self, answer: Any, name: str) -> Any:
        if not isinstance(answer, dict) or name not in answer:
            raise CrmUnavailable(f"EspoCRM answered without {name!r}: {str(answer)[:200]}")
        return answer[name]

    def stage_names(self) -> list[str]:
        """The ``stage`` options of ``Opportunity``, in pipeline order."""
        meta = self.api.request("GET", "Metadata")
        try:
            options = meta["entityDefs"]["Opportunity"]["fields"]["stage"]["options"]
        except (KeyError, TypeError) as exc:
            raise CrmUnavailable(
                "EspoCRM metadata has no entityDefs.Opportunity.fields.stage.options"
            ) from exc
        return [str(o) for o in options]

    def deals_in_stages(self, stages: Sequence[str]) -> list[dict[str, Any]]:
        """Opportunities in ``stages`` (every page)."""
        if not stages:
            return []
        rows = self._list(
            "Opportunity",
            {**_where(("in", "stage", list(stages))), "select": "id,name,stage,assignedUserName"},
        )
        return [self._deal(r) for r in rows]

    def count_deals_in_stages(self, stages: Sequence[str]) -> int:
        """The ``total`` of opportunities in ``stages``."""
        if not stages:
            return 0
        page = self.api.request(
            "GET",
            "Opportunity",
            params={**_where(("in", "stage", list(stages))), "maxSize": 1, "select": "id"},
        )
        return int(self._field(page, "total"))

    def get_deal(self, deal_id: str) -> dict[str, Any] | None:
        """The opportunity, or None when EspoCRM answers 404 (deleted)."""
        row = self.api.request("GET", f"Opportunity/{deal_id}", missing_ok=True)
        return None if row is None else self._deal(row)

    def recent_emails(self, deal_id: str, since: int) -> list[dict[str, Any]]:
        """E-mails whose parent is the opportunity, sent at or after ``since``."""
        after = datetime.fromtimestamp(since / 1000 - 1, UTC).strftime(_SENT)
        rows = self._list(
            "Email",
            {
                **_where(("equals", "parentId", deal_id), ("after", "dateSent", after)),
                "select": "dateSent,fromString,name,bodyPlain,body",
                "orderBy": "dateSent",
                "order": "asc",
            },
        )
        emails: list[dict[str, Any]] = []
        for row in rows:
            sent = datetime.strptime(str(row["dateSent"]), _SENT).replace(tzinfo=UTC)
            emails.append(
                {
                    "sent_at": int(sent.timestamp() * 1000),
                    "sender": str(row.get("fromString") or ""),
                    "subject": str(row.get("name") or ""),
                    "body": str(row.get("bodyPlain") or row.get("body") or ""),
                }
            )
        return [e for e in emails if int(e["sent_at"]) >= since]

    @staticmethod
    def _deal(row: dict[str, Any]) -> dict[str, Any]:
        return {
            "id": str(row["id"]),
            "name": str(row.get("name") or ""),
            "stage": str(row.get("stage") or ""),
            "owner": str(row.get("assignedUserName") or ""),
        }

    def close(self) -> None:
        """Close the HTTP client."""
        self.api.close()
