"""The sessions an episode server holds: one `TaskEnvironment` episode each, a cap, idle leases, teardown at shutdown.
Runs in: the episode server's process (training venv); no HTTP here (episodes/app.py), every method blocks.

A session lives from `seed` to `verify` (scored or not, the sandbox stopped) or to `close`; every call and
`keepalive` renew its lease, and `reap` ends one idle past `lease_sec` as `close` would. Verified answers are kept
for a lease, so a retried /verify gets the same one.
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from common.errors import RequestError
from common.stats import percentile
from episodes.local import EpisodeLimits, EpisodeStats, TaskEnvironment, end_episode, episode_failure, episode_reward
from harbor_tasks.folder import TaskFolder, is_task

logger = logging.getLogger("episodes")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class AtCapacity(Exception):
    """Every session slot is taken (HTTP 429)."""


@dataclass
class Session:
    id: str
    task: str
    env: TaskEnvironment
    stats: EpisodeStats
    last_used: float
    lock: threading.Lock = field(default_factory=threading.Lock)
    busy: int = 0                 # calls in progress (a busy session never expires)
    answer: dict | None = None    # the /verify answer, once verified
    ended: str | None = None      # "verified", "closed", "expired", "shutdown"


class EpisodeSessions:
    def __init__(self, task_roots: list[Path], max_sessions: int = 32, lease_sec: float = 120.0):
        self.task_roots = [Path(root) for root in task_roots]
        self.max_sessions, self.lease_sec = max_sessions, lease_sec
        self.totals = EpisodeStats()          # every episode this server ran
        self.events: Counter = Counter()      # opened, start_failed, verified, closed, expired, refused_at_capacity
        self._live: dict[str, Session] = {}
        self._ended: dict[str, tuple[float, Session]] = {}  # kept a lease: a late call gets a precise answer
        self._starting = 0
        self._lock = threading.Lock()

    # --- the episode ------------------------------------------------------------------------------------------
    def seed(self, task_id: str, limits: dict | None = None, digest: str | None = None) -> dict:
        """Start an episode of the task named `task_id` under the task roots. RequestError: unknown task (404), a
        copy that differs from the trainer's (409), bad limits (422); AtCapacity when every slot is taken."""
        task = self.find_task(task_id)
        if digest is not None and digest != TaskFolder.of(task).digest:
            raise RequestError(f"task_id {task_id!r}: this server's copy ({task}) differs from the trainer's "
                               "(task_digest): point --tasks at the same task folders the trainer reads", 409,
                               "task_digest")
        try:
            episode_limits = EpisodeLimits(**(limits or {}))
        except (TypeError, ValueError) as err:
            raise RequestError(f"limits: {err}", 422, "limits") from None
        with self._lock:
            if len(self._live) + self._starting >= self.max_sessions:
                self.events["refused_at_capacity"] += 1
                raise AtCapacity(f"all {self.max_sessions} sessions are taken; retry later or on another server")
            self._starting += 1
        try:
            stats = EpisodeStats()
            env = TaskEnvironment(episode_limits, stats)
            env.reset(task_dir=str(task))
        finally:
            with self._lock:
                self._starting -= 1
        self.totals.add(episodes=1)
        self.totals.start_seconds.extend(stats.start_seconds)
        failure = episode_failure(env)
        if failure is not None:  # the sandbox did not start: nothing to hold; the trainer counts it
            self.events["start_failed"] += 1
            self.totals.merge(stats.counts())
            return {"resources_session_id": None, "task_id": task_id, "reward": None, "failure_kind": failure[0],
                    "failure_reason": failure[1]}
        session = Session(uuid.uuid4().hex, task_id, env, stats, time.monotonic())
        with self._lock:
            self._live[session.id] = session
            self.events["opened"] += 1
        return {"resources_session_id": session.id, "task_id": task_id, "lease_sec": self.lease_sec,
                "verifier_timeout_sec": TaskFolder.of(task).verifier_timeout_sec,
                "start_seconds": round(stats.start_seconds[-1], 4) if stats.start_seconds else None}

    def bash(self, session_id: str, command: str) -> dict:
        with self._use(session_id) as session:
            return {"output": session.env.bash(command)}

    def verify(self, session_id: str) -> dict:
        """The episode's reward by its tests (TaskEnvironment's verification: the sandbox is stopped after), or
        not scored with the kind and detail; the session's counts go with it. Idempotent."""
        with self._lock:
            done = self._ended.get(session_id)
        if done is not None and done[1].answer is not None:
            return done[1].answer
        with self._use(session_id) as session:
            if session.answer is None:
                started = time.monotonic()
                reward = episode_reward(session.env)
                failure = episode_failure(session.env) if reward is None else None
                session.answer = {"resources_session_id": session.id, "task_id": session.task, "reward": reward,
                                  "failure_kind": failure[0] if failure else None,
                                  "failure_reason": failure[1] if failure else None,
                                  "verify_seconds": round(time.monotonic() - started, 4),
                                  "counts": session.stats.counts()}
                self._end(session, "verified")
            return session.answer

    def close(self, session_id: str) -> dict:
        """Stop the episode unverified (idempotent). Its counts (tool calls) go with the answer; a session
        already verified answers `closed: false` and no counts (they went with /verify)."""
        with self._lock:
            done = self._ended.get(session_id)
        if done is not None:
            return {"resources_session_id": session_id, "closed": False, "ended": done[1].ended, "counts": {}}
        with self._use(session_id) as session:
            if session.ended is not None:
                return {"resources_session_id": session_id, "closed": False, "ended": session.ended, "counts": {}}
            end_episode(session.env)
            self._end(session, "closed")
            return {"resources_session_id": session_id, "closed": True, "counts": session.stats.counts()}

    def keepalive(self, session_ids: list[str]) -> dict:
        """Renew the leases of these sessions (the trainer's keepalive thread); unknown ones are listed."""
        now, unknown = time.monotonic(), []
        with self._lock:
            for session_id in session_ids:
                session = self._live.get(session_id)
                if session is None:
                    unknown.append(session_id)
                else:
                    session.last_used = now
        return {"renewed": len(session_ids) - len(unknown), "unknown": unknown}

    # --- leases and shutdown ------------------------------------------------------------------------------------
    def reap(self) -> list[str]:
        """Expire the sessions idle past the lease (closed unverified, sandbox torn down); forget ended ones."""
        now = time.monotonic()
        with self._lock:
            idle = [s for s in self._live.values() if s.busy == 0 and now - s.last_used > self.lease_sec]
            for session in idle:
                del self._live[session.id]
            for session_id in [k for k, (at, _) in self._ended.items() if now - at > self.lease_sec]:
                del self._ended[session_id]
        for session in idle:
            end_episode(session.env)
            self._end(session, "expired")
            logger.warning("session %s (%s) expired after %g s without a call: its sandbox is torn down",
                           session.id, session.task, self.lease_sec)
        return [session.id for session in idle]

    def close_all(self) -> int:
        """Tear down every live sandbox (server shutdown), in parallel."""
        with self._lock:
            live, self._live = list(self._live.values()), {}
        with ThreadPoolExecutor(max(1, min(32, len(live)))) as pool:
            list(pool.map(end_episode, [session.env for session in live]))
        for session in live:
            self._end(session, "shutdown")
        return len(live)

    # --- reading --------------------------------------------------------------------------------------------
    def find_task(self, task_id) -> Path:
        if not isinstance(task_id, str) or not _NAME.fullmatch(task_id) or task_id in (".", ".."):
            raise RequestError(f"task_id must be a task folder's name (letters, digits, . _ -), not {task_id!r}",
                               422, "task_id")
        for root in self.task_roots:
            if is_task(root / task_id):
                return root / task_id
        raise RequestError(f"no task {task_id!r} under this server's --tasks "
                           f"({', '.join(map(str, self.task_roots))})", 404, "task_id")

    def health(self) -> dict:
        with self._lock:
            live, starting = len(self._live), self._starting
        episodes = self.totals.as_dict()
        for name, values in (("sandbox_start_seconds", self.totals.start_seconds),
                             ("verify_seconds", self.totals.verify_seconds)):
            ordered = sorted(values[-10_000:])  # the last 10,000 episodes
            episodes[f"{name}_p50"] = round(percentile(ordered, 50), 3) if ordered else None
            episodes[f"{name}_p90"] = round(percentile(ordered, 90), 3) if ordered else None
            episodes[f"{name}_max"] = round(ordered[-1], 3) if ordered else None
        return {"status": "ok", "live_sessions": live, "starting": starting, "max_sessions": self.max_sessions,
                "lease_sec": self.lease_sec, "tasks": [str(root) for root in self.task_roots],
                "sessions": dict(self.events), "episodes": episodes}

    # --- internals ------------------------------------------------------------------------------------------
    @contextmanager
    def _use(self, session_id):
        if not isinstance(session_id, str):
            raise RequestError("resources_session_id must be a string", 422, "resources_session_id")
        with self._lock:
            session = self._live.get(session_id)
            if session is None:
                raise RequestError(f"no live session {session_id}: {self._why_not(session_id)}", 404,
                                   "resources_session_id")
            session.busy += 1
        try:
            with session.lock:
                yield session
        finally:
            with self._lock:
                session.busy -= 1
                session.last_used = time.monotonic()

    def _why_not(self, session_id: str) -> str:  # called with the lock held
        done = self._ended.get(session_id)
        if done is None:
            return "unknown here (never opened, ended over a lease ago, or the server restarted)"
        if done[1].ended == "expired":
            return f"it expired (no call for over the {self.lease_sec:g} s lease) and its sandbox is torn down"
        return f"it was {done[1].ended}"

    def _end(self, session: Session, how: str) -> None:
        with self._lock:
            if session.ended is not None:
                return
            session.ended = how
            self._live.pop(session.id, None)
            self._ended[session.id] = (time.monotonic(), session)
            self.events[how] += 1
        self.totals.merge(session.stats.counts())
        self.totals.verify_seconds.extend(session.stats.verify_seconds)
