"""Tiny image root file systems for the sandbox's tests: a few of the host's programs and their libraries as a
rootfs tarball (Python's tarfile: no root, no mmdebstrap, no network), plus whatever members a test adds.

    tar = tiny_rootfs_tar(tmp_path / "image.tar", extra=[device("opt/zero", 1, 5), symlink("etc", "/elsewhere")])

Tests import these as `from rootfs import ...` (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

PROGRAMS = ("bash", "sh", "mkdir", "cat", "head", "ls", "touch", "rm", "wc", "readlink")


def device(name: str, major: int, minor: int, kind: bytes = tarfile.CHRTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.devmajor, info.devminor, info.mode = kind, major, minor, 0o666
    return info


def symlink(name: str, target: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
    return info


def folder(name: str, mode: int = 0o755) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode = tarfile.DIRTYPE, mode
    return info


def _libraries(program: str) -> list[str]:
    out = subprocess.run(["ldd", program], capture_output=True, text=True).stdout
    libs = []
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if len(parts) > 2 and parts[1] == "=>" else parts[0] if parts else ""
        if path.startswith("/"):
            libs.append(path)
    return libs


def _add_path(tar: tarfile.TarFile, path: str, seen: set[str]) -> None:
    """``path`` as the host has it: each symlink on its way (at its real folder) and the file it ends at."""
    for _ in range(16):
        where = os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))
        if where in seen:
            return
        seen.add(where)
        if not os.path.islink(where):
            tar.add(where, arcname=where.lstrip("/"), recursive=False)
            return
        target = os.readlink(where)
        tar.addfile(symlink(where.lstrip("/"), target))
        path = os.path.join(os.path.dirname(where), target)


def tiny_rootfs_tar(out: Path, extra: list[tarfile.TarInfo] = (), programs: tuple[str, ...] = PROGRAMS) -> Path:
    """A root file system tarball at ``out`` with ``programs`` (from the host's PATH) and their libraries, the
    host's top-level symlinks (``bin -> usr/bin``, ...) and the ``extra`` members (files get empty contents)."""
    seen: set[str] = set()
    with tarfile.open(out, "w") as tar:
        for top in ("bin", "sbin", "lib", "lib64", "lib32", "libx32"):
            if os.path.islink(f"/{top}"):
                tar.addfile(symlink(top, os.readlink(f"/{top}")))
                seen.add(f"/{top}")
        for d in ("etc", "tmp", "root", "usr/bin"):
            tar.addfile(folder(d, 0o1777 if d == "tmp" else 0o755))
        for name in programs:
            program = shutil.which(name, path="/usr/bin:/bin")
            assert program, f"{name} is not on this host"
            _add_path(tar, program, seen)
            for lib in _libraries(os.path.realpath(program)):
                _add_path(tar, lib, seen)
        for member in extra:
            tar.addfile(member, io.BytesIO(b"") if member.isreg() else None)
    return out
