"""Tar archives that carry files into and out of a sandbox. Runs in: any Python >= 3.11, standard library only."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

from sandbox.errors import SandboxError


def _root_owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def tar_of_file(source: Path, arcname: str) -> bytes:
    """One file, owned by root, stored as ``arcname``."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(source, arcname=arcname, filter=_root_owned)
    return buf.getvalue()


def tar_of_dir(source: Path) -> bytes:
    """The contents of ``source`` (not the folder itself), owned by root."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(source.rglob("*")):
            tar.add(path, arcname=path.relative_to(source).as_posix(), recursive=False, filter=_root_owned)
    return buf.getvalue()


def _data_filter_without_devices(member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo | None:
    """``tarfile.data_filter``, except that FIFOs and device nodes are skipped (they carry no content,
    and one left by a command in the sandbox would otherwise abort the whole extraction)."""
    if member.isdev():
        return None
    return tarfile.data_filter(member, dest_path)


def _stays_inside(member: tarfile.TarInfo, target: Path) -> bool:
    """For Pythons before 3.11.4 (no ``tarfile.data_filter``): the member, and a link's target, stay in ``target``."""
    root = target.resolve()
    path = (root / member.name).resolve()
    if not path.is_relative_to(root):
        return False
    if member.issym():
        return (path.parent / member.linkname).resolve().is_relative_to(root)
    if member.islnk():
        return (root / member.linkname).resolve().is_relative_to(root)
    return True


def extract_tar(data: bytes, target: Path) -> None:
    """Unpack an archive made inside the sandbox into ``target`` on the host (no paths or links out, no devices)."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tf:
        if hasattr(tarfile, "data_filter"):
            tf.extractall(path=target, filter=_data_filter_without_devices)
            return
        for member in tf.getmembers():
            if member.isdev():
                continue
            if not _stays_inside(member, target):
                raise SandboxError(f"refusing to extract {member.name!r}: it points outside {target}")
            member.mode &= 0o755  # like data_filter: no setuid/setgid, nothing group/other-writable
            tf.extract(member, path=target, set_attrs=not member.issym())
