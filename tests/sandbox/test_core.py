"""The sandbox's life (sandbox/core.py with sandbox/enter.py): its PID 1 out of the task's reach, and a PID 1 that
is gone never confused with whatever process gets its pid next. Tried as an attacker would."""

from __future__ import annotations

import gc
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from host_processes import host_processes

needs_namespaces = pytest.mark.skipif(
    not sys.platform.startswith("linux") or any(shutil.which(t) is None for t in ("unshare", "prlimit")),
    reason="the local sandbox needs Linux namespaces and util-linux (unshare, prlimit)")
SMALL = {"memory_mb": 256, "storage_mb": 64, "max_processes": 32}


@needs_namespaces
def test_signals_from_inside_never_end_pid1():
    from sandbox import BlockingSandbox, SandboxConfig

    with BlockingSandbox(SandboxConfig(**SMALL)) as sb:
        for sig in ("TERM", "INT", "HUP", "QUIT", "USR1", "ALRM", "PIPE"):
            sb.exec(f"kill -{sig} 1")
            r = sb.exec("echo alive")
            assert (r.return_code, r.stdout) == (0, "alive\n"), (sig, r)


def _take_pid(pid: int) -> subprocess.Popen | None:
    """A host process with exactly ``pid`` (root: the kernel's next pid set through ns_last_pid), or None."""
    for _ in range(500):
        Path("/proc/sys/kernel/ns_last_pid").write_text(str(pid - 1))
        proc = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL)
        if proc.pid == pid:
            return proc
        proc.kill()
        proc.wait()
    return None


@needs_namespaces
@pytest.mark.skipif(os.geteuid() != 0, reason="reusing a chosen pid needs root (ns_last_pid)")
def test_a_dead_pid1s_pid_taken_by_a_host_process_is_never_entered_nor_killed(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig, SandboxError

    marker = tmp_path / "ran-on-the-host"
    sb = BlockingSandbox(SandboxConfig(**SMALL))
    sb.start()
    holder = None
    try:
        pid = sb.sandbox.init_pid
        os.kill(pid, signal.SIGKILL)  # the init dies (out of memory, wall time, ...): its pid is free again
        for _ in range(500):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.02)
        holder = _take_pid(pid)
        assert holder is not None, f"could not start a host process with pid {pid} (the machine forks too much?)"
        r = sb.exec(f"touch {marker}; echo ran", cwd="/")
        assert not marker.exists(), "the command ran in the host's namespaces"
        assert r.return_code != 0 and "sandbox died" in r.stderr and "ran" not in r.stdout, r
        with pytest.raises(SandboxError, match="PID 1"):  # a transfer names the end of the sandbox
            sb.download_file("/etc/hostname", tmp_path / "hostname")
        sb.close()
        assert holder.poll() is None, "stop() killed the process that took the dead init's pid"
    finally:
        sb.close()
        if holder is not None:
            holder.kill()
            holder.wait()


def _host_state(folder: Path) -> dict:
    """What a sandbox could leave on the host: its mounts in the host's table, loop devices backed in ``folder``,
    this process's fds and threads."""
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines()
              if "loop" in line or "overlay" in line or str(folder) in line]
    loops = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            if backing.read_text().startswith(f"{folder}/"):
                loops.append(backing.parent.parent.name)
        except OSError:
            continue
    return {"mounts": mounts, "loops": loops, "fds": len(os.listdir("/proc/self/fd")),
            "threads": sorted(t.name for t in threading.enumerate())}


@needs_namespaces
def test_many_quick_starts_and_stops_leave_nothing_behind(tmp_path):
    """Sandboxes started and stopped back to back, as episodes and trials use them: tmpfs roots and (as root)
    disk-backed ones written to, each with a daemon left running and one still writing at the stop. Nothing of them
    stays: no process, cgroup, host mount, loop device, file in the disk folder, fd or thread of this process (the
    disk is let go of on a thread after the stop returns: waited for here)."""
    from sandbox import BlockingSandbox, SandboxConfig, entry

    disks = os.geteuid() == 0 and Path("/dev/loop-control").exists()
    entry.helper()  # the compiled entry's memfd is this process's for good: opened before the count, in any test order
    gc.collect()  # an earlier test's unreachable files closed now, not mid-test (a count one lower failed a CI run)
    before = _host_state(tmp_path)

    def left_behind() -> dict:  # a leak is fds gained; one an earlier test's thread closes meanwhile is not
        state = _host_state(tmp_path)
        return {**state, "fds": max(state["fds"], before["fds"])}
    names = [f"cycle-{os.getpid()}-{k}" for k in range(8)]
    for k, name in enumerate(names):
        storage_mb = 4096 if disks and k % 2 else 256  # past 7/8 of memory_mb: a disk-backed root (root only)
        config = SandboxConfig(**{**SMALL, "memory_mb": 512, "storage_mb": storage_mb}, disk_dir=tmp_path, name=name)
        with BlockingSandbox(config) as sb:
            r = sb.exec("head -c 16M /dev/zero > /app/written; setsid sleep 31361 </dev/null >/dev/null 2>&1 & "
                        "setsid sh -c 'while :; do echo x >> /app/log; done' </dev/null >/dev/null 2>&1 & echo ok")
            assert r.stdout == "ok\n", r
    assert host_processes("sleep 31361", *(f"sandbox_init:{n}" for n in names)) == []
    cgroups = [p for p in Path("/sys/fs/cgroup").glob("**/local-sandbox/*") if p.is_dir() and p.name in names]
    assert cgroups == []
    for _ in range(500):  # the disks' releases, on their threads
        if left_behind() == before:
            break
        time.sleep(0.02)
    assert left_behind() == before
    assert not list(tmp_path.iterdir())


def test_a_disks_mkfs_that_never_finishes_fails_the_start_within_its_bound(tmp_path, monkeypatch):
    """mkfs of a disk-backed root is awaited at most ``MKFS_TIMEOUT_SEC``: then it is killed and the start fails with
    a SandboxError naming it, not a start that waits forever (an mkfs standing in that only sleeps)."""
    import asyncio

    from sandbox import SandboxError, storage

    monkeypatch.setattr(storage, "MKFS", ("sh", "-c", "sleep 31362", "mkfs.ext4"))
    monkeypatch.setattr(storage, "MKFS_TIMEOUT_SEC", 0.5, raising=False)
    started = time.monotonic()
    with pytest.raises(SandboxError, match=r"sh of the sandbox's disk \(64 MiB in .*\) did not finish in 0.5 s"):
        asyncio.run(asyncio.wait_for(storage.make_disk(str(tmp_path), 64), 20))
    assert time.monotonic() - started < 15
    assert host_processes("sleep 31362") == [] and not list(tmp_path.iterdir())
