"""``Disk``: the disk-backed writable root of a sandbox whose storage exceeds what memory holds (root only).
Runs in: any Python >= 3.11, standard library only (plus e2fsprogs' mkfs.ext4 and loop devices), in the owning process.

An ext4 file system of ``storage_mb`` in a sparse file that never has a name (O_TMPFILE), on a loop device that
clears itself when its last user goes (the sandbox's mount); so nothing is left, even after SIGKILL. At stop it is
shut down (nothing written back) and let go of on a thread of its own (``shut_down``, ``let_go``).
Why and what bound holds where: docs/sandbox.md#what-is-isolated; the stop: docs/sandbox.md#stopping-a-sandbox.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import os
import shutil
import struct
import threading
import time

from sandbox.errors import SandboxError
from sandbox.processes import killpg

LOOP_CONTROL = "/dev/loop-control"
LOOP_CTL_GET_FREE, LOOP_CONFIGURE = 0x4C82, 0x4C0A  # linux/loop.h; LOOP_CONFIGURE since Linux 5.8
LO_FLAGS_AUTOCLEAR, LO_FLAGS_DIRECT_IO = 4, 16
ATTACH_PATIENCE_SEC = 5.0  # a device an ending sandbox's mount still holds stays busy for moments: wait those out
MKFS_TIMEOUT_SEC = 120  # a sparse image, no journal, lazy inode tables: seconds even for many GiB on a loaded host
MKFS = ("mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "nodiscard,lazy_itable_init=1")
MOUNT_OPTIONS = "noinit_itable"  # the sparse file reads as zeros: no inode tables to write in the background
FS_IOC_SHUTDOWN, SHUTDOWN_NOLOGFLUSH = 0x8004587D, 2  # linux/fs.h (ext4's EXT4_IOC_SHUTDOWN): nothing flushed


def unavailable() -> str | None:
    """Why this process cannot give a sandbox a disk-backed root, or None when it can."""
    if os.geteuid() != 0:
        return "only root can mount a file system image (an ordinary user's sandbox keeps its writes in memory)"
    if shutil.which(MKFS[0]) is None:
        return f"{MKFS[0]} is not installed (apt-get install e2fsprogs)"
    try:
        os.close(os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC))
    except OSError as exc:
        return f"no loop devices ({LOOP_CONTROL}: {exc.strerror})"
    return None


class Disk:
    """A configured loop device holding a fresh ext4 file system; ``close`` once the sandbox has mounted it (the
    mount then keeps it; the kernel clears it, and frees the file, when the sandbox's mount namespace goes)."""

    def __init__(self, device: str, fd: int):
        self.device = device
        self.rdev = os.fstat(fd).st_rdev  # the st_dev of the file system on it
        self._fd: int | None = fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _configure_free(ctl: int, image_fd: int) -> Disk | None:
    """The device the kernel offers as free, bound to the image; None when it is busy (taken meanwhile, or still
    held)."""
    n = fcntl.ioctl(ctl, LOOP_CTL_GET_FREE)
    try:
        fd = os.open(f"/dev/loop{n}", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        raise OSError(f"/dev/loop{n} does not exist (no devtmpfs?)") from None
    for flags in (LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO, LO_FLAGS_AUTOCLEAR):
        info = struct.pack("=5Q4I64s64s32s2Q", 0, 0, 0, 0, 0, 0, 0, 0, flags, b"", b"", b"", 0, 0)
        try:
            fcntl.ioctl(fd, LOOP_CONFIGURE, struct.pack("=II", image_fd, 0) + info + bytes(64))
            return Disk(f"/dev/loop{n}", fd)
        except OSError as exc:
            if exc.errno == errno.EBUSY:
                break
            if flags == LO_FLAGS_AUTOCLEAR:
                os.close(fd)
                raise
    os.close(fd)
    return None


async def _attach(image_fd: int) -> Disk:
    """The image on a free loop device. A busy one is asked for again at once (another process may take the free
    device first), and after every 16 busy answers in a row after a growing pause: while sandboxes end beside this
    one, as far as we can tell, the lowest unbound device is offered while its last mount is still going, and refuses
    every try until it has gone; up to ``ATTACH_PATIENCE_SEC``."""
    ctl = os.open(LOOP_CONTROL, os.O_RDWR | os.O_CLOEXEC)
    try:
        pause, deadline, busy = 0.005, time.monotonic() + ATTACH_PATIENCE_SEC, 0
        while (disk := _configure_free(ctl, image_fd)) is None:
            busy += 1
            if busy % 16:
                continue
            if time.monotonic() >= deadline:
                raise OSError(f"no free loop device (every one offered busy for {ATTACH_PATIENCE_SEC:g} s)")
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.2)
        return disk
    finally:
        os.close(ctl)


async def make_disk(directory: str, size_mb: int) -> Disk:
    """A loop device holding an empty ext4 of ``size_mb`` MiB, its sparse file unnamed in ``directory``; ``OSError``
    where mkfs fails, ``SandboxError`` where it runs past ``MKFS_TIMEOUT_SEC`` (killed)."""
    image = os.open(directory, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(image, size_mb << 20)
        proc = await asyncio.create_subprocess_exec(
            *MKFS, f"/proc/self/fd/{image}", pass_fds=(image,), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), MKFS_TIMEOUT_SEC)
        except BaseException as exc:  # past the bound, or the start cancelled: nothing of mkfs is left running
            killpg(proc.pid)
            try:
                await asyncio.wait_for(proc.wait(), 10)
            except asyncio.TimeoutError:
                pass
            transport = getattr(proc, "_transport", None)
            if transport is not None:
                transport.close()  # its pipe now, not when the event loop is gone
            if isinstance(exc, asyncio.TimeoutError):
                raise SandboxError(f"local sandbox: {MKFS[0]} of the sandbox's disk ({size_mb} MiB in {directory}) "
                                   f"did not finish in {MKFS_TIMEOUT_SEC} s") from None
            raise
        if proc.returncode != 0:
            raise OSError(f"{MKFS[0]} failed (exit {proc.returncode}): {out.decode(errors='replace').strip()[-500:]}")
        return await _attach(image)
    finally:
        os.close(image)  # the loop device holds the file now


def shut_down(fd: int, rdev: int) -> bool:
    """Shut down the file system ``fd`` is on, if it is the one on the loop device ``rdev``: its processes' writes fail
    from now on, and nothing of it is written back (its dirty pages are dropped at its unmount, not written to a file
    that is freed right after). Whether it was that file system."""
    if os.fstat(fd).st_dev != rdev:
        return False
    try:
        fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", SHUTDOWN_NOLOGFLUSH))
    except OSError:
        pass  # then its unmount writes back what is dirty: slower, the same end
    return True


def let_go(fd: int) -> None:
    """Close ``fd``, the last hold on a disk whose sandbox is gone, on a thread of its own: that close unmounts the file
    system for good, clears the loop device and frees the file (page cache dropped, the host's blocks freed: 0.4 s
    after 1 GiB written) off the caller's path. Nothing can stay: the kernel closes the fd if this process dies first."""
    threading.Thread(target=os.close, args=(fd,), name="sandbox-disk-release", daemon=True).start()
