"""``Sandbox``: one namespace sandbox on this host, driven with asyncio.

Runs in: any Python >= 3.11, standard library only (plus util-linux's unshare, nsenter, prlimit,
setpriv, and tar/bash on the host).

``start`` launches ``sandbox/init.py`` as the PID 1 of fresh mount, PID, network, IPC and UTS
namespaces (and a user namespace in ``userns`` mode) inside the limits (a cgroup as root, rlimits
otherwise), creates the workdir and replays the Dockerfile subset. ``exec`` enters those namespaces
with ``nsenter`` and runs ``bash -c`` under ``setpriv`` (Docker's default capability set minus
``CAP_MKNOD``) with a clean environment. A command past its ``timeout_sec``, or cancelled, has its whole
process group killed. ``stop`` kills PID 1 (the kernel then kills every process of the namespace),
so does the closing of the lifeline pipe when this process dies, and so does the ``wall_sec`` cap.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox import dockerfile
from sandbox.cgroup import Cgroup
from sandbox.config import SandboxConfig
from sandbox.errors import SandboxError, SandboxExecTimeoutError
from sandbox.processes import find_child_pid, kill_group, kill_pid, killpg
from sandbox.transfer import extract_tar, tar_of_dir, tar_of_file

INIT = Path(__file__).with_name("init.py")
HOST_TOOLS = ("unshare", "nsenter", "prlimit", "setpriv", "tar", "bash")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Docker's default capability set, minus CAP_MKNOD (there is no device cgroup here).
CAPABILITIES = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
                "setfcap", "net_bind_service", "net_raw", "sys_chroot", "audit_write")
_BOUNDING = "-all," + ",".join(f"+{c}" for c in CAPABILITIES)
_NEVER_HIDDEN = [Path(p) for p in DEFAULT_PATH.split(":")] + [Path(p) for p in ("/etc", "/lib", "/lib64",
                                                                                "/usr", "/var", "/opt")]
_TRANSFER_TIMEOUT_SEC = 600


@dataclass
class ExecResult:
    """What a command left: its decoded stdout and stderr ("" when empty) and its exit status."""

    stdout: str
    stderr: str
    return_code: int


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
        self._lifeline_w: int | None = None
        self._cgroup: Cgroup | None = None
        self._userns = False
        self._dockerfile_env: dict[str, str] = {}
        self._uid_cache: dict[str, tuple[int, int, str]] = {}
        self._running: set[asyncio.subprocess.Process] = set()

    async def __aenter__(self) -> Sandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()

    @property
    def init_pid(self) -> int | None:
        """The host pid of the sandbox's PID 1 while it runs, else None."""
        return self._init_pid

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Launch the sandbox, create the workdir, replay the Dockerfile; on failure nothing is left."""
        if self._init_pid is not None:
            raise SandboxError("sandbox already started")
        missing = missing_host_tools()
        if missing:
            raise SandboxError(f"the sandbox needs util-linux, tar and bash on this host; missing: {', '.join(missing)}")
        try:
            await self._launch()
            await self._prepare()
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Kill every process of the sandbox and remove its cgroup. Idempotent."""
        for proc in list(self._running):
            killpg(proc.pid)
        if self._init_pid:
            kill_pid(self._init_pid)  # PID 1 of the namespace: all of it dies
        if self._proc is not None:
            killpg(self._proc.pid)
            try:
                await asyncio.wait_for(self._proc.wait(), timeout=10)
            except asyncio.TimeoutError:
                pass
            self._proc = None
        if self._lifeline_w is not None:
            os.close(self._lifeline_w)
            self._lifeline_w = None
        if self._init_pid:
            deadline = time.monotonic() + 10
            while Path(f"/proc/{self._init_pid}").exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
        if self._cgroup is not None:
            self._cgroup.kill_all()
            self._cgroup.remove()
            self._cgroup = None
        self._init_pid = None

    async def _launch(self) -> None:
        cfg = self.config
        self._choose_mode()
        r, w = os.pipe()
        self._lifeline_w = w
        init_cfg = {
            "storage_mb": cfg.storage_mb,
            "shm_mb": min(cfg.memory_mb, 1024),
            "hide": self._hidden_paths(),
            "wall_sec": cfg.wall_sec,
            "hostname": cfg.hostname,
            "lifeline_fd": r,
        }
        argv = ["unshare", "--mount", "--pid", "--fork", "--net", "--ipc", "--uts",
                "--propagation", "private", "--kill-child"]
        if self._userns:
            argv += ["--user", "--map-root-user"]
        argv += ["--", sys.executable, "-I", str(INIT), f"sandbox_init:{cfg.name}", json.dumps(init_cfg)]
        argv = self._limit_prefix() + argv
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                pass_fds=(r,), start_new_session=True, env={"PATH": os.environ.get("PATH", DEFAULT_PATH)},
            )
        finally:
            os.close(r)
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), timeout=60)
        except asyncio.TimeoutError:
            line = b""
        if line.strip() != b"READY":
            err = b""
            try:
                err = await asyncio.wait_for(self._proc.stderr.read(), timeout=2)
            except asyncio.TimeoutError:
                pass
            raise SandboxError(f"sandbox failed to start: {(line + err).decode(errors='replace').strip()}")
        self._init_pid = find_child_pid(self._proc.pid)
        self.logger.debug(f"local sandbox up: init host pid {self._init_pid}, mode {'userns' if self._userns else 'root'}")

    async def _prepare(self) -> None:
        cfg = self.config
        df = cfg.environment_dir / "Dockerfile" if cfg.environment_dir else None
        self.workdir = cfg.workdir or (dockerfile.workdir(df) if df else None) or "/app"
        res = await self.exec(f"mkdir -p {shlex.quote(self.workdir)}", cwd="/", user="root")
        if res.return_code != 0:
            raise SandboxError(f"sandbox setup failed: {res.stderr}")
        if df is not None and cfg.dockerfile == "emulate":
            await dockerfile.replay(self, df, cfg.environment_dir, self._dockerfile_env,
                                    cfg.build_timeout_sec, self.logger)

    # ------------------------------------------------------------------ commands and files
    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: float | None = None, user: str | int | None = None) -> ExecResult:
        """Run ``command`` with ``bash -c`` in ``cwd`` (default: the workdir) as ``user`` (default: root).

        Raises ``SandboxExecTimeoutError`` past ``timeout_sec``; then, and when the call is cancelled,
        the command's whole process group is killed."""
        script = f"cd {shlex.quote(cwd or self.workdir)} || exit 1\n{command}"
        full_env = {**self._dockerfile_env, **self.config.env, **(env or {})}
        inner = await self._inner_argv(["/bin/bash", "-c", script], user, full_env)
        rc, out, err = await self._run(inner, timeout=timeout_sec, env=full_env)
        return ExecResult(stdout=out.decode(errors="replace"), stderr=err.decode(errors="replace"), return_code=rc)

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        """Copy a host file to ``target_path`` (into it, when that is a folder), owned by root."""
        source = Path(source_path)
        if not source.is_file():
            raise FileNotFoundError(f"Source file not found: {source}")
        script = ('t=$(mktemp -d /tmp/.hb-up.XXXXXX) && tar -xf - -C "$t" || exit 1\n'
                  'if [ -d "$1" ]; then dest="$1/$2"; else mkdir -p "$(dirname "$1")" && dest="$1"; fi\n'
                  'mv -f "$t/f" "$dest"; rc=$?; rm -rf "$t"; exit $rc')
        await self._checked(["/bin/sh", "-c", script, "sh", target_path, source.name], tar_of_file(source, "f"),
                            f"upload {source} -> {target_path}")

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        """Copy the contents of a host folder into ``target_dir`` (created), owned by root."""
        source = Path(source_dir)
        if not source.is_dir():
            raise FileNotFoundError(f"Source directory not found: {source}")
        await self._checked(["/bin/sh", "-c", 'mkdir -p "$1" && tar -xf - -C "$1"', "sh", target_dir],
                            tar_of_dir(source), f"upload {source} -> {target_dir}")

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        """Copy a sandbox file to ``target_path`` on the host (parent folders created)."""
        out = await self._checked(["/bin/cat", "--", source_path], None, f"download {source_path}")
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(out)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        """Copy the contents of a sandbox folder into ``target_dir`` on the host (devices and FIFOs skipped)."""
        out = await self._checked(["/bin/tar", "-cf", "-", "-C", source_dir, "."], None, f"download {source_dir}")
        extract_tar(out, Path(target_dir))

    # ------------------------------------------------------------------ internals
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

    def _limit_prefix(self) -> list[str]:
        cfg = self.config
        argv = self._cgroup.join_prefix() if self._cgroup else []
        argv += ["prlimit", f"--cpu={cfg.cpu_time_sec}", "--core=0"]
        if self._userns:
            argv += [f"--nproc={cfg.max_processes}", f"--data={cfg.memory_mb * 1024 * 1024}"]
        return argv + ["--"]

    def _nsenter(self) -> list[str]:
        argv = ["nsenter", "-t", str(self._init_pid)]
        if self._userns:
            argv += ["--user", "--preserve-credentials"]
        return argv + ["--mount", "--uts", "--ipc", "--net", "--pid", "--root", "--wd", "--"]

    async def _inner_argv(self, argv: list[str], user, env: dict[str, str]) -> list[str]:
        priv = ["setpriv", f"--bounding-set={_BOUNDING}"]
        if user is None or str(user) in ("root", "0"):
            env.setdefault("HOME", "/root")
            return priv + ["--"] + argv
        if self._userns:
            self.logger.warning(f"local sandbox (user namespace): only root is mapped; running as root, not {user!r}")
            env.setdefault("HOME", "/root")
            return priv + ["--"] + argv
        uid, gid, home = await self._lookup_user(user)
        env.setdefault("HOME", home)
        env.setdefault("USER", str(user))
        return priv + [f"--reuid={uid}", f"--regid={gid}", "--init-groups", "--"] + argv

    async def _lookup_user(self, user) -> tuple[int, int, str]:
        key = str(user)
        if key not in self._uid_cache:
            q = shlex.quote(key)
            rc, out, err = await self._run(
                ["setpriv", f"--bounding-set={_BOUNDING}", "--", "/bin/sh", "-c",
                 f"id -u {q} && id -g {q} && (getent passwd {q} | cut -d: -f6)"], timeout=30, env={})
            lines = out.decode().split()
            if rc != 0 or len(lines) < 2:
                if key.isdigit():
                    return int(key), int(key), "/"
                raise SandboxError(f"user {user!r} does not exist in the sandbox: {err.decode().strip()}")
            self._uid_cache[key] = (int(lines[0]), int(lines[1]), lines[2] if len(lines) > 2 else "/")
        return self._uid_cache[key]

    async def _run(self, inner: list[str], *, stdin: bytes | None = None, timeout: float | None = None,
                   env: dict[str, str] | None = None) -> tuple[int, bytes, bytes]:
        if self._init_pid is None:
            raise SandboxError("the sandbox is not running (call start() first)")
        proc_env = {"PATH": DEFAULT_PATH, "LANG": "C.UTF-8", "HOSTNAME": self.config.hostname, **(env or {})}
        proc_env.setdefault("HOME", "/root")
        argv = self._limit_prefix() + self._nsenter() + inner
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=proc_env, start_new_session=True,
        )
        self._running.add(proc)
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=timeout)
        except asyncio.TimeoutError:
            await kill_group(proc.pid)
            raise SandboxExecTimeoutError(f"Command timed out after {timeout} seconds") from None
        except BaseException:  # cancelled (e.g. by Harbor's phase timeout), or the caller is torn down
            await kill_group(proc.pid)
            raise
        finally:
            self._running.discard(proc)
        return proc.returncode if proc.returncode is not None else -1, out, err

    async def _checked(self, inner: list[str], stdin: bytes | None, what: str) -> bytes:
        inner = ["setpriv", f"--bounding-set={_BOUNDING}", "--"] + inner
        rc, out, err = await self._run(inner, stdin=stdin, timeout=_TRANSFER_TIMEOUT_SEC)
        if rc != 0:
            raise SandboxError(f"local sandbox: {what} failed (exit {rc}): {err.decode(errors='replace').strip()}")
        return out

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
