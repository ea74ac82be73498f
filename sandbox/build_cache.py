"""The build cache: a task's Dockerfile replayed once into a layer on disk, mounted read-only by every later start.
Runs in: any Python >= 3.11, standard library only, in the owning process (``Sandbox.start``).

``acquire`` keys a start by everything that can change the build's result (``key_inputs``), waits for or runs the one
build of that key under a file lock, and hands back the layer, held shared until ``Layer.release``; ``evict`` keeps
the cache folder under its size bound, least recently used first. How and why: docs/sandbox.md#the-build-cache.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fcntl
import hashlib
import json
import logging
import os
import shutil
import stat
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from sandbox import dockerfile
from sandbox.config import SandboxConfig
from sandbox.errors import EnvironmentBuildError, NetworkNeededError, SandboxError, SandboxExecTimeoutError
from sandbox.images import default_cache_dir
from sandbox.inside import Root
from sandbox.pid1 import ALLOWED_TOP, VAR_ALLOWED

HERE = Path(__file__).parent
# the code whose change can change a build's result: the replay, the transfers it copies with, the root it builds in
CODE_FILES = ("dockerfile.py", "users.py", "transfer.py", "pid1.py", "build_cache.py")
# the base root's identity: (mtime, size, inode) of these paths under it (the host's / or the image's rootfs)
BASE_MARKERS = ("etc", "etc/passwd", "etc/group", "etc/shadow", "etc/os-release", "var/lib/dpkg/status", "usr/bin",
                "usr/sbin", "usr/lib", "usr/share", "usr/local/bin", "usr/local/lib")
# pid1.py's upper layers of the host's folders (``stage/u/<key>``) and where each sits in the root
UPPERS = {**{n: n for n in ALLOWED_TOP}, **{"var-" + r.replace("/", "-"): f"var/{r}" for r in VAR_ALLOWED}}
ERRORS = {e.__name__: e for e in (EnvironmentBuildError, NetworkNeededError, SandboxError, SandboxExecTimeoutError)}
POLL_SEC = 0.05
BUILD_MARGIN_SEC = 300  # a build's start, COPY steps and stop, beyond its RUN steps' own bounds
_said: set[str] = set()  # what was logged once per process (a fallback's reason, a task's failed build)


def default_dir() -> Path:
    """$XDG_CACHE_HOME (else ~/.cache)/terminal-recipes/build-cache."""
    return default_cache_dir().with_name("build-cache")


class Starting(Protocol):
    """The sandbox whose start asks for a layer, and (of its type) the build sandbox that makes one: sandbox/core.py's
    ``Sandbox``, which runs above this module (what builds a layer sits below what runs in it). A build sandbox keeps
    its writable layer in ``_pid1_layers["stage_dir"]``; ``_prepare`` replays the Dockerfile into it."""

    config: SandboxConfig
    logger: logging.Logger
    _pid1_layers: dict[str, str]
    _dockerfile_env: dict[str, str]

    def __init__(self, config: SandboxConfig, logger: logging.Logger) -> None: ...
    async def _launch(self) -> None: ...
    async def _prepare(self) -> None: ...
    async def stop(self) -> None: ...
    def root(self) -> Root: ...


@dataclass
class Layer:
    """A cached layer held shared (no eviction) until ``release``: ``path`` (the root-relative tree). Its ``ENV``,
    ``USER`` and ``WORKDIR`` are the Dockerfile's plan, made again at every start (sandbox/dockerfile.py)."""

    path: Path
    lock_fd: int | None

    def release(self) -> None:
        if self.lock_fd is not None:
            os.close(self.lock_fd)
            self.lock_fd = None


def _say_once(logger: logging.Logger, what: str, text: str) -> None:
    if what not in _said:
        _said.add(what)
        logger.warning(text)


def _mode(config) -> str:
    return "root" if config.mode == "root" or (config.mode == "auto" and os.geteuid() == 0) else "userns"


def _sha256_file(path: Path, h) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        while piece := f.read(1 << 20):
            h.update(piece)


def context_digest(context: Path) -> str:
    """sha256 of every entry of the build context: its relative path, mode, and bytes (a file) or target (a link);
    nothing ignored, nothing followed, no FIFO or device opened."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(context):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            h.update(f"{os.path.relpath(path, context)}\0{st.st_mode:o}\0".encode())
            if stat.S_ISLNK(st.st_mode):
                h.update(os.readlink(path).encode())
            elif stat.S_ISREG(st.st_mode):
                _sha256_file(Path(path), h)
            h.update(b"\0\0")
    return h.hexdigest()


def key_inputs(config) -> dict:
    """What can change a build's result: the Dockerfile's bytes, the context's digest, the base root (its path and the
    signature of ``BASE_MARKERS`` under it), the network, the mode, the commands' environment, the build args, the
    image's config, the exposed host paths and the replay code's version. OSError where the context cannot be read."""
    context = config.environment_dir
    df = hashlib.sha256()
    _sha256_file(context / "Dockerfile", df)
    base = Path(config.rootfs) if config.rootfs else Path("/")
    marks = []
    for rel in BASE_MARKERS:
        try:
            st = os.lstat(base / rel)
            marks.append([rel, st.st_mtime_ns, st.st_size, st.st_ino])
        except OSError:
            marks.append([rel, None])
    code = hashlib.sha256()
    for name in CODE_FILES:
        code.update((HERE / name).read_bytes())
    return {"dockerfile": df.hexdigest(), "context": context_digest(context),
            "base": str(config.rootfs) if config.rootfs else "host userland",
            "base_signature": hashlib.sha256(json.dumps(marks).encode()).hexdigest(),
            "network": config.network, "mode": _mode(config), "env": dict(sorted(config.env.items())),
            "build_args": dict(sorted(config.build_args.items())), "image_env": dict(sorted(config.image_env.items())),
            "image_user": config.image_user, "image_workdir": config.image_workdir,
            "expose": sorted(config.expose), "code": code.hexdigest()}


def cache_dir(config) -> Path:
    """The cache folder (made 0700: a layer holds what a build made as root, set-uid files included); ``OSError`` where
    it cannot be made or is another user's."""
    path = Path(config.build_cache_dir or default_dir())
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = path.stat()
    if st.st_uid != os.geteuid():
        raise PermissionError(f"{path} belongs to uid {st.st_uid}, not to this user")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def locate(config) -> tuple[Path, str, dict] | None:
    """(the cache folder, the key, its inputs) of a config's build; None when it has none to cache (no Dockerfile,
    ``dockerfile=ignore``, ``build_cache=false``). OSError where the folder or the context cannot be had."""
    if not (config.build_cache and config.dockerfile == "emulate" and config.environment_dir
            and (config.environment_dir / "Dockerfile").is_file()):
        return None
    folder, inputs = cache_dir(config), key_inputs(config)
    return folder, hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:32], inputs


async def _flock(fd: int, op: int, deadline: float, what: str) -> None:
    """``flock`` polled without blocking, so a cancelled start leaves no thread waiting to take the lock; past
    ``deadline`` (of ``time.monotonic``) a ``SandboxError`` names ``what`` was waited for."""
    started = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise SandboxError(f"local sandbox: the start gave up after waiting {time.monotonic() - started:.0f} s "
                                   f"for {what}") from None
            await asyncio.sleep(POLL_SEC)


def _task(config) -> str:
    return config.environment_dir.parent.name if config.environment_dir else "?"


def wait_sec(config) -> float:
    """How long a start waits for the build of its key by another start (or for the key's lock): that build's own
    bounds (``build_timeout_sec`` per ``RUN`` and per ``ADD`` of an archive, the build sandbox's start and stop) and a
    margin."""
    try:
        runs = sum(step.op in ("RUN", "ADD") for step in dockerfile.plan(
            config.environment_dir / "Dockerfile", config.build_args, config.image_env, config.image_workdir,
            config.image_user).steps)
    except Exception:  # a Dockerfile the replay refuses: its build fails at once
        runs = 1
    return config.build_timeout_sec * max(runs, 1) + BUILD_MARGIN_SEC


async def acquire(sandbox: Starting) -> Layer | None:
    """The layer of ``sandbox``'s build, built now if none is cached; None when the cache is off or not usable here
    (the Dockerfile is then replayed as before; the reason is logged once). A failed build raises its error; a build
    of another start waited for past ``wait_sec`` raises ``SandboxError``.

    Two locks per key: ``<key>.lock``, held shared from here until ``Layer.release`` (the sandbox's stop), which only
    eviction takes exclusive; and ``<key>.build``, held exclusive by the one start that builds the key while the
    others wait for it. (A start that waited to take ``<key>.lock`` exclusive waited forever once the builder's
    sandbox, or any other mounting the layer, ran on.)"""
    cfg, logger = sandbox.config, sandbox.logger
    try:
        found = locate(cfg)
    except OSError as exc:
        _say_once(logger, f"off {exc}", f"local sandbox: build cache not used ({exc}); the Dockerfile is replayed "
                  "at every start (set build_cache_dir to a folder of this user's, or build_cache=false)")
        return None
    if found is None:
        return None
    folder, key, inputs = found
    entry, since = folder / key, time.time()
    deadline = time.monotonic() + wait_sec(cfg)
    fd = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        # shared: no eviction of the layer from now on (an eviction holds it exclusive only while it renames)
        await _flock(fd, fcntl.LOCK_SH, deadline,
                     f"the build cache's lock {folder / key}.lock (held exclusive by an eviction)")
        if not (entry / "meta.json").is_file():
            if not await _build_once(sandbox, folder, key, inputs, since, deadline):
                os.close(fd)
                return None
        os.utime(entry / "used")
        return Layer(entry / "layer", fd)
    except BaseException:
        os.close(fd)
        raise


async def _build_once(sandbox: Starting, folder: Path, key: str, inputs: dict, since: float, deadline: float) -> bool:
    """Build ``key`` unless another start has (waited for under ``<key>.build``, exclusive); whether its layer is
    there now (False: the Dockerfile is to be replayed)."""
    cfg, logger = sandbox.config, sandbox.logger
    fd = os.open(folder / f"{key}.build", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        await _flock(fd, fcntl.LOCK_EX, deadline, f"the build of task {_task(cfg)} by another start (its lock "
                     f"{folder / key}.build held exclusive)")
        if (folder / key / "meta.json").is_file():
            return True
        _raise_recent_failure(folder, key, since)
        if (folder / f"{key}.scratch").is_file():  # a build that leaves files where no layer keeps them
            _say_once(logger, f"scratch {key}", (folder / f"{key}.scratch").read_text())
            return False
        if not await _build(sandbox, folder, key, inputs):
            return False
        evict(folder, cfg.build_cache_mb, keep=key)
        return True
    finally:
        os.close(fd)


def _raise_recent_failure(folder: Path, key: str, since: float) -> None:
    """The error of a build of ``key`` that failed while this start waited for it (one build for all who wait)."""
    try:
        failed = json.loads((folder / f"{key}.failed").read_text())
    except (OSError, ValueError):
        return
    if failed.get("time", 0) >= since:
        cls = ERRORS.get(failed.get("type"), EnvironmentBuildError)
        if cls is NetworkNeededError:
            raise NetworkNeededError(failed["message"], phase=failed.get("phase", ""), names=failed.get("names", ()))
        raise cls(failed["message"])


async def _build(sandbox: Starting, folder: Path, key: str, inputs: dict) -> bool:
    """Replay the Dockerfile in a sandbox whose writable layer is a folder on disk, then make that the layer of
    ``key`` (renamed into place once complete). False where such a sandbox cannot start here."""
    cfg, logger = sandbox.config, sandbox.logger
    for stale in folder.glob(f".build-{key}-*"):  # a build that was killed (this start holds <key>.build)
        _rmtree(stale)
    tmp = folder / f".build-{key}-{uuid.uuid4().hex[:8]}"
    (tmp / "stage").mkdir(parents=True)
    builder = type(sandbox)(dataclasses.replace(cfg, name=f"{cfg.name}-build", build_cache=False), logger)
    builder._pid1_layers = {"stage_dir": str(tmp / "stage")}
    started = time.monotonic()
    try:
        try:
            await builder._launch()
        except (SandboxError, OSError) as exc:
            _say_once(logger, f"launch {exc}", f"local sandbox: build cache not used: a build sandbox with its "
                      f"writable layer in {folder} cannot start ({exc}); the Dockerfile is replayed at every start")
            return False
        try:
            await builder._prepare()
        except Exception as exc:
            _record_failure(folder, key, exc)
            _say_once(logger, f"failed {key}", f"local sandbox: the build of task {_task(cfg)} failed, not cached "
                      f"({type(exc).__name__}): {(str(exc).splitlines() or [''])[0]}")
            raise
        left = await _scratch_left(builder)
        if left:  # Docker keeps them in the image; a start's scratch folders are fresh: replayed, not cached
            reason = (f"local sandbox: the build of task {_task(cfg)} leaves {', '.join(left)}, which a cached layer "
                      "does not keep (every start's /tmp, /var/tmp and /run are fresh); its Dockerfile is replayed at "
                      "every start")
            (folder / f"{key}.scratch").write_text(reason)
            _say_once(logger, f"scratch {key}", reason)
            return False
        await builder.stop()  # every process gone, every mount of its namespace with them: the folder is the layer
        layer, skipped = _assemble(tmp / "stage", bool(cfg.rootfs))
        if skipped:
            logger.warning(f"local sandbox: the build of task {_task(cfg)} put a link where /{', /'.join(skipped)} "
                           "was mounted; what it wrote there is not in its cached layer")
        os.rename(layer, tmp / "layer")
        _rmtree(tmp / "stage")
        meta = {"task": _task(cfg), "inputs": inputs, "env": builder._dockerfile_env, "size_bytes": size(tmp / "layer"),
                "build_seconds": round(time.monotonic() - started, 3), "built_at": time.time()}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        (tmp / "used").touch()
        os.rename(tmp, folder / key)  # complete, or not there at all
        (folder / f"{key}.failed").unlink(missing_ok=True)
        return True
    finally:
        await builder.stop()
        if tmp.exists():
            _rmtree(tmp)


async def _scratch_left(builder: Starting) -> list[str]:
    """What a build left in the scratch folders (tmpfs mounts of their own, outside the layer), a few names; read
    by the host beneath the sandbox's root (nothing run: an image may have no ``find``)."""
    with builder.root() as root:
        return sorted(f"/{d}/{name}" for d in ("tmp", "var/tmp", "run") for name in root.listdir(d) or [])[:5]


def _record_failure(folder: Path, key: str, exc: Exception) -> None:
    record = {"type": type(exc).__name__, "message": str(exc), "time": time.time(),
              "phase": getattr(exc, "phase", ""), "names": list(getattr(exc, "names", ()))}
    (folder / f"{key}.failed").write_text(json.dumps(record))


def _assemble(stage: Path, image: bool) -> tuple[Path, list[str]]:
    """The build's writes as one tree shaped like the sandbox's root: an image's one upper layer, or the root's own
    folder with each host folder's upper layer moved to where it was mounted (whiteouts and opaque folders kept); and
    the folders left out because the build put a link on their way (no link the build made is ever followed)."""
    if image:
        return stage / "u" / "image", []
    root, skipped = stage / "root", []
    uppers = os.open(stage / "u", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for key in sorted(os.listdir(stage / "u")):
            if key not in UPPERS:
                continue
            *parents, name = UPPERS[key].split("/")
            fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                for part in parents:
                    nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
                    os.close(fd)
                    fd = nxt
                os.rmdir(name, dir_fd=fd)  # the empty folder the overlay was mounted on
                os.rename(key, name, src_dir_fd=uppers, dst_dir_fd=fd)
            except OSError:  # a link (or a file) where a folder was: this folder's writes are not kept
                skipped.append(UPPERS[key])
            finally:
                os.close(fd)
    finally:
        os.close(uppers)
    return root, skipped


def size(path: Path) -> int:
    """Bytes on disk under ``path`` (hard links counted once)."""
    seen, total = set(), 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            st = os.lstat(os.path.join(dirpath, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _rmtree(path: Path) -> None:
    """Remove ``path``, overlay work folders (mode 000) included; no link is followed."""
    if not os.path.lexists(path):
        return
    if path.is_symlink() or not path.is_dir():
        os.unlink(path)
        return
    if os.geteuid() != 0:
        os.chmod(path, 0o700)
        for dirpath, dirnames, _ in os.walk(path):  # top-down: each folder made enterable before it is entered
            for name in dirnames:
                if not os.path.islink(os.path.join(dirpath, name)):
                    os.chmod(os.path.join(dirpath, name), 0o700)
    shutil.rmtree(path)


def entries(folder: Path) -> list[dict]:
    """The cached layers: ``{"key", "task", "size_bytes", "used"}``, least recently used first."""
    out = []
    for entry in folder.iterdir() if folder.is_dir() else ():
        try:
            meta = json.loads((entry / "meta.json").read_text())
            out.append({"key": entry.name, "task": meta["task"], "size_bytes": meta["size_bytes"],
                        "used": (entry / "used").stat().st_mtime})
        except (OSError, ValueError, KeyError):
            continue
    return sorted(out, key=lambda e: e["used"])


def evict(folder: Path, bound_mb: int, keep: str = "") -> list[str]:
    """Remove the least recently used layers until the rest fit in ``bound_mb``; a layer in use (its lock held shared
    by a running sandbox) and ``keep`` stay. The keys removed."""
    layers = entries(folder)
    total, gone = sum(e["size_bytes"] for e in layers), []
    for e in layers:
        if total <= bound_mb << 20:
            break
        if e["key"] == keep:
            continue
        fd = os.open(folder / f"{e['key']}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            trash = folder / f".evicted-{e['key']}-{uuid.uuid4().hex[:8]}"
            os.rename(folder / e["key"], trash)
        finally:
            os.close(fd)
        _rmtree(trash)
        total -= e["size_bytes"]
        gone.append(e["key"])
    return gone
