"""The reward server's FastAPI app: NeMo Gym's resources-server endpoints, routing, guards, metrics.

Endpoints: `POST /verify`, `POST /seed_session` and `POST /close_session` (no-ops, as NeMo Gym's defaults),
`GET /health` (open), `GET /metrics`. Every bad request is a 4xx whose `detail` names the field; a body is read
(and refused with 413 past `max_body_bytes`) and the bearer token checked before any route runs.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import time
from contextlib import asynccontextmanager
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.responses import Response
from pydantic import ValidationError

from common.errors import RequestError
from rewards.config import ServerConfig
from rewards.connections import ConnectionGuard, default_max_connections
from rewards.environments import AGENT_NAMES, ENVIRONMENTS, Environment
from rewards.judge import Judge
from rewards.metrics import Metrics

logger = logging.getLogger("rewards")

ENDPOINTS = {"/verify", "/seed_session", "/close_session", "/health", "/metrics"}


# ---- JSON in and out --------------------------------------------------------------------------------------------


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


_TYPE_TAGS = {"str", "int", "float", "bool", "dict", "list", "none", "is-instance", "literal"}


def describe(err: ValidationError, limit: int = 5) -> str:
    """Pydantic errors as `field.path: message`, union-member tags (`str`, `list[...]`) left out of the path."""
    parts: list[str] = []
    for item in err.errors():
        where = ".".join(str(p) for p in item["loc"]
                         if not (isinstance(p, str) and (p in _TYPE_TAGS or "[" in p or "(" in p))) or "body"
        line = f"{where}: {item['msg']}"
        if line not in parts:
            parts.append(line)
    more = len(parts) - limit
    return "; ".join(parts[:limit]) + (f"; and {more} more" if more > 0 else "")


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


# ---- guards: body size, bearer token, metrics -----------------------------------------------------------------


class Guard:
    """ASGI middleware: reads the body up to `max_body_bytes` (413 beyond), checks the bearer token (401), times
    every request for the metrics."""

    def __init__(self, app, *, config: ServerConfig, metrics: Metrics):
        self.app, self.config, self.metrics = app, config, metrics
        self.token = config.auth_token.encode() if config.auth_token else None

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
            if self.token is not None and path != "/health" and not self._authorized(scope):
                return await self._reply(send_wrapper, 401, "missing or wrong bearer token (Authorization: Bearer ...)",
                                         {b"www-authenticate": b"Bearer"})
            headers = dict(scope.get("headers") or [])
            limit = self.config.max_body_bytes
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
            endpoint = path if path in ENDPOINTS else "other"
            self.metrics.request(endpoint, status["code"], time.perf_counter() - start)

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


# ---- the app --------------------------------------------------------------------------------------------------


def create_app(config: ServerConfig) -> FastAPI:
    judge = Judge(config.judge)
    environments: dict[str, Environment] = {
        name: ENVIRONMENTS[name](config.environment_config(name), judge) for name in config.environments()}
    metrics = Metrics()
    connections = ConnectionGuard(config.read_timeout, config.max_connections
                                  or default_max_connections(config.judge.max_concurrency))
    accepted = sorted(name for name, env in AGENT_NAMES.items() if env in environments)

    @asynccontextmanager
    async def lifespan(_app):
        loop = asyncio.get_running_loop()
        previous = loop.get_exception_handler()
        loop.set_exception_handler(connections.exception_handler(previous))
        yield
        loop.set_exception_handler(previous)
        for environment in environments.values():
            await environment.aclose()
        await judge.aclose()

    app = FastAPI(title="terminal-recipes reward server (NeMo Gym /verify protocol)", lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.state.config, app.state.metrics, app.state.judge, app.state.environments = config, metrics, judge, environments
    app.state.connections = connections  # read by rewards.connections.GuardedH11Protocol

    def route(body: dict) -> tuple[Optional[Environment], Optional[JSONOut]]:
        ref = body.get("agent_ref")
        name = None
        if ref is not None:
            if not isinstance(ref, dict) or not isinstance(ref.get("name"), str):
                return None, error(422, "agent_ref: must be an object with a string 'name'")
            name = ref["name"]
        if config.environment is not None:
            owner = AGENT_NAMES.get(name) if name else None
            if owner is not None and owner != config.environment:
                return None, error(400, f"agent_ref.name '{name}' is a {owner} row, but this server serves only "
                                        f"{config.environment}")
            return environments[config.environment], None
        if name is None:
            return None, error(400, "the row has no agent_ref.name; this server serves several environments and "
                                    f"routes by agent_ref.name, one of: {', '.join(accepted)}")
        if name not in AGENT_NAMES:
            return None, error(400, f"agent_ref.name '{name}' is not served here; accepted names: "
                                    f"{', '.join(accepted)}")
        return environments[AGENT_NAMES[name]], None

    @app.get("/health")
    async def health():
        return JSONOut({"status": "ok", "environments": list(environments),
                        "judge": judge.url is not None, "verify_timeout": config.verify_timeout})

    @app.get("/metrics")
    async def get_metrics():
        return JSONOut({**metrics.snapshot(judge), "connections": {
            **connections.counts, "max_connections": connections.max_connections,
            "read_timeout": connections.read_timeout}})

    @app.post("/seed_session")
    async def seed_session(request: Request):
        body, problem = parse_body(await request.body())
        if problem is not None:
            return problem
        session = body.get("resources_session_id")
        return JSONOut({"resources_session_id": session} if session is not None else {})

    @app.post("/close_session")
    async def close_session(request: Request):
        body, problem = parse_body(await request.body())
        return problem if problem is not None else JSONOut({})

    @app.post("/verify")
    async def verify(request: Request):
        body, problem = parse_body(await request.body())
        if problem is not None:
            return problem
        environment, problem = route(body)
        if problem is not None:
            return problem
        try:
            parsed = environment.request_model.model_validate(body)
        except ValidationError as err:
            return error(422, f"invalid {environment.name} row: {describe(err)}")
        except RecursionError:
            return error(400, "the request body is nested too deeply")
        try:
            result = await environment.verify_failsafe(parsed, body, config.verify_timeout)
            out = JSONOut(result, headers={"x-verify-timeout": f"{config.verify_timeout:g}"})
        except RequestError as err:  # the row's content, refused by the environment (422, naming the field)
            return error(err.status, f"invalid {environment.name} row: {err.message}")
        except RecursionError:
            return error(400, "the request body is nested too deeply")
        except Exception as err:
            logger.exception("internal error in /verify (%s)", environment.name)
            return error(500, f"internal error: {type(err).__name__} (logged by the server)")
        metrics.verified(environment.name, result)
        return out

    app.add_middleware(Guard, config=config, metrics=metrics)
    return app
