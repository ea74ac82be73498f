"""Files into and out of a sandbox, moved by the host itself through fds beneath the sandbox's root; bounded reads.
Runs in: any Python >= 3.11, standard library only (Linux >= 5.6 for openat2).

No program of the sandbox runs for a transfer, and no stream it made is unpacked: every path inside is resolved by
the kernel beneath the sandbox's root (openat2 RESOLVE_IN_ROOT, no magic links) and every entry of a folder is opened
one name at a time without following links. How and why: docs/sandbox.md#inside-the-modules.
"""

from __future__ import annotations

import ctypes
import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from sandbox.errors import SandboxError

TASK_FILE_MAX_BYTES = 4 * 1024 * 1024  # a task's Dockerfile, task.toml, instruction, scripts: text, never bigger
ENTRY_BYTES = 512  # what each entry of a downloaded folder counts against max_download_bytes (a tar header's size)
MAX_DEPTH = 128  # folders deeper than this below a transferred folder are skipped (each level holds two fds)
_SYS_OPENAT2 = 437  # the same number on x86_64 and aarch64 (the generic table)
_RESOLVE_NO_MAGICLINKS, _RESOLVE_IN_ROOT = 0x02, 0x10
_CHUNK = 1 << 20
_EAGAIN_TRIES = 1000
_libc = ctypes.CDLL(None, use_errno=True)


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


def _openat2(dirfd: int, path: str, flags: int, resolve: int) -> int:
    """openat2(2), retried on EAGAIN: with RESOLVE_IN_ROOT the kernel answers that when any rename or mount on the
    machine raced a ``..`` step (other sandboxes starting, a build renaming its layer into place), and asks the caller
    to retry. Bounded: a sandbox renaming without pause can make it last, and then the path is not found here."""
    flags |= os.O_CLOEXEC if flags & os.O_PATH else os.O_CLOEXEC | os.O_NOCTTY  # openat2 takes no other with O_PATH
    how = _OpenHow(flags, 0, resolve)
    for _ in range(_EAGAIN_TRIES):
        fd = _libc.syscall(_SYS_OPENAT2, dirfd, os.fsencode(path), ctypes.byref(how), ctypes.sizeof(how))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err != errno.EAGAIN:
            break
    raise OSError(err, os.strerror(err), path)


def in_root(root: int, path: str, flags: int = os.O_PATH) -> int:
    """An fd of ``path`` as the sandbox sees it: resolved by the kernel beneath ``root`` (``..`` and absolute links
    stay inside), magic links (``/proc/*/root``, ``/proc/*/fd/*``) refused."""
    return _openat2(root, path, flags, _RESOLVE_IN_ROOT | _RESOLVE_NO_MAGICLINKS)


def open_root(pid: int, alive: Callable[[], bool], entry: str = "root", flags: int = os.O_PATH) -> int:
    """An ``O_PATH`` fd of the root of the sandbox whose PID 1 is ``pid`` (or of another folder ``entry`` of
    ``/proc/<pid>``, e.g. ``fd/7``, opened with ``flags``). ``alive`` says whether that PID 1 (held by what cannot be
    reused: its start time, a pidfd) still runs; asked once ``/proc/<pid>`` is open, a yes means that folder is PID 1's
    and no reused pid can hand out another root (the host's)."""
    gone = SandboxError("the sandbox is not running (its PID 1 is gone)")
    try:
        proc = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        raise gone from None
    try:
        if not alive():
            raise gone
        return os.open(entry, flags | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=proc)
    except OSError:  # it ended since: the folder of a dead process leads nowhere
        raise gone from None
    finally:
        os.close(proc)


def _reopen(path_fd: int, flags: int = os.O_RDONLY) -> int:
    """Open for reading the inode an ``O_PATH`` fd holds (the same inode, whatever its name now points to)."""
    return os.open(f"/proc/self/fd/{path_fd}", flags | os.O_NOCTTY | os.O_NONBLOCK | os.O_CLOEXEC)


def read_regular_file(path: str | Path, cap: int = TASK_FILE_MAX_BYTES) -> bytes:
    """The bytes of a host file (links followed) that is a regular file of at most ``cap`` bytes; ``ValueError``
    naming the file otherwise (a FIFO, a device such as ``/dev/zero``, a giant) and nothing read past ``cap``."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as err:
        raise ValueError(f"{path}: cannot be read ({err.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"{path}: not a regular file ({_kind(st.st_mode)}); a task file must be one")
        if st.st_size > cap:
            raise ValueError(f"{path}: {st.st_size} bytes, more than the {cap} bytes a task file may have")
        try:
            data_fd = _reopen(fd)
        except OSError as err:
            raise ValueError(f"{path}: cannot be read ({err.strerror})") from None
        try:
            data = _read_at_most(data_fd, cap + 1)
        finally:
            os.close(data_fd)
        if len(data) > cap:
            raise ValueError(f"{path}: more than the {cap} bytes a task file may have")
        return data
    finally:
        os.close(fd)


def _read_at_most(fd: int, n: int) -> bytes:
    chunks, total = [], 0
    while total < n and (chunk := os.read(fd, min(_CHUNK, n - total))):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a file"


def _tmp_name() -> str:
    return f".tr-{secrets.token_hex(8)}"


def _subdir(parent: int, name: str) -> int:
    """The folder ``name`` in the folder ``parent`` (the host's or the sandbox's), opened without following a link:
    made, or whatever else was there (a link, a file) replaced by one, as tar would."""
    for _ in range(3):
        try:
            os.mkdir(name, 0o700, dir_fd=parent)
        except FileExistsError:
            pass
        try:
            return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except FileNotFoundError:
            continue
        except OSError as err:  # ENOTDIR (a file) or ELOOP (a link) is replaced
            if err.errno not in (errno.ENOTDIR, errno.ELOOP):
                raise
            os.unlink(name, dir_fd=parent)
    raise SandboxError(f"local sandbox: could not make the folder {name!r}")


# ---------------------------------------------------------------------------------------------- out of the sandbox
class _Budget:
    """What a download may write in all: ``cap`` bytes, each entry counting ``ENTRY_BYTES``."""

    def __init__(self, cap: int, what: str):
        self.cap, self.what, self.total = cap, what, 0

    def take(self, n: int) -> None:
        self.total += n
        if self.total > self.cap:
            raise SandboxError(f"local sandbox: {self.what} refused: more than {self.cap} bytes in all "
                               "(max_download_bytes, each entry counting 512)")


class _TooBig(OSError):
    """One file grew past max_download_bytes while it was copied (an OSError: in a folder, that file is skipped)."""


def _copy_fd(src: int, dst: int, budget: _Budget | None, limit: int | None, what: str) -> None:
    total = 0
    while chunk := os.read(src, _CHUNK):
        total += len(chunk)
        if limit is not None and total > limit:
            raise _TooBig(f"{what} refused: larger than max_download_bytes={limit}")
        if budget is not None:
            budget.take(len(chunk))
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]


def _write_file(dst_dir: int, name: str, src: int, mode: int, st: os.stat_result, budget: _Budget | None,
                cap: int | None, what: str, owner: tuple[int, int] | None = None) -> None:
    """Write ``src``'s bytes as ``name`` in the folder ``dst_dir``: a new file with ``mode`` and ``st``'s times,
    renamed into place (a link planted at ``name`` is replaced, never followed), owned by this process or ``owner``
    (uid, gid; set before the mode, which a change of owner would strip of its set-id bits)."""
    tmp = _tmp_name()
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dst_dir)
    try:
        try:
            _copy_fd(src, out, budget, cap, what)
            if owner is not None:
                os.fchown(out, *owner)
            os.fchmod(out, mode)
            os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            os.close(out)
        os.rename(tmp, name, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dst_dir)
        except OSError:
            pass
        raise


def _write_host_file(dst_dir: int, name: str, src: int, st: os.stat_result, budget: _Budget | None, cap: int,
                     what: str) -> None:
    """``_write_file`` into a host folder, the mode without set-id bits or group/other write (as tarfile's data
    filter)."""
    _write_file(dst_dir, name, src, stat.S_IMODE(st.st_mode) & 0o755, st, budget, cap, what)


def _symlink_into_place(dst_dir: int, name: str, link: str, owner: tuple[int, int] | None = None) -> None:
    """A symbolic link to ``link`` as ``name`` in ``dst_dir``, made under a new name and renamed into place."""
    tmp = _tmp_name()
    os.symlink(link, tmp, dir_fd=dst_dir)
    try:
        if owner is not None:
            os.chown(tmp, *owner, dir_fd=dst_dir, follow_symlinks=False)
        os.rename(tmp, name, src_dir_fd=dst_dir, dst_dir_fd=dst_dir)
    except BaseException:
        os.unlink(tmp, dir_fd=dst_dir)
        raise


def _link_stays_inside(link: str, depth: int) -> bool:
    """Whether a symbolic link ``depth`` folders below the destination resolves inside it whatever its other links
    are: relative, at most ``depth`` leading ``..`` and none after a name (a lexical check of ``a/../..`` is what
    CVE-2025-4517 fooled; a link with only leading ``..`` climbs real folders, then only descends)."""
    if not link or link.startswith("/"):
        return False
    ups = 0
    for i, part in enumerate(p for p in link.split("/") if p not in ("", ".")):
        if part == "..":
            if ups != i:
                return False
            ups += 1
    return ups <= depth


def download_file(root: int, source: str, target: Path, cap: int) -> None:
    """Copy the sandbox's regular file ``source`` (links followed inside the sandbox) to ``target`` on the host; over
    ``cap`` bytes (a sparse file counts its full size) is a ``SandboxError``."""
    what = f"download {source}"
    try:
        fd = in_root(root, source)
    except OSError as err:
        raise SandboxError(f"local sandbox: {what} failed: {err.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SandboxError(f"local sandbox: {what} failed: {_kind(st.st_mode)}, not a regular file")
        if st.st_size > cap:
            raise SandboxError(f"local sandbox: {what} refused: larger than max_download_bytes={cap}")
        target.parent.mkdir(parents=True, exist_ok=True)
        data = _reopen(fd)
        dst_dir = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _write_host_file(dst_dir, target.name, data, st, None, cap, what)
        finally:
            os.close(dst_dir)
            os.close(data)
    except OSError as err:
        raise SandboxError(f"local sandbox: {what} failed: {err}") from None
    finally:
        os.close(fd)


def download_dir(root: int, source: str, target: Path, cap: int, warn: Callable[[str], None]) -> None:
    """Copy the contents of the sandbox's folder ``source`` into ``target`` on the host: folders, regular files, and
    symbolic links that stay inside (``_link_stays_inside``); devices, FIFOs, sockets, links out, other file systems
    (mount points below ``source``) and files over ``cap`` are skipped (the last three with a ``warn``); more than
    ``cap`` in all is a ``SandboxError``."""
    what = f"download {source}"
    try:
        src = in_root(root, source, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        raise SandboxError(f"local sandbox: {what} failed: {err.strerror}") from None
    try:
        target.mkdir(parents=True, exist_ok=True)
        dst = os.open(target, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _copy_out(src, dst, "", 0, _Budget(cap, what), cap, warn)
        finally:
            os.close(dst)
    except OSError as err:
        raise SandboxError(f"local sandbox: {what} failed: {err}") from None
    finally:
        os.close(src)


def _copy_out(src: int, dst: int, rel: str, depth: int, budget: _Budget, cap: int, warn) -> None:
    device = os.fstat(src).st_dev
    with os.scandir(src) as entries:
        for entry in entries:
            path = f"./{rel}{entry.name}"
            budget.take(ENTRY_BYTES)
            try:
                _copy_out_entry(src, dst, entry.name, entry.stat(follow_symlinks=False), device, rel, depth, budget,
                                cap, warn)
            except OSError as err:  # one entry that changed under the copy (or cannot be read) is skipped, named
                warn(f"skipped {path}: {err.strerror or err}")


def _copy_out_entry(src: int, dst: int, name: str, st: os.stat_result, device: int, rel: str, depth: int,
                    budget: _Budget, cap: int, warn) -> None:
    path = f"./{rel}{name}"
    if stat.S_ISDIR(st.st_mode):
        if st.st_dev != device:
            warn(f"skipped {path}: another file system (a mount point)")
            return
        if depth >= MAX_DEPTH:
            warn(f"skipped {path}: more than {MAX_DEPTH} folders deep")
            return
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
        try:
            if os.fstat(child).st_dev != device:  # swapped for a mount point since the listing
                return
            host = _subdir(dst, name)
            try:
                _copy_out(child, host, f"{rel}{name}/", depth + 1, budget, cap, warn)
                os.fchmod(host, (stat.S_IMODE(st.st_mode) & 0o755) | 0o700)
            finally:
                os.close(host)
        finally:
            os.close(child)
    elif stat.S_ISREG(st.st_mode):
        if st.st_size > cap:
            warn(f"skipped {path}: {st.st_size} bytes, over max_download_bytes")
            return
        path_fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
        try:
            st = os.fstat(path_fd)
            if not stat.S_ISREG(st.st_mode):  # swapped since the listing
                return
            data = _reopen(path_fd)
            try:
                _write_host_file(dst, name, data, st, budget, cap, f"download {path}")
            finally:
                os.close(data)
        finally:
            os.close(path_fd)
    elif stat.S_ISLNK(st.st_mode):
        link = os.readlink(name, dir_fd=src)
        if not _link_stays_inside(link, depth):
            warn(f"skipped {path}: a symbolic link out of the folder ({link})")
            return
        _symlink_into_place(dst, name, link)
    # devices, FIFOs and sockets are not copied


# ----------------------------------------------------------------------------------------------- into the sandbox
def _makedirs_in_root(root: int, path: str, what: str, owner: tuple[int, int] | None = None) -> int:
    """``mkdir -p path`` inside the sandbox, every step resolved beneath its root, the folders it makes owned by
    ``owner`` (uid, gid) when given; an fd of the folder."""
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for i in range(len(parts) + 1):
        prefix = "/" + "/".join(parts[:i])
        try:
            os.close(in_root(root, prefix, os.O_PATH | os.O_DIRECTORY))
            continue
        except FileNotFoundError:
            pass
        parent = in_root(root, "/" + "/".join(parts[:i - 1]), os.O_PATH | os.O_DIRECTORY)
        try:
            os.mkdir(parts[i - 1], 0o700, dir_fd=parent)
            made = os.open(parts[i - 1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
            try:
                if owner is not None:
                    os.fchown(made, *owner)
                os.fchmod(made, 0o755)  # as mkdir -p inside would make it, whatever this process's umask
            finally:
                os.close(made)
        except FileExistsError:
            raise SandboxError(f"local sandbox: {what} failed: {prefix} exists and is not a folder") from None
        finally:
            os.close(parent)
    return in_root(root, path or "/", os.O_RDONLY | os.O_DIRECTORY)


def _place_in_sandbox(dst_dir: int, name: str, source: str, src_dir: int | None, what: str,
                      owner: tuple[int, int] | None = None, mode: int | None = None) -> None:
    """Put the host entry ``source`` (a regular file or a symbolic link, relative to ``src_dir`` when given) as
    ``name`` in the sandbox's folder ``dst_dir``: written under a new name, then renamed into place; ``owner`` and
    ``mode``, when given, instead of this process's uid and the source's mode."""
    st = os.stat(source, dir_fd=src_dir, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        _symlink_into_place(dst_dir, name, os.readlink(source, dir_fd=src_dir), owner)
    elif stat.S_ISREG(st.st_mode):
        src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_dir)
        try:
            st = os.fstat(src)
            if stat.S_ISREG(st.st_mode):
                _write_file(dst_dir, name, src, stat.S_IMODE(st.st_mode) if mode is None else mode, st, None, None,
                            what, owner)
        finally:
            os.close(src)
    # devices, FIFOs and sockets of the host are not copied in


def upload_file(root: int, source: Path, target: str, owner: tuple[int, int] | None = None,
                mode: int | None = None) -> None:
    """Copy the host file (or symbolic link) ``source`` to ``target`` in the sandbox, into it when that is a
    folder; parent folders made. Owned by the sandbox's root (this process's uid, mapped to it), or by ``owner``
    (uid, gid: the file and the folders made), with the source's mode or ``mode``."""
    what = f"upload {source} -> {target}"
    try:
        try:
            dst, name = in_root(root, target, os.O_RDONLY | os.O_DIRECTORY), source.name
        except (FileNotFoundError, NotADirectoryError):
            parent, _, name = target.rstrip("/").rpartition("/")
            if name in ("", ".", ".."):
                raise SandboxError(f"local sandbox: {what} failed: no file name in the target") from None
            dst = _makedirs_in_root(root, parent, what, owner)
        try:
            _place_in_sandbox(dst, name, str(source), None, what, owner, mode)
        finally:
            os.close(dst)
    except OSError as err:
        raise SandboxError(f"local sandbox: {what} failed: {err}") from None


def upload_dir(root: int, source: Path, target: str, owner: tuple[int, int] | None = None,
               mode: int | None = None) -> None:
    """Copy the contents of the host folder ``source`` into ``target`` in the sandbox (made): folders, regular files
    and symbolic links as links, nothing followed below ``source``; ``owner`` and ``mode`` as ``upload_file``'s, for
    every entry copied (and the folders made)."""
    what = f"upload {source} -> {target}"
    try:
        dst = _makedirs_in_root(root, target, what, owner)
        try:
            src = os.open(source, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                _copy_in(src, dst, 0, what, owner, mode)
            finally:
                os.close(src)
        finally:
            os.close(dst)
    except OSError as err:
        raise SandboxError(f"local sandbox: {what} failed: {err}") from None


def make_dirs(root: int, path: str, owner: tuple[int, int] | None = None) -> None:
    """``mkdir -p path`` in the sandbox, the folders it makes owned by ``owner`` (uid, gid) when given."""
    try:
        os.close(_makedirs_in_root(root, path, f"make {path}", owner))
    except OSError as err:
        raise SandboxError(f"local sandbox: make {path} failed: {err}") from None


def _copy_in(src: int, dst: int, depth: int, what: str, owner: tuple[int, int] | None, mode: int | None) -> None:
    if depth > MAX_DEPTH:
        raise SandboxError(f"local sandbox: {what} failed: more than {MAX_DEPTH} folders deep")
    with os.scandir(src) as entries:
        for entry in entries:
            name = entry.name
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                _place_in_sandbox(dst, name, name, src, what, owner, mode)
                continue
            child_src = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=src)
            try:
                child_dst = _subdir(dst, name)
                try:
                    _copy_in(child_src, child_dst, depth + 1, what, owner, mode)
                    if owner is not None:
                        os.fchown(child_dst, *owner)
                    os.fchmod(child_dst, stat.S_IMODE(st.st_mode) if mode is None else mode)
                    os.utime(child_dst, ns=(st.st_atime_ns, st.st_mtime_ns))
                finally:
                    os.close(child_dst)
            finally:
                os.close(child_src)


