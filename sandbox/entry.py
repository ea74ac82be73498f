"""How a command enters a sandbox: the compiled helper (sandbox/enter.c) where it is built, else sandbox/enter.py.
Runs in: any Python >= 3.11, standard library only; in the process that owns the sandbox (core), and in
``python -m sandbox.build_enter`` (make setup), which compiles the helper with the host's C compiler.

A compiled helper rather than a forkserver per sandbox: enter.py's one short-lived process per command stays as it
was, and no long-lived privileged process or socket is left for a task to find, signal or race.
The helper is built as ``sandbox/.build/enter-<machine>-<digest of enter.c>``, so an edited enter.c never runs
stale: unbuilt, commands fall back to enter.py, the reason logged once. Why and what it costs: docs/sandbox.md.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import logging
import os
import resource
import shutil
import subprocess
from pathlib import Path

from sandbox.enter import seccomp_filter
from sandbox.errors import SandboxError

SOURCE = Path(__file__).with_name("enter.c")
BUILD_DIR = Path(__file__).with_name(".build")
SPEC_FORMAT = "1"  # enter.c's SPEC_FORMAT
MFD_EXEC = 0x10  # linux/memfd.h (Linux >= 6.3)
RLIMITS = {"cpu": resource.RLIMIT_CPU, "core": resource.RLIMIT_CORE, "nproc": resource.RLIMIT_NPROC,
           "data": resource.RLIMIT_DATA}  # prlimit's names
_told: set[str] = set()


def helper_path(build_dir: Path | None = None) -> Path:
    """Where the helper of this enter.c is (or would be) built (in ``build_dir``, default ``BUILD_DIR``)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return (build_dir or BUILD_DIR) / f"enter-{os.uname().machine}-{digest}"


@functools.cache
def _found() -> tuple[int | None, str]:
    path = helper_path()
    if not os.access(path, os.X_OK):
        if not compiler():
            return None, "no C compiler (cc, gcc or clang) to build it: apt-get install gcc libc6-dev, then make setup"
        return None, "it is not built for this sandbox/enter.c (run make setup, or python -m sandbox.build_enter)"
    # run from a sealed memfd: its path (the repository's) never shows inside, and nothing can write it
    flags = os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING
    try:
        try:
            fd = os.memfd_create("sandbox-enter", flags | MFD_EXEC)  # executable where vm.memfd_noexec says otherwise
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # EINVAL: a kernel before 6.3, whose memfds are executable
                raise
            fd = os.memfd_create("sandbox-enter", flags)
    except OSError as exc:
        return None, f"no executable memfd to run it from ({exc.strerror}; vm.memfd_noexec?)"
    os.write(fd, path.read_bytes())
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE)
    return fd, ""


def helper(logger: logging.Logger | None = None, required: bool = False) -> int | None:
    """An fd of the compiled helper (a sealed memfd, kept for this process), or None (then enter.py), the reason
    logged once per process; ``required``: SandboxError instead of None."""
    fd, reason = _found()
    if fd is None and required:
        raise SandboxError(f"entry=compiled: the compiled entry helper cannot be used: {reason}")
    if fd is None and reason not in _told:
        _told.add(reason)
        (logger or logging.getLogger(__name__)).warning(
            f"local sandbox: commands enter through sandbox/enter.py (about 30 ms more each), not the compiled "
            f"helper: {reason}")
    return fd


def compiler() -> str | None:
    return next((c for c in (os.environ.get("CC"), "cc", "gcc", "clang") if c and shutil.which(c)), None)


def build(build_dir: Path | None = None) -> Path:
    """Compile enter.c (static where the C library allows, else dynamic); RuntimeError with the reason."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc, gcc or clang): apt-get install gcc libc6-dev")
    out = helper_path(build_dir)
    if os.access(out, os.X_OK):
        return out
    out.parent.mkdir(exist_ok=True)
    tmp = out.parent / f".{out.name}.{os.getpid()}"
    errors = ""
    for static in (["-static"], []):
        proc = subprocess.run([cc, "-O2", "-Wall", "-Werror", *static, "-o", str(tmp), str(SOURCE)],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            os.replace(tmp, out)  # concurrent builds each rename a whole binary
            _found.cache_clear()
            return out
        errors = proc.stderr
    raise RuntimeError(f"{cc} failed to build {SOURCE}: {errors.strip()[-2000:]}")


@functools.cache
def seccomp_program() -> bytes | None:
    """enter.py's seccomp filter for this machine (None where it has none), built once per process."""
    return seccomp_filter(os.uname().machine)


def spec(*, pid: int, pidfd: int, userns: bool, uid: int, gid: int, groups: list[int], caps: list[int],
         cgroup_files: list[str], rlimits: dict[str, int], argv: list[str], env: dict[str, str],
         program: bytes) -> bytes:
    """The helper's spec: NUL-terminated fields (counts before lists), then the seccomp program's bytes."""
    fields = [SPEC_FORMAT, pid, pidfd, int(userns), uid, gid, len(groups), *groups, sum(1 << c for c in set(caps)),
              len(cgroup_files), *cgroup_files, 2 * len(rlimits)]
    fields += [x for name, value in rlimits.items() for x in (RLIMITS[name], value)]
    fields += [len(argv), *argv, len(env), *(f"{k}={v}" for k, v in env.items()), len(program)]
    encoded = [os.fsencode(str(f)) for f in fields]
    if any(b"\0" in f for f in encoded):
        raise ValueError("embedded null byte")  # as os.execve says
    return b"".join(f + b"\0" for f in encoded) + program
