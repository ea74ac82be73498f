"""A decision point of a task rebuilt in a local sandbox: the earlier commands replayed, one action run, what it left.
Runs in: any Python >= 3.11, standard library only (the local sandbox); the functional pivot reward calls it.

    point = DecisionPoint(task_dir, prefix=["grep -rl 'ticket: X' archive\\n"], limits=PlayLimits())
    played = point.play("cat archive/q3/yarrow.txt\\n", then=["echo elif > owner.txt\\n"])
    played.changed, played.output, played.verdict     # did it change the workdir, what it printed, the tests' verdict
The workdir's state is a digest read from the host (types, modes, contents, link targets; no times), so nothing the
action does to the sandbox's tools can fake it. A sandbox that fails raises (SandboxError, OSError).
"""

from __future__ import annotations

import hashlib
import os
import stat as statmod
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harbor_tasks.evidence import VerifierWatch
from harbor_tasks.folder import TaskFolder
from harbor_tasks.verdict import Verdict
from harbor_tasks.verifier_run import run_tests
from sandbox import BlockingSandbox, SandboxConfig
from sandbox.errors import SandboxExecTimeoutError

MAX_ENTRIES = 20000  # entries of the workdir the digest reads at most (then the digest says it stopped)
MAX_FILE_BYTES = 1 << 22  # bytes of one file the digest reads (a larger one counts by its size and its head)
SKIPPED = ("__pycache__",)  # folders that are caches, not state: running a Python script writes them


@dataclass(frozen=True)
class PlayLimits:
    command_timeout_sec: float = 30.0  # the earlier commands together, the action, the rest of the work: each
    memory_mb: int = 1024
    storage_mb: int = 1024


@dataclass(frozen=True)
class Played:
    before: str  # the workdir's digest once the earlier commands ran
    after: str  # after the action
    output: str  # what the action printed (stdout, then stderr)
    timed_out: bool  # the action ran past command_timeout_sec (killed)
    verdict: Verdict | None  # the tests' verdict after the rest of the work (None: not run)
    # wall seconds of each part: start (the sandbox), prefix (the earlier commands and a digest), action (it and a
    # digest), rest (the remaining work, the tests, the stop), total
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.before != self.after


def script(keystrokes: list[str]) -> str:
    """Terminus keystrokes as one bash script: the typed text in order, each command ending its line."""
    return "".join(k if k.endswith("\n") else k + "\n" for k in keystrokes if k.strip())


def workdir_digest(root, top: str) -> str:
    """A digest of `top` and everything beneath it, read from the host through `root` (sandbox.inside.Root): each
    entry's relative path, type, mode, and a regular file's contents or a link's target. No times, no owners, no
    SKIPPED folders."""
    digest = hashlib.sha256()
    st = root.lstat(top)
    if st is None:
        return "absent"
    fd = root.open(top, os.O_RDONLY | os.O_DIRECTORY)
    entries = 0
    try:
        for folder, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED)
            for name in dirs + sorted(files):
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                kind, mode = statmod.S_IFMT(st.st_mode), st.st_mode & 0o7777
                digest.update(f"{folder}/{name}\0{kind}\0{mode:o}\0".encode(errors="surrogateescape"))
                if statmod.S_ISREG(st.st_mode):
                    digest.update(_file_digest(name, dir_fd, st.st_size))
                elif statmod.S_ISLNK(st.st_mode):
                    digest.update(os.readlink(name, dir_fd=dir_fd).encode(errors="surrogateescape"))
                entries += 1
                if entries >= MAX_ENTRIES:
                    return digest.hexdigest() + "+truncated"
    finally:
        os.close(fd)
    return digest.hexdigest()


def _file_digest(name: str, dir_fd: int, size: int) -> bytes:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return f"unreadable:{size}".encode()
    try:
        head = os.read(fd, MAX_FILE_BYTES) if size else b""
    finally:
        os.close(fd)
    return hashlib.sha256(head).digest() + str(size).encode()


class DecisionPoint:
    """A task's sandbox brought to a decision point by replaying `prefix` (the keystrokes typed before it)."""

    def __init__(self, task_dir: str | Path, prefix: list[str], limits: PlayLimits | None = None):
        self.task = TaskFolder.of(task_dir)
        self.prefix, self.limits = list(prefix), limits or PlayLimits()

    def play(self, action: list[str], then: list[str] | None = None,
             when: Callable[[str, str], bool] | None = None) -> Played:
        """A fresh sandbox: the earlier commands, then `action` (keystrokes); with `then`, those commands next and
        the task's tests (their verdict, tamper evidence included, in `verdict`), only if `when(before, after)`
        (the workdir's digests around the action) says so, where given."""
        task, limits = self.task, self.limits
        config = SandboxConfig(environment_dir=task.environment_dir, workdir=task.workdir, build_args=task.build_args,
                               memory_mb=limits.memory_mb, storage_mb=limits.storage_mb)
        clock = [time.perf_counter()]
        seconds: dict[str, float] = {}

        def lap(part: str) -> None:
            clock.append(time.perf_counter())
            seconds[part] = round(clock[-1] - clock[-2], 4)

        with BlockingSandbox(config) as box:
            watch = VerifierWatch(box.root, box.command_path(), box.command_sessions)  # as built, before any command
            top = box.workdir
            lap("start")
            if self.prefix:
                self._run(box, script(self.prefix))
            with box.root() as root:
                before = workdir_digest(root, top)
            lap("prefix")
            output, timed_out = self._run(box, script(action))
            with box.root() as root:
                after = workdir_digest(root, top)
            lap("action")
            verdict = None
            if then is not None and (when is None or when(before, after)):
                if then:
                    self._run(box, script(then))
                verdict, _ = run_tests(box, watch, task.path / "tests", task.verifier_timeout_sec,
                                       task.internet_declared)
        lap("rest")
        seconds["total"] = round(clock[-1] - clock[0], 4)
        return Played(before, after, output, timed_out, verdict, seconds)

    def _run(self, box: BlockingSandbox, text: str) -> tuple[str, bool]:
        if not text:
            return "", False
        try:
            result = box.exec(text, timeout_sec=self.limits.command_timeout_sec)
        except SandboxExecTimeoutError:
            return "", True
        return result.stdout + result.stderr, False
