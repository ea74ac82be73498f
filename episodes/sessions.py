"""The sessions an episode server holds: one episode each (bash tool or Terminus-2), a cap, idle leases, teardown.
Runs in: the episode server's process (training venv); no HTTP here (episodes/app.py), every method blocks.

A session lives from `seed` to `verify` (scored or not, the sandbox stopped) or to `close`; every call and
`keepalive` renew its lease, and `reap` ends one without either for `lease_sec`, or past its deadline, busy or not
(its sandbox stopped under a running command). Client limits above the caps are refused. Verified answers are
kept for a lease, so a retried /verify gets the same one.
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
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from common.errors import RequestError
from common.stats import percentile
from common.harnesses import BASH_TOOL_HARNESS, HARNESSES, TERMINUS_2_HARNESS, UnknownHarness, harness_named
from episodes.local import (
    WALL_GRACE_SEC,
    EpisodeLimits,
    EpisodeStats,
    TaskEnvironment,
    end_episode,
    episode_failure,
    episode_reward,
)
from episodes.terminus import TerminusEnvironment, terminus_first_message, terminus_step
from harbor_tasks.folder import TaskFolder, is_task

logger = logging.getLogger("episodes")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class AtCapacity(Exception):
    """Every session slot is taken (HTTP 429)."""


@dataclass(frozen=True)
class LimitCaps:
    """The most one session's limits (episodes.local.EpisodeLimits) may ask for: the server's `--max_<key>` flags.
    A seed asking for more is refused (422) naming the key and the cap, not clamped: the run asked for that limit."""

    command_timeout_sec: float = 1800.0
    episode_wall_sec: float = 7200.0
    max_output_chars: int = 65536
    memory_mb: int = 16384
    storage_mb: int = 32768

    @staticmethod
    def flag(key: str) -> str:
        return "--max_" + key.removeprefix("max_")

    def check(self, limits: EpisodeLimits) -> None:
        for item in fields(self):
            value, cap = getattr(limits, item.name), getattr(self, item.name)
            if value > cap:
                flag = self.flag(item.name)
                raise RequestError(f"limits.{item.name}: {_number(value)} is over this server's cap, {_number(cap)} "
                                   f"({flag}); ask for less, or start the server with a larger {flag}", 422, "limits")


@dataclass
class Session:
    id: str
    task: str
    env: TaskEnvironment | TerminusEnvironment
    stats: EpisodeStats
    last_used: float              # the last call's start or end, or keepalive: the lease runs from it
    deadline: float               # seeded + episode_wall_sec + the wall grace: ended then, whatever the keepalives
    lock: threading.Lock = field(default_factory=threading.Lock)
    answer: dict | None = None    # the /verify answer, once verified
    ended: str | None = None      # "verified", "closed", "expired", "past_deadline", "shutdown"
    harness: str = BASH_TOOL_HARNESS      # common/harnesses.py: which calls act in it (its episode_calls)
    first_message: str | None = None  # a Terminus-2 session's first message, once asked for (asked again: the same)


class EpisodeSessions:
    def __init__(self, task_roots: list[Path], max_sessions: int = 32, lease_sec: float = 120.0,
                 caps: LimitCaps | None = None, wall_grace_sec: float = WALL_GRACE_SEC):
        self.task_roots = [Path(root) for root in task_roots]
        self.max_sessions, self.lease_sec = max_sessions, lease_sec
        self.caps, self.wall_grace_sec = caps or LimitCaps(), wall_grace_sec
        self.totals = EpisodeStats()          # every episode this server ran
        # opened, start_failed, verified, closed, expired, past_deadline, shutdown, refused_at_capacity
        self.events: Counter = Counter()
        self._live: dict[str, Session] = {}
        self._ended: dict[str, tuple[float, Session]] = {}  # kept a lease: a late call gets a precise answer
        self._starting = 0
        self._lock = threading.Lock()

    # --- the episode ------------------------------------------------------------------------------------------
    def seed(self, task_id: str, limits: dict | None = None, digest: str | None = None,
             harness: str = BASH_TOOL_HARNESS) -> dict:
        """Start an episode of the task named `task_id` under the task roots, in `harness` (HARNESSES). RequestError:
        unknown task (404), a copy that differs from the trainer's (409), bad limits or limits over the caps or an
        unknown harness (422); AtCapacity when every slot is taken."""
        try:
            harness_named(harness)
        except UnknownHarness as err:
            raise RequestError(str(err), 422, "harness") from None
        task = self.find_task(task_id)
        if digest is not None and digest != TaskFolder.of(task).digest:
            raise RequestError(f"task_id {task_id!r}: this server's copy ({task}) differs from the trainer's "
                               "(task_digest): point --tasks at the same task folders the trainer reads", 409,
                               "task_digest")
        try:
            episode_limits = EpisodeLimits(**(limits or {}))
        except (TypeError, ValueError) as err:
            raise RequestError(f"limits: {err}", 422, "limits") from None
        self.caps.check(episode_limits)
        with self._lock:
            if len(self._live) + self._starting >= self.max_sessions:
                self.events["refused_at_capacity"] += 1
                raise AtCapacity(f"all {self.max_sessions} sessions are taken; retry later or on another server")
            self._starting += 1
        try:
            stats = EpisodeStats()
            env = (TerminusEnvironment if harness == TERMINUS_2_HARNESS else TaskEnvironment)(episode_limits, stats)
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
        now, lifetime = time.monotonic(), episode_limits.episode_wall_sec + self.wall_grace_sec
        session = Session(uuid.uuid4().hex, task_id, env, stats, now, now + lifetime, harness=harness)
        with self._lock:
            self._live[session.id] = session
            self.events["opened"] += 1
        return {"resources_session_id": session.id, "task_id": task_id, "harness": harness,
                "lease_sec": self.lease_sec, "deadline_sec": lifetime,
                "verifier_timeout_sec": TaskFolder.of(task).verifier_timeout_sec,
                "start_seconds": round(stats.start_seconds[-1], 4) if stats.start_seconds else None}

    def bash(self, session_id: str, command: str) -> dict:
        with self._use(session_id, BASH_TOOL_HARNESS) as session:
            output = session.env.bash(command)
        return {"output": output}

    def terminus_first(self, session_id: str) -> dict:
        """A Terminus-2 session's first user message (tmux started); asked again, the same message (idempotent)."""
        with self._use(session_id, TERMINUS_2_HARNESS) as session:
            if session.first_message is None:
                session.first_message = terminus_first_message(session.env)
            message = session.first_message
        return {"message": message}

    def terminus_step(self, session_id: str, response: str) -> dict:
        """One Terminus-2 turn: the policy's response read and its keystrokes typed; the next message, done or not."""
        with self._use(session_id, TERMINUS_2_HARNESS) as session:
            turn = terminus_step(session.env, response)
        return {"observation": turn.observation, "done": turn.done}

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
                self._end(session, "verified", {
                    "resources_session_id": session.id, "task_id": session.task, "reward": reward,
                    "failure_kind": failure[0] if failure else None, "failure_reason": failure[1] if failure else None,
                    "verify_seconds": round(time.monotonic() - started, 4), "counts": session.stats.counts()})
            answer = session.answer
        return answer

    def close(self, session_id: str) -> dict:
        """Stop the episode unverified (idempotent), at once: a command still running dies with the sandbox and its
        call answers 404. Its counts (tool calls) go with the answer; a session already ended answers
        `closed: false` and no counts (a verified one's went with /verify)."""
        with self._lock:
            done = self._ended.get(session_id) if isinstance(session_id, str) else None
        if done is not None:
            return {"resources_session_id": session_id, "closed": False, "ended": done[1].ended, "counts": {}}
        session = self._live_session(session_id)
        if not self._end(session, "closed"):
            return {"resources_session_id": session_id, "closed": False, "ended": session.ended, "counts": {}}
        end_episode(session.env)
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
        """End the sessions past their lease (no call or keepalive for `lease_sec`) or past their deadline, busy
        or not: closed unverified, sandbox torn down, a running command with it. Forget those ended a lease ago."""
        now = time.monotonic()
        with self._lock:
            due = [(s, "past_deadline" if now >= s.deadline else "expired") for s in self._live.values()
                   if now >= s.deadline or now - s.last_used > self.lease_sec]
            for session_id in [k for k, (at, _) in self._ended.items() if now - at > self.lease_sec]:
                del self._ended[session_id]
        ended = [session for session, how in due if self._end(session, how)]
        _teardown(ended)
        for session in ended:
            logger.warning("session %s (%s) %s: its sandbox is torn down", session.id, session.task,
                           f"expired after {self.lease_sec:g} s without a call or keepalive"
                           if session.ended == "expired" else "passed its deadline (episode_wall_sec + "
                           f"{self.wall_grace_sec:g} s after its seed)")
        return [session.id for session in ended]

    def close_all(self) -> int:
        """Tear down every live sandbox (server shutdown), in parallel."""
        with self._lock:
            live = list(self._live.values())
        ended = [session for session in live if self._end(session, "shutdown")]
        _teardown(ended)
        return len(ended)

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
                "lease_sec": self.lease_sec, "wall_grace_sec": self.wall_grace_sec, "caps": asdict(self.caps),
                "tasks": [str(root) for root in self.task_roots], "sessions": dict(self.events),
                "episodes": episodes}

    # --- internals ------------------------------------------------------------------------------------------
    def _live_session(self, session_id) -> Session:
        if not isinstance(session_id, str):
            raise RequestError("resources_session_id must be a string", 422, "resources_session_id")
        with self._lock:
            session = self._live.get(session_id)
            if session is None:
                raise RequestError(f"no live session {session_id}: {self._why_not(session_id)}", 404,
                                   "resources_session_id")
            session.last_used = time.monotonic()
            return session

    @contextmanager
    def _use(self, session_id, harness: str | None = None):
        """The live session, one call at a time; a call of another harness than the session's is refused (409). A
        session ended under the call (closed, expired, past its deadline: its sandbox stopped) makes the call a 404
        saying so, whatever the dying sandbox returned."""
        session = self._live_session(session_id)
        if harness is not None and session.harness != harness:
            raise RequestError(f"session {session.id} is a {session.harness} episode, not {harness}: call "
                               f"{' and '.join(HARNESSES[session.harness].episode_calls)}", 409, "resources_session_id")
        try:
            with session.lock:
                self._still_live(session)
                yield session
        except RequestError:
            raise
        except Exception:
            self._still_live(session)
            raise
        finally:
            session.last_used = time.monotonic()
        self._still_live(session)

    def _still_live(self, session: Session) -> None:
        if session.ended not in (None, "verified"):
            with self._lock:
                why = self._why_not(session.id)
            raise RequestError(f"no live session {session.id}: {why}", 404, "resources_session_id")

    def _why_not(self, session_id: str) -> str:  # called with the lock held
        done = self._ended.get(session_id)
        if done is None:
            return "unknown here (never opened, ended over a lease ago, or the server restarted)"
        if done[1].ended == "expired":
            return (f"it expired (no call or keepalive for over the {self.lease_sec:g} s lease) and its sandbox is "
                    "torn down")
        if done[1].ended == "past_deadline":
            return (f"it passed its deadline (episode_wall_sec + {self.wall_grace_sec:g} s after its seed) and its "
                    "sandbox is torn down")
        return f"it was {done[1].ended}"

    def _end(self, session: Session, how: str, answer: dict | None = None) -> bool:
        """Mark the session ended (`how`; a verified one with its answer); False when it already was. The caller
        stops its sandbox (verification stops its own)."""
        with self._lock:
            if session.ended is not None:
                return False
            session.ended, session.answer = how, answer
            self._live.pop(session.id, None)
            self._ended[session.id] = (time.monotonic(), session)
            self.events[how] += 1
        self.totals.merge(session.stats.counts())
        self.totals.verify_seconds.extend(session.stats.verify_seconds)
        return True


def _teardown(sessions: list[Session]) -> None:
    """Stop these sessions' sandboxes, in parallel (a namespace's teardown takes a second or two)."""
    if sessions:
        with ThreadPoolExecutor(min(32, len(sessions)), thread_name_prefix="episode-teardown") as pool:
            list(pool.map(end_episode, [session.env for session in sessions]))


def _number(value) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:g}"
