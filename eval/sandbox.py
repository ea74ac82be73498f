"""``--env local``: a Harbor environment that runs a trial without Docker, in a sandbox on this host.

Use it from the Harbor venv with this repo on ``PYTHONPATH``::

    PYTHONPATH=. .venv-harbor/bin/harbor run -p TASK --env eval.sandbox:LocalSandboxEnvironment -a oracle

Per trial (``start``) it starts one sandbox (``eval/sandbox_init.py`` is its PID 1):

* **own root**: a tmpfs-backed overlay over the host's ``/`` (host = read-only lower layer), entered
  with ``pivot_root`` (the old root is detached, so no path leads back). Fresh ``/proc`` (own PID
  namespace; ``/proc/sys`` read-only), ``/dev`` (null, zero, full, random, urandom, tty, a new
  devpts, ``/dev/shm``), read-only ``/sys``, fresh ``/tmp``, ``/var/tmp``, ``/run``. Everything the
  trial writes lands in that tmpfs; the host file system is never written. The task's folder, its
  dataset folder and the jobs folder are covered by empty read-only tmpfs (no peeking at
  solutions or other trials); ``--ek hide=/a,/b`` hides more.
* **no network**: a new network namespace with only loopback (so a task may run a local
  service on 127.0.0.1, which is the sandbox's own loopback, not the host's).
* **own PID, IPC and UTS namespaces**; every process of the trial is killed when the sandbox stops
  (PID 1 dies → the kernel kills the namespace), when the Harbor process dies (a lifeline pipe),
  or at the sandbox's wall-time cap.
* **limits**: as root, a cgroup (v1 or v2) per trial: ``pids.max`` = ``max_processes``,
  memory = the task's ``memory_mb`` (tmpfs writes count against it), CPU quota = the task's
  ``cpus``; as an ordinary user (user namespace, the user mapped to root inside), rlimits instead:
  ``RLIMIT_NPROC`` (processes), ``RLIMIT_DATA`` (memory), no CPU quota. Both modes set
  ``RLIMIT_CPU`` (``cpu_time_sec`` per process). Harbor's own agent/verifier timeouts are
  enforced here by killing the command's whole process group; ``wall_sec`` caps a sandbox's life.
  As root without writable cgroups it refuses to start (``--ek limits=best-effort`` runs anyway).
* **capabilities**: commands run under ``setpriv`` with Docker's default capability set minus
  ``CAP_MKNOD`` (no ``CAP_SYS_ADMIN``, ``CAP_SYS_RESOURCE``, ``CAP_DAC_READ_SEARCH``, ...), so
  root inside can neither remount, raise its limits, nor open host files by handle.
* **environment variables**: a clean set (PATH, HOME, LANG, the task's ``[environment] env`` and
  Dockerfile ``ENV``); nothing of the Harbor process's environment (API keys) leaks in.

**The userland is the host's.** ``FROM`` and ``docker_image`` are ignored: the trial sees this
machine's ``/usr`` (its tools and versions), not the task's image. Of a task's
``environment/Dockerfile`` a subset is replayed inside the sandbox (``--ek dockerfile=ignore`` turns
it off): ``WORKDIR`` (the default cwd), ``ENV``, ``COPY``/``ADD`` of files from the build context,
and ``RUN`` (as root, no network, so ``apt-get install`` fails the start). Tasks that use
``docker_image`` without a Dockerfile get ``environment/`` uploaded into the workdir by Harbor
itself. Multi-container (docker-compose) tasks, GPUs and network access are not supported; scores
on real Terminal-Bench tasks need their images: use Harbor's ``--env docker|daytona|modal``.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path, PurePosixPath

from harbor.environments.base import BaseEnvironment, ExecResult, transfer_tar_filter
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities

_INIT = Path(__file__).with_name("sandbox_init.py")
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Docker's default capability set, minus CAP_MKNOD (there is no device cgroup here).
_CAPS = ("chown", "dac_override", "fowner", "fsetid", "kill", "setgid", "setuid", "setpcap",
         "setfcap", "net_bind_service", "net_raw", "sys_chroot", "audit_write")
_BOUNDING = "-all," + ",".join(f"+{c}" for c in _CAPS)
_CGROUP_BASE = "harbor-local-sandbox"


class SandboxError(RuntimeError):
    """The sandbox could not be set up (missing tools, kernel refused a namespace, no limits)."""


class SandboxExecTimeoutError(TimeoutError):
    """A command ran past its ``timeout_sec``; its process group was killed.

    A ``TimeoutError``, so inside Harbor's agent/verifier phases it is reported as
    ``AgentTimeoutError``/``VerifierTimeoutError``, like the phase's own timeout."""


def _list(v) -> list[str]:
    if v is None or v == "":
        return []
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v]
    return [x for x in str(v).split(",") if x]


class _Cgroup:
    """One cgroup per trial (v2, or v1 pids/memory/cpu hierarchies). Root only."""

    def __init__(self, name: str, pids_max: int, memory_mb: int | None, cpus: float | None):
        self.dirs: list[Path] = []
        self.v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
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
        root = Path("/sys/fs/cgroup")
        want = {"pids", "memory", "cpu"}
        avail = set((root / "cgroup.controllers").read_text().split())
        if "pids" not in avail:
            raise OSError("cgroup v2 without the pids controller")
        enable = " ".join(f"+{c}" for c in sorted(want & avail))
        (root / "cgroup.subtree_control").write_text(enable)
        base = root / _CGROUP_BASE
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
            mnt = Path("/sys/fs/cgroup") / ctrl
            if not mnt.is_dir():
                if ctrl == "pids":
                    raise OSError("no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids")
                continue
            d = mnt / self._own_path(ctrl).lstrip("/") / _CGROUP_BASE / name
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
        """Remove empty per-trial cgroups left by Harbor processes that died before ``stop``."""
        now = time.time()
        for base in Path("/sys/fs/cgroup").glob(f"**/{_CGROUP_BASE}"):
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


class LocalSandboxEnvironment(BaseEnvironment):
    """Harbor environment: one namespace sandbox per trial on this host (see the module docstring).

    Environment kwargs (``--ek key=value``): ``mode`` (auto|root|userns), ``max_processes`` (512),
    ``cpu_time_sec`` (per-process CPU seconds, 3600), ``wall_sec`` (sandbox lifetime, 21600),
    ``memory_mb``/``storage_mb`` (defaults when the task sets none: 4096/10240), ``limits``
    (strict|best-effort), ``dockerfile`` (emulate|ignore), ``hide`` (extra host paths to hide).
    """

    def __init__(
        self,
        environment_dir: Path,
        environment_name: str,
        session_id: str,
        trial_paths,
        task_env_config,
        logger=None,
        mode: str = "auto",
        max_processes: int | str = 512,
        cpu_time_sec: int | str = 3600,
        wall_sec: int | float | str = 21600,
        memory_mb: int | str = 4096,
        storage_mb: int | str = 10240,
        limits: str = "strict",
        dockerfile: str = "emulate",
        hide: str | list[str] | None = None,
        **kwargs,
    ):
        self._mode_req = str(mode)
        self._max_processes = int(max_processes)
        self._cpu_time_sec = int(cpu_time_sec)
        self._wall_sec = float(wall_sec)
        self._default_memory_mb = int(memory_mb)
        self._default_storage_mb = int(storage_mb)
        self._limits = str(limits)
        self._dockerfile_mode = str(dockerfile)
        self._extra_hide = _list(hide)
        self._proc: asyncio.subprocess.Process | None = None
        self._init_pid: int | None = None
        self._lifeline_w: int | None = None
        self._cgroup: _Cgroup | None = None
        self._userns = False
        self._workdir = "/app"
        self._dockerfile_env: dict[str, str] = {}
        self._uid_cache: dict[str, tuple[int, int, str]] = {}
        self._running: set[asyncio.subprocess.Process] = set()
        self._memory_mb = int(memory_mb)
        super().__init__(environment_dir, environment_name, session_id, trial_paths, task_env_config,
                         logger=logger, **kwargs)

    # ------------------------------------------------------------------ Harbor contract
    @staticmethod
    def type() -> str:
        return "local-sandbox"

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(disable_internet=True)

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True, fractional_cpus=True)

    @classmethod
    def preflight(cls) -> None:
        missing = [t for t in ("unshare", "nsenter", "prlimit", "setpriv", "tar", "bash") if not shutil.which(t)]
        if missing:
            raise SystemExit(f"local sandbox needs util-linux/tar/bash on this host; missing: {', '.join(missing)}")

    def _validate_definition(self):
        if (self.environment_dir / "docker-compose.yaml").exists() and not (self.environment_dir / "Dockerfile").exists():
            raise ValueError(
                f"{self.environment_dir}: multi-container (docker-compose) tasks need --env docker or daytona; "
                "the local sandbox runs one host-userland sandbox per trial"
            )

    async def start(self, force_build: bool) -> None:
        self.preflight()
        cfg = self.task_env_config
        memory_mb = self._effective_memory_mb or self._default_memory_mb
        storage_mb = cfg.storage_mb or self._default_storage_mb
        cpus = self._effective_cpus
        self._choose_mode(memory_mb, cpus)
        if not self._network_disabled:
            self.logger.debug("local sandbox: the task allows network access; the sandbox has none")

        r, w = os.pipe()
        self._lifeline_w = w
        init_cfg = {
            "storage_mb": storage_mb,
            "shm_mb": min(memory_mb, 1024),
            "hide": self._hide_paths(),
            "wall_sec": self._wall_sec,
            "hostname": "sandbox",
            "lifeline_fd": r,
        }
        argv = ["unshare", "--mount", "--pid", "--fork", "--net", "--ipc", "--uts",
                "--propagation", "private", "--kill-child"]
        if self._userns:
            argv += ["--user", "--map-root-user"]
        argv += ["--", sys.executable, "-I", str(_INIT), json.dumps(init_cfg)]
        argv = self._limit_prefix() + argv
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                pass_fds=(r,), start_new_session=True, env={"PATH": os.environ.get("PATH", _DEFAULT_PATH)},
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
            await self._teardown()
            raise SandboxError(f"sandbox failed to start: {(line + err).decode(errors='replace').strip()}")
        self._init_pid = self._find_init_pid(self._proc.pid)
        self.logger.debug(f"local sandbox up: init host pid {self._init_pid}, mode "
                          f"{'userns' if self._userns else 'root'}")

        self._workdir = cfg.workdir or self._dockerfile_workdir() or "/app"
        res = await self.exec(
            f"mkdir -p {shlex.quote(self._workdir)} /logs/agent /logs/verifier /logs/artifacts "
            "&& chmod 777 /logs/agent /logs/verifier /logs/artifacts",
            cwd="/", user="root",
        )
        if res.return_code != 0:
            raise SandboxError(f"sandbox setup failed: {res.stderr}")
        if self._dockerfile_mode == "emulate" and not cfg.docker_image:
            await self._replay_dockerfile(timeout=int(cfg.build_timeout_sec or 600))
        await self._upload_environment_dir_after_start()

    async def stop(self, delete: bool):
        await self._teardown()

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        user = self._resolve_user(user)
        cwd = cwd or self._workdir
        script = f"cd {shlex.quote(cwd)} || exit 1\n{command}"
        full_env = {**self._dockerfile_env, **(self._merge_env(env) or {})}
        inner = await self._inner_argv(["/bin/bash", "-c", script], user, full_env)
        rc, out, err = await self._run(inner, timeout=timeout_sec, env=full_env, user=user)
        return ExecResult(stdout=out.decode(errors="replace") or None,
                          stderr=err.decode(errors="replace") or None, return_code=rc)

    async def upload_file(self, source_path: Path | str, target_path: str):
        source = Path(source_path)
        if not source.is_file():
            raise FileNotFoundError(f"Source file not found: {source}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(source, arcname="f", filter=_root_owned)
        script = ('t=$(mktemp -d /tmp/.hb-up.XXXXXX) && tar -xf - -C "$t" || exit 1\n'
                  'if [ -d "$1" ]; then dest="$1/$2"; else mkdir -p "$(dirname "$1")" && dest="$1"; fi\n'
                  'mv -f "$t/f" "$dest"; rc=$?; rm -rf "$t"; exit $rc')
        await self._checked(["/bin/sh", "-c", script, "sh", target_path, source.name], buf.getvalue(),
                            f"upload {source} -> {target_path}")

    async def upload_dir(self, source_dir: Path | str, target_dir: str):
        source = Path(source_dir)
        if not source.is_dir():
            raise FileNotFoundError(f"Source directory not found: {source}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for path in sorted(source.rglob("*")):
                tar.add(path, arcname=path.relative_to(source).as_posix(), recursive=False, filter=_root_owned)
        await self._checked(["/bin/sh", "-c", 'mkdir -p "$1" && tar -xf - -C "$1"', "sh", target_dir],
                            buf.getvalue(), f"upload {source} -> {target_dir}")

    async def download_file(self, source_path: str, target_path: Path | str):
        out = await self._checked(["/bin/cat", "--", source_path], None, f"download {source_path}")
        target = Path(target_path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(out)

    async def download_dir(self, source_dir: str, target_dir: Path | str):
        out = await self._checked(["/bin/tar", "-cf", "-", "-C", source_dir, "."], None, f"download {source_dir}")
        target = Path(target_dir)
        target.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(out), mode="r:") as tf:
            tf.extractall(path=target, filter=transfer_tar_filter)

    # ------------------------------------------------------------------ internals
    def _choose_mode(self, memory_mb: int, cpus: float | None) -> None:
        is_root = os.geteuid() == 0
        mode = self._mode_req
        if mode == "auto":
            mode = "root" if is_root else "userns"
        if mode == "root":
            if not is_root:
                raise SandboxError("mode=root needs root; use mode=userns (the default for other users)")
            _Cgroup.sweep_stale()
            try:
                self._cgroup = _Cgroup(self.session_id.replace("/", "_"), self._max_processes, memory_mb, cpus)
            except SandboxError as exc:
                if self._limits != "best-effort":
                    raise SandboxError(
                        f"{exc}. As root the process and memory limits need a writable cgroup file system "
                        "(RLIMIT_NPROC does not bind root). Run as an ordinary user (user namespaces), give "
                        "this process cgroup access, or pass --ek limits=best-effort to run without them."
                    ) from exc
                self.logger.warning(f"local sandbox: running WITHOUT process/memory limits ({exc})")
            self._userns = False
        elif mode == "userns":
            if is_root and self._limits != "best-effort":
                raise SandboxError("mode=userns as root maps root to root: RLIMIT_NPROC would not bind; "
                                   "use mode=root (cgroups) or --ek limits=best-effort")
            self._userns = True
        else:
            raise SandboxError(f"unknown mode {mode!r} (auto, root, userns)")
        self._memory_mb = memory_mb

    def _limit_prefix(self) -> list[str]:
        argv = self._cgroup.join_prefix() if self._cgroup else []
        argv += ["prlimit", f"--cpu={self._cpu_time_sec}", "--core=0"]
        if self._userns:
            argv += [f"--nproc={self._max_processes}", f"--data={self._memory_mb * 1024 * 1024}"]
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
                 f"id -u {q} && id -g {q} && (getent passwd {q} | cut -d: -f6)"], timeout=30, env={}, user="root")
            lines = out.decode().split()
            if rc != 0 or len(lines) < 2:
                if key.isdigit():
                    return int(key), int(key), "/"
                raise SandboxError(f"user {user!r} does not exist in the sandbox: {err.decode().strip()}")
            self._uid_cache[key] = (int(lines[0]), int(lines[1]), lines[2] if len(lines) > 2 else "/")
        return self._uid_cache[key]

    async def _run(self, inner: list[str], *, stdin: bytes | None = None, timeout: float | None = None,
                   env: dict[str, str] | None = None, user=None) -> tuple[int, bytes, bytes]:
        if self._init_pid is None:
            raise SandboxError("local sandbox not started")
        base = {"PATH": _DEFAULT_PATH, "LANG": "C.UTF-8", "HOSTNAME": "sandbox"}
        proc_env = {**base, **(env or {})}
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
            await _kill_group(proc.pid)
            raise SandboxExecTimeoutError(f"Command timed out after {timeout} seconds") from None
        except BaseException:  # cancelled by Harbor's phase timeout, or the job is torn down
            await _kill_group(proc.pid)
            raise
        finally:
            self._running.discard(proc)
        return proc.returncode if proc.returncode is not None else -1, out, err

    async def _checked(self, inner: list[str], stdin: bytes | None, what: str) -> bytes:
        inner = ["setpriv", f"--bounding-set={_BOUNDING}", "--"] + inner
        rc, out, err = await self._run(inner, stdin=stdin, timeout=600)
        if rc != 0:
            raise RuntimeError(f"local sandbox: {what} failed (exit {rc}): {err.decode(errors='replace').strip()}")
        return out

    @staticmethod
    def _find_init_pid(unshare_pid: int) -> int:
        for _ in range(100):
            try:
                kids = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
            except OSError:
                kids = []
            if not kids:
                for st in Path("/proc").glob("[0-9]*/stat"):
                    try:
                        fields = st.read_text().rsplit(")", 1)[1].split()
                    except OSError:
                        continue
                    if int(fields[1]) == unshare_pid:
                        kids.append(st.parent.name)
            if kids:
                return int(kids[0])
            time.sleep(0.02)
        raise SandboxError("sandbox init process not found")

    def _hide_paths(self) -> list[str]:
        cands = [self.environment_dir.parent, self.environment_dir.parent.parent,
                 self.trial_paths.trial_dir.parent, self.trial_paths.trial_dir.parent.parent,
                 *map(Path, self._extra_hide)]
        keep = [Path(p) for p in _DEFAULT_PATH.split(":")] + [Path("/etc"), Path("/lib"), Path("/lib64"),
                                                               Path("/usr"), Path("/var"), Path("/opt")]
        out: list[str] = []
        for c in cands:
            try:
                c = c.resolve()
            except OSError:
                continue
            if c == Path("/") or any(k == c or k.is_relative_to(c) for k in keep):
                continue
            if str(c) not in out:
                out.append(str(c))
        return out

    async def _teardown(self) -> None:
        for proc in list(self._running):
            _killpg(proc.pid)
        if self._init_pid:
            try:
                os.kill(self._init_pid, signal.SIGKILL)  # PID 1 of the namespace: all of it dies
            except ProcessLookupError:
                pass
        if self._proc is not None:
            _killpg(self._proc.pid)
            try:
                await asyncio.wait_for(self._proc.wait(), timeout=10)
            except asyncio.TimeoutError:
                pass
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

    # ------------------------------------------------------------------ Dockerfile subset
    def _dockerfile_lines(self) -> list[tuple[str, str]]:
        path = self.environment_dir / "Dockerfile"
        if not path.exists():
            return []
        lines, cur = [], ""
        for raw in path.read_text().splitlines():
            s = raw.strip()
            if not cur and (not s or s.startswith("#")):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            if cur.strip():
                op, _, rest = cur.strip().partition(" ")
                lines.append((op.upper(), rest.strip()))
            cur = ""
        return lines

    def _dockerfile_workdir(self) -> str | None:
        wd = None
        for op, rest in self._dockerfile_lines():
            if op == "WORKDIR":
                wd = str(PurePosixPath(wd or "/") / rest)
        return wd

    async def _replay_dockerfile(self, timeout: int) -> None:
        wd, env = "/", self._dockerfile_env
        for op, rest in self._dockerfile_lines():
            if op == "WORKDIR":
                wd = str(PurePosixPath(wd) / rest)
                await self.exec(f"mkdir -p {shlex.quote(wd)}", cwd="/", user="root")
            elif op == "ENV":
                parts = shlex.split(rest)
                if parts and "=" not in parts[0]:
                    env[parts[0]] = " ".join(parts[1:])
                else:
                    env.update(p.split("=", 1) for p in parts if "=" in p)
            elif op in ("COPY", "ADD"):
                args = [a for a in (json.loads(rest) if rest.startswith("[") else shlex.split(rest))
                        if not a.startswith("--")]
                if any(a.startswith("--from") for a in shlex.split(rest)) or len(args) < 2:
                    self.logger.warning(f"local sandbox: skipping Dockerfile {op} {rest}")
                    continue
                *srcs, dst = args
                dst = str(PurePosixPath(wd) / dst)
                for pattern in srcs:
                    for src in sorted(self.environment_dir.glob(pattern)) or [self.environment_dir / pattern]:
                        if src.is_dir():
                            await self.upload_dir(src, dst)
                        elif dst.endswith("/") or len(srcs) > 1:
                            await self.upload_file(src, dst.rstrip("/") + "/" + src.name)
                        else:
                            await self.upload_file(src, dst)
            elif op == "RUN":
                cmd = " ".join(shlex.quote(a) for a in json.loads(rest)) if rest.startswith("[") else rest
                res = await self.exec(cmd, cwd=wd, user="root", timeout_sec=timeout)
                if res.return_code != 0:
                    raise SandboxError(f"Dockerfile RUN failed in the local sandbox (exit {res.return_code}; "
                                       f"host userland, no network): {cmd}\n{res.stderr or res.stdout}")
            elif op not in ("FROM", "ARG", "LABEL", "CMD", "ENTRYPOINT", "EXPOSE", "USER", "SHELL",
                            "HEALTHCHECK", "VOLUME", "STOPSIGNAL", "MAINTAINER", "ONBUILD"):
                self.logger.warning(f"local sandbox: ignoring Dockerfile {op}")


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


async def _kill_group(pgid: int, wait_sec: float = 5.0) -> None:
    """SIGKILL a command's process group and wait (briefly) until the sandbox's init reaped it,
    so that the next command finds its pids.max slots free again."""
    _killpg(pgid)
    deadline = time.monotonic() + wait_sec
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return
        await asyncio.sleep(0.02)


def _killpg(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
