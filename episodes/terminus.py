"""One episode of a Harbor task in Terminus-2's harness: keystrokes typed into tmux in a local sandbox, the verdict.
Runs in: the training venv (Python >= 3.11), in the trainer's process; no Harbor, no server.

    env = TerminusEnvironment(EpisodeLimits(), EpisodeStats())   # GRPOTrainer(environment_factory=...) builds these
    env.reset(task_dir="outputs/tasks/write-value-1-0")           # reset is its only public method: no tools
    prompt = terminus_first_message(env)                          # the first user message, as Harbor's agent sends it
    turn = terminus_step(env, response_text)                      # TerminusTurn(observation, done)
    episode_reward(env), episode_failure(env), end_episode(env)   # as for TaskEnvironment (episodes/local.py)
On an episode server: episodes/remote.py's RemoteTerminusEnvironment, driven by the same two functions.
The protocol is common/terminus_2.py's; what matches Harbor's agent: docs/agentic-grpo.md ("The Terminus-2 harness").
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from common.terminus_2 import TmuxScreen, Turns, first_message, limit_output, shown_instruction
from episodes.local import NOT_RUNNING, SANDBOX_FAILED, EpisodeLimits, EpisodeStats, SandboxEpisode
from harbor_tasks.folder import TaskFolder
from harbor_tasks.verdict import infra_failure
from sandbox import BlockingSandbox, SandboxError
from sandbox.errors import SandboxExecTimeoutError

LOG_DIRS = "/logs/agent /logs/verifier /logs/artifacts"  # what Harbor's environment makes before the agent starts
TMUX_CALL_SEC = 10.0        # one tmux call (a send-keys, a capture); past it the episode ends (a hung tmux)
PROMPT_WAIT_SEC = 3.0       # for the login shell's first prompt before the first screen is captured
LIMIT_REACHED = "error: the episode's time limit is reached; no more commands run"
SESSION_ENDED = "error: the terminal session has ended; no more commands run"


@dataclass
class TerminusTurn:
    observation: str   # the next user message, as Harbor's Terminus-2 would send it
    done: bool         # the completion confirmed, or the episode over (time limit, session or sandbox gone)


class TerminusEnvironment(SandboxEpisode):
    """One Terminus-2 episode at a time in a local sandbox: `reset(task_dir=...)`, `terminus_first_message(env)`,
    `terminus_step(env, text)` until done, then `episode_reward(env)`. No public method but reset: no tools."""

    _max_output_bytes = 16 << 20  # a capture of the whole scrollback grows over the episode

    def __init__(self, limits: EpisodeLimits | None = None, stats: EpisodeStats | None = None,
                 background_start: bool = False):
        super().__init__(limits, stats, background_start)
        self._screen: TmuxScreen | None = None
        self._turns = Turns()
        self._over = False

    def reset(self, **row) -> None:
        """Start the episode of the row's task: a fresh sandbox with the task's Dockerfile replayed."""
        self._screen, self._turns, self._over = None, Turns(), False
        return super().reset(**row)

    def _prepare(self, box: BlockingSandbox) -> None:
        result = box.exec(f"mkdir -p {LOG_DIRS} && chmod 777 {LOG_DIRS}", cwd="/", timeout_sec=30, user="root")
        if result.return_code != 0:
            raise SandboxError(f"making {LOG_DIRS} failed: {result.stderr.strip()}")

    def _tmux(self, command: str) -> tuple[int, str, str]:
        """A tmux call in the sandbox as the task's default user (as Harbor's agent runs them), time-bounded."""
        result = self._box.exec(command, timeout_sec=max(min(TMUX_CALL_SEC, self._left()), 0.05))
        return result.return_code, result.stdout, result.stderr

    # --- the turns: what terminus_first_message and terminus_step (below) call ---------------------------------
    def _first_message(self) -> str:
        self._ready()  # the sandbox's start is not the episode's time on either clock
        with self._call():
            return self._first_screen()

    def _step(self, response_text: str) -> TerminusTurn:
        self._ready()
        with self._call():
            return self._turn(response_text)

    def _first_screen(self) -> str:
        instruction = shown_instruction(TaskFolder.of(self._task).instruction)
        if self._box is None:
            self._over = True
            return first_message(instruction, NOT_RUNNING)
        screen = TmuxScreen(self._tmux)
        try:
            rc, err = screen.start()
            if rc != 0:
                self._fail(infra_failure(f"tmux did not start: {err.strip() or rc}", "sandbox"))
                self._over = True
                return first_message(instruction, SANDBOX_FAILED)
            deadline = time.monotonic() + PROMPT_WAIT_SEC  # Harbor's agent captures after its setup; here the prompt
            while not screen.capture().strip() and time.monotonic() < deadline:
                time.sleep(0.01)
            state = screen.incremental_output()
        except SandboxError as err:
            self._fail(infra_failure(err, "sandbox"))
            self._over = True
            return first_message(instruction, SANDBOX_FAILED)
        self._screen = screen
        return first_message(instruction, state)

    def _turn(self, response_text: str) -> TerminusTurn:
        if self._over or self._box is None or self._screen is None:
            self._over = True
            return TerminusTurn(SANDBOX_FAILED if self._failure else NOT_RUNNING, True)
        turns, screen, stats = self._turns, self._screen, self._stats
        result = turns.read(response_text)
        if turns.failed:
            stats.add(parse_errors=1)
        elif result.warning:
            stats.add(parse_warnings=1)
        try:
            for command in turns.commands:
                if self._left() <= 0:
                    return _limited(self)
                started = time.monotonic()
                stats.add(commands=1)
                rc, _ = screen.send_keys(command.keystrokes)
                if rc != 0:  # tmux refused: its server is gone (the agent ended it); Harbor's agent stops there too
                    self._over = True
                    return TerminusTurn(SESSION_ENDED, True)
                wait = command.duration - (time.monotonic() - started)
                if wait > 0:
                    time.sleep(max(min(wait, self._left()), 0))
                    if self._left() <= 0:
                        return _limited(self)
            output = None if turns.failed else limit_output(screen.incremental_output())
            observation, done = turns.observe(output)
            if not done and not screen.alive():  # Harbor's loop ends before its next model call
                done = True
        except SandboxExecTimeoutError:  # a tmux call that hung (the agent's doing) or the time limit
            self._over = True
            if self._left() <= 0:
                return _limited(self)
            return TerminusTurn(SESSION_ENDED, True)
        except SandboxError as err:
            self._fail(infra_failure(err, "sandbox"))
            self._over = True
            return TerminusTurn(SANDBOX_FAILED, True)
        self._over = done
        return TerminusTurn(observation, done)


def terminus_first_message(env) -> str:
    """Wait for the sandbox, start tmux, and return Terminus-2's first user message (the task's instruction and the
    first screen). A sandbox or tmux that fails here is an infrastructure failure: the episode is not scored.
    `env`: a TerminusEnvironment, or episodes.remote's RemoteTerminusEnvironment (the same turns on a server)."""
    return env._first_message()


def terminus_step(env, response_text: str) -> TerminusTurn:
    """Read the policy's response as Terminus-2 does, type its commands (each waited for its duration, never past
    episode_wall_sec) unless it did not parse, and return the next user message and whether the episode is done."""
    return env._step(response_text)


def _limited(env: TerminusEnvironment) -> TerminusTurn:
    env._limited, env._over = True, True
    return TerminusTurn(LIMIT_REACHED, True)
