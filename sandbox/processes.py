"""Host-side process helpers of the sandbox: kill a command's process group, find the sandbox's PID 1.
Runs in: any Python >= 3.11, standard library only.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from sandbox.errors import SandboxError


def killpg(pgid: int) -> None:
    """SIGKILL a process group; a group that is gone already is fine."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def kill_group(pgid: int, wait_sec: float = 5.0) -> None:
    """SIGKILL a command's process group and wait (briefly) until the sandbox's init reaped it,
    so that the next command finds its pids.max slots free again."""
    killpg(pgid)
    deadline = time.monotonic() + wait_sec
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        await asyncio.sleep(0.02)


def find_child_pid(parent_pid: int) -> int:
    """The host pid of ``parent_pid``'s (only) child: the sandbox's PID 1 under ``unshare --fork``."""
    for _ in range(100):
        try:
            kids = Path(f"/proc/{parent_pid}/task/{parent_pid}/children").read_text().split()
        except OSError:
            kids = []
        if not kids:
            for st in Path("/proc").glob("[0-9]*/stat"):
                try:
                    fields = st.read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[1]) == parent_pid:
                    kids.append(st.parent.name)
        if kids:
            return int(kids[0])
        time.sleep(0.02)
    raise SandboxError("sandbox init process not found")
