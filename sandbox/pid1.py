"""PID 1 of a sandbox: builds its root, answers its DNS, reaps its orphans.
Runs in: any Python >= 3.11, standard library only, as ``python -I -S pid1.py sandbox_init:NAME CONFIG_FD`` (core).

It prints ``READY`` (and the fd it holds of its disk, if it has one) when the root is built, and exits when the
wall-time deadline passes or the lifeline pipe from the owning process closes; the kernel then kills every process of
the namespace.
The root it builds: docs/sandbox.md#inside-the-modules.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import glob
import json
import os
import platform
import select
import signal
import socket
import stat
import struct
import sys
import time

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _err(what: str) -> OSError:
    e = ctypes.get_errno()
    return OSError(e, f"{what}: {os.strerror(e)}")


def mount(src: str, target: str, fstype: str | None, flags: int = 0, data: str | None = None) -> None:
    rc = _libc.mount(
        src.encode(), target.encode(), fstype.encode() if fstype else None,
        ctypes.c_ulong(flags), data.encode() if data else None,
    )
    if rc != 0:
        raise _err(f"mount {fstype or 'bind'} {src} -> {target} ({data or ''})")


def umount2(target: str, flags: int) -> None:
    if _libc.umount2(target.encode(), ctypes.c_int(flags)) != 0:
        raise _err(f"umount {target}")


def pivot_root(new: str, old: str) -> None:
    nr = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217, "riscv64": 41}.get(platform.machine())
    if nr is None:
        raise OSError(errno.ENOSYS, f"pivot_root syscall number unknown for {platform.machine()}")
    if _libc.syscall(ctypes.c_long(nr), new.encode(), old.encode()) != 0:
        raise _err("pivot_root")


def overlay(lower: str, upper: str, work: str, target: str) -> None:
    """An overlay, nodev: a device node in an image (or in its upper layer) opens nothing."""
    opts = f"lowerdir={lower},upperdir={upper},workdir={work}"
    try:
        mount("overlay", target, "overlay", MS_NODEV, opts)
    except OSError:  # in a user namespace: no trusted.* xattrs
        mount("overlay", target, "overlay", MS_NODEV, opts + ",userxattr")


def loopback_up() -> None:
    SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        ifr = struct.pack("16sH14s", b"lo", 0, b"")
        flags = struct.unpack("16sH14s", fcntl.ioctl(s, SIOCGIFFLAGS, ifr))[1]
        fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH14s", b"lo", flags | IFF_UP, b""))
    finally:
        s.close()


# The host's top-level folders a sandbox sees (each through its own overlay, writes land in the
# sandbox's tmpfs); every other top-level entry of the host (/root, /home, /work, /srv, /mnt, /media,
# /opt, /boot, /tmp, ...) is an empty folder inside. ``expose`` adds host paths read-only.
ALLOWED_TOP = ("bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc")
# of /var only what package tools need; the rest of /var is an empty skeleton
VAR_DIRS = ("backups", "cache", "lib", "local", "log", "mail", "opt", "spool", "tmp")
VAR_ALLOWED = ("lib/dpkg", "lib/apt", "lib/ucf", "lib/pam", "lib/python", "lib/ca-certificates",
               "lib/ca-certificates-java", "lib/sgml-base", "lib/xml-core", "cache/debconf", "cache/ldconfig")
# secrets of the host's /etc: password hashes are replaced by "*", private keys are removed, and so is every
# other file or folder that other users may not read (not_world_readable), but for policy that holds no secret
ETC_SANITIZED = ("shadow", "shadow-", "gshadow", "gshadow-")
ETC_REMOVED_GLOBS = ("ssh/ssh_host_*_key", "ssl/private/*", "security/opasswd", "krb5.keytab")
ETC_KEPT = (".pwd.lock", "sudoers", "sudoers.d")  # an empty lock file; sudo refuses to run without its policy


def not_world_readable(top: str) -> list[str]:
    """The files under ``top`` that other users may not read and the folders they may not list or enter (not
    descended into), relative to ``top``; symlinks are left to their targets."""
    out: list[str] = []

    def walk(path: str, rel: str) -> None:
        try:
            entries = list(os.scandir(path))
        except OSError:
            return
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            sub = f"{rel}{entry.name}"
            if stat.S_ISDIR(mode):
                if mode & 0o005 != 0o005:
                    out.append(sub)
                else:
                    walk(entry.path, sub + "/")
            elif not stat.S_ISLNK(mode) and not mode & 0o004:
                out.append(sub)

    walk(top, "")
    return out

# what Docker masks in /proc and /sys (moby's default masked paths), and /proc/kmsg
MASKED = ("proc/acpi", "proc/asound", "proc/kcore", "proc/keys", "proc/latency_stats", "proc/timer_list",
          "proc/timer_stats", "proc/sched_debug", "proc/scsi", "proc/kmsg", "sys/firmware",
          "sys/devices/virtual/powercap")

SYS_OPENAT2 = 437  # one number on every architecture of the unified syscall table (Linux >= 5.6)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_IN_ROOT = 0x10


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


class Root:
    """The sandbox's root while PID 1 builds it: every path PID 1 writes or mounts on there is resolved beneath it
    as the sandbox will see it (openat2 ``RESOLVE_IN_ROOT``: an image's ``etc -> /host/dir`` leads to
    ``<root>/host/dir``, ``..`` stops at the root), and each mount goes onto the fd it resolved to."""

    def __init__(self, path: str):  # opened after the root's own mount, so that it sees the mounts on top
        self.path = path
        self.fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def open(self, rel: str, flags: int = os.O_PATH, mode: int = 0) -> int:
        how = _OpenHow(flags | os.O_CLOEXEC, mode, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
        for _ in range(1000):  # EAGAIN: a rename or mount on the machine raced a `..` step (as sandbox/transfer.py)
            fd = _libc.syscall(ctypes.c_long(SYS_OPENAT2), ctypes.c_int(self.fd), ctypes.c_char_p(rel.encode()),
                               ctypes.byref(how), ctypes.c_size_t(ctypes.sizeof(how)))
            if fd >= 0:
                return fd
            e = ctypes.get_errno()
            if e != errno.EAGAIN:
                break
        raise OSError(e, f"/{rel.strip('/')} in the sandbox's root: {os.strerror(e)}")

    def _parent(self, rel: str) -> tuple[int, str]:
        """(an fd of the folder holding ``rel``, made where missing; ``rel``'s last name)."""
        head, _, name = rel.strip("/").rpartition("/")
        if not name or name in (".", ".."):
            raise OSError(errno.EINVAL, f"/{rel}: not a name in the sandbox's root")
        return self.folder(head), name

    def lstat(self, rel: str) -> os.stat_result | None:
        """``rel``'s own status (a symlink is not followed), None where it is missing."""
        try:
            parent, name = self._parent_existing(rel)
        except FileNotFoundError:
            return None
        try:
            return os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        finally:
            os.close(parent)

    def _parent_existing(self, rel: str) -> tuple[int, str]:
        head, _, name = rel.strip("/").rpartition("/")
        return self.open(head or ".", os.O_PATH | os.O_DIRECTORY), name

    def folder(self, rel: str, mode: int = 0o755, _links: int = 0) -> int:
        """An fd of the folder ``rel``, each missing folder on its way made with ``mode`` (a symlink to a missing
        folder: that folder, as ``mkdir -p`` does inside the sandbox)."""
        parts = [p for p in rel.split("/") if p]
        fd, done = os.dup(self.fd), ""
        try:
            while parts:
                name = parts.pop(0)
                step = f"{done}/{name}"
                try:
                    nxt = self.open(step, os.O_PATH | os.O_DIRECTORY)
                except FileNotFoundError:
                    try:
                        os.mkdir(name, mode, dir_fd=fd)  # mkdirat: a symlink at ``name`` is not followed
                    except FileExistsError:
                        pass
                    try:
                        nxt = self.open(step, os.O_PATH | os.O_DIRECTORY)
                    except FileNotFoundError:
                        if _links >= 40 or not stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                            raise
                        target = os.readlink(name, dir_fd=fd)
                        base = "" if target.startswith("/") else done
                        return self.folder("/".join([base, target, *parts]), mode, _links + 1)
                os.close(fd)
                fd, done = nxt, step
            fd, out = -1, fd
            return out
        finally:
            if fd >= 0:
                os.close(fd)

    def file(self, rel: str) -> int:
        """An fd of the file ``rel`` (made empty where missing: a mount point)."""
        parent, name = self._parent(rel)
        try:
            os.close(os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
                             dir_fd=parent))
        except FileExistsError:
            pass
        finally:
            os.close(parent)
        return self.open(rel, os.O_PATH)

    def write(self, rel: str, text: str, like: os.stat_result | None = None) -> None:
        """``rel`` replaced by a new file holding ``text`` (a symlink there is replaced, never followed), with the
        owner and mode of ``like`` (else root's, 0644)."""
        parent, name = self._parent(rel)
        try:
            try:
                os.unlink(name, dir_fd=parent)
            except FileNotFoundError:
                pass
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                         dir_fd=parent)
            with os.fdopen(fd, "w") as f:
                f.write(text)
                if like is not None:
                    os.fchown(f.fileno(), like.st_uid, like.st_gid)
                os.fchmod(f.fileno(), stat.S_IMODE(like.st_mode) if like is not None else 0o644)
        finally:
            os.close(parent)

    def remove(self, rel: str) -> None:
        """``rel`` gone (a folder with everything in it; a symlink itself, not what it points at)."""
        parent, name = self._parent_existing(rel)
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
                try:
                    for entry in os.listdir(sub):
                        self.remove(f"{rel}/{entry}")
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=parent)
            else:
                os.unlink(name, dir_fd=parent)
        finally:
            os.close(parent)

    def symlink(self, target: str, rel: str) -> None:
        parent, name = self._parent(rel)
        try:
            os.symlink(target, name, dir_fd=parent)
        finally:
            os.close(parent)

    def mount(self, src: str, rel: str, fstype: str | None, flags: int = 0, data: str | None = None,
              is_file: bool = False) -> None:
        """``mount`` onto ``rel`` (a folder, or with ``is_file`` a file, made where missing)."""
        fd = self.file(rel) if is_file else self.folder(rel)
        try:
            mount(src, f"/proc/self/fd/{fd}", fstype, flags, data)
        except OSError as exc:
            raise OSError(exc.errno, f"mount {fstype or 'bind'} {src} on /{rel.strip('/')} in the sandbox's root "
                                     f"({data or ''}): {os.strerror(exc.errno)}") from None
        finally:
            os.close(fd)

    def remount(self, rel: str, flags: int) -> None:
        """Change the flags of the mount on ``rel`` (resolved again: the fd of the folder under it would not do)."""
        fd = self.open(rel, os.O_PATH)
        try:
            mount("none", f"/proc/self/fd/{fd}", None, MS_REMOUNT | MS_BIND | flags)
        finally:
            os.close(fd)

    def bind_ro(self, rel: str) -> None:
        fd = self.open(rel, os.O_PATH)
        try:
            mount(f"/proc/self/fd/{fd}", f"/proc/self/fd/{fd}", None, MS_BIND)
        finally:
            os.close(fd)
        self.remount(rel, MS_RDONLY | MS_NOSUID | MS_NODEV)


def _sanitize_etc(root: Root) -> None:
    for name in ETC_SANITIZED:
        host = f"/etc/{name}"
        if not os.path.isfile(host):
            continue
        try:
            with open(host) as f:
                lines = f.read().splitlines()
            out = []
            for line in lines:
                fields = line.split(":")
                if len(fields) > 1:
                    fields[1] = "*"
                out.append(":".join(fields))
            root.write(f"etc/{name}", "\n".join(out) + ("\n" if out else ""), like=os.stat(host))
        except OSError:  # an unprivileged user namespace cannot read it either: it stays unreadable
            try:
                root.remove(f"etc/{name}")
            except OSError:
                pass
    for pattern in ETC_REMOVED_GLOBS:
        for host in glob.glob(f"/etc/{pattern}"):
            try:
                root.remove(host)
            except OSError:
                pass
    for rel in not_world_readable("/etc"):
        if rel not in ETC_SANITIZED and rel not in ETC_KEPT:
            try:
                root.remove(f"etc/{rel}")
            except OSError:  # an unprivileged user namespace: neither PID 1 nor the task can read it
                pass


def _overlay_or_bind(src: str, root: Root, rel: str, stage: str, key: str, layer: str | None = None) -> None:
    upper, work = f"{stage}/u/{key}", f"{stage}/w/{key}"
    cached = f"{layer}/{rel}" if layer and os.path.isdir(f"{layer}/{rel}") and not os.path.islink(f"{layer}/{rel}") \
        else None
    os.makedirs(upper)
    os.makedirs(work)
    fd = root.folder(rel)
    dst = f"/proc/self/fd/{fd}"
    try:
        overlay(f"{cached}:{src}" if cached else src, upper, work, dst)
    except OSError:  # a directory holding other mounts, in a user namespace: read-only bind
        try:
            mount(src, dst, None, MS_BIND | MS_REC)
            try:
                root.remount(rel, MS_RDONLY | MS_NODEV)
            except OSError:
                pass
        except OSError:
            pass  # stays empty
    finally:
        os.close(fd)


def _open_exposed(paths: list[str]) -> list[tuple[str, int, bool]]:
    """(path, O_PATH fd, is_dir) of each ``expose`` path, opened before the stage tmpfs covers /tmp."""
    out = []
    for host in paths:
        host = os.path.realpath(host)
        if host == "/" or not os.path.exists(host):
            continue
        out.append((host, os.open(host, os.O_PATH | os.O_CLOEXEC), os.path.isdir(host)))
    return out


def _expose(root: Root, host: str, fd: int, is_dir: bool) -> None:
    """``host`` visible read-only at the same path (as the sandbox resolves it)."""
    try:
        root.mount(f"/proc/self/fd/{fd}", host, None, MS_BIND | MS_REC, is_file=not is_dir)
    except OSError as exc:
        raise OSError(exc.errno, f"expose {host}: {exc.strerror}") from None
    finally:
        os.close(fd)
    try:
        root.remount(host, MS_RDONLY | MS_NOSUID)
    except OSError:
        root.remount(host, MS_RDONLY | MS_NOSUID | MS_NODEV)


def _host_folders(root: Root, stage: str, layer: str | None = None) -> None:
    """Deny by default: only the allowed host folders, each an overlay (read-only lower, upper in the tmpfs; a cached
    build's ``layer`` between them)."""
    for name in sorted(os.listdir("/")):
        src = f"/{name}"
        if os.path.islink(src):
            if root.lstat(name) is None:  # (the layer holds it already)
                root.symlink(os.readlink(src), name)
        elif os.path.isdir(src):
            os.close(root.folder(name, 0o700 if name == "root" else 0o755))
            if name in ALLOWED_TOP:
                _overlay_or_bind(src, root, name, stage, name, layer)
    for name in ("root", "home", "opt", "srv", "mnt", "media", "var"):
        os.close(root.folder(name, mode=0o700 if name == "root" else 0o755))
    for name in VAR_DIRS:
        os.close(root.folder(f"var/{name}"))
    for name, target in (("run", "/run"), ("lock", "/run/lock")):
        if root.lstat(f"var/{name}") is None:
            root.symlink(target, f"var/{name}")
    for rel in VAR_ALLOWED:
        if os.path.isdir(f"/var/{rel}") and not os.path.islink(f"/var/{rel}"):
            _overlay_or_bind(f"/var/{rel}", root, f"var/{rel}", stage, "var-" + rel.replace("/", "-"), layer)
    _sanitize_etc(root)


def _image_skeleton(root: Root) -> None:
    """The folders the sandbox needs in an image's root, where the image has nothing (not even a symlink) there."""
    for rel, mode in (("proc", 0o555), ("dev", 0o755), ("sys", 0o555), ("tmp", 0o1777), ("var/tmp", 0o1777),
                      ("run", 0o755), ("root", 0o700), ("etc", 0o755)):
        if root.lstat(rel) is None:
            os.close(root.folder(rel, mode))


def _write_resolv_conf(root: Root, text: str) -> None:
    """The sandbox's own /etc/resolv.conf (a symlink, e.g. systemd's stub, is replaced; the host's is untouched)."""
    try:
        root.write("etc/resolv.conf", text)
    except OSError as exc:  # a read-only /etc (user namespace without overlay): names resolve as the host's do
        print(f"sandbox: cannot write /etc/resolv.conf ({exc}); DNS queries are not recorded", file=sys.stderr)


def build_root(cfg: dict) -> int | None:
    """Build the sandbox's root and pivot into it; returns an fd of the disk's top folder (kept open for core's stop,
    which shuts that file system down through it), or None without a disk."""
    sizes = cfg.get("tmpfs_mb") or {}
    storage_mb = int(sizes.get("root") or 1024)
    shm_mb = int(sizes.get("shm") or 64)
    exposed = _open_exposed(cfg.get("expose") or [])
    rootfs_fd = os.open(cfg["rootfs"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if cfg.get("rootfs") else None
    # the build cache (sandbox/build_cache.py): a build's writable layer is a host folder kept after it; a later
    # start gets that layer read-only, below its own writable one
    kept, layer = (os.open(cfg[k], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if cfg.get(k) else None
                   for k in ("stage_dir", "layer"))
    stage = "/tmp"  # an existing directory; the tmpfs is mounted over it in *this* mount ns only
    disk = cfg.get("disk")  # storage past memory: an ext4 on a loop device (sandbox/storage.py) instead
    disk_fd = None
    if kept is not None:
        mount(f"/proc/self/fd/{kept}", stage, None, MS_BIND)
        mount("none", stage, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV)
        os.close(kept)
    elif disk:
        mount(disk, stage, "ext4", MS_NOSUID | MS_NODEV, cfg.get("disk_options") or None)
        disk_fd = os.open(stage, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, f"size={storage_mb}m,mode=755")
    for d in ("u", "w", "root"):
        os.mkdir(f"{stage}/{d}", 0o755)
    path = f"{stage}/root"
    lower = None
    if layer is not None:
        lower = f"{stage}/layer"
        os.mkdir(lower, 0o755)
        mount(f"/proc/self/fd/{layer}", lower, None, MS_BIND)
        mount("none", lower, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.close(layer)
    if rootfs_fd is not None:  # the image's userland: one overlay over the unpacked root file system
        os.makedirs(f"{stage}/u/image")
        os.makedirs(f"{stage}/w/image")
        lowers = f"{lower}:" if lower else ""
        overlay(f"{lowers}/proc/self/fd/{rootfs_fd}", f"{stage}/u/image", f"{stage}/w/image", path)
        os.close(rootfs_fd)
    elif lower:  # the layer's own folders (/app, /opt, ...) under the root
        os.makedirs(f"{stage}/u/root")
        os.makedirs(f"{stage}/w/root")
        overlay(lower, f"{stage}/u/root", f"{stage}/w/root", path)
    else:
        mount(path, path, None, MS_BIND)  # a mount point for pivot_root, on the same tmpfs (one size budget)
    root = Root(path)
    if rootfs_fd is not None:
        _image_skeleton(root)
    else:
        _host_folders(root, stage, lower)
    if cfg.get("resolv_conf"):
        _write_resolv_conf(root, cfg["resolv_conf"])

    # /proc: a fresh instance for the new PID namespace (no /proc/1/root path to the host)
    root.mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for rel in ("proc/sys", "proc/sysrq-trigger", "proc/irq", "proc/bus", "proc/fs"):
        if root.lstat(rel) is not None:
            try:
                root.bind_ro(rel)
            except OSError:
                pass
    # /dev
    root.mount("tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=1024k,mode=755")
    for name in ("null", "zero", "full", "random", "urandom", "tty"):
        if os.path.exists(f"/dev/{name}"):
            root.mount(f"/dev/{name}", f"dev/{name}", None, MS_BIND, is_file=True)
    try:
        root.mount("devpts", "dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
        root.symlink("pts/ptmx", "dev/ptmx")
    except OSError as exc:
        print(f"sandbox: no devpts ({exc}); pseudo-terminals (tmux) will not work", file=sys.stderr)
    root.mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, f"size={shm_mb}m,mode=1777")
    for src, dst in (("/proc/self/fd", "fd"), ("/proc/self/fd/0", "stdin"),
                     ("/proc/self/fd/1", "stdout"), ("/proc/self/fd/2", "stderr")):
        root.symlink(src, f"dev/{dst}")
    # /sys read-only where allowed (needs the network namespace we own)
    try:
        root.mount("sysfs", "sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        try:
            root.mount("tmpfs", "sys", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k")
        except OSError:
            pass
    for rel in MASKED:  # as Docker does: a file reads as empty, a folder is an empty read-only tmpfs
        st = root.lstat(rel)
        try:
            if st is not None and stat.S_ISREG(st.st_mode):
                root.mount("/dev/null", rel, None, MS_BIND, is_file=True)
            elif st is not None and stat.S_ISDIR(st.st_mode):
                root.mount("tmpfs", rel, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=555")
        except OSError:
            pass
    # scratch directories: fresh, never the host's
    for rel, mode, key in (("tmp", "1777", "tmp"), ("var/tmp", "1777", "var_tmp"), ("run", "755", "run")):
        st = root.lstat(rel)
        if st is not None and stat.S_ISLNK(st.st_mode):
            continue
        if disk and key != "run":  # on the disk, as in a container's writable layer
            os.mkdir(f"{stage}/{key}")
            os.chmod(f"{stage}/{key}", int(mode, 8))
            root.mount(f"{stage}/{key}", rel, None, MS_BIND)
            continue
        root.mount("tmpfs", rel, "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(sizes.get(key) or 64)}m,mode={mode}")
    # hidden host paths (task sources with their solutions, the jobs dir, ...)
    for rel in cfg.get("hide") or []:
        st = root.lstat(rel)
        if st is None or stat.S_ISLNK(st.st_mode):
            continue
        if stat.S_ISDIR(st.st_mode):
            root.mount("tmpfs", rel, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=755")
        else:
            root.mount("/dev/null", rel, None, MS_BIND, is_file=True)

    for host, fd, is_dir in exposed:  # last: over the fresh scratch folders too
        _expose(root, host, fd, is_dir)

    os.close(root.fd)
    os.chdir(path)
    pivot_root(".", ".")
    umount2(".", MNT_DETACH)
    os.chdir("/")
    return disk_fd


# ---------------------------------------------------------------- the recording resolver (no network)
# Hand-written rather than dnsmasq & co: they log names but not which process asked, and the verifier/agent
# split needs the asker; and a parser in Python is a smaller thing to expose to the task's packets than C as root.
DNS_REFUSED = 5
MAX_NAME = 253  # a DNS name's longest form: a record stays one atomic pipe write (PIPE_BUF)


def dns_question(data: bytes) -> tuple[bytes, str, int] | None:
    """(the REFUSED reply, the name asked, its type) of a DNS query; None for anything that is not one."""
    if len(data) < 12:
        return None
    qid, flags, qdcount = struct.unpack(">HHH", data[:6])
    if flags & 0x8000 or qdcount < 1:
        return None
    i, labels = 12, []
    while True:
        if i >= len(data) or len(labels) > 127:
            return None
        n = data[i]
        if n == 0:
            i += 1
            break
        if n & 0xC0:
            return None
        labels.append(data[i + 1:i + 1 + n])
        i += 1 + n
    if i + 4 > len(data):
        return None
    qtype = struct.unpack(">H", data[i:i + 2])[0]
    reply = struct.pack(">HHHHHH", qid, 0x8000 | (flags & 0x7900) | 0x0080 | DNS_REFUSED, 1, 0, 0, 0) + data[12:i + 4]
    return reply, b".".join(labels).decode("ascii", "replace").lower(), qtype


OWNER_SCAN_SEC = 0.05  # per query: PID 1 must keep reaping; past it the asker is unknown (counted as an orphan)


def _socket_owner(port: int) -> int | None:
    """The pid (in this PID namespace) holding the UDP socket bound to ``port``: /proc/net/udp gives its inode,
    /proc/<pid>/fd the process. Gives up (None) after OWNER_SCAN_SEC."""
    deadline = time.monotonic() + OWNER_SCAN_SEC
    hexport = f"{port:04X}"
    targets = set()
    for table in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) > 9 and parts[1].rsplit(":", 1)[-1] == hexport:
                targets.add(f"socket:[{parts[9]}]")
    if not targets:
        return None
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or pid == "1":
            continue
        if time.monotonic() > deadline:
            return None
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds[:4096]:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in targets:
                    return int(pid)
            except OSError:
                continue
    return None


def _lineage(pid: int) -> tuple[str, bool]:
    """(program name, orphan): a process descends from a running command when its chain of parents ends at one
    whose parent is outside this PID namespace (ppid 0: sandbox/enter.py's child); an orphan's ends at PID 1."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            comm = f.read().strip()
    except OSError:
        return "?", True
    for _ in range(256):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return comm, True
        if ppid == 0:
            return comm, False
        if ppid == 1:
            return comm, True
        pid = ppid
    return comm, True


def answer_dns(sock: socket.socket, report_fd: int, state: dict) -> None:
    try:
        data, addr = sock.recvfrom(4096)
    except OSError:
        return
    q = dns_question(data)
    if q is None:
        return
    reply, name, qtype = q
    if report_fd >= 0:  # every query, no cap: the owner reads as they come and keeps counts and a bounded set
        pid = _socket_owner(addr[1])
        comm, orphan = _lineage(pid) if pid else ("?", True)
        record = {"name": name[:MAX_NAME], "type": qtype, "comm": comm[:16], "orphan": orphan}
        if state["lost"]:
            record["lost"] = state["lost"]
        try:
            os.write(report_fd, (json.dumps(record) + "\n").encode())  # before the answer: its asker still runs
            state["lost"] = 0
        except OSError:  # a full pipe (the owner is not reading): counted, and told with the next record
            state["lost"] += 1
    try:
        sock.sendto(reply, addr)
    except OSError:
        pass


def main() -> int:
    with os.fdopen(int(sys.argv[-1]), "rb") as f:  # the config, as a memfd: PID 1's command line is readable inside
        cfg = json.loads(f.read())
    for fd in cfg.get("close_fds") or []:  # the interpreter and this script, as core passed them
        os.close(fd)
    _libc.prctl(15, b"sandbox-init", 0, 0, 0)  # PR_SET_NAME: not the fd number it was started as
    lifeline = int(cfg.get("lifeline_fd", -1))
    deadline = time.monotonic() + float(cfg.get("wall_sec") or 86400)
    try:  # never the OOM killer's choice (commands get +500): a full tmpfs must not end the sandbox
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
    except OSError:
        pass  # an unprivileged user namespace may not lower it
    try:
        disk_fd = build_root(cfg)
        try:
            socket.sethostname(cfg.get("hostname") or "sandbox")
        except (OSError, AttributeError):
            pass
        loopback_up()
        dns = None
        if cfg.get("resolver"):
            dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            dns.bind(("127.0.0.1", 53))
            dns.setblocking(False)
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which raises
        print(f"SANDBOX_ERROR {type(exc).__name__}: {exc}", flush=True)
        return 3
    report_fd = int(cfg.get("report_fd", -1))
    if report_fd >= 0:
        os.set_blocking(report_fd, False)
    dns_state = {"lost": 0}
    # From here on this process (host root in root mode) lives in the sandbox's tree, which the task
    # can write: it must never import or load anything again (no path-based imports, exit with _exit).
    sys.path[:] = []
    sys.path_hooks[:] = []
    sys.path_importer_cache.clear()
    # No handler but SIGCHLD's: the kernel drops every signal a process of the namespace sends to its init unless
    # the init handles it (Python's own SIGINT handler included), so PID 1 is out of the task's reach; from the
    # host only SIGKILL ends it.
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    # Reap at once on SIGCHLD: zombies of killed processes would hold pids.max slots.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    devnull = os.open("/dev/null", os.O_RDWR)  # before READY: no command has run, /dev/null is still ours
    print("READY" if disk_fd is None else f"READY {disk_fd}", flush=True)  # core reaches the disk through that fd
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    while True:
        timeout = deadline - time.monotonic()
        if timeout <= 0:
            return 124  # wall time of the whole sandbox spent: everything in it dies with us
        fds = [wake_r] + ([lifeline] if lifeline >= 0 else []) + ([dns] if dns is not None else [])
        try:
            ready, _, _ = select.select(fds, [], [], min(timeout, 5.0))
        except InterruptedError:
            ready = []
        if lifeline in ready and not os.read(lifeline, 64):
            return 0  # the process that started the sandbox is gone
        if dns is not None and dns in ready:
            answer_dns(dns, report_fd, dns_state)
        if wake_r in ready:
            try:
                os.read(wake_r, 4096)
            except BlockingIOError:
                pass
        while True:  # reap orphans re-parented to us
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # no interpreter shutdown (it could import) inside the sandbox's tree
