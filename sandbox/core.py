"""``Sandbox``: one namespace sandbox on this host, driven with asyncio.
Runs in: any Python >= 3.11, standard library only (plus util-linux's unshare and prlimit on the host).

``start`` launches sandbox/pid1.py in fresh namespaces, ``exec`` runs one command through sandbox/enter.c|py, ``stop``
(or this process's death, or ``wall_sec``) kills PID 1 and with it every process inside; ``names_asked`` reports
the names the sandbox's resolver refused.
How: docs/sandbox.md#inside-the-modules; the network: docs/sandbox.md#what-is-isolated.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox import build_cache, dockerfile, entry, transfer, users
from sandbox.cgroup import Cgroup
from sandbox.config import SandboxConfig
from sandbox.enter import CAP_NUMBERS, EXIT_SANDBOX_GONE
from sandbox.errors import SandboxError, SandboxExecTimeoutError
from sandbox.inside import Root
from sandbox.names_asked import NamesAsked
from sandbox.processes import find_child_pid, kill_group, killpg
from sandbox.storage import MOUNT_OPTIONS as DISK_MOUNT_OPTIONS
from sandbox.storage import Disk, let_go, make_disk, shut_down
from sandbox.storage import unavailable as disk_unavailable

INIT = Path(__file__).with_name("pid1.py")
ENTER = Path(__file__).with_name("enter.py")
HOST_TOOLS = ("unshare", "prlimit")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Docker's default capability set, minus CAP_MKNOD (there is no device cgroup here).
CAPABILITIES = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
                "setfcap", "net_bind_service", "net_raw", "sys_chroot", "audit_write")
_NEVER_HIDDEN = [Path(p) for p in DEFAULT_PATH.split(":")] + [Path(p) for p in ("/etc", "/lib", "/lib64",
                                                                                "/usr", "/var", "/opt")]
NET_ADDRESS, NET_GATEWAY, NET_DNS = "10.0.2.100", "10.0.2.2", "10.0.2.3"  # slirp4netns's defaults; pasta told so
RESOLV_OFFLINE = "# the local sandbox: no network; this resolver answers no name and records the names asked\n" \
                 "nameserver 127.0.0.1\noptions attempts:1 timeout:2\n"
NETWORK_PACKAGES = {"pasta": "passt", "slirp4netns": "slirp4netns"}
SETUP_TIMEOUT_SEC = 60  # a start's own commands in the sandbox (the workdir's mkdir)


@dataclass
class ExecResult:
    """What a command left: its decoded stdout and stderr ("" when empty) and its exit status."""

    stdout: str
    stderr: str
    return_code: int


def _truncated(total: int, cap: int) -> bytes:
    return f"\n[local sandbox: output truncated: {total} bytes, only the first {cap} kept (max_output_bytes)]\n".encode()


async def _read_capped(stream: asyncio.StreamReader, cap: int) -> tuple[bytes, int]:
    """The first ``cap`` bytes of ``stream`` and its full length (the rest is read and dropped)."""
    buf = bytearray()
    total = 0
    while chunk := await stream.read(1 << 16):
        total += len(chunk)
        if len(buf) < cap:
            buf += chunk[: cap - len(buf)]
    return bytes(buf), total


SANDBOX_DIED = (b"\nlocal sandbox: the sandbox died (its PID 1 is gone: killed, out of memory, or past wall_sec); "
                b"this command and every later one fail\n")


def _exited(pidfd: int, timeout_sec: float = 0) -> bool:
    """Whether the process a pidfd holds has exited (waiting up to ``timeout_sec``); its pid may be anyone's now."""
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    return bool(poller.poll(timeout_sec * 1000))


async def _until_exited(pidfd: int, timeout_sec: float) -> bool:
    """Wait until the process a pidfd holds has exited (the event loop told when it reads: no polling loop), up to
    ``timeout_sec``; whether it has."""
    if _exited(pidfd):
        return True
    loop = asyncio.get_running_loop()
    exited = loop.create_future()
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(True))
    try:
        return await asyncio.wait_for(exited, timeout_sec)
    except asyncio.TimeoutError:
        return False
    finally:
        loop.remove_reader(pidfd)


async def _ended(proc: asyncio.subprocess.Process, wait_sec: float = 10) -> None:
    """Wait for a killed host process to exit; one still there after ``wait_sec`` gets its group SIGKILLed, and
    ``wait_sec`` more."""
    for last in (False, True):
        try:
            await asyncio.wait_for(proc.wait(), timeout=wait_sec)
            return
        except asyncio.TimeoutError:
            if not last:
                killpg(proc.pid)


def _pidfd_of_child(pid: int, parent: int) -> int:
    """A pidfd of ``pid``, checked to be ``parent``'s child still running once held (so not a reused pid)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError) as exc:
        raise SandboxError(f"the sandbox holds its PID 1 by a pidfd, which needs Linux >= 5.8: {exc}") from exc
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        ppid = -1
    if ppid != parent or _exited(pidfd):
        os.close(pidfd)
        raise SandboxError("sandbox failed to start: its PID 1 exited at once")
    return pidfd


def missing_host_tools() -> list[str]:
    """The host programs a sandbox needs that are not on PATH."""
    return [t for t in HOST_TOOLS if not shutil.which(t)]


class Sandbox:
    """One sandbox (see the module docstring); ``async with Sandbox(config) as sb: await sb.exec(...)``."""

    def __init__(self, config: SandboxConfig | None = None, logger: logging.Logger | None = None):
        self.config = config or SandboxConfig()
        self.logger = logger or logging.getLogger(__name__)
        self.workdir = self.config.workdir or "/app"
        self._proc: asyncio.subprocess.Process | None = None
        self._init_pid: int | None = None
        self._init_pidfd: int | None = None  # PID 1 held by what cannot be reused (its pid can)
        self._lifeline_w: int | None = None
        self._cgroup: Cgroup | None = None
        self._userns = False
        self._dockerfile_env: dict[str, str] = {}  # the image's Env with the Dockerfile's ENV over it
        self._default_user: str | None = None  # the final USER of the image or the Dockerfile
        self._warned_users: set[str] = set()
        self._running: set[asyncio.subprocess.Process] = set()
        self._spawned: list[int] = []  # the host pids of the enter helpers started, in order (command_sessions)
        self._report_r: int | None = None
        self._reading: asyncio.AbstractEventLoop | None = None
        self._asked = NamesAsked()
        self._net_proc: asyncio.subprocess.Process | None = None
        self._disk: Disk | None = None
        self._layer: build_cache.Layer | None = None  # the cached build this sandbox starts from
        self._pid1_layers: dict[str, str] = {}  # to PID 1: a build's kept "stage_dir", or a cached "layer"
        self._disk_in_init: tuple[int, int] | None = None  # PID 1's fd of its disk, and the disk's st_dev

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    @property
    def init_pid(self) -> int | None:
        """The host pid of the sandbox's PID 1 while it runs, else None."""
        return self._init_pid

    def root(self) -> Root:
        """The sandbox's root held open for the host to read beneath it (sandbox/inside.py), nothing of it run;
        SandboxError once the sandbox is not running."""
        if self._init_pid is None:
            raise SandboxError("the sandbox is not running (call start() first)")
        return Root(transfer.open_root(self._init_pid, self._alive), self._init_pid)

    def command_path(self, env: dict[str, str] | None = None) -> str:
        """The PATH a command run with ``env`` gets (the task's and the Dockerfile's ENV, else the default)."""
        return {**self._dockerfile_env, **self.config.env, **(env or {})}.get("PATH") or DEFAULT_PATH

    @property
    def default_user(self) -> str | None:
        """Whom ``exec`` runs as when no user is given: the final ``USER`` of the Dockerfile or the image (None: root),
        as ``docker exec`` defaults to the image's."""
        return self._default_user

    @property
    def userns(self) -> bool:
        """Whether the sandbox runs in a user namespace (an ordinary user's sandbox), where only root is mapped."""
        return self._userns

    @property
    def userland(self) -> str:
        """What the sandbox's programs are: ``host userland`` or ``image <rootfs>`` (for messages)."""
        return f"image {self.config.rootfs}" if self.config.rootfs else "host userland"

    def command_sessions(self, since: int = 0) -> list[int]:
        """The sessions of the commands run in the sandbox, from the ``since``-th on, in the order they started: each
        command runs in the session its enter helper leads (a host pid), and so does whatever it leaves behind. A
        mark for ``since``: ``len(command_sessions())``. Kept for the sandbox's life, as the helpers may be gone by
        the time a session's processes are looked at (harbor_tasks/evidence.py)."""
        return self._spawned[since:]

    # ------------------------------------------------------------------ names asked (network="none")
    def network_mark(self) -> int:
        """A mark for ``names_asked(since=...)``: the number of DNS queries recorded so far."""
        self._drain_reports()
        return self._asked.mark()

    def names_asked(self, since: int = 0, commands_only: bool = False, until: int | None = None) -> list[str]:
        """The host names asked of the sandbox's resolver between the marks ``since`` and ``until`` (``network_mark``;
        default: now), first-asked first, each once (at most 64 per span between two marks and kind of asker).
        ``commands_only``: only those asked by a process descending from a command that was running then (not by
        an orphan, e.g. a daemon an earlier command left behind)."""
        self._drain_reports()
        return self._asked.names(since, commands_only, until)

    def asked_count(self, since: int = 0, commands_only: bool = False, until: int | None = None) -> int:
        """How many DNS queries came between the marks ``since`` and ``until`` (every one is counted)."""
        self._drain_reports()
        return self._asked.count(since, commands_only, until)

    def queries(self, since: int = 0) -> list[dict]:
        """The distinct DNS queries recorded since ``since``: ``{"name", "type", "comm", "orphan", "count"}`` each."""
        self._drain_reports()
        return self._asked.records(since)

    def _drain_reports(self) -> None:
        """Read PID 1's report pipe (also called by the event loop whenever it is readable, so it never fills)."""
        if self._report_r is None:
            return
        while True:
            try:
                chunk = os.read(self._report_r, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:  # PID 1 is gone: nothing more will come
                self._stop_reading()
                return
            self._asked.feed(chunk)

    def _stop_reading(self) -> None:
        if self._reading is not None and self._report_r is not None:
            self._reading.remove_reader(self._report_r)
        self._reading = None

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Launch the sandbox, create the workdir, replay the Dockerfile; on failure nothing is left."""
        if self._init_pid is not None:
            raise SandboxError("sandbox already started")
        missing = missing_host_tools()
        if missing:
            raise SandboxError(f"the sandbox needs util-linux, tar and bash on this host; missing: {', '.join(missing)}")
        try:
            self._layer = await build_cache.acquire(self)
            self._pid1_layers = {"layer": str(self._layer.path)} if self._layer is not None else {}
            await self._launch()
            await self._prepare()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Kill every process of the sandbox and remove its cgroup; a disk-backed root is shut down first and let go of
        on a thread of its own. Idempotent. Where its time goes: docs/sandbox.md#stopping-a-sandbox."""
        disk = self._hold_disk()  # before the kill, while PID 1 holds it
        for proc in list(self._running):
            killpg(proc.pid)
        if self._init_pidfd is not None:
            try:  # PID 1 of the namespace: all of it dies
                signal.pidfd_send_signal(self._init_pidfd, signal.SIGKILL)
            except ProcessLookupError:
                pass
        elif self._proc is not None:  # no PID 1 known (a failed start): unshare's group, PID 1 with it
            killpg(self._proc.pid)
        if self._net_proc is not None:
            killpg(self._net_proc.pid)
        # unshare reaps PID 1 and exits (the sandbox's mounts go with it), the network helper dies: waited together
        await asyncio.gather(*(_ended(p) for p in (self._proc, self._net_proc) if p is not None))
        self._proc = self._net_proc = None
        if self._lifeline_w is not None:
            os.close(self._lifeline_w)
            self._lifeline_w = None
        if self._disk is not None:  # not yet mounted (a failed start): the loop device clears itself now
            self._disk.close()
            self._disk = None
        if self._report_r is not None:
            self._drain_reports()
            self._stop_reading()
            os.close(self._report_r)
            self._report_r = None
        if self._init_pidfd is not None:
            await _until_exited(self._init_pidfd, 10)  # at once: unshare reaped it
            os.close(self._init_pidfd)
            self._init_pidfd = None
        if self._cgroup is not None:  # the cgroups of runs killed before their stop go at the next start
            self._cgroup.kill_all()
            self._cgroup.remove()
            self._cgroup = None
        if self._layer is not None:  # unmounted with the namespace: it may be evicted now
            self._layer.release()
            self._layer = None
        if disk is not None:
            let_go(disk)
        self._init_pid = self._disk_in_init = None

    def _hold_disk(self) -> int | None:
        """An fd of the sandbox's disk (its file system shut down: nothing of it is written back), taken from PID 1
        while it runs; the last hold on it once the sandbox is gone. None without a disk."""
        if self._disk_in_init is None or self._init_pid is None:
            return None
        fd_number, rdev = self._disk_in_init
        try:
            fd = transfer.open_root(self._init_pid, self._alive, f"fd/{fd_number}", os.O_RDONLY)
        except SandboxError:  # PID 1 is gone, and its mounts with it
            return None
        if not shut_down(fd, rdev):
            os.close(fd)
            return None
        return fd

    async def _launch(self) -> None:
        cfg = self.config
        self._choose_mode()
        if cfg.network != "none" and not shutil.which(cfg.network):
            raise SandboxError(f"network={cfg.network}: {cfg.network} is not installed on this host "
                               f"(apt-get install {NETWORK_PACKAGES[cfg.network]}), or use network=none")
        if cfg.rootfs is not None and not (cfg.rootfs / "bin" / "sh").exists() \
                and not (cfg.rootfs / "bin").is_symlink():
            raise SandboxError(f"rootfs {cfg.rootfs}: not an unpacked root file system (no bin/sh)")
        r, w = os.pipe()
        self._lifeline_w = w
        report_r, report_w = os.pipe() if cfg.network == "none" else (None, None)
        if report_r is not None:
            os.set_blocking(report_r, False)
            try:
                fcntl.fcntl(report_w, 1031, 1 << 20)  # F_SETPIPE_SZ: room for many records between two reads
            except OSError:
                pass
        self._report_r = report_r
        self._disk = None if "stage_dir" in self._pid1_layers else await self._storage_disk()
        init_cfg = {
            "tmpfs_mb": cfg.tmpfs_sizes_mb(self._userns),
            "disk": self._disk.device if self._disk else None,
            "disk_options": DISK_MOUNT_OPTIONS,
            "hide": [] if cfg.rootfs else self._hidden_paths(),
            "expose": cfg.expose,
            "wall_sec": cfg.wall_sec,
            "hostname": cfg.hostname,
            "lifeline_fd": r,
            "rootfs": str(cfg.rootfs) if cfg.rootfs else None,
            "resolver": cfg.network == "none",
            "report_fd": report_w if report_w is not None else -1,
            "resolv_conf": RESOLV_OFFLINE if cfg.network == "none" else f"nameserver {NET_DNS}\n",
            **self._pid1_layers,
        }
        argv = ["unshare", "--mount", "--pid", "--fork", "--net", "--ipc", "--uts", "--cgroup",
                "--propagation", "private", "--kill-child"]
        if self._userns:
            argv += ["--user", "--map-root-user"]
        # PID 1's command line is readable inside: the interpreter, pid1.py and the config travel as fds, so that it
        # names no host path (the repository, the venv, the exposed and hidden paths)
        interpreter = os.open(os.path.realpath(sys.executable), os.O_PATH)
        script, config = os.memfd_create("sandbox-init", 0), os.memfd_create("sandbox-init-config", 0)
        os.write(script, INIT.read_bytes())
        init_cfg["close_fds"] = [interpreter, script]
        os.write(config, json.dumps(init_cfg).encode())
        os.lseek(config, 0, os.SEEK_SET)
        argv += ["--", f"/proc/self/fd/{interpreter}", "-I", "-S", f"/proc/self/fd/{script}",
                 f"sandbox_init:{cfg.name}", str(config)]  # -S: no site-packages (.pth files), PID 1 is stdlib only
        argv = self._limit_prefix(for_init=True) + argv
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                pass_fds=(r, interpreter, script, config) + ((report_w,) if report_w is not None else ()),
                start_new_session=True, env={"PATH": os.environ.get("PATH", DEFAULT_PATH)},
            )
        finally:
            for fd in (r, interpreter, script, config):
                os.close(fd)
            if report_w is not None:
                os.close(report_w)
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), timeout=60)
        except asyncio.TimeoutError:
            line = b""
        if line.split()[:1] != [b"READY"]:
            err = b""
            try:
                err = await asyncio.wait_for(self._proc.stderr.read(), timeout=2)
            except asyncio.TimeoutError:
                pass
            raise SandboxError(f"sandbox failed to start: {(line + err).decode(errors='replace').strip()}")
        if self._disk is not None:  # mounted in the sandbox's namespace, which holds it from now on
            self._disk_in_init = int(line.split()[1]), self._disk.rdev
            self._disk.close()
            self._disk = None
        if report_r is not None:  # read the records as they come: a full pipe would lose them
            self._reading = asyncio.get_running_loop()
            self._reading.add_reader(report_r, self._drain_reports)
        pid = find_child_pid(self._proc.pid)
        self._init_pidfd = _pidfd_of_child(pid, self._proc.pid)
        self._init_pid = pid
        if cfg.network != "none":
            await self._attach_network()
        self.logger.debug(f"local sandbox up: init host pid {self._init_pid}, mode "
                          f"{'userns' if self._userns else 'root'}, network {cfg.network}"
                          + (f", rootfs {cfg.rootfs}" if cfg.rootfs else ""))

    async def _storage_disk(self) -> Disk | None:
        """The disk-backed root (sandbox/storage.py) where ``storage_mb`` exceeds what the tmpfs may hold (memory),
        else None; where none can be had the root stays a tmpfs, with a warning."""
        cfg = self.config
        if cfg.storage_mb <= cfg.tmpfs_budget_mb():
            return None
        reason = "a user namespace cannot mount a file system image" if self._userns else disk_unavailable()
        if reason is None:
            try:
                return await make_disk(str(cfg.disk_dir or tempfile.gettempdir()), cfg.storage_mb)
            except OSError as exc:
                reason = str(exc)
        self.logger.warning(f"local sandbox: storage_mb={cfg.storage_mb} is not honoured: {reason}; every write "
                            f"shares a tmpfs of {cfg.tmpfs_budget_mb()} MiB (7/8 of memory_mb)")
        return None

    async def _attach_network(self) -> None:
        """Start pasta or slirp4netns on the sandbox's network namespace and wait for its default route. The
        helper dies with this process (``setpriv --pdeathsig``) or at ``stop``."""
        tool, pid = self.config.network, self._init_pid
        fds = [os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY) for ns in ("net", "user")[:1 + self._userns]]
        if _exited(self._init_pidfd):  # opened while PID 1 ran: they are its namespaces, not a reused pid's
            for fd in fds:
                os.close(fd)
            raise SandboxError("sandbox failed to start: its PID 1 exited")
        netns, userns = f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[-1]}"
        if tool == "pasta":
            argv = ["pasta", "-f", "-q", "--config-net", "-t", "none", "-u", "none", "-T", "none", "-U", "none",
                    "--no-map-gw", "-a", NET_ADDRESS, "-n", "24", "-g", NET_GATEWAY, "--dns-forward", NET_DNS,
                    "--netns", netns]
            if self._userns:
                argv += ["--userns", userns]
            else:
                argv[1:1] = ["--runas", "0"]  # as root it would switch to nobody, who cannot join a root-owned netns
        else:
            argv = ["slirp4netns", "--configure", "--mtu=65520", "--disable-host-loopback", "--enable-sandbox",
                    "--netns-type=path"]
            if self._userns:
                argv += [f"--userns-path={userns}"]
            argv += [netns, "tap0"]
        try:
            self._net_proc = await asyncio.create_subprocess_exec(
                "setpriv", "--pdeathsig", "KILL", "--", *argv, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, pass_fds=tuple(fds),
                start_new_session=True, env={"PATH": os.environ.get("PATH", DEFAULT_PATH)})
        finally:
            for fd in fds:
                os.close(fd)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                routes = Path(f"/proc/{pid}/net/route").read_text().splitlines()[1:]
            except OSError:
                routes = []
            if any(line.split()[1:2] == ["00000000"] for line in routes):
                return
            if self._net_proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        err = b""
        if self._net_proc.returncode is not None:
            try:  # (a helper's child may hold the pipe)
                err = await asyncio.wait_for(self._net_proc.stderr.read(), timeout=2)
            except asyncio.TimeoutError:
                pass
        lines = [ln for ln in err.decode(errors="replace").splitlines() if "syslog" not in ln]
        raise SandboxError(f"network={tool}: no default route in the sandbox after 20 s"
                           + (f": {' '.join(lines)[-500:]}" if lines else ""))

    async def _prepare(self) -> None:
        """Replay the Dockerfile (sandbox/dockerfile.py); take its final ENV, USER and WORKDIR (made if missing)."""
        cfg = self.config
        build = None
        if cfg.environment_dir is not None and cfg.dockerfile == "emulate":
            build = dockerfile.plan(cfg.environment_dir / "Dockerfile", cfg.build_args, cfg.image_env,
                                    cfg.image_workdir, cfg.image_user)
            if self._layer is None:  # else built once into the cached layer this sandbox mounts (sandbox/build_cache.py)
                await dockerfile.replay(self, build, cfg.environment_dir, cfg.build_timeout_sec, self.logger)
        self.workdir = cfg.workdir or (build.workdir if build else cfg.image_workdir) or "/app"
        try:
            res = await self.exec(f"mkdir -p {shlex.quote(self.workdir)}", cwd="/", user="root",
                                  timeout_sec=SETUP_TIMEOUT_SEC)
        except SandboxExecTimeoutError:
            raise SandboxError(f"sandbox setup failed: mkdir -p {self.workdir} did not finish in "
                               f"{SETUP_TIMEOUT_SEC} s") from None
        if res.return_code != 0:
            raise SandboxError(f"sandbox setup failed: {res.stderr}")
        self._dockerfile_env = dict(build.env if build else cfg.image_env)
        self._default_user = build.user if build else cfg.image_user

    # ------------------------------------------------------------------ commands and files
    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: float | None = None, user: str | int | None = None,
                   until_exit: bool = False) -> ExecResult:
        """Run ``command`` with ``bash -c`` in ``cwd`` (default: the workdir) as ``user`` (default: ``default_user``,
        else root).

        Raises ``SandboxExecTimeoutError`` past ``timeout_sec``; then, and when the call is cancelled,
        the command's whole process group is killed. ``until_exit``: the output is read until the command exits (and
        a second more), not until every process it left in the background closes it (a verifier's own server)."""
        if self._init_pid is not None and not self._alive():  # the end of the sandbox: nothing enters it again
            return ExecResult(stdout="", stderr=SANDBOX_DIED.decode().lstrip(), return_code=137)
        script = f"cd {shlex.quote(cwd or self.workdir)} || exit 1\n{command}"
        full_env = {**self._dockerfile_env, **self.config.env, **(env or {})}
        inner, spec = await self._inner_argv(["/bin/bash", "-c", script], user, full_env)
        try:
            rc, out, err = await self._run(inner, timeout=timeout_sec, env=full_env, user_spec=spec,
                                           cap=self.config.max_output_bytes, until_exit=until_exit)
        finally:
            self._drain_reports()  # the records of this command's queries are in the pipe by now
        # a SIGKILL is what the end of the PID namespace sends every process in it, before PID 1's own exit shows
        killed = rc in (EXIT_SANDBOX_GONE, -9, 137)
        if (killed or rc < 0 or rc >= 128) and not (
                await asyncio.to_thread(self._alive, 0.5) if killed else self._alive()):
            # a command failure, not an infrastructure error: the task (e.g. a full tmpfs) did it
            self.logger.warning("local sandbox: the sandbox died under a command")
            err += SANDBOX_DIED
            rc = 137
        return ExecResult(stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"), return_code=rc)

    async def upload_file(self, source_path: Path | str, target_path: str, owner: tuple[int, int] | None = None,
                          mode: int | None = None) -> None:
        """Copy a host file to ``target_path`` (into it, when that is a folder), owned by root or ``owner`` (uid, gid;
        see ``owner()``), with its mode or ``mode``. The host writes it itself, beneath the sandbox's root
        (sandbox/transfer.py): no program of the sandbox runs."""
        source = Path(source_path)
        if not source.is_file():
            raise FileNotFoundError(f"Source file not found: {source}")
        await self._transfer(transfer.upload_file, source, target_path, owner, mode)

    async def upload_dir(self, source_dir: Path | str, target_dir: str, owner: tuple[int, int] | None = None,
                         mode: int | None = None) -> None:
        """Copy the contents of a host folder into ``target_dir`` (created), owned by root or ``owner``, with their
        modes or ``mode``; links stay links."""
        source = Path(source_dir)
        if not source.is_dir():
            raise FileNotFoundError(f"Source directory not found: {source}")
        await self._transfer(transfer.upload_dir, source, target_dir, owner, mode)

    async def make_dir(self, path: str, owner: tuple[int, int] | None = None) -> None:
        """``mkdir -p path``, the folders it makes owned by ``owner`` (uid, gid) when given; the host makes them."""
        await self._transfer(transfer.make_dirs, path, owner)

    def owner(self, spec: str | None) -> tuple[int, int] | None:
        """The (uid, gid) that ``COPY --chown=spec`` gives, read from the sandbox's /etc/passwd and /etc/group
        (sandbox/users.py); None for root, and in user-namespace mode, where only root is mapped (a warning says
        so). ``SandboxError`` names a user or group the sandbox lacks."""
        if spec is None or spec in users.ROOT_SPECS:
            return None
        with self.root() as root:
            try:
                ids = users.owner(root, spec)
            except LookupError as err:
                raise SandboxError(str(err)) from None
        return None if ids == (0, 0) or self._only_root(spec) else ids

    def exec_user(self, user: str | int | None = None) -> users.ExecUser:
        """Whom ``exec(user=user)`` runs as, read from the sandbox's /etc/passwd and /etc/group as ``docker exec``
        reads them (sandbox/users.py); ``SandboxError`` names a user or group the sandbox lacks. In user-namespace
        mode only root is mapped: anyone else runs as root (a warning says so)."""
        user = self._default_user if user is None else user
        spec = str(user)
        if user is None or spec in users.ROOT_SPECS:
            return users.ROOT
        with self.root() as root:
            try:
                found = users.exec_user(root, spec)
            except LookupError as err:
                raise SandboxError(str(err)) from None
        return users.ROOT if (found.uid or found.gid) and self._only_root(spec) else found

    def _only_root(self, spec: str) -> bool:
        """In user-namespace mode, whether (saying so once per user) ``spec`` becomes root."""
        if self._userns and spec not in self._warned_users:
            self._warned_users.add(spec)
            self.logger.warning(f"local sandbox (user namespace): only root is mapped; {spec!r} is root here "
                                "(as root, mode=root runs it as itself)")
        return self._userns

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        """Copy a sandbox file to ``target_path`` on the host (parent folders created); a file over
        ``max_download_bytes`` (a sparse one counts its full size) fails with ``SandboxError`` and leaves no
        target file. Read by the host through an fd beneath the sandbox's root: no program of the sandbox runs."""
        target = Path(target_path)
        try:
            await self._transfer(transfer.download_file, source_path, target, self.config.max_download_bytes)
        except BaseException:
            target.unlink(missing_ok=True)
            raise

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        """Copy the contents of a sandbox folder into ``target_dir`` on the host: folders, regular files, and links
        that stay inside it (links out, devices, FIFOs and mount points below it skipped). Files over
        ``max_download_bytes`` (sparse ones count their full size) are skipped with a warning; more than that cap in
        all fails with ``SandboxError``."""
        what = f"local sandbox: download {source_dir}"
        await self._transfer(transfer.download_dir, source_dir, Path(target_dir), self.config.max_download_bytes,
                             lambda line: self.logger.warning(f"{what}: {line}"))

    async def _transfer(self, move, *args) -> None:
        """Run one of sandbox/transfer.py's moves in a thread, with an fd of this sandbox's root."""
        if self._init_pid is None:
            raise SandboxError("the sandbox is not running (call start() first)")

        def run() -> None:
            root = transfer.open_root(self._init_pid, self._alive)
            try:
                move(root, *args)
            finally:
                os.close(root)

        await asyncio.to_thread(run)

    # ------------------------------------------------------------------ internals
    def _alive(self, wait_sec: float = 0) -> bool:
        """Whether the sandbox's PID 1 still runs (the same process: it is held by a pidfd, not by its pid), asked
        again for up to ``wait_sec`` if it does."""
        return self._init_pidfd is not None and not _exited(self._init_pidfd, wait_sec)

    def _choose_mode(self) -> None:
        cfg = self.config
        is_root = os.geteuid() == 0
        mode = cfg.mode
        if mode == "auto":
            mode = "root" if is_root else "userns"
        if mode == "root":
            if not is_root:
                raise SandboxError("mode=root needs root; use mode=userns (the default for other users)")
            Cgroup.sweep_stale()
            try:
                self._cgroup = Cgroup(cfg.name, cfg.max_processes, cfg.memory_mb, cfg.cpus)
            except SandboxError as exc:
                if cfg.limits != "best-effort":
                    raise SandboxError(
                        f"{exc}. As root the process and memory limits need a writable cgroup file system "
                        "(RLIMIT_NPROC does not bind root). Run as an ordinary user (user namespaces), give "
                        "this process cgroup access, or pass --ek limits=best-effort to run without them."
                    ) from exc
                self.logger.warning(f"local sandbox: running WITHOUT process/memory limits ({exc})")
            self._userns = False
        else:  # userns
            if is_root and cfg.limits != "best-effort":
                raise SandboxError("mode=userns as root maps root to root: RLIMIT_NPROC would not bind; "
                                   "use mode=root (cgroups) or --ek limits=best-effort")
            self._userns = True

    def _rlimits(self) -> dict[str, int]:
        """prlimit's name -> the value (soft and hard) of each resource limit every process of the sandbox gets."""
        cfg = self.config
        out = {"cpu": cfg.cpu_time_sec, "core": 0}
        if self._userns:
            out |= {"nproc": cfg.max_processes, "data": cfg.memory_mb * 1024 * 1024}
        return out

    def _limit_prefix(self, for_init: bool = False) -> list[str]:
        argv = self._cgroup.join_prefix(for_init) if self._cgroup else []
        return argv + ["prlimit", *(f"--{name}={value}" for name, value in self._rlimits().items()), "--"]

    async def _inner_argv(self, argv: list[str], user, env: dict[str, str]) -> tuple[list[str], dict]:
        u = self.exec_user(user)
        env.setdefault("HOME", u.home)
        if u.uid != 0:
            env.setdefault("USER", u.name)
        return argv, {"uid": u.uid, "gid": u.gid, "groups": list(u.groups)}

    def _enter_argv(self, inner: list[str], env: dict[str, str], user_spec: dict | None
                    ) -> tuple[list[str], int, tuple[int, ...], dict[str, str]]:
        """The host command that runs ``inner`` in the sandbox, the memfd with its spec, the fds it takes and its
        environment: the compiled helper (sandbox/enter.c, run from a sealed memfd; it also joins the cgroup and
        sets the rlimits), else ``sandbox/enter.py`` behind ``sh`` (the cgroup) and ``prlimit``. The same steps
        either way; the helper saves the interpreter's start (docs/sandbox.md)."""
        u = user_spec or {"uid": 0, "gid": 0, "groups": []}
        spec = {"pid": self._init_pid, "pidfd": self._init_pidfd, "userns": self._userns, "uid": u["uid"],
                "gid": u["gid"], "groups": u["groups"], "caps": [CAP_NUMBERS[c] for c in CAPABILITIES], "argv": inner,
                "env": env}
        helper = entry.helper(self.logger, required=self.config.entry == "compiled") \
            if self.config.entry != "python" else None
        program = entry.seccomp_program() if helper is not None else None
        if program is not None:
            data = entry.spec(**spec, cgroup_files=[str(d / "cgroup.procs") for d in self._cgroup.dirs]
                              if self._cgroup else [], rlimits=self._rlimits(), program=program)
        else:
            data = json.dumps(spec | {"seccomp": True}).encode()
        fd = os.memfd_create("sandbox-enter", 0)  # inheritable only through pass_fds
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
        if program is not None:
            return [f"/proc/self/fd/{helper}", str(fd)], fd, (fd, self._init_pidfd, helper), {}
        argv = self._limit_prefix() + [sys.executable, "-I", "-S", str(ENTER), str(fd)]
        return argv, fd, (fd, self._init_pidfd), {"PATH": os.environ.get("PATH", DEFAULT_PATH)}

    async def _spawn(self, inner: list[str], *, env: dict[str, str] | None, user_spec: dict | None, stdin: bool,
                     stdout=asyncio.subprocess.PIPE) -> asyncio.subprocess.Process:
        if self._init_pid is None:
            raise SandboxError("the sandbox is not running (call start() first)")
        if not self._alive():
            raise SandboxError("local sandbox: the sandbox is gone (its PID 1 exited: killed, out of memory, or past "
                               "wall_sec); nothing runs in it any more")
        cmd_env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "HOSTNAME": self.config.hostname, **(env or {})}
        cmd_env.setdefault("HOME", "/root")
        argv, spec_fd, pass_fds, host_env = self._enter_argv(inner, cmd_env, user_spec)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=stdout, stderr=asyncio.subprocess.PIPE, pass_fds=pass_fds, env=host_env,
                start_new_session=True,
            )
        finally:
            os.close(spec_fd)
        self._running.add(proc)
        self._spawned.append(proc.pid)
        return proc

    async def _supervise(self, proc: asyncio.subprocess.Process, work, timeout: float | None):
        """Await ``work`` (reading the command's output) and the command; past ``timeout``, on
        cancellation or on an error of ``work`` the command's process group is killed."""
        work = asyncio.ensure_future(work)

        async def both():
            res = await work
            await proc.wait()
            return res

        try:
            return await asyncio.wait_for(both(), timeout=timeout)
        except asyncio.TimeoutError:
            await self._abort(proc, work)
            raise SandboxExecTimeoutError(f"Command timed out after {timeout} seconds") from None
        except BaseException:  # cancelled (e.g. by Harbor's phase timeout), a cap, or the caller is torn down
            await self._abort(proc, work)
            raise
        finally:
            self._running.discard(proc)

    @staticmethod
    async def _abort(proc: asyncio.subprocess.Process, work: asyncio.Future) -> None:
        await kill_group(proc.pid)
        work.cancel()
        await asyncio.gather(work, return_exceptions=True)
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()  # its pipes now, not when the event loop is gone

    async def _run(self, inner: list[str], *, stdin: bytes | None = None, timeout: float | None = None,
                   env: dict[str, str] | None = None, user_spec: dict | None = None,
                   cap: int | None = None, until_exit: bool = False) -> tuple[int, bytes, bytes]:
        """Run a command; of its stdout and stderr the first ``cap`` bytes each are kept (the rest is read
        and dropped, and a truncation note is appended)."""
        cap = cap or self.config.max_output_bytes
        proc = await self._spawn(inner, env=env, user_spec=user_spec, stdin=stdin is not None)

        async def feed() -> None:
            if stdin is None:
                return
            try:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass
            finally:
                proc.stdin.close()

        reads = asyncio.gather(_read_capped(proc.stdout, cap), _read_capped(proc.stderr, cap))
        _, ((out, n_out), (err, n_err)) = await self._supervise(
            proc, asyncio.gather(feed(), self._until_exit(proc, reads) if until_exit else reads), timeout)
        if n_out > cap:
            out += _truncated(n_out, cap)
        if n_err > cap:
            err += _truncated(n_err, cap)
        return proc.returncode if proc.returncode is not None else -1, out, err

    @staticmethod
    async def _until_exit(proc: asyncio.subprocess.Process, reads: asyncio.Future, grace_sec: float = 1.0):
        """``reads`` of a command's output until it exits, then ``grace_sec`` more; then its pipes are closed (the
        readers end with what came)."""
        while not reads.done() and proc.returncode is None:  # (proc.wait() waits for the pipes too, on 3.11)
            await asyncio.wait({reads}, timeout=0.05)
        if not reads.done() and not (await asyncio.wait({reads}, timeout=grace_sec))[0]:
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()
        return await reads

    def _hidden_paths(self) -> list[str]:
        out: list[str] = []
        for c in map(Path, self.config.hide):
            try:
                c = c.resolve()
            except OSError:
                continue
            if c == Path("/") or any(k == c or k.is_relative_to(c) for k in _NEVER_HIDDEN):
                continue
            if str(c) not in out:
                out.append(str(c))
        return out
