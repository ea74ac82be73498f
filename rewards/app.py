"""The reward server's FastAPI app: NeMo Gym's resources-server endpoints, routing, guards, metrics.
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.

Endpoints: `POST /verify`, `POST /seed_session` and `POST /close_session` (no-ops, as NeMo Gym's defaults),
`GET /health` (open), `GET /metrics`. Every bad request is a 4xx whose `detail` names the field; a body is read
(and refused with 413 past `max_body_bytes`) and the bearer token checked before any route runs.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import asynccontextmanager
from typing import Optional

from fastapi import FastAPI, Request
from pydantic import ValidationError

from common.asgi import Guard, JSONOut, error, parse_body
from common.errors import RequestError
from rewards import CLOSE_SESSION, HEALTH, METRICS, SEED_SESSION, VERIFY
from rewards.config import ServerConfig
from rewards.connections import ConnectionGuard, default_max_connections
from rewards.environments import AGENT_NAMES, ENVIRONMENTS, Environment
from rewards.judge import Judge
from rewards.metrics import Metrics

logger = logging.getLogger("rewards")

ENDPOINTS = {VERIFY, SEED_SESSION, CLOSE_SESSION, HEALTH, METRICS}

# JSON in and out (JSONOut, error, parse_body) and the guard (body size, bearer token, timing): common/asgi.py

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

    @app.get(HEALTH)
    async def health():
        return JSONOut({"status": "ok", "environments": list(environments),
                        "judge": judge.url is not None, "verify_timeout": config.verify_timeout})

    @app.get(METRICS)
    async def get_metrics():
        return JSONOut({**metrics.snapshot(judge), "connections": {
            **connections.counts, "max_connections": connections.max_connections,
            "read_timeout": connections.read_timeout}})

    @app.post(SEED_SESSION)
    async def seed_session(request: Request):
        body, problem = parse_body(await request.body())
        if problem is not None:
            return problem
        session = body.get("resources_session_id")
        return JSONOut({"resources_session_id": session} if session is not None else {})

    @app.post(CLOSE_SESSION)
    async def close_session(request: Request):
        body, problem = parse_body(await request.body())
        return problem if problem is not None else JSONOut({})

    @app.post(VERIFY)
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

    app.add_middleware(Guard, auth_token=config.auth_token, max_body_bytes=config.max_body_bytes,
                       on_request=lambda path, status, seconds: metrics.request(
                           path if path in ENDPOINTS else "other", status, seconds))
    return app
