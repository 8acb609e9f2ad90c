"""``ChatSummarizer``: the summarizer on a Mistral-style chat completions API
(``POST /v1/chat/completions``, bearer key; OpenAI-compatible servers answer the same shape).
Failures, and answers without ``choices[0].message.content``, are ``SummarizerUnavailable``;
a 429's ``Retry-After`` is handed to the retry policy."""

from __future__ import annotations

import httpx

from machines.followup.adapters import SummarizerUnavailable
from machines.http import ApiClient

MISTRAL_API = "https://api.mistral.ai"


class ChatSummarizer:
    """``complete(prompt)`` with ``model`` at ``base_url``."""

    def __init__(
        self,
        api_key: str,
        model: str = "mistral-small-latest",
        base_url: str = MISTRAL_API,
        timeout_s: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.model = model
        self.api = ApiClient(
            base_url.rstrip("/") + "/v1",
            {"Authorization": f"Bearer {api_key}"},
            SummarizerUnavailable,
            timeout_s,
            transport,
        )

    def complete(self, prompt: str) -> str:
        """The model's answer to one user message (temperature 0: the same e-mails give the
        same summary)."""
        answer = self.api.request(
            "POST",
            "chat/completions",
            json={
                "model": self.model,
                "temperature": 0,
                "messages": [{"role": "user", "content": prompt}],
            },
        )
        try:
            content = answer["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise SummarizerUnavailable(
                f"the chat API answered without choices[0].message.content: {str(answer)[:200]}"
            ) from exc
        if not isinstance(content, str):
            raise SummarizerUnavailable(f"the chat API's content is not text: {content!r}")
        return content

    def close(self) -> None:
        """Close the HTTP client."""
        self.api.close()
