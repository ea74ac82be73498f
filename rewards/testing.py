"""Loopback servers for tests and local runs: any ASGI app in a background thread, and a scripted fake judge.

    judge = FakeJudge(default="[[YES]]")
    judge.rules.append(("peanut", Reply(status=500)))          # prompts containing "peanut" get HTTP 500
    with ServerThread(judge.app) as judge_url, ServerThread(create_app(config)) as reward_url:
        ...
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional, Union

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ServerThread:
    """Serve an ASGI app with uvicorn on a free loopback port in a daemon thread; the context gives its URL."""

    def __init__(self, app, port: Optional[int] = None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    access_log=False, lifespan="on"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the server on port {self.port} did not start")
            time.sleep(0.01)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@dataclass
class Reply:
    """What the fake judge answers: `text` as the message content (None: null content), after `delay` seconds,
    with HTTP `status`; `raw` bytes instead of a chat completion (garbage)."""

    text: Optional[str] = "[[YES]]"
    status: int = 200
    delay: float = 0.0
    raw: Optional[bytes] = None
    headers: dict = field(default_factory=dict)


Action = Union[str, Reply, Callable[[dict, int], Union[str, Reply]]]  # a callable gets (body, call index)


class FakeJudge:
    """An OpenAI-compatible `/v1/chat/completions` server whose answers are scripted by substring rules on the
    prompt (all message contents joined); it records every request and the most calls ever in flight at once."""

    def __init__(self, default: Action = "[[YES]]"):
        self.default = default
        self.rules: list[tuple[str, Action]] = []
        self.requests: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.app = self._build()

    def reset(self, default: Action = "[[YES]]") -> None:
        self.default, self.rules, self.requests = default, [], []
        self.in_flight = self.max_in_flight = 0

    def prompts(self) -> list[str]:
        return ["\n".join(str(m.get("content")) for m in r.get("messages", [])) for r in self.requests]

    def _pick(self, body: dict, index: int) -> Reply:
        prompt = "\n".join(str(m.get("content")) for m in body.get("messages", []) if isinstance(m, dict))
        action = next((a for key, a in self.rules if key in prompt), self.default)
        if callable(action):
            action = action(body, index)
        return Reply(text=action) if isinstance(action, str) else action

    def _build(self) -> FastAPI:
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            index = len(self.requests)  # 0-based number of this call
            self.requests.append(body)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            try:
                reply = self._pick(body, index)
                if reply.delay:
                    await asyncio.sleep(reply.delay)
            finally:
                self.in_flight -= 1
            if reply.raw is not None:
                return Response(reply.raw, status_code=reply.status, media_type="application/json")
            if reply.status != 200:
                return JSONResponse({"error": {"message": "scripted failure"}}, status_code=reply.status,
                                    headers=reply.headers)
            return JSONResponse({
                "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "judge"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": reply.text}}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})

        return app
