"""Optional OpenAI-compatible chat client. Absent configuration means extractive fallbacks."""

from __future__ import annotations

import os
from typing import Protocol

from docgraph.errors import DocgraphError


class ChatModel(Protocol):
    """Anything that completes a prompt."""

    name: str

    def complete(self, prompt: str, max_tokens: int = 400) -> str:
        """The model's answer to ``prompt``."""
        ...


class OpenAIChatModel:
    """``POST {base_url}/chat/completions`` with one user message (temperature 0)."""

    def __init__(self, base_url: str, model: str, api_key_env: str = "OPENAI_API_KEY",
                 timeout_s: float = 60.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.name = model
        self.api_key = os.environ.get(api_key_env, "")
        self.timeout_s = timeout_s

    def complete(self, prompt: str, max_tokens: int = 400) -> str:
        """Send the prompt; raises :class:`DocgraphError` naming the server on failure."""
        import httpx

        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            response = httpx.post(
                f"{self.base_url}/chat/completions",
                json={"model": self.name, "temperature": 0, "max_tokens": max_tokens,
                      "messages": [{"role": "user", "content": prompt}]},
                headers=headers, timeout=self.timeout_s,
            )
            response.raise_for_status()
            return str(response.json()["choices"][0]["message"]["content"])
        except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
            raise DocgraphError(f"chat model at {self.base_url} failed: {exc}") from exc
