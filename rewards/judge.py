"""The LLM judge: one OpenAI-compatible `/chat/completions` endpoint, called with bounds NeMo Gym lacks.
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.

Every call waits for a slot of one shared semaphore (`max_concurrency`), has a deadline per attempt and is retried
`retries` times with backoff on connection errors, 5xx and 429. A call that still fails raises `JudgeError`
(the environments' `judge_failed`, masked); an answer without a verdict is the environment parser's to score.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from typing import Any, Optional

import httpx
from pydantic import BaseModel, ConfigDict, Field


class JudgeError(Exception):
    """A judge call failed (transport, deadline, HTTP status, or a body that is not a chat completion)."""


class JudgeConfig(BaseModel):
    """The `judge:` block of a reward server config (`ServerConfig.judge`); `Judge` takes it as it is."""

    model_config = ConfigDict(extra="forbid")

    base_url: Optional[str] = None  # an OpenAI-compatible server, ending in /v1
    model: str = "judge"
    api_key: Optional[str] = None
    max_concurrency: int = Field(64, ge=1)
    timeout: float = Field(120.0, gt=0)  # seconds, per attempt
    retries: int = Field(3, ge=0)
    backoff_base: float = Field(0.5, ge=0)
    backoff_max: float = Field(8.0, ge=0)


@dataclass
class JudgeReply:
    request: dict  # the chat-completions body sent
    response: dict  # the chat completion received
    text: str  # choices[0].message.content ("" when null)


class Judge:
    def __init__(self, config: JudgeConfig):
        self.config = config
        self.url = f"{config.base_url.rstrip('/')}/chat/completions" if config.base_url else None
        self._semaphore = asyncio.Semaphore(config.max_concurrency)
        self._client: Optional[httpx.AsyncClient] = None
        self.in_flight = 0
        self.calls = 0
        self.failures = 0
        self.retried = 0

    @property
    def configured(self) -> bool:
        return self.url is not None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
            limit = self.config.max_concurrency
            self._client = httpx.AsyncClient(
                headers=headers, timeout=httpx.Timeout(self.config.timeout),
                limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit))
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def chat(self, messages: list[dict], params: dict[str, Any] | None = None) -> JudgeReply:
        """POST one chat completion; return its text, or raise JudgeError."""
        if not self.configured:
            raise JudgeError("no judge is configured (start the server with --judge_base_url URL)")
        body = {"model": self.config.model, "messages": messages, **(params or {})}
        self.calls += 1
        attempts = self.config.retries + 1
        for attempt in range(attempts):
            try:
                async with self._semaphore:
                    self.in_flight += 1
                    try:
                        reply = await asyncio.wait_for(self._http().post(self.url, json=body),
                                                       timeout=self.config.timeout + 0.5)
                    finally:
                        self.in_flight -= 1
            except (asyncio.TimeoutError, httpx.TimeoutException):
                self.failures += 1
                raise JudgeError(f"judge {self.url}: no answer within the {self.config.timeout:g} s deadline") from None
            except httpx.TransportError as err:  # connection refused/reset, protocol errors
                cause = f"{type(err).__name__}: {err}" if str(err) else type(err).__name__
                if attempt + 1 < attempts:
                    await self._backoff(attempt)
                    continue
                self.failures += 1
                raise JudgeError(f"judge {self.url}: {cause} (after {attempts} attempts)") from None
            if reply.status_code == 429 or reply.status_code >= 500:
                if attempt + 1 < attempts:
                    await self._backoff(attempt, reply.headers.get("retry-after"))
                    continue
                self.failures += 1
                raise JudgeError(f"judge {self.url}: HTTP {reply.status_code} (after {attempts} attempts): "
                                 f"{reply.text[:200]}")
            if reply.status_code >= 400:
                self.failures += 1
                raise JudgeError(f"judge {self.url}: HTTP {reply.status_code}: {reply.text[:200]}")
            return JudgeReply(request=body, response=(data := self._parse(reply)), text=_content(data))
        raise AssertionError("unreachable")

    def _parse(self, reply: httpx.Response) -> dict:
        try:
            data = reply.json()
            message = data["choices"][0]["message"]
            content = message.get("content")
            if content is not None and not isinstance(content, str):
                raise TypeError("message.content is not a string")
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as err:
            self.failures += 1
            raise JudgeError(f"judge {self.url}: the body is not a chat completion ({type(err).__name__}: {err}): "
                             f"{reply.text[:200]!r}") from None
        return data

    async def _backoff(self, attempt: int, retry_after: str | None = None) -> None:
        self.retried += 1
        delay = min(self.config.backoff_max, self.config.backoff_base * 2 ** attempt)
        delay *= random.uniform(0.5, 1.0)
        if retry_after:
            try:
                delay = max(delay, min(float(retry_after), self.config.backoff_max))
            except ValueError:
                pass
        await asyncio.sleep(delay)


def _content(data: dict) -> str:
    return data["choices"][0]["message"].get("content") or ""
