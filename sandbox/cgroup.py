"""The per-sandbox cgroup (v2, or the v1 pids/memory/cpu hierarchies). Root only.
Runs in: any Python >= 3.11, standard library only; in the process that owns the sandbox.
"""

from __future__ import annotations

import os
import select
import shlex
import signal
import time
from pathlib import Path

from sandbox.errors import SandboxError

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_BASE = "local-sandbox"  # the parent folder of every sandbox's cgroup


class Cgroup:
    """One cgroup per sandbox: ``pids.max``, memory limit (no swap), CPU quota."""

    STALE_AFTER_SEC = 10.0  # an empty per-sandbox cgroup older than this is left over (its PID 1 joins at once)

    def __init__(self, name: str, pids_max: int, memory_mb: int | None, cpus: float | None):
        self.dirs: list[Path] = []
        self.v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
        for attempt in range(3):
            try:
                if self.v2:
                    self._make_v2(name, pids_max, memory_mb, cpus)
                else:
                    self._make_v1(name, pids_max, memory_mb, cpus)
                return
            except FileNotFoundError as exc:  # the base folder was just swept by another sandbox's stop
                self.remove()
                self.dirs = []
                if attempt == 2:
                    raise SandboxError(f"cannot set up a cgroup for the sandbox limits: {exc}") from exc
            except OSError as exc:
                self.remove()
                raise SandboxError(f"cannot set up a cgroup for the sandbox limits: {exc}") from exc

    @staticmethod
    def _own_path(controller: str) -> str:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, ctrls, path = line.split(":", 2)
            if controller in ctrls.split(","):
                return path
        return "/"

    def _make_v2(self, name, pids_max, memory_mb, cpus):
        want = {"pids", "memory", "cpu"}
        avail = set((CGROUP_ROOT / "cgroup.controllers").read_text().split())
        if "pids" not in avail:
            raise OSError("cgroup v2 without the pids controller")
        enable = " ".join(f"+{c}" for c in sorted(want & avail))
        (CGROUP_ROOT / "cgroup.subtree_control").write_text(enable)
        base = CGROUP_ROOT / CGROUP_BASE
        base.mkdir(exist_ok=True)
        (base / "cgroup.subtree_control").write_text(enable)
        d = base / name
        d.mkdir()
        self.dirs = [d]
        (d / "pids.max").write_text(str(pids_max))
        if memory_mb and "memory" in avail:
            (d / "memory.max").write_text(str(memory_mb * 1024 * 1024))
            if (d / "memory.swap.max").exists():
                (d / "memory.swap.max").write_text("0")
        if cpus and "cpu" in avail:
            (d / "cpu.max").write_text(f"{int(cpus * 100000)} 100000")

    def _make_v1(self, name, pids_max, memory_mb, cpus):
        for ctrl in ("pids", "memory", "cpu"):
            mnt = CGROUP_ROOT / ctrl
            if not mnt.is_dir():
                if ctrl == "pids":
                    raise OSError(f"no cgroup v1 pids hierarchy at {mnt}")
                continue
            d = mnt / self._own_path(ctrl).lstrip("/") / CGROUP_BASE / name
            d.mkdir(parents=True)
            self.dirs.append(d)
            if ctrl == "pids":
                (d / "pids.max").write_text(str(pids_max))
            elif ctrl == "memory" and memory_mb:
                (d / "memory.limit_in_bytes").write_text(str(memory_mb * 1024 * 1024))
                sw = d / "memory.memsw.limit_in_bytes"
                if sw.exists():
                    sw.write_text(str(memory_mb * 1024 * 1024))
            elif ctrl == "cpu" and cpus:
                (d / "cpu.cfs_period_us").write_text("100000")
                (d / "cpu.cfs_quota_us").write_text(str(int(cpus * 100000)))

    @classmethod
    def sweep_stale(cls, max_age_sec: float | None = None) -> None:
        """Remove empty per-sandbox cgroups left by processes that died before ``stop`` (older than
        ``STALE_AFTER_SEC``: a live sandbox's cgroup always holds its PID 1), then every empty base folder."""
        max_age = cls.STALE_AFTER_SEC if max_age_sec is None else max_age_sec
        now = time.time()
        bases = _bases()
        by_name: dict[str, list[Path]] = {}  # one sandbox's cgroups in every v1 hierarchy
        for base in bases:
            try:
                for d in base.iterdir():
                    if d.is_dir():
                        by_name.setdefault(d.name, []).append(d)
            except OSError:
                continue
        for dirs in by_name.values():
            # only when empty everywhere: a live sandbox's PID 1 is in its pids cgroup, while its v1
            # memory cgroup is empty between commands
            try:
                stale = all(now - d.stat().st_mtime >= max_age and not (d / "cgroup.procs").read_text().strip()
                            for d in dirs)
            except OSError:
                continue
            if stale:
                for d in dirs:
                    try:
                        d.rmdir()
                    except OSError:
                        pass
        for base in bases:
            _rmdir_if_empty(base)

    def join_prefix(self, for_init: bool = False) -> list[str]:
        """argv prefix that moves the command into the cgroup before exec'ing it. ``for_init``: the
        sandbox's PID 1 stays out of a v1 memory cgroup, so that the tasks' tmpfs pages and processes
        filling it never get PID 1 OOM-killed (it allocates next to nothing; v2 has one cgroup for all)."""
        dirs = [d for d in self.dirs if not (for_init and not self.v2 and "memory" in d.parts)]
        files = " ".join(shlex.quote(str(d / "cgroup.procs")) for d in dirs)
        return ["/bin/sh", "-c", f'for f in {files}; do echo $$ > "$f" || exit 125; done; exec "$@"', "sh"]

    def pids(self) -> set[int]:
        return set().union(*(_procs(d) for d in self.dirs))

    def kill_all(self) -> None:
        for d in self.dirs:
            if (d / "cgroup.kill").exists():
                try:
                    (d / "cgroup.kill").write_text("1")
                except OSError:
                    pass
        for _ in range(3):
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    def remove(self, wait_sec: float = 5.0) -> None:
        """Remove this sandbox's cgroups, and their base folders when no other sandbox uses them. A cgroup that
        processes are still leaving (killed, not yet exited) goes once they have exited, waited for by their pidfds
        (up to ``wait_sec`` in all)."""
        deadline = time.monotonic() + wait_sec
        for d in self.dirs:
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() >= deadline:
                        break
                    _until_exited(_procs(d), deadline)
            if d.parent.name == CGROUP_BASE:
                _rmdir_if_empty(d.parent)


def _bases() -> list[Path]:
    """Every base folder of per-sandbox cgroups (v2: one; v1: one per hierarchy, under this process's own path)."""
    for _ in range(10):  # the walk meets cgroups that other sandboxes, stopping at the same time, remove: walk again
        out: list[Path] = []
        try:
            for pattern in (CGROUP_BASE, f"*/{CGROUP_BASE}", f"**/{CGROUP_BASE}"):
                for p in CGROUP_ROOT.glob(pattern):
                    if p.is_dir() and p not in out:
                        out.append(p)
            return out
        except FileNotFoundError:
            continue
    return out


def _procs(d: Path) -> set[int]:
    try:
        return {int(x) for x in (d / "cgroup.procs").read_text().split()}
    except OSError:
        return set()


def _until_exited(pids: set[int], deadline: float) -> None:
    """Wait until each of ``pids`` (killed) has exited, its pidfd readable (no polling loop), or ``deadline`` passes."""
    poller, pidfds = select.poll(), []
    for pid in pids:
        try:
            pidfds.append(os.pidfd_open(pid))
        except OSError:  # gone already
            continue
        poller.register(pidfds[-1], select.POLLIN)
    try:
        waiting = len(pidfds)
        while waiting and (left := deadline - time.monotonic()) > 0:
            for fd, _ in poller.poll(left * 1000):
                poller.unregister(fd)
                waiting -= 1
    finally:
        for fd in pidfds:
            os.close(fd)
    if not pidfds:  # none left in it, yet still busy: the kernel is finishing their exits
        time.sleep(0.005)


def _rmdir_if_empty(base: Path) -> None:
    """rmdir a base folder that holds no sandbox's cgroup (a cgroup with children refuses: EBUSY)."""
    try:
        if not any(d.is_dir() for d in base.iterdir()):
            base.rmdir()
    except OSError:
        pass
