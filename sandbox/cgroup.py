"""The per-sandbox cgroup (v2, or the v1 pids/memory/cpu hierarchies). Root only.

Runs in: any Python >= 3.11, standard library only.
"""

from __future__ import annotations

import os
import shlex
import signal
import time
from pathlib import Path

from sandbox.errors import SandboxError

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_BASE = "local-sandbox"  # the parent folder of every sandbox's cgroup


class Cgroup:
    """One cgroup per sandbox: ``pids.max``, memory limit (no swap), CPU quota."""

    def __init__(self, name: str, pids_max: int, memory_mb: int | None, cpus: float | None):
        self.dirs: list[Path] = []
        self.v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
        try:
            if self.v2:
                self._make_v2(name, pids_max, memory_mb, cpus)
            else:
                self._make_v1(name, pids_max, memory_mb, cpus)
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

    @staticmethod
    def sweep_stale(max_age_sec: float = 300.0) -> None:
        """Remove empty per-sandbox cgroups left by processes that died before ``stop``."""
        now = time.time()
        for base in CGROUP_ROOT.glob(f"**/{CGROUP_BASE}"):
            for d in base.iterdir():
                try:
                    if d.is_dir() and now - d.stat().st_mtime > max_age_sec and not (d / "cgroup.procs").read_text().strip():
                        d.rmdir()
                except OSError:
                    pass

    def join_prefix(self) -> list[str]:
        """argv prefix that moves the command into the cgroup before exec'ing it."""
        files = " ".join(shlex.quote(str(d / "cgroup.procs")) for d in self.dirs)
        return ["/bin/sh", "-c", f'for f in {files}; do echo $$ > "$f" || exit 125; done; exec "$@"', "sh"]

    def pids(self) -> set[int]:
        out: set[int] = set()
        for d in self.dirs:
            try:
                out |= {int(x) for x in (d / "cgroup.procs").read_text().split()}
            except OSError:
                pass
        return out

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

    def remove(self) -> None:
        for d in self.dirs:
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)
