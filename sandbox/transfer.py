"""Tar archives that carry files into and out of a sandbox (streamed, capped).
Runs in: any Python >= 3.11, standard library only.
"""

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


class CappedReader:
    """A file-like reader over a pipe that raises ``SandboxError`` once more than ``cap`` bytes came through."""

    def __init__(self, raw, cap: int, what: str):
        self._raw, self._cap, self._what, self.total = raw, cap, what, 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n if n is not None and n >= 0 else 1 << 20)
        self.total += len(data)
        if self.total > self._cap:
            raise SandboxError(f"local sandbox: {self._what} refused: more than {self._cap} bytes "
                               "(max_download_bytes, plus archive headers)")
        return data

    def close(self) -> None:
        try:
            self._raw.close()
        except OSError:
            pass


def extract_tar_stream(stream, target: Path) -> None:
    """Unpack a tar stream made inside the sandbox into ``target``, member by member, never holding the
    archive in memory (``tarfile`` stream mode); no paths or links out, no devices."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=stream, mode="r|") as tf:
        for member in tf:
            if member.isdev():
                continue
            if hasattr(tarfile, "data_filter"):
                member = tarfile.data_filter(member, str(target))  # FilterError for paths or links out
                tf.extract(member, path=target, filter="fully_trusted")
                continue
            if not _stays_inside(member, target):
                raise SandboxError(f"refusing to extract {member.name!r}: it points outside {target}")
            member.mode &= 0o755  # like data_filter: no setuid/setgid, nothing group/other-writable
            tf.extract(member, path=target, set_attrs=not member.issym())
