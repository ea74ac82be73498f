"""The episode server's FastAPI app: its sessions over HTTP, NeMo Gym style (episodes.sessions does the work).
Runs in: the episode server's process (training venv); the paths are the package's wire constants.

    POST /seed_session   {task_id, limits?, task_digest?, harness?} -> {resources_session_id, lease_sec, ...}
    POST /bash           {resources_session_id, command}          -> {output}: what TaskEnvironment.bash returns
    POST /terminus_first {resources_session_id}                   -> {message}: terminus_first_message (again: the same)
    POST /terminus_step  {resources_session_id, response}         -> {observation, done}: terminus_step
    POST /verify         {resources_session_id}                   -> {reward, failure_kind, failure_reason, counts}
    POST /close_session  {resources_session_id}                   -> {closed, counts}
    POST /keepalive      {resources_session_ids: [...]}           -> {renewed, unknown}
    GET  /health         (open)                                   -> live sessions, capacity, counts by kind
harness: "bash-tool" (default; /bash) or "terminus-2" (/terminus_*); another harness's call is a 409.
Status codes, the guard, the caps and the thread pools: docs/agentic-grpo.md ("Sandboxes on other nodes").
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request

from common.asgi import Guard, JSONOut, error, parse_body
from common.errors import RequestError
from common.harnesses import BASH_TOOL_HARNESS
from episodes import BASH, CLOSE_SESSION, HEALTH, KEEPALIVE, SEED_SESSION, TERMINUS_FIRST, TERMINUS_STEP, VERIFY
from episodes.local import WALL_GRACE_SEC
from episodes.sessions import AtCapacity, EpisodeSessions, LimitCaps

logger = logging.getLogger("episodes")


@dataclass
class EpisodeServerConfig:
    tasks: list[Path] = field(default_factory=list)  # folders of Harbor task folders; a task goes by its name
    host: str = "127.0.0.1"
    port: int = 8200
    max_sessions: int = 32
    lease_sec: float = 120.0
    auth_token: str | None = None
    max_body_bytes: int = 4 << 20
    log_level: str = "info"
    caps: LimitCaps = field(default_factory=LimitCaps)  # the most a seed's limits may ask for (--max_<key>)
    wall_grace_sec: float = WALL_GRACE_SEC  # a session ends episode_wall_sec + this after its seed


WAITING_CALLS = 4  # per session, beyond the one running (a /verify retried while the first runs); more get 429


class SessionBusy(Exception):
    """More calls on one session than one running and WAITING_CALLS waiting (HTTP 429)."""


class SessionTurns:
    """One call at a time per session; the others wait their turn in the event loop, holding no thread, and at
    most `waiting` of them: a client's pile of calls on its own session never takes the threads of other
    sessions' calls, of the seeds or of the reaper."""

    def __init__(self, waiting: int):
        self.waiting = waiting
        self._turns: dict[str, list] = {}  # session id -> [asyncio.Lock, calls running or waiting]

    @asynccontextmanager
    async def turn(self, session_id: str):
        entry = self._turns.setdefault(session_id, [asyncio.Lock(), 0])
        if entry[1] > self.waiting:
            raise SessionBusy(f"session {session_id} has a call running and {entry[1] - 1} waiting: one call at a "
                              "time per session")
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._turns[session_id]


def create_app(config: EpisodeServerConfig) -> FastAPI:
    sessions = EpisodeSessions(config.tasks, config.max_sessions, config.lease_sec, config.caps,
                               config.wall_grace_sec)
    # three pools, so that no work waits behind another kind: seeds (at most max_sessions start at once, the rest
    # are refused at capacity), session calls (one at a time per session: SessionTurns; room for the calls of
    # sessions ended under them), and the reaper's sweeps
    seed_pool = ThreadPoolExecutor(config.max_sessions, thread_name_prefix="episode-seed")
    call_pool = ThreadPoolExecutor(2 * config.max_sessions + 4, thread_name_prefix="episode-call")
    reaper_pool = ThreadPoolExecutor(1, thread_name_prefix="episode-reaper")
    turns = SessionTurns(WAITING_CALLS)

    async def blocking(pool, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)

    async def reaper():
        while True:
            await asyncio.sleep(max(0.2, min(5.0, config.lease_sec / 4)))
            try:
                await blocking(reaper_pool, sessions.reap)
            except Exception:  # a teardown that failed must not stop the next sweep
                logger.exception("reaping idle sessions")

    @asynccontextmanager
    async def lifespan(_app):
        task = asyncio.create_task(reaper())
        yield
        task.cancel()
        closed = await blocking(reaper_pool, sessions.close_all)
        if closed:
            logger.info("shutdown: %d live session(s) closed, their sandboxes torn down", closed)
        for pool in (seed_pool, call_pool, reaper_pool):
            pool.shutdown(wait=True)

    app = FastAPI(title="terminal-recipes episode server", lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.sessions = sessions

    async def read(request: Request, *required: str) -> tuple[dict | None, JSONOut | None]:
        body, problem = parse_body(await request.body())
        missing = [key for key in required if problem is None and key not in body]
        return body, problem or (error(422, f"{missing[0]}: Field required") if missing else None)

    async def run(request: Request, call, pool=call_pool, session_id=None) -> JSONOut:
        """A call in its pool, a session's in its turn; refusals as 4xx (404, 409, 422, 429), anything else a
        logged 500. A call whose client left while it waited for its turn is not run."""
        try:
            if not isinstance(session_id, str):
                return JSONOut(await blocking(pool, call))
            async with turns.turn(session_id):
                if await request.is_disconnected():
                    return error(499, "the client closed the connection before the call's turn: not run")
                return JSONOut(await blocking(pool, call))
        except RequestError as err:
            return error(err.status, err.message)
        except (AtCapacity, SessionBusy) as err:
            return JSONOut({"detail": str(err)}, status_code=429, headers={"retry-after": "1"})
        except Exception as err:
            logger.exception("internal error in %s", request.url.path)
            return error(500, f"internal error: {type(err).__name__} (logged by the server)")

    @app.get(HEALTH)
    async def health():
        return JSONOut(sessions.health())

    @app.post(SEED_SESSION)
    async def seed_session(request: Request):
        body, problem = await read(request, "task_id")
        if problem is not None:
            return problem
        limits, digest, harness = body.get("limits"), body.get("task_digest"), body.get("harness", BASH_TOOL_HARNESS)
        if limits is not None and not isinstance(limits, dict):
            return error(422, "limits: must be an object of EpisodeLimits fields")
        if digest is not None and not isinstance(digest, str):
            return error(422, "task_digest: must be a string")
        if not isinstance(harness, str):
            return error(422, f"harness: must be a string, not {type(harness).__name__}")
        return await run(request, lambda: sessions.seed(body["task_id"], limits, digest, harness), seed_pool)

    @app.post(BASH)
    async def bash(request: Request):
        body, problem = await read(request, "resources_session_id", "command")
        if problem is not None:
            return problem
        if not isinstance(body["command"], str):
            return error(422, f"command: must be a string, not {type(body['command']).__name__}")
        session_id = body["resources_session_id"]
        return await run(request, lambda: sessions.bash(session_id, body["command"]), session_id=session_id)

    @app.post(TERMINUS_FIRST)
    async def terminus_first(request: Request):
        body, problem = await read(request, "resources_session_id")
        if problem is not None:
            return problem
        session_id = body["resources_session_id"]
        return await run(request, lambda: sessions.terminus_first(session_id), session_id=session_id)

    @app.post(TERMINUS_STEP)
    async def terminus_step(request: Request):
        body, problem = await read(request, "resources_session_id", "response")
        if problem is not None:
            return problem
        if not isinstance(body["response"], str):
            return error(422, f"response: must be a string, not {type(body['response']).__name__}")
        session_id = body["resources_session_id"]
        return await run(request, lambda: sessions.terminus_step(session_id, body["response"]), session_id=session_id)

    @app.post(VERIFY)
    async def verify(request: Request):
        body, problem = await read(request, "resources_session_id")
        if problem is not None:
            return problem
        session_id = body["resources_session_id"]
        return await run(request, lambda: sessions.verify(session_id), session_id=session_id)

    @app.post(CLOSE_SESSION)
    async def close_session(request: Request):
        body, problem = await read(request, "resources_session_id")
        if problem is not None:
            return problem
        # not in the session's turn: closing ends a running command (its sandbox stopped), it does not wait for it
        return await run(request, lambda: sessions.close(body["resources_session_id"]))

    @app.post(KEEPALIVE)
    async def keepalive(request: Request):
        body, problem = await read(request, "resources_session_ids")
        if problem is not None:
            return problem
        ids = body["resources_session_ids"]
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            return error(422, "resources_session_ids: must be a list of strings")
        return JSONOut(sessions.keepalive(ids))

    app.add_middleware(Guard, auth_token=config.auth_token, max_body_bytes=config.max_body_bytes)
    return app
