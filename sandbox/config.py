"""What one sandbox is made of: ``SandboxConfig``.
Runs in: any Python >= 3.11, standard library only.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("auto", "root", "userns")
LIMITS = ("strict", "best-effort")
DOCKERFILE_MODES = ("emulate", "ignore")
NETWORKS = ("none", "pasta", "slirp4netns")
ENTRIES = ("auto", "compiled", "python")


def _new_name() -> str:
    return f"sandbox-{uuid.uuid4().hex[:12]}"


@dataclass
class SandboxConfig:
    """Settings of one sandbox; the defaults are those of ``--env local`` for a task that sets none.

    ``mode``: ``root`` (cgroup limits; needs root), ``userns`` (an ordinary user in a user namespace,
    rlimits) or ``auto`` (root when running as root). ``limits``: ``strict`` refuses to start without
    the process/memory limits, ``best-effort`` runs without them. ``max_processes`` (pids.max or
    RLIMIT_NPROC), ``cpu_time_sec`` (RLIMIT_CPU per process), ``wall_sec`` (the sandbox's lifetime),
    ``memory_mb`` (cgroup memory or RLIMIT_DATA; also caps /dev/shm at 1 GiB), ``storage_mb`` (what every
    write together may hold: a tmpfs, or as root where it exceeds the memory budget (``tmpfs_budget_mb``) an ext4
    of that size on disk, in ``disk_dir``, default the temporary folder), ``cpus`` (CPU quota, root mode only;
    None = no quota).
    ``workdir``: the default cwd (created at start); None = the Dockerfile's ``WORKDIR``, else the image's, else
    ``/app``. ``environment_dir``: the build context holding a ``Dockerfile`` that is replayed at start when
    ``dockerfile`` is ``emulate`` (``RUN`` lines and ``ADD``'s archives get ``build_timeout_sec`` each; its ``ARG``
    values ``build_args``, as ``docker build --build-arg``). ``image_env``, ``image_workdir``, ``image_user``: what
    the base image's config sets (its ``Env``, ``WorkingDir``, ``User``), under the Dockerfile's ``ENV``,
    ``WORKDIR`` and ``USER``; the final ``USER`` is whom ``exec`` runs as by default. ``hide``: host paths covered
    by an empty read-only folder inside (``/``, ``/usr``, ``/etc``, ... are never hidden).
    Of the host the sandbox sees only ``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/etc`` (password
    hashes and private keys removed) and the package databases of ``/var``; ``expose``: more host
    paths (absolute), visible read-only at the same path (e.g. ``/opt``). ``max_output_bytes``: of each
    command's stdout and stderr only this much is kept (the rest is dropped, a note appended);
    ``max_download_bytes``: a downloaded file over it fails, files over it in a downloaded folder are
    skipped (a warning), a folder stream over it in all fails (sparse files count their full size).
    ``env``: variables of every command, over PATH/HOME/LANG, the image's and the Dockerfile's ``ENV``; nothing of
    this process's own environment is passed in. ``name``: names the cgroup and the PID 1 process.
    ``network``: ``none`` (loopback only; a resolver on 127.0.0.1 answers no name and records the names asked,
    ``Sandbox.names_asked``), or user-mode networking by ``pasta`` or ``slirp4netns`` (the host programs, Debian
    packages passt and slirp4netns): a default route out through them, never to the host's loopback.
    ``rootfs``: an unpacked root file system (a folder, see ``sandbox.images``) that the sandbox runs instead of
    the host's system folders: it is the read-only lower layer of one overlay that becomes ``/`` (``hide`` and the
    ``/etc`` sanitizing then have nothing to do; ``expose`` still binds host paths read-only).
    ``entry``: how each command enters, with the same steps either way: ``auto`` (the compiled helper,
    sandbox/enter.c, where it is built, else sandbox/enter.py), ``compiled`` (the helper or a SandboxError) or
    ``python`` (sandbox/enter.py).
    ``build_cache``: the Dockerfile is replayed once per key into a layer in ``build_cache_dir`` (default
    ``$XDG_CACHE_HOME/terminal-recipes/build-cache``), which later starts mount read-only; the folder is kept under
    ``build_cache_mb``, least recently used layers evicted first (``sandbox/build_cache.py``).
    """

    mode: str = "auto"
    limits: str = "strict"
    max_processes: int = 512
    cpu_time_sec: int = 3600
    wall_sec: float = 21600
    memory_mb: int = 4096
    storage_mb: int = 10240
    cpus: float | None = None
    workdir: str | None = None
    environment_dir: Path | None = None
    dockerfile: str = "emulate"
    build_timeout_sec: float = 600
    build_args: dict[str, str] = field(default_factory=dict)
    image_env: dict[str, str] = field(default_factory=dict)
    image_workdir: str | None = None
    image_user: str | None = None
    hide: list[str] = field(default_factory=list)
    expose: list[str] = field(default_factory=list)
    max_output_bytes: int = 16 * 1024 * 1024
    max_download_bytes: int = 256 * 1024 * 1024
    env: dict[str, str] = field(default_factory=dict)
    hostname: str = "sandbox"
    network: str = "none"
    rootfs: Path | None = None
    disk_dir: Path | None = None
    entry: str = "auto"
    build_cache: bool = True
    build_cache_dir: Path | None = None
    build_cache_mb: int = 20480
    name: str = field(default_factory=_new_name)

    def tmpfs_budget_mb(self) -> int:
        """What the tmpfs mounts may hold together: ``min(storage_mb, 7/8 of memory_mb)`` (see tmpfs_sizes_mb)."""
        return max(min(self.storage_mb, self.memory_mb * 7 // 8), 8)

    def tmpfs_sizes_mb(self, userns: bool) -> dict[str, int]:
        """Sizes (MiB) of the sandbox's writable tmpfs mounts. The rule: tmpfs is memory, so together they
        never exceed one budget, ``min(storage_mb, 7/8 of memory_mb)`` (in user-namespace mode nothing
        else would count tmpfs pages against the task; in root mode the cgroup does, and the 1/8 left
        keeps a full tmpfs from leaving no memory to run a command); of it ``/tmp`` gets 1/4,
        ``/var/tmp`` 1/8, ``/dev/shm`` 1/8 (at most 1 GiB), ``/run`` 1/32 (at most 64 MiB), and the rest
        holds the root (the overlays' writes and the empty folders such as ``/root``). With a disk-backed root
        (root mode, ``storage_mb`` over the budget) the root, ``/tmp`` and ``/var/tmp`` share that disk instead
        and only ``/dev/shm`` and ``/run`` are tmpfs, of these sizes."""
        total = self.tmpfs_budget_mb()
        sizes = {"tmp": total // 4, "var_tmp": total // 8, "shm": min(total // 8, 1024),
                 "run": max(1, min(total // 32, 64))}
        sizes = {k: max(v, 1) for k, v in sizes.items()}
        sizes["root"] = total - sum(sizes.values())
        return sizes

    def __post_init__(self) -> None:
        for key, allowed in (("mode", MODES), ("limits", LIMITS), ("dockerfile", DOCKERFILE_MODES),
                             ("network", NETWORKS), ("entry", ENTRIES)):
            if getattr(self, key) not in allowed:
                raise ValueError(f"sandbox {key} {getattr(self, key)!r} is not one of {', '.join(allowed)}")
        for key in ("max_processes", "cpu_time_sec", "wall_sec", "memory_mb", "storage_mb", "build_timeout_sec",
                    "max_output_bytes", "build_cache_mb", "max_download_bytes"):
            if not getattr(self, key) > 0:
                raise ValueError(f"sandbox {key} must be positive, not {getattr(self, key)!r}")
        if self.cpus is not None and not self.cpus > 0:
            raise ValueError(f"sandbox cpus must be positive or None, not {self.cpus!r}")
        if "/" in self.name or self.name in ("", ".", ".."):
            raise ValueError(f"sandbox name {self.name!r} must be a single path component")
        if self.environment_dir is not None:
            self.environment_dir = Path(self.environment_dir)
        if self.disk_dir is not None:
            self.disk_dir = Path(self.disk_dir)
        if self.build_cache_dir is not None:
            self.build_cache_dir = Path(self.build_cache_dir)
        if self.rootfs is not None:
            self.rootfs = Path(self.rootfs)
            if not self.rootfs.is_absolute() or any(c in str(self.rootfs) for c in ",:\n"):
                raise ValueError(f"sandbox rootfs {str(self.rootfs)!r} must be an absolute path without ',' or ':'")
        self.hide = [str(p) for p in self.hide]
        self.expose = [str(p) for p in self.expose]
        for p in self.expose:
            if not p.startswith("/") or p.rstrip("/") == "":
                raise ValueError(f"sandbox expose path {p!r} must be an absolute path other than /")
