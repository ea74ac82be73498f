"""``--env local``: Harbor's environment for the local sandbox (``sandbox/``), one sandbox per trial.
Runs in: the Harbor venv (.venv-harbor, Python >= 3.12), loaded by Harbor by import path, inside the harbor process.

    PYTHONPATH=. .venv-harbor/bin/harbor run -p TASK --env harbor_plugins.local_sandbox:LocalSandboxEnvironment -a oracle

A thin adapter: the task's ``[environment]``, the trial's paths and the ``--ek`` knobs become a
``sandbox.SandboxConfig``, and every call goes to ``sandbox.Sandbox``. The knobs and the Harbor-specific parts: docs/sandbox.md#inside-the-modules.
"""

from __future__ import annotations

import asyncio
import json
import shlex
import shutil
from pathlib import Path

from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.models.trial.paths import EnvironmentPaths

from harbor_tasks.evidence import TESTS_DIR, VerifierWatch
from harbor_tasks.folder import TaskFolder
from harbor_tasks.verdict import TAMPER_FILE, TEST_STDOUT, VERIFIER_DIR, judge_verifier_run
from sandbox import EnvironmentBuildError, Sandbox, SandboxConfig, SandboxError, dockerfile, missing_host_tools
from sandbox.config import NETWORKS
from sandbox.images import ImageRoot, ImageStore, load_images_file

__all__ = ["LocalSandboxEnvironment"]

_LOG_DIRS = "/logs/agent /logs/verifier /logs/artifacts"
_FRESH = f"rm -rf {VERIFIER_DIR} {TESTS_DIR} && mkdir -p {VERIFIER_DIR} && chmod 777 {VERIFIER_DIR}"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _list(v) -> list[str]:
    if v is None or v == "":
        return []
    if isinstance(v, (list, tuple)):
        return [str(x) for x in v]
    return [x for x in str(v).split(",") if x]


def _flag(name: str, value) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in _TRUE + _FALSE:
        return str(value).lower() in _TRUE
    raise ValueError(f"--ek {name}={value!r}: expected true or false")


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
    ``expose`` (host paths made visible read-only, e.g. ``/opt``; the sandbox sees only the system folders),
    ``network`` (none|pasta|slirp4netns: user-mode networking for tasks that allow internet; default none),
    ``images`` (a JSON file: image reference -> OCI layout, image tarball or root file system tarball/folder),
    ``pull`` (true: pull images that file does not name with skopeo; needs the network), ``image_cache``
    (where unpacked images are kept; default ~/.cache/terminal-recipes/images), ``entry`` (auto|compiled|python:
    how each command enters the sandbox, ``SandboxConfig.entry``), ``build_cache`` (true: a task's Dockerfile is
    replayed once into a cached layer that later trials mount; false: replayed in every trial), ``build_cache_dir``
    (default ~/.cache/terminal-recipes/build-cache), ``build_cache_mb`` (its size bound, 20480).
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
        network: str = "none",
        images: str | None = None,
        pull: bool | str = False,
        image_cache: str | None = None,
        entry: str = "auto",
        build_cache: bool | str = True,
        build_cache_dir: str | None = None,
        build_cache_mb: int | str = 20480,
        **kwargs,
    ):
        self._knobs = {
            "mode": str(mode),
            "limits": str(limits),
            "max_processes": _number("max_processes", max_processes, int),
            "cpu_time_sec": _number("cpu_time_sec", cpu_time_sec, int),
            "wall_sec": _number("wall_sec", wall_sec, float),
            "entry": str(entry),
        }
        self._default_memory_mb = _number("memory_mb", memory_mb, int)
        self._default_storage_mb = _number("storage_mb", storage_mb, int)
        self._dockerfile_mode = str(dockerfile)
        self._extra_hide = _list(hide)
        self._expose = _list(expose)
        if str(network) not in NETWORKS:
            raise ValueError(f"--ek network={network!r}: use one of {', '.join(NETWORKS)}")
        self._network = str(network)
        self._images_file = str(images) if images else None
        self._pull = _flag("pull", pull)
        self._image_cache = str(image_cache) if image_cache else None
        self._build_cache = {"build_cache": _flag("build_cache", build_cache),
                             "build_cache_dir": str(build_cache_dir) if build_cache_dir else None,
                             "build_cache_mb": _number("build_cache_mb", build_cache_mb, int)}
        self._sandbox: Sandbox | None = None
        self._agent_mark = 0
        self._watch: VerifierWatch | None = None
        self._verifying = False          # between the first step of a verifier run and its end
        self._verified: dict | None = None  # what the last verifier run left, as the harness read it
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
        # nothing here: Harbor validates every task's environment before the job starts, so an error raised here
        # would end the whole job; a task this environment cannot run fails its own trials, in start()
        pass

    async def start(self, force_build: bool) -> None:
        self.preflight()
        if (self.environment_dir / "docker-compose.yaml").exists() and not (self.environment_dir / "Dockerfile").exists():
            raise SandboxBuildFailedError(
                f"{self.environment_dir}: multi-container (docker-compose) tasks need --env docker or daytona; "
                "the local sandbox runs one sandbox per trial")
        # built here, not in __init__: a bad knob value (mode, limits, dockerfile) fails the trial, as
        # SandboxError/ValueError in its result, not the whole job
        try:
            image = await asyncio.to_thread(self._image_root)
            self._sandbox = Sandbox(self._sandbox_config(image), logger=self.logger)
            await self._sandbox.start()
        except EnvironmentBuildError as err:  # Harbor's own name for it (its error policy knows it)
            raise SandboxBuildFailedError(str(err)) from err
        res = await self._sandbox.exec(f"mkdir -p {_LOG_DIRS} && chmod 777 {_LOG_DIRS}", cwd="/", user="root")
        if res.return_code != 0:
            raise SandboxError(f"sandbox setup failed: {res.stderr}")
        await self._upload_environment_dir_after_start()
        self._agent_mark = self._sandbox.network_mark()
        self._watch = await asyncio.to_thread(VerifierWatch, self._sandbox.root, self._sandbox.command_path(),
                                                self._sandbox.command_sessions)

    async def stop(self, delete: bool):
        if self._sandbox is not None:
            await self._sandbox.stop()

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: int | None = None, user: str | int | None = None) -> ExecResult:
        sandbox = self._running()
        if self._is_verifier_run(command):
            return await self._run_verifier(sandbox, command, cwd, env, timeout_sec, user)
        if self._removes_rewards(command):
            await self._verifier_starting()
        resets = not self._verifying and self._resets_verifier_paths(command)
        if resets:  # the harness's, not the agent's: what the agent did there is kept, and the emptied folders
            await asyncio.to_thread(self._watch.before_harness_reset)  # become the baseline
        res = await sandbox.exec(command, cwd=cwd, env=self._merge_env(env), timeout_sec=timeout_sec,
                                 user=self._resolve_user(user))
        if resets:
            await asyncio.to_thread(self._watch.after_harness_reset)
        return ExecResult(stdout=res.stdout or None, stderr=res.stderr or None, return_code=res.return_code)

    async def upload_file(self, source_path: Path | str, target_path: str):
        await self._running().upload_file(source_path, target_path)

    async def upload_dir(self, source_dir: Path | str, target_dir: str):
        if target_dir.rstrip("/") == TESTS_DIR:
            await self._verifier_starting()
            await asyncio.to_thread(self._watch.expect_tests, [Path(source_dir)])
        await self._running().upload_dir(source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str):
        await self._running().download_file(source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str):
        if self._sandbox is None or self._sandbox.init_pid is None:
            # Harbor collects the logs of a trial whose environment never started (a build failure): there are none
            self.logger.debug(f"local sandbox: not running; nothing to download from {source_dir}")
            return
        await self._running().download_dir(source_dir, target_dir)
        if source_dir.rstrip("/") == VERIFIER_DIR and self._verified is not None:
            self._write_verified(Path(target_dir))

    async def download_dir_filtered(self, *, source_dir: str, target_dir: Path | str, include=None, exclude=None,
                                    protect=None) -> None:
        await super().download_dir_filtered(source_dir=source_dir, target_dir=target_dir, include=include,
                                            exclude=exclude, protect=protect)
        if source_dir.rstrip("/") == VERIFIER_DIR and self._verified is not None:
            self._write_verified(Path(target_dir))

    # ------------------------------------------------------------------ the verifier's run
    def _is_verifier_run(self, command: str) -> bool:
        """Harbor's verifier runs ``(/tests/test.sh) > /logs/verifier/test-stdout.txt 2>&1``."""
        return self._verifier_script(command) is not None

    async def _keep_verifier_files(self, sandbox: Sandbox, err: Exception) -> None:
        """Copy the verifier's folder (reward files, its whole output) into the trial, as Harbor does after a run that
        did not raise, and say so in ``err``'s message (it carries only the output's end)."""
        target = self.trial_paths.verifier_dir
        try:
            await asyncio.wait_for(sandbox.download_dir(str(EnvironmentPaths.verifier_dir), target), timeout=120)
        except Exception as exc:  # noqa: BLE001 - the verifier's failure is what the trial reports
            self.logger.warning(f"local sandbox: the verifier's files could not be kept in the trial: {exc}")
            return
        _say_kept(err, f"{target.name}/{self.trial_paths.test_stdout_path.name}")

    def _verifier_script(self, command: str) -> str | None:
        """The verifier command without its redirection into the sandbox's file (the harness captures the output)."""
        out = str(EnvironmentPaths.verifier_dir / self.trial_paths.test_stdout_path.name)
        for suffix in (f"> {out} 2>&1", f"> {shlex.quote(out)} 2>&1"):
            if command.rstrip().endswith(suffix):
                return command.rstrip()[: -len(suffix)].rstrip()
        return None

    def _resets_verifier_paths(self, command: str) -> bool:
        """Harbor's shared multi-step mode empties /logs/verifier and /tests before each round and before its
        verifier (Trial._reset_shared_step_verifier_dirs): those exact commands, as Harbor builds them."""
        paths = EnvironmentPaths.for_os(self.os)
        return command in (self._empty_dirs_command([paths.verifier_dir], chmod=True),
                           self._empty_dirs_command([paths.tests_dir], chmod=False))

    @staticmethod
    def _removes_rewards(command: str) -> bool:
        """Harbor's first step of a verifier run: ``rm -f -- /logs/verifier/reward.txt /logs/verifier/reward.json``."""
        return command.startswith("rm -f -- ") and f"{VERIFIER_DIR}/reward." in command

    async def _verifier_starting(self) -> None:
        """The first step of a verifier run (once per run): what the agent did to the verifier's paths is recorded,
        then /logs/verifier is made fresh and /tests emptied for the upload."""
        if self._verifying:
            return
        self._verifying, self._verified = True, None
        await asyncio.to_thread(self._watch.check_paths)
        res = await self._running().exec(_FRESH, cwd="/", user="root")
        if res.return_code != 0:
            raise SandboxError(f"local sandbox: could not make {VERIFIER_DIR} fresh: {res.stderr.strip()}")

    async def _run_verifier(self, sandbox: Sandbox, command: str, cwd, env, timeout_sec, user) -> ExecResult:
        """Run the tests with their output captured by the harness, read the reward from the host, and raise the
        infrastructure failure behind the run (harbor_tasks.verdict.judge_verifier_run, the verdict RL episodes reach
        from the same evidence); Harbor scores the rest, from the files download_dir hands it (the harness's)."""
        await self._verifier_starting()
        watch = self._watch
        await asyncio.to_thread(watch.before_verifier)
        mark = sandbox.network_mark()
        try:
            res = await sandbox.exec(f"{self._verifier_script(command)} 2>&1", cwd=cwd, env=self._merge_env(env),
                                     timeout_sec=timeout_sec, user=self._resolve_user(user), until_exit=True)
        except BaseException as err:
            await asyncio.to_thread(watch.abandon)
            self._verifying = False
            if isinstance(err, Exception):  # Harbor downloads /logs/verifier only after a run that did not raise
                await self._keep_verifier_files(sandbox, err)
            raise
        reward_json, reward_txt = await asyncio.to_thread(watch.after_verifier)
        self._verifying = False
        output = res.stdout
        self._verified = {"reward.json": reward_json, "reward.txt": reward_txt, TEST_STDOUT: output,
                          TAMPER_FILE: json.dumps(watch.tamper, indent=1) + "\n"}
        if watch.tamper:
            self.logger.warning(f"local sandbox: the agent tampered with the verifier's run: {watch.tamper}")
        verifier_names = sandbox.names_asked(mark, commands_only=True)
        agent_names = sandbox.names_asked(self._agent_mark, until=mark)  # between the start (or last round) and now
        self._agent_mark = sandbox.network_mark()  # a multi-step task's next round starts counting here
        # the agent's names count only where the task says it needs internet (TB2 tasks do: allow_internet = true);
        # Harbor's default policy is public too, and a failing agent must not get out of its 0 by trying the network
        declared = "network_mode" in self.task_env_config.model_fields_set and not self._network_disabled
        verdict = judge_verifier_run(reward_json, reward_txt, output, verifier_names=verifier_names,
                                     agent_names=agent_names, internet_allowed=declared, userland=sandbox.userland,
                                     tamper=watch.tamper, absent_tools=watch.absent_tools)
        if verdict.error is not None:
            self.logger.warning(f"local sandbox: {type(verdict.error).__name__}: {verdict.detail}")
            self._keep_verified(verdict.error)
            raise verdict.error
        return ExecResult(stdout=None, stderr=None, return_code=res.return_code)

    def _keep_verified(self, err: Exception) -> None:
        """The harness's verifier files (reward files, the whole output, tamper.json) into the trial beside an
        infrastructure failure (Harbor downloads nothing after a run that raised), and ``err``'s message says so."""
        target = self.trial_paths.verifier_dir
        target.mkdir(parents=True, exist_ok=True)
        self._write_verified(target)
        _say_kept(err, f"{target.name}/{self.trial_paths.test_stdout_path.name}")

    def _write_verified(self, target: Path) -> None:
        """The verifier's files as the harness read them, over what the sandbox's folder held by the time Harbor
        downloaded it; a reward file the run did not leave is removed."""
        for name, text in self._verified.items():
            path = target / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            path.unlink(missing_ok=True)
            if text is not None:
                path.write_text(text)

    # ------------------------------------------------------------------ mapping
    @property
    def _build_args(self) -> dict[str, str]:
        """The task's `[environment] build_args` (Harbor's model of the section drops keys it does not know)."""
        return TaskFolder.of(self.environment_dir.parent).build_args

    def _running(self) -> Sandbox:
        if self._sandbox is None:
            raise SandboxError("local sandbox not started")
        return self._sandbox

    def _image_root(self) -> tuple[ImageRoot | None, bool]:
        """(the unpacked image, whether it is the task's own docker_image) with --ek images/pull; else (None, False).
        Blocking (it may unpack or pull): run in a thread."""
        cfg = self.task_env_config
        base = dockerfile.base_image(self.environment_dir / "Dockerfile", self._build_args)
        if not (self._images_file or self._pull):
            if cfg.docker_image or base:
                self.logger.info(f"local sandbox: image {cfg.docker_image or base} noted, not obeyed: the host's "
                                 "userland runs the task (give images with --ek images=FILE)")
            return None, False
        try:
            store = ImageStore(load_images_file(self._images_file) if self._images_file else {},
                               cache_dir=self._image_cache, pull=self._pull)
        except ValueError as err:
            raise EnvironmentBuildError(f"--ek images: {err}") from None
        for ref, own in ((cfg.docker_image, True), (base, False)):
            if ref and store.has(ref):
                return store.root(ref), own
        ref = cfg.docker_image or base
        if ref and store.pull:
            return store.root(ref), ref == cfg.docker_image
        raise EnvironmentBuildError(
            f"no image root file system for this task: {self._images_file or 'the images file'} names neither "
            f"{cfg.docker_image or '(no docker_image)'} nor the Dockerfile's FROM {base or '(none)'}; add one, "
            "or --ek pull=true (skopeo, needs the network)")

    def _sandbox_config(self, image: tuple[ImageRoot | None, bool] = (None, False)) -> SandboxConfig:
        root, own_image = image
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
            # the task's own image holds its build already; otherwise the Dockerfile is replayed (docker_image or not)
            dockerfile="ignore" if own_image else self._dockerfile_mode,
            build_timeout_sec=int(cfg.build_timeout_sec or 600),
            build_args=self._build_args,
            hide=[str(p) for p in hide],
            expose=self._expose,
            network=self._network if not self._network_disabled else "none",
            **(root.sandbox_fields() if root else {}),
            **self._build_cache,
            name=self.session_id.replace("/", "_"),
        )
        if self._network != "none" and self._network_disabled:
            self.logger.debug(f"local sandbox: --ek network={self._network} ignored: the task does not allow internet")
        return config


def _say_kept(err: Exception, where: str) -> None:
    """``err``'s message (which carries only the output's end) names the trial's file with the whole output."""
    if len(err.args) == 1 and isinstance(err.args[0], str):
        err.args = (f"{err.args[0]}\n(the verifier's files are kept in the trial: {where} holds its whole output)",)
