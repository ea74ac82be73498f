"""Look inside a running sandbox from the host without running anything of it: files beneath its root, its processes.
Runs in: any Python >= 3.11, standard library only (openat2 through ctypes: Linux >= 5.6); the harness's side.

Every path is resolved by the kernel beneath the sandbox's root (``RESOLVE_IN_ROOT``: its symlinks and ``..`` stay
inside, no magic links), so what the sandbox planted can lie about its own files but never names a host file.
Processes are read from the host's ``/proc`` (counters the sandbox cannot rewrite). Why: docs/sandbox.md#threat-model.
"""

from __future__ import annotations

import os
import stat as statmod
from dataclasses import dataclass
from pathlib import Path

from sandbox.transfer import in_root


class Root:
    """The sandbox's root as its PID 1 (host pid ``init_pid``) sees it, held open: ``with sandbox.root() as root:
    root.read("/x")``. ``fd``: an ``O_PATH`` fd of that root (sandbox/transfer.py's ``open_root``, which refuses a
    PID 1 that is gone, so a reused pid never hands out the host's root); closed with this object."""

    def __init__(self, fd: int, init_pid: int):
        self.fd = fd
        self.init_pid = init_pid

    def __enter__(self) -> Root:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def open(self, path: str, flags: int = os.O_RDONLY) -> int:
        """An fd of ``path`` (absolute inside the sandbox) resolved beneath the root; OSError as open(2)."""
        return in_root(self.fd, path.lstrip("/") or ".", flags)

    def lstat(self, path: str) -> os.stat_result | None:
        """The entry itself (a symlink is not followed); None when there is none."""
        parent, name = os.path.split(path.rstrip("/") or "/")
        if not name:
            return self.stat("/")
        try:
            fd = self.open(parent, os.O_PATH | os.O_DIRECTORY)
        except OSError:
            return None
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            return None
        finally:
            os.close(fd)

    def stat(self, path: str) -> os.stat_result | None:
        """What ``path`` resolves to (symlinks followed inside); None when nothing."""
        try:
            fd = self.open(path, os.O_PATH)
        except OSError:
            return None
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def read(self, path: str, limit: int) -> bytes | None:
        """The first ``limit`` bytes of a regular file; None when it is missing or not a regular file (a FIFO, a
        device, a folder: nothing blocks or streams forever)."""
        try:
            fd = self.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return None
        try:
            if not statmod.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks, left = [], limit
            while left > 0 and (chunk := os.read(fd, min(left, 1 << 16))):
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        except OSError:
            return None
        finally:
            os.close(fd)

    def listdir(self, path: str) -> list[str] | None:
        """The names in a folder (sorted); None when it is not one."""
        try:
            fd = self.open(path, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return None
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    def which(self, name: str, path_env: str) -> str | None:
        """The first ``PATH`` entry holding an executable file ``name`` (as a shell's look-up finds it)."""
        for folder in path_env.split(":"):
            if not folder.startswith("/"):
                continue
            candidate = f"{folder.rstrip('/')}/{name}"
            st = self.stat(candidate)
            if st is not None and statmod.S_ISREG(st.st_mode) and st.st_mode & 0o111:
                return candidate
        return None


@dataclass(frozen=True)
class Process:
    """One process of a sandbox as the host sees it: host pid, start time, name, its session's host pid, and the
    bytes it (and the children it reaped) passed to write calls (``/proc/PID/io`` wchar)."""

    pid: int
    start: str
    comm: str
    ppid: int
    session: int
    wchar: int


def _process(pid: int) -> Process | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
        io = Path(f"/proc/{pid}/io").read_text()
    except OSError:
        return None
    comm = raw[raw.find("(") + 1:raw.rfind(")")]
    fields = raw.rsplit(")", 1)[1].split()
    if len(fields) < 20 or fields[0] in ("Z", "X"):
        return None
    wchar = next((int(line.split()[1]) for line in io.splitlines() if line.startswith("wchar:")), 0)
    return Process(pid, fields[19], comm, int(fields[1]), int(fields[3]), wchar)


def processes(init_pid: int) -> dict[int, Process]:
    """Every live process in the sandbox's PID namespace but its PID 1, by host pid."""
    try:
        ns = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return {}
    found: dict[int, Process] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == init_pid:
            continue
        try:
            if os.readlink(f"/proc/{entry.name}/ns/pid") != ns:
                continue
        except OSError:
            continue
        proc = _process(int(entry.name))
        if proc is not None:
            found[proc.pid] = proc
    return found


def host_parent(pid: int) -> int | None:
    """The parent pid of a host process (None once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
