"""One episode of a Harbor task in a fresh local sandbox as a TRL environment: the policy's `bash`, the tests' verdict.
Runs in: the training venv (Python >= 3.11), in the trainer's process or an episode server's; no Harbor, no server.

    env = TaskEnvironment(EpisodeLimits(), EpisodeStats())   # GRPOTrainer(environment_factory=...) builds these
    env.reset(task_dir="outputs/tasks/write-value-1-0")        # the dataset row's columns
    env.bash("ls")                                           # the policy's only tool: its output back to it
    episode_reward(env)                                      # the verdict's score, or None: not scored
    episode_failure(env), episode_verdict(env)               # why not: (kind, detail); the harbor_tasks Verdict
Outcomes, limits and teardown: docs/agentic-grpo.md ("Rewards and failures", "Teardown").
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import weakref
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from common.bash_harness import (
    DEFAULT_COMMAND_TIMEOUT_SEC,
    DEFAULT_MAX_OUTPUT_CHARS,
    format_output,
    harness_prompt,
    timeout_message,
)
from harbor_tasks.evidence import VerifierWatch
from harbor_tasks.folder import TaskFolder
from harbor_tasks.verdict import AGENT_FAILURE, Verdict, infra_failure
from harbor_tasks.verifier_run import run_tests
from sandbox import BlockingSandbox, SandboxConfig, SandboxError
from sandbox.errors import SandboxExecTimeoutError

LIMIT_OUTCOMES = ("zero", "mask")
# what episode_wall_sec counts: "environment", the seconds the episode's calls took in its sandbox (commands, their
# waits, tmux), not the seconds it waited for the policy's next turn (which grow with the trainer's batch and hardware:
# 64 Terminus-2 episodes at once on 2 CPU cores had 43% of them cut mid-task by the wall); "wall", every second since
# its sandbox started (as Harbor's agent timeout counts)
EPISODE_CLOCKS = ("environment", "wall")
TAMPER_OUTCOMES = ("zero", "mask")  # an episode with tamper evidence (harbor_tasks.verdict.TAMPER_KINDS)
TAMPERED = "tampered"                # its kind among the not-scored ones, under tamper_outcome "mask"
# what the policy reads when its sandbox is gone (here, or on an episode server: episodes/remote.py)
NOT_RUNNING = "error: the sandbox is not running (an infrastructure failure: this episode is not scored)"
SANDBOX_FAILED = "error: the sandbox failed (an infrastructure failure: this episode is not scored)"
# how long a sandbox outlives episode_wall_sec (the verifier's run, the batch's last turns); then it is stopped
WALL_GRACE_SEC = 600.0


@dataclass
class EpisodeLimits:
    """What one episode may use. Turns and tokens are TRL's (`max_tool_calling_iterations`,
    `max_completion_length`); these are the sandbox's."""

    command_timeout_sec: float = DEFAULT_COMMAND_TIMEOUT_SEC  # one bash call (common/bash_harness.py's default)
    episode_wall_sec: float = 300.0        # the whole episode; later calls are refused and the episode ends
    episode_clock: str = "environment"     # what episode_wall_sec counts: EPISODE_CLOCKS
    max_output_chars: int = DEFAULT_MAX_OUTPUT_CHARS  # of one call's output returned to the model (head and tail)
    limit_outcome: str = "zero"            # an episode ended by episode_wall_sec: "zero" (scored 0) or "mask"
    tamper_outcome: str = "zero"           # one whose agent touched the verifier's run: "zero" (scored 0) or "mask"
    memory_mb: int = 1024
    storage_mb: int = 1024

    def __post_init__(self):
        if self.limit_outcome not in LIMIT_OUTCOMES:
            raise ValueError(f"limit_outcome {self.limit_outcome!r}: one of {', '.join(LIMIT_OUTCOMES)}")
        if self.episode_clock not in EPISODE_CLOCKS:
            raise ValueError(f"episode_clock {self.episode_clock!r}: one of {', '.join(EPISODE_CLOCKS)}")
        if self.tamper_outcome not in TAMPER_OUTCOMES:
            raise ValueError(f"tamper_outcome {self.tamper_outcome!r}: one of {', '.join(TAMPER_OUTCOMES)}")
        for key in ("command_timeout_sec", "episode_wall_sec", "max_output_chars", "memory_mb", "storage_mb"):
            if not getattr(self, key) > 0:
                raise ValueError(f"{key} must be positive, not {getattr(self, key)!r}")


@dataclass
class EpisodeStats:
    """Counts over every episode of a run (shared by all environments of the trainer's pool; thread-safe)."""

    episodes: int = 0
    scored: int = 0
    passed: int = 0
    agent_failures: int = 0                # scored 0: the verifier timed out or wrote no reward (as Harbor scores them)
    masked_by_kind: Counter = field(default_factory=Counter)
    tampered_by_kind: Counter = field(default_factory=Counter)  # episodes with tamper evidence, per kind
    ended_by_limit: int = 0
    tool_calls: int = 0
    tool_errors: int = 0                   # calls that timed out or exited non-zero
    parse_errors: int = 0                  # Terminus-2 responses that ran no command (episodes/terminus.py)
    parse_warnings: int = 0                # Terminus-2 responses parsed with warnings (their commands ran)
    commands: int = 0                      # Terminus-2 keystroke commands typed
    start_seconds: list = field(default_factory=list)
    verify_seconds: list = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **counts):
        with self._lock:
            for key, value in counts.items():
                setattr(self, key, getattr(self, key) + value)

    def mask(self, kind: str):
        with self._lock:
            self.masked_by_kind[kind] += 1

    def tampered(self, kinds: list[str]):
        with self._lock:
            self.tampered_by_kind.update(kinds)

    def counts(self) -> dict:
        """What episodes added beyond being started (no timings): what an episode server reports per episode."""
        with self._lock:
            return {**{key: getattr(self, key) for key in _COUNTS}, "masked_by_kind": dict(self.masked_by_kind),
                    "tampered_by_kind": dict(self.tampered_by_kind)}

    def merge(self, counts: dict) -> None:
        """Add another's `counts()` (an episode run elsewhere: an episode server's session)."""
        with self._lock:
            for key in _COUNTS:
                setattr(self, key, getattr(self, key) + int(counts.get(key, 0)))
            self.masked_by_kind.update({kind: int(n) for kind, n in counts.get("masked_by_kind", {}).items()})
            self.tampered_by_kind.update({kind: int(n) for kind, n in counts.get("tampered_by_kind", {}).items()})

    def as_dict(self) -> dict:
        with self._lock:
            mean = (lambda xs: round(sum(xs) / len(xs), 3) if xs else None)
            return {"episodes": self.episodes, "scored": self.scored, "passed": self.passed,
                    "pass_rate": round(self.passed / self.scored, 4) if self.scored else None,
                    "masked": sum(self.masked_by_kind.values()), "masked_by_kind": dict(self.masked_by_kind),
                    "tampered": sum(self.tampered_by_kind.values()),
                    "tampered_by_kind": dict(self.tampered_by_kind),
                    "agent_failures": self.agent_failures, "ended_by_limit": self.ended_by_limit,
                    "tool_calls": self.tool_calls,
                    "tool_errors": self.tool_errors, "sandbox_start_seconds_mean": mean(self.start_seconds),
                    "verify_seconds_mean": mean(self.verify_seconds), "parse_errors": self.parse_errors,
                    "parse_warnings": self.parse_warnings, "commands": self.commands}


_COUNTS = ("scored", "passed", "agent_failures", "ended_by_limit", "tool_calls", "tool_errors", "parse_errors",
           "parse_warnings", "commands")
_LIVE: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _close_all():
    for env in list(_LIVE):
        env._close()


class SandboxEpisode:
    """What every harness's episode shares: the sandbox's start (in the background or not), the limits and counts, the
    verifier's run and verdict, the failure kinds, tamper checks and teardown. `reset` is its only public method (TRL
    makes every other public method of an environment a tool): a harness adds its tools (TaskEnvironment.bash) or none
    (episodes/terminus.py)."""

    _max_output_bytes = 1 << 20  # of one exec's output, as the sandbox keeps it

    def __init__(self, limits: EpisodeLimits | None = None, stats: EpisodeStats | None = None,
                 background_start: bool = False):
        """`background_start`: reset() returns at once and the sandbox starts in a thread; the first tool call, the
        verifier and the next reset wait for it. TRL resets a batch's environments one after the other before it
        generates, so their sandboxes then start side by side, and while the policy writes its first turn."""
        self._limits = limits or EpisodeLimits()
        self._stats = stats or EpisodeStats()
        self._background_start = background_start
        self._starting: threading.Thread | None = None
        self._start_error: BaseException | None = None
        self._box: BlockingSandbox | None = None
        self._watch: VerifierWatch | None = None
        self._task: Path | None = None
        self._failure: str | None = None   # an infrastructure kind (harbor_tasks.verdict.INFRA_KINDS) once unscorable
        self._unscored: tuple[str, str] | None = None  # (kind, detail) of an episode that is not scored
        self._limited = False
        self._started = 0.0
        self._spent = 0.0                   # seconds of the episode's finished calls (episode_clock "environment")
        self._call_started: float | None = None
        self._result: float | None = None
        self._verified = False
        self._verdict: Verdict | None = None
        self._killed_by_agent = False
        self._verifier_output = ""  # what the last verifier run printed (a multi-round episode's feedback)
        _LIVE.add(self)

    # --- what TRL calls -------------------------------------------------------------------------------------
    def reset(self, **row) -> None:
        """Start the episode of the row's task: a fresh sandbox with the task's Dockerfile replayed."""
        self._close()
        self._task, self._failure, self._unscored, self._limited = Path(row["task_dir"]), None, None, False
        self._spent, self._call_started = 0.0, None
        self._result, self._verified, self._killed_by_agent, self._verdict = None, False, False, None
        self._stats.add(episodes=1)
        if self._background_start:
            self._starting = threading.Thread(target=self._start_in_thread, name="sandbox-start", daemon=True)
            self._starting.start()
        else:
            self._start()
        return None

    def _verify(self) -> float | None:
        if not self._verified:
            self._verified = True
            self._result = self._run_verifier()
            self._close(wait=False)
        return self._result

    # --- internals ------------------------------------------------------------------------------------------
    def _start(self) -> None:
        """Start the episode's sandbox: the task's Dockerfile replayed; a failure is `sandbox_start`, not scored."""
        started = time.monotonic()
        task = TaskFolder.of(self._task)
        config = SandboxConfig(environment_dir=task.environment_dir, workdir=task.workdir, build_args=task.build_args,
                               memory_mb=self._limits.memory_mb, storage_mb=self._limits.storage_mb,
                               wall_sec=self._sandbox_lifetime(),
                               max_output_bytes=self._max_output_bytes)
        box = BlockingSandbox(config)
        try:
            box.start()
            self._prepare(box)
            watch = VerifierWatch(box.root, box.command_path(), box.command_sessions)  # as built, before the agent
        except (SandboxError, OSError) as err:
            box.close()
            self._fail(infra_failure(err))
            return
        self._box, self._watch = box, watch
        self._started = time.monotonic()
        self._stats.start_seconds.append(self._started - started)

    def _sandbox_lifetime(self) -> float:
        """How long the sandbox may live: episode_wall_sec and the grace on the wall clock; on the environment clock
        the policy's turns take what they take, so SandboxConfig's default (a net for a trainer that hangs: the
        sandbox also dies with the process that started it)."""
        if self._limits.episode_clock == "wall":
            return self._limits.episode_wall_sec + WALL_GRACE_SEC
        return max(SandboxConfig.wall_sec, self._limits.episode_wall_sec + WALL_GRACE_SEC)

    def _elapsed(self) -> float:
        """The seconds episode_wall_sec is held against: on the environment clock the finished calls' and the
        running call's; on the wall clock all since the sandbox started."""
        now = time.monotonic()
        if self._limits.episode_clock == "wall":
            return now - self._started
        return self._spent + (now - self._call_started if self._call_started is not None else 0.0)

    def _left(self) -> float:
        return self._limits.episode_wall_sec - self._elapsed()

    @contextmanager
    def _call(self):
        """One call of the policy's into the sandbox (a bash call, a Terminus-2 turn): its seconds count on the
        environment clock."""
        self._call_started = time.monotonic()
        try:
            yield
        finally:
            self._spent += time.monotonic() - self._call_started
            self._call_started = None

    def _prepare(self, box: BlockingSandbox) -> None:
        """The harness's own setup in a started sandbox, before the verifier's paths are recorded (none here)."""

    def _start_in_thread(self) -> None:
        try:
            self._start()
        except BaseException as err:  # raised where the episode next needs its sandbox, as _start() would raise
            self._start_error = err

    def _ready(self) -> None:
        """Wait for a sandbox starting in the background (background_start); re-raise what its start raised."""
        starting, self._starting = self._starting, None
        if starting is not None:
            starting.join()
        error, self._start_error = self._start_error, None
        if error is not None:
            raise error

    def _run_verifier(self, tests: Path | None = None) -> float | None:
        tests = tests or self._task / "tests"
        self._verifier_output = ""
        self._ready()
        if self._failure or self._box is None:
            return None
        if self._killed_by_agent:
            self._stats.add(scored=1)
            return 0.0
        if self._limited:
            self._stats.add(ended_by_limit=1)
            if self._limits.limit_outcome == "mask":
                self._stats.mask("episode_wall_sec")
                self._unscored = ("episode_wall_sec", f"ran past episode_wall_sec "
                                  f"({self._limits.episode_wall_sec:g} s) with limit_outcome: mask")
                return None
        task = TaskFolder.of(self._task)
        started = time.monotonic()
        try:
            verdict, output = run_tests(self._box, self._watch, tests, task.verifier_timeout_sec,
                                        task.internet_declared)
        except (SandboxError, OSError) as err:
            return self._fail(infra_failure(err, "sandbox"))
        finally:
            self._stats.verify_seconds.append(time.monotonic() - started)
        self._verifier_output = output
        self._verdict = verdict
        if verdict.infra_kind is not None:
            return self._fail(verdict)
        if verdict.tamper:
            self._stats.tampered(verdict.tamper_kinds)
            detail = "; ".join(f"{kind}: {what}" for kind, what in verdict.tamper)
            logging.getLogger(__name__).warning("episode tampered with its verifier's run: %s: %s (%s)", self._task,
                                                detail, self._limits.tamper_outcome)
            if self._limits.tamper_outcome == "mask":
                self._stats.mask(TAMPERED)
                self._unscored = (TAMPERED, detail)
                return None
            self._stats.add(scored=1)
            return 0.0
        self._stats.add(scored=1, passed=int(verdict.passed), agent_failures=int(verdict.outcome == AGENT_FAILURE))
        return verdict.score

    def _fail(self, verdict: Verdict) -> None:
        """The episode is not scored: an infrastructure failure (its kind counted, the first one kept)."""
        if self._failure is None:
            self._failure, self._unscored = verdict.infra_kind, (verdict.infra_kind, verdict.detail)
            self._verdict = verdict
            self._stats.mask(verdict.infra_kind)
            logging.getLogger(__name__).warning("episode not scored: %s: %s: %s", self._task, verdict.infra_kind,
                                                verdict.detail)
        return None

    def _close(self, wait: bool = True) -> None:
        """Stop the episode's sandbox. `wait=False` (after verification) stops it in a background thread: the
        kernel's teardown of a namespace can take a second or two and the episode's result does not wait for it
        (should this process end first, the sandbox dies with its lifeline pipe)."""
        try:
            self._ready()
        except Exception:  # a start that failed outside the sandbox's own errors: nothing to stop
            pass
        box, self._box, self._watch = self._box, None, None
        if box is None:
            return
        if wait:
            _stop(box)
        else:
            threading.Thread(target=_stop, args=(box,), name="sandbox-teardown", daemon=True).start()

    def __del__(self):
        self._close()


class TaskEnvironment(SandboxEpisode):
    """One episode at a time in a local sandbox: `reset(task_dir=...)`, the policy's `bash` calls, then
    `episode_reward(env)`. Public methods are the policy's tools: add none without meaning it."""

    # TRL derives the tool's schema from this signature and docstring: common/bash_harness.py's BASH_TOOL is that
    # schema written out for the eval agent, and a test holds the two equal (edit both or neither)
    def bash(self, command: str) -> str:
        """Run a command line with bash in the task's Linux sandbox and return what it printed.

        Every call starts a new shell in the task's working directory (/app for most tasks): `cd` does not carry
        over to the next call, so chain commands with `&&` or use absolute paths.

        Args:
            command: The command line to run, for example `wc -l < /app/data/input.log > /app/count.txt`.
        """
        self._ready()
        if self._box is None:
            return NOT_RUNNING
        left = self._left()
        if left <= 0:
            self._limited = True
            return "error: the episode's time limit is reached; no more commands run"
        self._stats.add(tool_calls=1)
        try:
            with self._call():
                result = self._box.exec(command, timeout_sec=min(self._limits.command_timeout_sec, left))
        except SandboxExecTimeoutError:
            self._stats.add(tool_errors=1)
            if self._left() <= 0:
                self._limited = True
            return timeout_message(min(self._limits.command_timeout_sec, left))
        except SandboxError as err:
            self._fail(infra_failure(err, "sandbox"))
            return SANDBOX_FAILED
        if result.return_code == 137 and "the sandbox died" in result.stderr:
            # the sandbox's PID 1 went under the agent's command (memory, a full tmpfs): the agent's doing, as the
            # sandbox core counts it, so the episode scores 0 rather than going unscored
            self._killed_by_agent = True
        if result.return_code != 0:
            self._stats.add(tool_errors=1)
        return format_output(result.stdout, result.stderr, result.return_code, self._limits.max_output_chars)


def task_prompt(task: Path) -> list[dict]:
    """The conversation an episode starts from: the task's instruction and how to act (training and oracle alike)."""
    return [{"role": "user", "content": harness_prompt(TaskFolder.of(task).instruction)}]


def episode_reward(env: SandboxEpisode) -> float | None:
    """The episode's reward from the task's tests (run once; the sandbox is stopped after), or None when it is not
    scored (an infrastructure failure, or a limit with limit_outcome "mask", or tamper evidence with tamper_outcome
    "mask"); 0 for an episode with tamper evidence under tamper_outcome "zero"."""
    return env._verify()


def episode_failure(env: SandboxEpisode) -> tuple[str, str] | None:
    """Why the episode is not scored, `(kind, detail)` (an infrastructure kind, "episode_wall_sec" or "tampered"), or
    None."""
    return env._unscored


def episode_verdict(env: SandboxEpisode) -> Verdict | None:
    """The verdict of the episode's verifier run or infrastructure failure (None before it is verified, or when a
    limit or the agent's own command ended it)."""
    return env._verdict


def verify_round(env: SandboxEpisode, tests: Path) -> tuple[float | None, str]:
    """One round of a multi-round task (its `steps/<round>/tests`): the tests run in the episode's sandbox, which goes
    on for the next round; (the round's score or None: not scored, what the tests printed). A function, not a method:
    TRL makes every public method of an environment a tool."""
    return env._run_verifier(Path(tests)), env._verifier_output


def end_episode(env: SandboxEpisode) -> None:
    """Stop the episode's sandbox without verifying it (an episode server's closed or expired session)."""
    env._close()


def _stop(box: BlockingSandbox) -> None:
    try:
        box.close()
    except SandboxError:
        pass
