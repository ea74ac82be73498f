"""PID 1 of a sandbox: builds its root, answers its DNS, reaps its orphans.
Runs in: any Python >= 3.11, standard library only, as ``python -I pid1.py sandbox_init:NAME CONFIG`` (sandbox.core).

It prints ``READY`` when the root is built, and exits when the wall-time deadline passes or the lifeline pipe from
the owning process closes; the kernel then kills every process of the namespace.
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


def bind_ro(path: str) -> None:
    mount(path, path, None, MS_BIND)
    mount(path, path, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


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
# secrets of the host's /etc: password hashes are replaced by "*", private keys are removed
ETC_SANITIZED = ("shadow", "shadow-", "gshadow", "gshadow-")
ETC_REMOVED_GLOBS = ("ssh/ssh_host_*_key", "ssl/private/*", "security/opasswd", "krb5.keytab")


def _sanitize_etc(root: str) -> None:
    for name in ETC_SANITIZED:
        host, inside = f"/etc/{name}", f"{root}/etc/{name}"
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
            with open(inside, "w") as f:
                f.write("\n".join(out) + ("\n" if out else ""))
        except OSError:  # an unprivileged user namespace cannot read it either: it stays unreadable
            try:
                os.unlink(inside)
            except OSError:
                pass
    for pattern in ETC_REMOVED_GLOBS:
        for host in glob.glob(f"/etc/{pattern}"):
            try:
                os.unlink(root + host)
            except OSError:
                pass


def _overlay_or_bind(src: str, dst: str, stage: str, key: str) -> None:
    upper, work = f"{stage}/u/{key}", f"{stage}/w/{key}"
    os.makedirs(upper)
    os.makedirs(work)
    try:
        overlay(src, upper, work, dst)
    except OSError:  # a directory holding other mounts, in a user namespace: read-only bind
        try:
            mount(src, dst, None, MS_BIND | MS_REC)
            try:
                mount(src, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NODEV)
            except OSError:
                pass
        except OSError:
            pass  # stays empty


def _open_exposed(paths: list[str]) -> list[tuple[str, int, bool]]:
    """(path, O_PATH fd, is_dir) of each ``expose`` path, opened before the stage tmpfs covers /tmp."""
    out = []
    for host in paths:
        host = os.path.realpath(host)
        if host == "/" or not os.path.exists(host):
            continue
        out.append((host, os.open(host, os.O_PATH | os.O_CLOEXEC), os.path.isdir(host)))
    return out


def _expose(root: str, host: str, fd: int, is_dir: bool) -> None:
    """``host`` visible read-only at the same path."""
    dst = root + host
    if is_dir:
        os.makedirs(dst, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        if not os.path.exists(dst):
            open(dst, "w").close()
    src = f"/proc/self/fd/{fd}"
    mount(src, dst, None, MS_BIND | MS_REC)
    os.close(fd)
    try:
        mount(dst, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    except OSError:
        mount(dst, dst, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _host_folders(root: str, stage: str) -> None:
    """Deny by default: only the allowed host folders, each an overlay (read-only lower, upper in the tmpfs)."""
    mount(root, root, None, MS_BIND)  # a mount point for pivot_root, on the same tmpfs (one size budget)
    for name in sorted(os.listdir("/")):
        src, dst = f"/{name}", f"{root}/{name}"
        if os.path.islink(src):
            os.symlink(os.readlink(src), dst)
        elif os.path.isdir(src):
            os.mkdir(dst, 0o700 if name == "root" else 0o755)
            if name in ALLOWED_TOP:
                _overlay_or_bind(src, dst, stage, name)
    for name in ("root", "home", "opt", "srv", "mnt", "media", "var"):
        os.makedirs(f"{root}/{name}", mode=0o700 if name == "root" else 0o755, exist_ok=True)
    for name in VAR_DIRS:
        os.makedirs(f"{root}/var/{name}", exist_ok=True)
    for name, target in (("run", "/run"), ("lock", "/run/lock")):
        if not os.path.lexists(f"{root}/var/{name}"):
            os.symlink(target, f"{root}/var/{name}")
    for rel in VAR_ALLOWED:
        if os.path.isdir(f"/var/{rel}") and not os.path.islink(f"/var/{rel}"):
            os.makedirs(f"{root}/var/{rel}", exist_ok=True)
            _overlay_or_bind(f"/var/{rel}", f"{root}/var/{rel}", stage, "var-" + rel.replace("/", "-"))
    _sanitize_etc(root)


def _image_root(root: str, stage: str, rootfs_fd: int) -> None:
    """The image's userland: one overlay over the unpacked root file system (opened before /tmp was covered)."""
    os.makedirs(f"{stage}/u/image")
    os.makedirs(f"{stage}/w/image")
    overlay(f"/proc/self/fd/{rootfs_fd}", f"{stage}/u/image", f"{stage}/w/image", root)
    os.close(rootfs_fd)
    for rel, mode in (("proc", 0o555), ("dev", 0o755), ("sys", 0o555), ("tmp", 0o1777), ("var/tmp", 0o1777),
                      ("run", 0o755), ("root", 0o700), ("etc", 0o755)):
        if not os.path.lexists(f"{root}/{rel}"):
            os.makedirs(f"{root}/{rel}", mode=mode)


def _write_resolv_conf(root: str, text: str) -> None:
    """The sandbox's own /etc/resolv.conf (a symlink, e.g. systemd's stub, is replaced; the host's is untouched)."""
    path = f"{root}/etc/resolv.conf"
    try:
        if os.path.lexists(path):
            os.unlink(path)
        with open(path, "w") as f:
            f.write(text)
    except OSError as exc:  # a read-only /etc (user namespace without overlay): names resolve as the host's do
        print(f"sandbox: cannot write /etc/resolv.conf ({exc}); DNS queries are not recorded", file=sys.stderr)


def build_root(cfg: dict) -> None:
    sizes = cfg.get("tmpfs_mb") or {}
    storage_mb = int(sizes.get("root") or 1024)
    shm_mb = int(sizes.get("shm") or 64)
    exposed = _open_exposed(cfg.get("expose") or [])
    rootfs_fd = os.open(cfg["rootfs"], os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC) if cfg.get("rootfs") else None
    stage = "/tmp"  # an existing directory; the tmpfs is mounted over it in *this* mount ns only
    mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, f"size={storage_mb}m,mode=755")
    for d in ("u", "w", "root"):
        os.mkdir(f"{stage}/{d}", 0o755)
    root = f"{stage}/root"
    if rootfs_fd is not None:
        _image_root(root, stage, rootfs_fd)
    else:
        _host_folders(root, stage)
    if cfg.get("resolv_conf"):
        _write_resolv_conf(root, cfg["resolv_conf"])

    def p(rel: str) -> str:
        return root + rel

    def ensure_dir(path: str, mode: int = 0o755) -> None:
        os.makedirs(path, mode=mode, exist_ok=True)

    # /proc: a fresh instance for the new PID namespace (no /proc/1/root path to the host)
    ensure_dir(p("/proc"))
    mount("proc", p("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    for rel in ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"):
        if os.path.exists(p(rel)):
            try:
                bind_ro(p(rel))
            except OSError:
                pass
    # /dev
    ensure_dir(p("/dev"))
    mount("tmpfs", p("/dev"), "tmpfs", MS_NOSUID | MS_NOEXEC, "size=1024k,mode=755")
    for name in ("null", "zero", "full", "random", "urandom", "tty"):
        if os.path.exists(f"/dev/{name}"):
            open(p(f"/dev/{name}"), "w").close()
            mount(f"/dev/{name}", p(f"/dev/{name}"), None, MS_BIND)
    for rel in ("/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/kmsg"):
        if os.path.isfile(p(rel)):
            try:
                mount(p("/dev/null"), p(rel), None, MS_BIND)
            except OSError:
                pass
    ensure_dir(p("/dev/pts"))
    try:
        mount("devpts", p("/dev/pts"), "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
        os.symlink("pts/ptmx", p("/dev/ptmx"))
    except OSError as exc:
        print(f"sandbox: no devpts ({exc}); pseudo-terminals (tmux) will not work", file=sys.stderr)
    ensure_dir(p("/dev/shm"))
    mount("tmpfs", p("/dev/shm"), "tmpfs", MS_NOSUID | MS_NODEV, f"size={shm_mb}m,mode=1777")
    for src, dst in (("/proc/self/fd", "fd"), ("/proc/self/fd/0", "stdin"),
                     ("/proc/self/fd/1", "stdout"), ("/proc/self/fd/2", "stderr")):
        os.symlink(src, p(f"/dev/{dst}"))
    # /sys read-only where allowed (needs the network namespace we own)
    ensure_dir(p("/sys"))
    try:
        mount("sysfs", p("/sys"), "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except OSError:
        try:
            mount("tmpfs", p("/sys"), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k")
        except OSError:
            pass
    # scratch directories: fresh, never the host's
    for rel, mode, key in (("/tmp", "1777", "tmp"), ("/var/tmp", "1777", "var_tmp"), ("/run", "755", "run")):
        if os.path.islink(p(rel)):
            continue
        ensure_dir(p(rel))
        mount("tmpfs", p(rel), "tmpfs", MS_NOSUID | MS_NODEV, f"size={int(sizes.get(key) or 64)}m,mode={mode}")
    # hidden host paths (task sources with their solutions, the jobs dir, ...)
    for rel in cfg.get("hide") or []:
        target = p(rel)
        if os.path.islink(target) or not os.path.exists(target):
            continue
        if os.path.isdir(target):
            mount("tmpfs", target, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=4k,mode=755")
        else:
            mount(p("/dev/null"), target, None, MS_BIND)

    for host, fd, is_dir in exposed:  # last: over the fresh scratch folders too
        _expose(root, host, fd, is_dir)

    os.chdir(root)
    pivot_root(".", ".")
    umount2(".", MNT_DETACH)
    os.chdir("/")


# ---------------------------------------------------------------- the recording resolver (no network)
# Hand-written rather than dnsmasq & co: they log names but not which process asked, and the verifier/agent
# split needs the asker; and a parser in Python is a smaller thing to expose to the task's packets than C as root.
DNS_REFUSED = 5
MAX_REPORTS = 2000  # names reported per sandbox; later queries are still answered


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
    if state["reported"] < MAX_REPORTS and report_fd >= 0:
        state["reported"] += 1
        pid = _socket_owner(addr[1])
        comm, orphan = _lineage(pid) if pid else ("?", True)
        line = json.dumps({"name": name, "type": qtype, "comm": comm, "orphan": orphan}) + "\n"
        try:
            os.write(report_fd, line.encode())  # before the answer: the asker is still waiting, its command running
        except OSError:  # a full pipe (the owner is not reading): the record is lost, the answer is not
            pass
    try:
        sock.sendto(reply, addr)
    except OSError:
        pass


def main() -> int:
    cfg = json.loads(sys.argv[-1])
    lifeline = int(cfg.get("lifeline_fd", -1))
    deadline = time.monotonic() + float(cfg.get("wall_sec") or 86400)
    try:  # never the OOM killer's choice (commands get +500): a full tmpfs must not end the sandbox
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("-1000")
    except OSError:
        pass  # an unprivileged user namespace may not lower it
    try:
        build_root(cfg)
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
    dns_state = {"reported": 0}
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
    print("READY", flush=True)
    devnull = os.open("/dev/null", os.O_RDWR)
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
