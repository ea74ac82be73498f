"""Connection hygiene for the reward server on uvicorn: read deadlines, a connection cap, floods logged once.
Runs in: the reward server's process: the training venv, or any Python >= 3.11 with FastAPI, pydantic and httpx.

`GuardedH11Protocol` (`uvicorn_options`): a `read_timeout` per request and a `max_connections` cap (503 past it);
`ConnectionGuard.exception_handler`: out-of-descriptor accept errors logged once a minute, counted in `/metrics`.
Why: docs/reward-server.md#the-config-file.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import time
from typing import Optional

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

logger = logging.getLogger("rewards")

RESERVED_FDS = 64  # besides the judge's connections: log files, the listening socket, imports, the event loop
# the listen backlog, which is also how many connections asyncio accepts in one go, before the protocol can refuse
# any: the default cap leaves that many descriptors free, so a flood is refused with 503s rather than EMFILE
ACCEPT_BATCH = 128
LOG_EVERY = 60.0  # seconds between two log lines of one kind of event
OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_REFUSAL_BODY = b'{"detail":"the reward server is at max_connections; retry shortly"}'
REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
           b"content-length: %d\r\n\r\n%s" % (len(_REFUSAL_BODY), _REFUSAL_BODY))


def default_max_connections(judge_connections: int) -> int:
    """The open-file limit (soft) less the judge's connections, `RESERVED_FDS` and `ACCEPT_BATCH`; at least 16."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, soft - judge_connections - RESERVED_FDS - ACCEPT_BATCH)


def raise_open_file_limit() -> None:
    """Raise the soft open-file limit to the hard one (at most 65,536), as servers do; quietly, where allowed."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)
        if soft != resource.RLIM_INFINITY and soft < target:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        pass


class ConnectionGuard:
    """The settings and counters the protocol reads from the app (`app.state.connections`)."""

    def __init__(self, read_timeout: float, max_connections: int):
        self.read_timeout, self.max_connections = read_timeout, max_connections
        self.counts = {"read_timeouts": 0, "refused": 0, "accept_errors": 0}
        self._logged: dict[str, tuple[float, int]] = {}  # kind -> (when last logged, count then)

    def event(self, kind: str, message: str) -> None:
        """Count one event; log it the first time, then at most once per LOG_EVERY seconds, with the count since."""
        self.counts[kind] += 1
        now = time.monotonic()
        last = self._logged.get(kind)
        if last is None or now - last[0] >= LOG_EVERY:
            since = self.counts[kind] - (last[1] if last else 0)
            logger.warning("%s (%d since the last such line; next one in %g s at the earliest)", message, since,
                           LOG_EVERY)
            self._logged[kind] = (now, self.counts[kind])

    def exception_handler(self, previous):
        """An event-loop exception handler: out-of-descriptor accept errors logged as `event`s, one line each."""

        def handle(loop: asyncio.AbstractEventLoop, context: dict) -> None:
            err = context.get("exception")
            if isinstance(err, OSError) and err.errno in OUT_OF_RESOURCES:
                self.event("accept_errors", f"cannot accept connections: {err.strerror or err} (too many open "
                                            "files? lower max_connections or raise the open-file limit)")
                return
            if previous is not None:
                previous(loop, context)
            else:
                loop.default_exception_handler(context)

        return handle


def find_guard(app) -> Optional[ConnectionGuard]:
    """The `ConnectionGuard` of the FastAPI app under uvicorn's middleware wrappers (None: not a reward server)."""
    for _ in range(16):
        if app is None:
            return None
        state = getattr(app, "state", None)
        guard = getattr(state, "connections", None) if state is not None else None
        if isinstance(guard, ConnectionGuard):
            return guard
        app = getattr(app, "app", None)
    return None


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a read deadline per request and a connection cap (see the module)."""

    _guard: Optional[ConnectionGuard] = None
    _read_timer: Optional[asyncio.TimerHandle] = None
    _refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._guard = guard = find_guard(self.app)
        if guard is not None and len(self.connections) >= guard.max_connections:
            self._refused = True
            self.transport = transport
            guard.event("refused", f"refused connections past max_connections ({guard.max_connections}) with 503")
            transport.write(REFUSAL)
            transport.close()
            return
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        if self._guard is not None:
            self._read_timer = self.loop.call_later(self._guard.read_timeout, self._read_timed_out)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _reading(self) -> bool:
        """Whether a request is still being read (nothing yet, its headers, or its body)."""
        return self.conn.their_state in (h11.IDLE, h11.SEND_BODY)

    def _read_timed_out(self) -> None:
        self._read_timer = None
        if self.transport.is_closing() or not self._reading():
            return
        self._guard.event("read_timeouts", "closed connections that sent no complete request within "
                                           f"read_timeout ({self._guard.read_timeout:g} s)")
        self.transport.close()

    def handle_events(self) -> None:
        super().handle_events()
        if self._read_timer is not None and not self._reading():
            self._disarm()  # the request is in: scoring is under verify_timeout, not the read deadline

    def on_response_complete(self) -> None:
        if not self.transport.is_closing():
            self._arm()  # the next request on this keep-alive connection (uvicorn closes it if none comes)
        super().on_response_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._refused:
            return
        super().connection_lost(exc)


def uvicorn_options(max_connections: Optional[int]) -> dict:
    """uvicorn.run / uvicorn.Config keyword arguments (the app carries the guard and its limits itself)."""
    return {"http": GuardedH11Protocol, "backlog": ACCEPT_BATCH, "timeout_keep_alive": 30}
