"""``--env local``: Harbor's environment for the local sandbox (``sandbox/``), one sandbox per trial.

Runs in: the Harbor venv (.venv-harbor, Python >= 3.12), loaded by Harbor by import path, with this repo
on ``PYTHONPATH``::

    PYTHONPATH=. .venv-harbor/bin/harbor run -p TASK --env harbor_plugins.local_sandbox:LocalSandboxEnvironment -a oracle

A thin adapter: it turns the task's ``[environment]`` (memory, cpus, storage, workdir, env), the trial's
paths and the ``--ek`` knobs into a ``sandbox.SandboxConfig`` and hands every call to ``sandbox.Sandbox``.
What the sandbox isolates and what it does not: the ``sandbox`` package and the README's "The local
sandbox" section. Harbor-specific parts live here: ``/logs/*`` created at start, ``environment/``
uploaded for ``docker_image`` tasks, the Dockerfile replayed only when the task has no
``docker_image``, the task's folder, dataset folder and jobs folder hidden, the default user.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities

from sandbox import Sandbox, SandboxConfig, SandboxError, missing_host_tools

__all__ = ["LocalSandboxEnvironment"]

_LOG_DIRS = "/logs/agent /logs/verifier /logs/artifacts"


def _list(v) -> list[str]:
    if v is None or v == "":
        return []
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v]
    return [x for x in str(v).split(",") if x]


def _number(name: str, value, kind: type):
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ValueError(f"--ek {name}={value!r}: expected {'an integer' if kind is int else 'a number'}") from None


class LocalSandboxEnvironment(BaseEnvironment):
    """Harbor environment: one ``sandbox.Sandbox`` per trial on this host.

    Environment kwargs (``--ek key=value``): ``mode`` (auto|root|userns), ``max_processes`` (512),
    ``cpu_time_sec`` (per-process CPU seconds, 3600), ``wall_sec`` (sandbox lifetime, 21600),
    ``memory_mb``/``storage_mb`` (defaults when the task sets none: 4096/10240), ``limits``
    (strict|best-effort), ``dockerfile`` (emulate|ignore), ``hide`` (extra host paths to hide),
    ``expose`` (host paths made visible read-only, e.g. ``/opt``; the sandbox sees only the system folders).
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
        expose: str | list[str] | None = None,
        **kwargs,
    ):
        self._knobs = {
            "mode": str(mode),
            "limits": str(limits),
            "max_processes": _number("max_processes", max_processes, int),
            "cpu_time_sec": _number("cpu_time_sec", cpu_time_sec, int),
            "wall_sec": _number("wall_sec", wall_sec, float),
        }
        self._default_memory_mb = _number("memory_mb", memory_mb, int)
        self._default_storage_mb = _number("storage_mb", storage_mb, int)
        self._dockerfile_mode = str(dockerfile)
        self._extra_hide = _list(hide)
        self._expose = _list(expose)
        self._sandbox: Sandbox | None = None
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
        missing = missing_host_tools()
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
        if not self._network_disabled:
            self.logger.debug("local sandbox: the task allows network access; the sandbox has none")
        # built here, not in __init__: a bad knob value (mode, limits, dockerfile) fails the trial, as
        # SandboxError/ValueError in its result, not the whole job
        self._sandbox = Sandbox(self._sandbox_config(), logger=self.logger)
        await self._sandbox.start()
        res = await self._sandbox.exec(f"mkdir -p {_LOG_DIRS} && chmod 777 {_LOG_DIRS}", cwd="/", user="root")
        if res.return_code != 0:
            raise SandboxError(f"sandbox setup failed: {res.stderr}")
        await self._upload_environment_dir_after_start()

    async def stop(self, delete: bool):
        if self._sandbox is not None:
            await self._sandbox.stop()

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        res = await self._running().exec(command, cwd=cwd, env=self._merge_env(env), timeout_sec=timeout_sec,
                                         user=self._resolve_user(user))
        return ExecResult(stdout=res.stdout or None, stderr=res.stderr or None, return_code=res.return_code)

    async def upload_file(self, source_path: Path | str, target_path: str):
        await self._running().upload_file(source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str):
        await self._running().upload_dir(source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str):
        await self._running().download_file(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str):
        await self._running().download_dir(source_dir, target_dir)

    # ------------------------------------------------------------------ mapping
    def _running(self) -> Sandbox:
        if self._sandbox is None:
            raise SandboxError("local sandbox not started")
        return self._sandbox

    def _sandbox_config(self) -> SandboxConfig:
        cfg = self.task_env_config
        # the task's folder and dataset folder (solutions, tests) and the jobs folder (other trials)
        hide = [self.environment_dir.parent, self.environment_dir.parent.parent,
                self.trial_paths.trial_dir.parent, self.trial_paths.trial_dir.parent.parent, *self._extra_hide]
        config = SandboxConfig(
            **self._knobs,
            memory_mb=self._effective_memory_mb or self._default_memory_mb,
            storage_mb=cfg.storage_mb or self._default_storage_mb,
            cpus=self._effective_cpus,
            workdir=cfg.workdir,
            environment_dir=self.environment_dir,
            dockerfile=self._dockerfile_mode,
            build_timeout_sec=int(cfg.build_timeout_sec or 600),
            hide=[str(p) for p in hide],
            expose=self._expose,
            name=self.session_id.replace("/", "_"),
        )
        # docker_image tasks get environment/ uploaded instead (_upload_environment_dir_after_start)
        return replace(config, dockerfile="ignore") if cfg.docker_image else config
