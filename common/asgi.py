"""What the repository's HTTP servers share: JSON replies, request bodies parsed into a clear 4xx, the request guard.
Runs in: the training venv (FastAPI); in the reward server (rewards/app.py) and the episode server (episodes/app.py).

The guard every request passes first: body-size limit, bearer token, per-request timing.
"""

from __future__ import annotations

import hmac
import json
import math
import time
from collections.abc import Callable
from typing import Any, Optional

from fastapi.responses import Response


def _no_constants(name: str):
    raise ValueError(f"{name} is not JSON")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


class JSONOut(Response):
    """JSON that always serializes: lone surrogates become U+FFFD (as NeMo Gym's `_sanitize_unicode_string`), and
    non-finite floats (a model's `NaN` inside its action, say) become null."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        try:
            text = json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        except ValueError:
            text = json.dumps(_finite(content), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        try:
            return text.encode("utf-8")
        except UnicodeEncodeError:
            return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace").encode("utf-8")


def error(status: int, detail: str) -> JSONOut:
    return JSONOut({"detail": detail}, status_code=status)


def parse_body(raw: bytes) -> tuple[Optional[dict], Optional[JSONOut]]:
    if not raw:
        return None, error(400, "the request body is empty; send a JSON object")
    try:
        body = json.loads(raw, parse_constant=_no_constants)
    except RecursionError:
        return None, error(400, "the request body is nested too deeply")
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError, NaN/Infinity
        return None, error(400, f"the request body is not valid JSON: {str(err)[:200]}")
    if not isinstance(body, dict):
        return None, error(422, f"the request body must be a JSON object, not {type(body).__name__}")
    return body, None


class Guard:
    """ASGI middleware: reads the body up to `max_body_bytes` (413 beyond), checks the bearer token (401) on every
    path but `open_paths`, and reports every request to `on_request(path, status, seconds)` (the server's metrics).

        app.add_middleware(Guard, auth_token=token, max_body_bytes=limit, on_request=metrics.request)
    """

    def __init__(self, app, *, auth_token: str | None, max_body_bytes: int,
                 on_request: Callable[[str, int, float], None] | None = None, open_paths=("/health",)):
        self.app, self.max_body_bytes, self.on_request = app, max_body_bytes, on_request
        self.open_paths = frozenset(open_paths)
        self.token = auth_token.encode() if auth_token else None

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        path = scope.get("path", "")
        status = {"code": 500}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            if self.token is not None and path not in self.open_paths and not self._authorized(scope):
                return await self._reply(send_wrapper, 401, "missing or wrong bearer token (Authorization: Bearer ...)",
                                         {b"www-authenticate": b"Bearer"})
            headers = dict(scope.get("headers") or [])
            limit = self.max_body_bytes
            declared = headers.get(b"content-length")
            if declared is not None:
                try:
                    if int(declared) > limit:
                        return await self._reply(send_wrapper, 413, f"the body is larger than {limit} bytes")
                except ValueError:
                    return await self._reply(send_wrapper, 400, "bad Content-Length header")
            chunks, size = [], 0
            if scope.get("method") in ("POST", "PUT", "PATCH"):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        return await self._reply(send_wrapper, 413, f"the body is larger than {limit} bytes")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        break
            body = b"".join(chunks)
            sent = {"done": False}

            async def replay():
                if not sent["done"]:
                    sent["done"] = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            await self.app(scope, replay, send_wrapper)
        finally:
            if self.on_request is not None:
                self.on_request(path, status["code"], time.perf_counter() - start)

    def _authorized(self, scope) -> bool:
        for name, value in scope.get("headers") or []:
            if name == b"authorization":
                scheme, _, token = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.token)
        return False

    @staticmethod
    async def _reply(send, status: int, detail: str, headers: dict | None = None):
        payload = json.dumps({"detail": detail}).encode()
        raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        raw_headers += list((headers or {}).items())
        if status == 413:
            raw_headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": raw_headers})
        await send({"type": "http.response.body", "body": payload})
