"""Image root file systems for the sandbox: an image reference -> an unpacked folder (``SandboxConfig.rootfs``).
Runs in: any Python >= 3.11, standard library only (plus tar, umoci and skopeo on the host, as a source needs them).

``ImageStore`` (from an images file, or ``pull``) unpacks each source once into the cache folder, shared by
concurrent trials; ``build_debian_image`` makes an offline Debian stand-in with mmdebstrap.
Sources and cache: docs/sandbox.md#inside-the-modules.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import tarfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sandbox import dockerfile as df
from sandbox.errors import EnvironmentBuildError

ROOTFS_MARKERS = ("bin", "usr", "etc")
PULL_TIMEOUT_SEC = 900
NO_DEVICES = "no-device-nodes"  # beside an unpacked rootfs: its device nodes are gone


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "terminal-recipes" / "images"


def normalize_ref(ref: str) -> str:
    """``ubuntu:24.04``, ``docker.io/library/ubuntu:24.04`` -> ``ubuntu:24.04``; an untagged ref gets ``:latest``."""
    ref = ref.strip()
    for prefix in ("docker://", "docker.io/", "index.docker.io/", "registry-1.docker.io/"):
        if ref.startswith(prefix):
            ref = ref[len(prefix):]
    if ref.startswith("library/"):
        ref = ref[len("library/"):]
    name, _, digest = ref.partition("@")
    last = name.rsplit("/", 1)[-1]
    if ":" not in last and not digest:
        name += ":latest"
    return name + (f"@{digest}" if digest else "")


@dataclass
class ImageRoot:
    """An unpacked image: its root file system, and the ``Env`` (``KEY=value``), ``WorkingDir`` and ``User`` (as
    ``uid:gid``, None for root) of its config."""

    rootfs: Path
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    source: str = ""
    user: str | None = None

    def sandbox_fields(self) -> dict:
        """What a ``SandboxConfig`` takes from this image: its root, and its config's Env, WorkingDir and User."""
        return {"rootfs": self.rootfs, "image_env": dict(self.env), "image_workdir": self.workdir,
                "image_user": self.user}


def load_images_file(path: str | Path) -> dict[str, str]:
    """The images file: ``{reference: source}``; a relative source is relative to the file's folder."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"images file {path}: cannot be read ({err.strerror})") from None
    except ValueError as err:
        raise ValueError(f"images file {path}: not JSON ({err})") from None
    if not isinstance(data, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        raise ValueError(f'images file {path}: expected {{"image:tag": "path/to/source", ...}} (strings)')
    return {normalize_ref(k): str((path.parent / v) if not Path(v).is_absolute() else Path(v)) for k, v in data.items()}


def _run(argv: list[str], what: str, timeout: float = PULL_TIMEOUT_SEC) -> None:
    tool = argv[0]
    if not shutil.which(tool):
        package = {"umoci": "umoci", "skopeo": "skopeo", "tar": "tar"}.get(tool, tool)
        raise EnvironmentBuildError(f"{what}: {tool} is not installed on this host (apt-get install {package})")
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise EnvironmentBuildError(f"{what}: {tool} ran past {timeout:.0f} s") from None
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip()[-1500:]
        raise EnvironmentBuildError(f"{what}: {' '.join(argv[:2])} failed (exit {proc.returncode}): {tail}")


def drop_device_nodes(root: Path) -> list[str]:
    """Remove every character and block device node under an unpacked image's ``root`` (a task's image may carry
    kmsg or kvm; the sandbox's /dev holds Docker's default devices, and its root is mounted nodev as well)."""
    dropped = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if stat.S_ISCHR(mode := os.lstat(path).st_mode) or stat.S_ISBLK(mode):
                os.unlink(path)
                dropped.append(os.path.relpath(path, root))
    return dropped


def _source_kind(source: Path) -> str:
    """rootfs-dir, oci-layout, oci-archive, docker-archive or rootfs-tar."""
    if source.is_dir():
        if (source / "oci-layout").is_file():
            return "oci-layout"
        if any((source / m).exists() for m in ROOTFS_MARKERS):
            return "rootfs-dir"
        raise EnvironmentBuildError(f"image source {source}: a folder that is neither an OCI image layout "
                                    "(no oci-layout file) nor a root file system (no bin/, usr/ or etc/)")
    if not source.is_file():
        raise EnvironmentBuildError(f"image source {source}: no such file or folder")
    try:
        with tarfile.open(source) as tar:
            names = []
            for i, member in enumerate(tar):
                name = member.name.lstrip("./")
                names.append(name)
                if name.split("/")[0] in ROOTFS_MARKERS and i < 200:
                    return "rootfs-tar"
                if name in ("oci-layout", "manifest.json") and i > 200:
                    break
            if "oci-layout" in names:
                return "oci-archive"
            if "manifest.json" in names:
                return "docker-archive"
            return "rootfs-tar"
    except (tarfile.TarError, OSError) as err:
        raise EnvironmentBuildError(f"image source {source}: not a tarball, an OCI layout or a folder ({err})") from None


def _oci_tag(layout: Path) -> str | None:
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError):
        return None
    for manifest in index.get("manifests") or []:
        name = (manifest.get("annotations") or {}).get("org.opencontainers.image.ref.name")
        if name:
            return name
    return None


def _read_config(bundle: Path) -> tuple[dict[str, str], str | None, str | None]:
    """Env, cwd and user (``uid:gid``, None for root) of umoci's runtime config.json (made from the image's config,
    its ``User`` resolved against the image's /etc/passwd)."""
    try:
        process = json.loads((bundle / "config.json").read_text()).get("process") or {}
    except (OSError, ValueError):
        return {}, None, None
    env = dict(item.split("=", 1) for item in process.get("env") or [] if "=" in item)
    for key in ("HOME", "TERM"):  # umoci adds them; the sandbox sets HOME per user, and TERM is the agent's
        env.pop(key, None)
    cwd = process.get("cwd")
    ids = process.get("user") or {}
    uid, gid = ids.get("uid", 0), ids.get("gid", 0)
    return env, (cwd if cwd and cwd != "/" else None), (f"{uid}:{gid}" if uid or gid else None)


class ImageStore:
    """Image references -> unpacked root file systems (see the module docstring)."""

    def __init__(self, images: dict[str, str] | None = None, cache_dir: str | Path | None = None,
                 pull: bool = False):
        self.images = {normalize_ref(k): v for k, v in (images or {}).items()}
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.pull = pull

    def has(self, ref: str | None) -> bool:
        return bool(ref) and normalize_ref(ref) in self.images

    def can_provide(self, ref: str | None) -> bool:
        return self.has(ref) or (self.pull and bool(ref))

    def root(self, ref: str) -> ImageRoot:
        """The unpacked image of ``ref`` (unpacked now unless cached); ``EnvironmentBuildError`` when it cannot be had."""
        key = normalize_ref(ref)
        if key in self.images:
            source = Path(self.images[key])
            if _source_kind(source) == "rootfs-dir":
                return ImageRoot(source.resolve(), source=str(source))
            st = source.stat()
            digest = hashlib.sha256(f"{source.resolve()}\0{st.st_size}\0{st.st_mtime_ns}".encode()).hexdigest()[:24]
            return self._cached(digest, lambda tmp: self._unpack(source, tmp), str(source))
        if self.pull:
            digest = "pull-" + hashlib.sha256(key.encode()).hexdigest()[:24]
            return self._cached(digest, lambda tmp: self._pull(key, tmp), f"docker://{key}")
        raise EnvironmentBuildError(f"no image root file system for {ref}: name it in the images file "
                                    "(--ek images=FILE), or allow pulling it (--ek pull=true, needs skopeo and the network)")

    # ------------------------------------------------------------------ internals
    def _cached(self, key: str, make, source: str) -> ImageRoot:
        final = self.cache_dir / key
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        with open(self.cache_dir / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (final / "rootfs").is_dir():
                tmp = self.cache_dir / f".{key}.tmp"
                shutil.rmtree(tmp, ignore_errors=True)
                tmp.mkdir()
                try:
                    make(tmp)
                    os.rename(tmp, final)
                except BaseException:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
            if not (final / NO_DEVICES).exists():  # just unpacked, or unpacked before device nodes were dropped
                drop_device_nodes(final / "rootfs")
                (final / NO_DEVICES).touch()
        env, workdir, user = _read_config(final)
        return ImageRoot(final / "rootfs", env=env, workdir=workdir, source=source, user=user)

    def _unpack(self, source: Path, bundle: Path) -> None:
        kind = _source_kind(source)
        what = f"unpack image {source}"
        if kind == "rootfs-tar":
            (bundle / "rootfs").mkdir()
            owner = ["--same-owner", "--numeric-owner"] if os.geteuid() == 0 else ["--no-same-owner"]
            _run(["tar", "-xpf", str(source), "-C", str(bundle / "rootfs"), *owner, "--exclude=./dev/*",
                  "--exclude=dev/*"], what)
            return
        if kind == "oci-layout":
            layout, tag = source, _oci_tag(source)
            if tag is None:
                raise EnvironmentBuildError(f"{what}: the OCI layout names no image (no "
                                            "org.opencontainers.image.ref.name in its index.json)")
        else:
            layout, tag = bundle / "oci", "image"
            _run(["skopeo", "copy", "-q", f"{kind}:{source}", f"oci:{layout}:{tag}"], what)
        self._umoci(layout, tag, bundle / "bundle", what)

    def _pull(self, ref: str, bundle: Path) -> None:
        layout = bundle / "oci"
        _run(["skopeo", "copy", "-q", f"docker://{ref}", f"oci:{layout}:image"], f"pull image {ref}")
        self._umoci(layout, "image", bundle / "bundle", f"unpack image {ref}")

    @staticmethod
    def _umoci(layout: Path, tag: str, unpacked: Path, what: str) -> None:
        argv = ["umoci", "unpack", *([] if os.geteuid() == 0 else ["--rootless"]), "--image", f"{layout}:{tag}",
                str(unpacked)]
        _run(argv, what)
        bundle = unpacked.parent  # <tmp>/rootfs and <tmp>/config.json, as _cached expects
        os.rename(unpacked / "rootfs", bundle / "rootfs")
        if (unpacked / "config.json").is_file():
            os.rename(unpacked / "config.json", bundle / "config.json")
        shutil.rmtree(unpacked, ignore_errors=True)
        if layout.parent == bundle:  # skopeo's intermediate layout, not the user's
            shutil.rmtree(layout, ignore_errors=True)


# ---------------------------------------------------------------- stand-in images, built offline
def dockerfile_hooks(dockerfile: Path) -> list[str]:
    """A Dockerfile's ``WORKDIR``, ``COPY``/``ADD`` (files and folders of the build context) and ``RUN`` lines as
    mmdebstrap customize hooks (``$1`` is the root being built); ``ENV`` and the metadata lines are left out."""
    context, workdir, hooks = dockerfile.resolve().parent, "/", []
    for op, rest in df.parse(dockerfile):
        if op == "WORKDIR":
            workdir = str(PurePosixPath(workdir) / rest)
            hooks.append(f'mkdir -p "$1{workdir}"')
        elif op in ("COPY", "ADD") and "--from" not in rest:
            *srcs, dst = [a for a in shlex.split(rest) if not a.startswith("--")]
            dst = str(PurePosixPath(workdir) / dst)
            for src in srcs:
                path = context / src
                files = sorted(str(p) for p in path.iterdir()) if path.is_dir() else [str(path)]
                target = dst if path.is_dir() or dst.endswith("/") else str(PurePosixPath(dst).parent)
                hooks.append(f'mkdir -p "$1{target}"')
                hooks.append("copy-in " + " ".join(shlex.quote(f) for f in files) + f" {shlex.quote(target)}")
        elif op == "RUN":
            hooks.append(f'chroot "$1" sh -c {shlex.quote(f"cd {workdir} && {rest}")}')
    return hooks


def build_debian_image(out: str | Path, dockerfile: Path | None = None, suite: str = "bookworm",
                       timeout: float = PULL_TIMEOUT_SEC) -> Path:
    """``out``: a root file system tarball, Debian ``suite`` minbase plus ``dockerfile``'s steps (mmdebstrap)."""
    out = Path(out)
    hooks = dockerfile_hooks(dockerfile) if dockerfile else []
    tmp = out.with_name(f".{out.name}.tmp")
    try:
        # --format=tar: mmdebstrap picks the format from the name's extension, and the temporary name has none
        _run(["mmdebstrap", "--variant=minbase", "--format=tar", "--quiet",
              *[f"--customize-hook={h}" for h in hooks], suite, str(tmp)],
             f"build a Debian {suite} image" + (f" with {dockerfile}" if dockerfile else ""), timeout)
        if out.is_dir():  # an earlier build's directory under the tarball's name (before --format=tar)
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
