"""An episode on an episode server (`python -m episodes.server`): the client, the same tool, verdict and failure kinds.
Runs in: the training venv (Python >= 3.11), in the trainer's process; needs only httpx.

    servers = EpisodeServers(["http://cpu1:8200", "http://cpu2:8200"])     # one per trainer process
    env = RemoteTaskEnvironment(servers, EpisodeLimits(), EpisodeStats())  # GRPOTrainer(environment_factory=...)
    env.reset(task_dir=".../write-value-1-0", task="write-value-1-0")      # the dataset row's columns
    env.bash("ls"); episode_reward(env)                                    # on the server's sandbox
    RemoteTerminusEnvironment(servers, ...): Terminus-2 (episodes.terminus's terminus_first_message, terminus_step)
Retries, leases and what a failing server masks: docs/agentic-grpo.md ("Sandboxes on other nodes").
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import random
import threading
import time
import weakref
from dataclasses import asdict
from pathlib import Path

import httpx

from common.errors import ConfigError
from common.harnesses import BASH_TOOL_HARNESS, TERMINUS_2_HARNESS
from common.terminus_2 import first_message, shown_instruction
from episodes import BASH, CLOSE_SESSION, KEEPALIVE, SEED_SESSION, TERMINUS_FIRST, TERMINUS_STEP, TOKEN_ENV, VERIFY
from episodes.local import NOT_RUNNING, SANDBOX_FAILED, EpisodeLimits, EpisodeStats, TaskEnvironment
from episodes.terminus import TerminusTurn
from harbor_tasks.folder import TaskFolder

logger = logging.getLogger(__name__)
FIRST_MESSAGE_TIMEOUT_SEC = 120.0  # a Terminus-2 session's tmux start and first screen (bounded tmux calls)


class EpisodeServerError(Exception):
    """A call to an episode server that failed for good (network, 5xx, timeout, capacity): an infrastructure
    failure of the episode, not the run's."""


class EpisodeServers:
    """The episode servers of a run, as one trainer process sees them: pooled connections, seeds spread over the
    URLs round-robin from a random start (so ranks do not all begin on the first), and the keepalive thread."""

    def __init__(self, urls: list[str], auth_token: str | None = None, start_timeout: float = 300.0,
                 retries: int = 3, connect_timeout: float = 10.0):
        if not urls:
            raise ConfigError("sandbox_urls is empty: name at least one episode server")
        self.urls = [url.rstrip("/") for url in urls]
        self.start_timeout, self.retries, self.connect_timeout = start_timeout, retries, connect_timeout
        token = auth_token or os.environ.get(TOKEN_ENV)
        self._headers = {"authorization": f"Bearer {token}"} if token else {}
        self._next = itertools.count(random.randrange(len(self.urls)))
        self._client: httpx.Client | None = None
        self._lock = threading.Lock()
        self._live: dict[tuple[str, str], float] = {}  # (url, session) -> the server's lease in seconds
        self._keepalive: threading.Thread | None = None
        _ALL.add(self)

    @property
    def client(self) -> httpx.Client:
        with self._lock:
            if self._client is None:
                self._client = httpx.Client(headers=self._headers, limits=httpx.Limits(max_connections=256))
            return self._client

    # --- calls ----------------------------------------------------------------------------------------------
    def seed(self, task: str, digest: str, limits: EpisodeLimits, harness: str = BASH_TOOL_HARNESS) -> tuple[str, dict]:
        """Open a session of `task` in `harness` on the first server that takes it: (url, the server's answer).
        Raises EpisodeServerError when none did within start_timeout, ConfigError when a server refused the request
        or opened a session of another harness (a server older than the harness)."""
        body = {"task_id": task, "task_digest": digest, "limits": asdict(limits), "harness": harness}
        deadline = time.monotonic() + self.start_timeout
        first = next(self._next) % len(self.urls)
        order = self.urls[first:] + self.urls[:first]
        problems: list[str] = []
        for attempt in itertools.count():
            full = 0
            for url in order:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    reply = self.client.post(f"{url}{SEED_SESSION}", json=body, timeout=self._timeout(left))
                except httpx.HTTPError as err:  # a seed that timed out may have opened a session: its lease ends it
                    problems.append(f"{url}: {_describe(err)}")
                    continue
                if reply.status_code == 200:
                    return url, self._of_harness(url, reply.json(), harness)
                if reply.status_code == 429:
                    full += 1
                    problems.append(f"{url}: at capacity")
                elif reply.status_code >= 500:
                    problems.append(f"{url}: HTTP {reply.status_code} {_detail(reply)}")
                else:
                    raise _refused(url, SEED_SESSION, reply)
            left = deadline - time.monotonic()
            if left <= 0 or (full == 0 and attempt >= self.retries):
                raise EpisodeServerError("; ".join(problems[-len(order):]) or "start_timeout spent")
            time.sleep(min(left, _backoff(attempt)))
        raise AssertionError("unreachable")

    def _of_harness(self, url: str, answer: dict, harness: str) -> dict:
        """The seed's answer, once it says the session runs `harness` (a server that predates Terminus-2 sessions
        ignores the field and opens a bash-tool one: closed, and the run stops saying so)."""
        session = answer.get("resources_session_id")
        if session is None or answer.get("harness", BASH_TOOL_HARNESS) == harness:
            return answer
        try:
            self.client.post(f"{url}{CLOSE_SESSION}", json={"resources_session_id": session},
                             timeout=self._timeout(10.0))
        except httpx.HTTPError:
            pass  # its lease ends it
        raise ConfigError(f"episode server {url} opened a {answer.get('harness', 'bash-tool')} session when asked for "
                          f"{harness}: it predates {harness} sessions; restart it from this checkout")

    def call(self, url: str, path: str, body: dict, timeout: float, *, idempotent: bool) -> dict:
        """POST `body` to url+path: the JSON answer, or EpisodeServerError once the retries are spent (network
        errors and 5xx; for a call that is not idempotent only errors before the request was sent)."""
        for attempt in itertools.count():
            retry = attempt < self.retries
            try:
                reply = self.client.post(f"{url}{path}", json=body, timeout=self._timeout(timeout))
            except (httpx.ConnectError, httpx.ConnectTimeout) as err:
                problem = f"{url}{path}: {_describe(err)}"
            except httpx.HTTPError as err:
                problem = f"{url}{path}: {_describe(err)}"
                retry = retry and idempotent
            else:
                if reply.status_code == 200:
                    return reply.json()
                if reply.status_code == 404:  # the session is gone: expired, closed, or the server restarted
                    raise EpisodeServerError(f"{url}{path}: {_detail(reply)}")
                if reply.status_code < 500:
                    raise _refused(url, path, reply)
                problem = f"{url}{path}: HTTP {reply.status_code} {_detail(reply)}"
                retry = retry and idempotent
            if not retry:
                raise EpisodeServerError(problem)
            time.sleep(_backoff(attempt))
        raise AssertionError("unreachable")

    def _timeout(self, read: float) -> httpx.Timeout:
        return httpx.Timeout(read, connect=min(self.connect_timeout, read))

    # --- leases ---------------------------------------------------------------------------------------------
    def opened(self, url: str, session: str, lease_sec: float) -> None:
        with self._lock:
            self._live[(url, session)] = lease_sec
            if self._keepalive is None:
                self._keepalive = threading.Thread(target=self._renew_leases, name="episode-keepalive", daemon=True)
                self._keepalive.start()

    def ended(self, url: str, session: str) -> None:
        with self._lock:
            self._live.pop((url, session), None)

    def _renew_leases(self) -> None:
        """Every third of the shortest lease: POST /keepalive with this process's live sessions, per server.
        Errors are left to the episode's next call, which reports them."""
        while True:
            with self._lock:
                live = dict(self._live)
            interval = min(live.values(), default=30.0) / 3
            by_url: dict[str, list[str]] = {}
            for url, session in live:
                by_url.setdefault(url, []).append(session)
            for url, sessions in by_url.items():
                try:
                    self.client.post(f"{url}{KEEPALIVE}", json={"resources_session_ids": sessions},
                                     timeout=self._timeout(max(1.0, interval)))
                except httpx.HTTPError:
                    pass
            time.sleep(max(0.2, interval))

    def close_all(self) -> None:
        """Close this process's live sessions (at exit; the servers' leases would end them later anyway)."""
        with self._lock:
            live = list(self._live)
        for url, session in live:
            try:
                self.client.post(f"{url}/close_session", json={"resources_session_id": session},
                                 timeout=self._timeout(10.0))
            except httpx.HTTPError:
                pass
            self.ended(url, session)


_ALL: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all():
    for servers in list(_ALL):
        servers.close_all()


class RemoteEpisode:
    """What the remote episodes of every harness share: the session's seed (`reset`, its only public method: TRL
    makes every other public method of an environment a tool), the verdict over /verify, the failure kinds, the
    close. The local counterpart is episodes.local.SandboxEpisode."""

    _harness = BASH_TOOL_HARNESS  # the session's harness (common/harnesses.py), sent with the seed

    def __init__(self, servers: EpisodeServers, limits: EpisodeLimits | None = None,
                 stats: EpisodeStats | None = None):
        self._servers = servers
        self._limits = limits or EpisodeLimits()
        self._stats = stats or EpisodeStats()
        self._url: str | None = None
        self._session: str | None = None
        self._task: str | None = None
        self._task_dir: Path | None = None
        self._verify_timeout = 120.0
        self._failure: str | None = None
        self._unscored: tuple[str, str] | None = None
        self._result: float | None = None
        self._verified = False

    # --- what TRL calls -------------------------------------------------------------------------------------
    def reset(self, **row) -> None:
        """Start the episode of the row's task in a fresh sandbox on an episode server."""
        self._close()
        self._task_dir = Path(row["task_dir"])
        self._task = row.get("task") or self._task_dir.name
        self._failure, self._unscored, self._result, self._verified = None, None, None, False
        self._stats.add(episodes=1)
        started = time.monotonic()
        try:
            url, reply = self._servers.seed(self._task, TaskFolder.of(self._task_dir).digest, self._limits,
                                            self._harness)
        except EpisodeServerError as err:
            self._fail("sandbox", f"no episode server took the session: {err}")
            return None
        if reply.get("resources_session_id") is None:  # the server's sandbox did not start (its TaskEnvironment's)
            self._fail(reply.get("failure_kind") or "sandbox", f"{url}: {reply.get('failure_reason')}")
            return None
        self._url, self._session = url, reply["resources_session_id"]
        self._verify_timeout = float(reply.get("verifier_timeout_sec", 120.0))
        self._servers.opened(url, self._session, float(reply.get("lease_sec", 60.0)))
        self._stats.start_seconds.append(time.monotonic() - started)
        return None

    def _verify(self) -> float | None:
        if not self._verified:
            self._verified = True
            self._result = self._run_verifier()
        return self._result

    # --- internals ------------------------------------------------------------------------------------------
    def _act(self, path: str, body: dict, timeout: float, what: str, *, idempotent: bool = False) -> dict | None:
        """A call that acts in the session: its answer, or None once it failed (the episode not scored, kind
        sandbox, and its session closed). Not idempotent: retried only when the request never reached the server."""
        try:
            return self._servers.call(self._url, path, {"resources_session_id": self._session, **body}, timeout,
                                      idempotent=idempotent)
        except EpisodeServerError as err:
            self._fail("sandbox", f"{what} failed on its episode server: {err}")
            self._close()
            return None

    def _run_verifier(self) -> float | None:
        if self._session is None:
            return None
        url, session = self._url, self._session
        started = time.monotonic()
        try:
            reply = self._servers.call(url, VERIFY, {"resources_session_id": session},
                                       self._verify_timeout + 90, idempotent=True)
        except EpisodeServerError as err:
            self._close()
            return self._fail("sandbox", f"/verify failed on its episode server: {err}")
        finally:
            self._stats.verify_seconds.append(time.monotonic() - started)
        self._servers.ended(url, session)
        self._url = self._session = None
        self._stats.merge(reply.get("counts", {}))  # scored, passed, tool calls, not-scored kinds: the server's
        if reply.get("reward") is None:
            self._unscored = (reply.get("failure_kind") or "sandbox", str(reply.get("failure_reason")))
            logger.warning("episode not scored: %s on %s: %s: %s", self._task, url, *self._unscored)
            return None
        return float(reply["reward"])

    def _fail(self, kind: str, detail) -> None:
        if self._failure is None:
            self._failure, self._unscored = kind, (kind, str(detail))
            self._stats.mask(kind)
            logger.warning("episode not scored: %s: %s: %s", self._task, kind, detail)
        return None

    def _close(self) -> None:
        """End the session on its server if one is open (an episode left unverified, or after a failure)."""
        url, session, self._url, self._session = self._url, self._session, None, None
        if session is None:
            return
        self._servers.ended(url, session)
        try:
            reply = self._servers.call(url, CLOSE_SESSION, {"resources_session_id": session}, 30.0,
                                       idempotent=True)
            self._stats.merge(reply.get("counts", {}))
        except (EpisodeServerError, ConfigError):
            pass  # the server is gone or the session with it; its lease ends whatever is left


class RemoteTaskEnvironment(RemoteEpisode):
    """One episode at a time in a session on an episode server: `reset(task_dir=..., task=...)`, the policy's
    `bash` calls, then `episode_reward(env)` (episodes.local). Public methods are the policy's tools: `bash`,
    the same tool as TaskEnvironment's, description included (TRL derives the same schema from both)."""

    def bash(self, command: str) -> str:
        if self._session is None:
            return NOT_RUNNING
        reply = self._act(BASH, {"command": command}, self._limits.command_timeout_sec + 60, "a bash call")
        return SANDBOX_FAILED if reply is None else reply["output"]

    bash.__doc__ = TaskEnvironment.bash.__doc__  # the policy's tool description: TaskEnvironment's, word for word


class RemoteTerminusEnvironment(RemoteEpisode):
    """One Terminus-2 episode at a time in a session on an episode server: `reset(task_dir=..., task=...)`,
    `terminus_first_message(env)`, `terminus_step(env, text)` until done (episodes.terminus), then
    `episode_reward(env)`. The same turns as TerminusEnvironment's, typed on the server. No public method but
    reset: no tools."""

    _harness = TERMINUS_2_HARNESS

    def _first_message(self) -> str:
        if self._session is None:  # no sandbox: the message TerminusEnvironment sends then
            return self._first_message_without(NOT_RUNNING)
        # idempotent: the server keeps the first message and answers it again
        reply = self._act(TERMINUS_FIRST, {}, FIRST_MESSAGE_TIMEOUT_SEC, TERMINUS_FIRST, idempotent=True)
        return self._first_message_without(SANDBOX_FAILED) if reply is None else reply["message"]

    def _first_message_without(self, screen: str) -> str:
        return first_message(shown_instruction(TaskFolder.of(self._task_dir).instruction), screen)

    def _step(self, response_text: str) -> TerminusTurn:
        if self._session is None:
            return TerminusTurn(SANDBOX_FAILED if self._failure else NOT_RUNNING, True)
        # a step types keystrokes (never re-sent once it reached the server) for at most what is left of the wall
        reply = self._act(TERMINUS_STEP, {"response": response_text}, self._limits.episode_wall_sec + 60,
                          f"a {TERMINUS_STEP} call")
        if reply is None:
            return TerminusTurn(SANDBOX_FAILED, True)
        return TerminusTurn(reply["observation"], bool(reply["done"]))


def _backoff(attempt: int) -> float:
    return min(10.0, 0.5 * 2 ** attempt) * random.uniform(0.5, 1.0)


def _describe(err: httpx.HTTPError) -> str:
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _detail(reply: httpx.Response) -> str:
    try:
        return str(reply.json().get("detail", ""))[:300]
    except ValueError:
        return reply.text[:300]


def _refused(url: str, path: str, reply: httpx.Response) -> Exception:
    """A 4xx: the request is wrong for this server (its tasks, its token, its limits), not a passing failure."""
    if reply.status_code == 401:
        return ConfigError(f"episode server {url} refused the token: set sandbox_auth_token (or ${TOKEN_ENV}) "
                           "to the server's --auth_token")
    return ConfigError(f"episode server {url}{path}: HTTP {reply.status_code}: {_detail(reply)}")
