"""Loopback servers for tests and benchmarks: any ASGI app in a background thread, a scripted OpenAI-compatible fake
judge, a scripted flaky /verify server, and a slow /verify stand-in for benchmarks (in its own process).

    judge = FakeJudge(default="[[YES]]")
    judge.rules.append(("peanut", Reply(status=500)))          # prompts containing "peanut" get HTTP 500
    with ServerThread(judge.app) as judge_url, ServerThread(create_app(config)) as reward_url:
        ...

    python tests/servers.py slow-verify --port 8100 --delay 0.2   # /verify answers after 0.2 s; GET /health

Tests import these as `from servers import ...` (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Union

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run as a script: the repository's packages importable without an install
    sys.path.insert(0, str(REPO))

import uvicorn  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse, Response  # noqa: E402

from common.net import free_port  # noqa: E402


class ServerThread:
    """Serve an ASGI app with uvicorn on a free loopback port in a daemon thread; the context gives its URL.
    `options`: more uvicorn.Config keywords (e.g. `rewards.server.uvicorn_options(config)`)."""

    def __init__(self, app, port: Optional[int] = None, **options):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning",
                                                    access_log=False, lifespan="on", **options))
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


# ---- the fake judge -------------------------------------------------------------------------------------------


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


# ---- /verify stand-ins ------------------------------------------------------------------------------------------


class FlakyServer:
    """A minimal HTTP/1.1 /verify server on a background event loop; each request takes the next scripted
    behaviour (the last one repeats): ok, masked, drop, 503, stall, 422, a dict (answered as JSON with HTTP 200)
    or bytes (the raw 200 body, e.g. b'{"reward": NaN}'). With no script, the completion's text is the behaviour,
    so concurrent requests get theirs whatever their arrival order."""

    def __init__(self, script, reward=1.0):
        self.script, self.reward, self.requests, self.bodies = list(script or []), reward, 0, []
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self.handle, "127.0.0.1", 0), self.loop).result()
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def handle(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if not head.startswith(b"POST /verify "):  # GET /health and the like: not served here
                    writer.write(b"HTTP/1.1 404 X\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
                    await writer.drain()
                    continue
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length"))
                body = json.loads(await reader.readexactly(length))
                if self.script:
                    behaviour = self.script[min(self.requests, len(self.script) - 1)]
                else:
                    behaviour = [i for i in body["response"]["output"] if i["type"] == "message"][0]["content"][0]["text"]
                self.requests += 1
                self.bodies.append(body)
                if behaviour == "drop":
                    writer.close()
                    return
                if behaviour == "stall":
                    await asyncio.sleep(5)
                    writer.close()
                    return
                if isinstance(behaviour, bytes):
                    status, data = 200, behaviour
                else:
                    status, payload = (200, behaviour) if isinstance(behaviour, dict) else {
                        "ok": (200, {"reward": self.reward, "failure_reason": "none", "similarity_score": 0.5}),
                        "masked": (200, {"reward": 0.0, "mask_sample": True, "failure_kind": "judge_failed"}),
                        "503": (503, {"detail": "overloaded"}),
                        "422": (422, {"detail": "response: field required"}),
                    }[behaviour]
                    data = json.dumps(payload).encode()
                writer.write(b"HTTP/1.1 %d X\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
                             % (status, len(data), data))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def stop(self):
        async def shutdown():
            self.server.close()
            handlers = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)


def slow_verify_app(delay: float) -> FastAPI:
    """A /verify that sleeps `delay` seconds per request, then answers reward = (length of the last output item's
    text) mod 2, unmasked; `GET /health`. For benchmarks, served in its own process (`slow-verify` below) so that
    it shares neither the GIL nor the event loop of the client being measured."""
    app = FastAPI()

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.post("/verify")
    async def verify(request: Request):
        body = await request.json()
        await asyncio.sleep(delay)
        text = body["response"]["output"][-1]["content"][0]["text"]
        return {"reward": float(len(text) % 2), "mask_sample": False}

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python tests/servers.py", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    slow = commands.add_parser("slow-verify", help="serve slow_verify_app on 127.0.0.1 until killed")
    slow.add_argument("--port", type=int, required=True)
    slow.add_argument("--delay", type=float, default=0.2, help="seconds per /verify request (default 0.2)")
    args = parser.parse_args(argv)
    if args.command == "slow-verify":
        uvicorn.run(slow_verify_app(args.delay), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
