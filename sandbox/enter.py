"""Enter a running sandbox and run one command there with a task's privileges (replaces nsenter + setpriv).

Runs in: the host's Python (any >= 3.11, standard library only), started by ``sandbox.core`` as
``python -I -S enter.py FD`` by absolute path, so that nothing of the sandbox's file system is loaded
while this process still holds the host's privileges. FD is an inherited file (a memfd) holding the
JSON spec: ``pid`` (host pid of the sandbox's PID 1), ``userns``, ``uid``, ``gid``, ``groups``,
``caps`` (the capability numbers the command keeps), ``seccomp`` (apply ``seccomp_filter``), ``argv``, ``env``.

Order, all before anything of the sandbox runs:
  1. open /proc/PID/ns/{user,mnt,uts,ipc,net,pid} and /proc/PID/root (the sandbox's PID 1)
  2. setns into user (userns mode), mnt, uts, ipc, net, pid; fchdir to that root and chroot(".")
  3. drop the capability bounding set to ``caps``, clear ambient capabilities, set the groups,
     gid and uid, capset(effective = permitted = ``caps``, inheritable = none), PR_SET_NO_NEW_PRIVS,
     the seccomp filter (``seccomp_filter``, built before step 2: EPERM for namespaces, mounts,
     io_uring, keyrings, BPF, perf, userfaultfd, modules, kexec, swap, reboot, file handles)
  4. fork (the child is in the sandbox's PID namespace) and execve ``argv`` from the sandbox's tree
     with exactly ``env``; the parent waits and exits like the child.
Every module and the libc handle are loaded at import time; after the chroot only system calls run
(no imports, no NSS look-ups: the caller resolves users and groups inside the sandbox beforehand).
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import struct
import sys

EXIT_SANDBOX_GONE = 251  # the sandbox's PID 1 is not there (any more): core turns it into a command failure
EXIT_ENTER_FAILED = 252

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACES = (("mnt", CLONE_NEWNS), ("uts", CLONE_NEWUTS), ("ipc", CLONE_NEWIPC), ("net", CLONE_NEWNET),
              ("pid", CLONE_NEWPID))

PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
SECCOMP_MODE_FILTER = 2
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

CAP_NUMBERS = {
    "chown": 0, "dac_override": 1, "dac_read_search": 2, "fowner": 3, "fsetid": 4, "kill": 5, "setgid": 6,
    "setuid": 7, "setpcap": 8, "linux_immutable": 9, "net_bind_service": 10, "net_broadcast": 11,
    "net_admin": 12, "net_raw": 13, "ipc_lock": 14, "ipc_owner": 15, "sys_module": 16, "sys_rawio": 17,
    "sys_chroot": 18, "sys_ptrace": 19, "sys_pacct": 20, "sys_admin": 21, "sys_boot": 22, "sys_nice": 23,
    "sys_resource": 24, "sys_time": 25, "sys_tty_config": 26, "mknod": 27, "lease": 28, "audit_write": 29,
    "audit_control": 30, "setfcap": 31, "mac_override": 32, "mac_admin": 33, "syslog": 34, "wake_alarm": 35,
    "block_suspend": 36, "audit_read": 37, "perfmon": 38, "bpf": 39, "checkpoint_restore": 40,
}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
_libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
_libc.chroot.argtypes = [ctypes.c_char_p]
_libc.syscall.restype = ctypes.c_long


# ---------------------------------------------------------------- seccomp: a deny list like Docker's default
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
# system calls that fail with EPERM (name -> number on x86_64, aarch64): namespaces, mounts, kernel
# keyring, io_uring, BPF, perf, userfaultfd, modules, kexec, swap, reboot, handles, accounting, quotas
DENIED = {
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41), "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    "io_uring_setup": (425, 425), "io_uring_enter": (426, 426), "io_uring_register": (427, 427),
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "kexec_load": (246, 104),
    "kexec_file_load": (320, 294), "init_module": (175, 105), "finit_module": (313, 273),
    "delete_module": (176, 106), "swapon": (167, 224), "swapoff": (168, 225), "reboot": (169, 142),
    "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264), "acct": (163, 89),
    "quotactl": (179, 60), "lookup_dcookie": (212, 18), "syslog": (103, 116),
}
NR_CLONE = {"x86_64": 56, "aarch64": 220}
NR_CLONE3 = 435  # both: ENOSYS, so that the C library falls back to clone, whose flags are checked
CLONE_NEW_ANY = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38


def seccomp_filter(machine: str) -> bytes | None:
    """The classic BPF program of the filter for this architecture (None where unknown)."""
    if machine not in AUDIT_ARCH:
        return None
    col = 0 if machine == "x86_64" else 1

    def ins(code, k, jt=0, jf=0):
        return struct.pack("HBBI", code, jt, jf, k)

    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    deny = SECCOMP_RET_ERRNO | EPERM
    prog = [ins(ld, 4), ins(jeq, AUDIT_ARCH[machine], 1, 0), ins(ret, deny),  # another ABI (i386, arm32): no
            ins(ld, 0)]
    if machine == "x86_64":
        prog += [ins(jge, 0x40000000, 0, 1), ins(ret, deny)]  # the x32 ABI
    prog += [ins(jeq, NR_CLONE3, 0, 1), ins(ret, SECCOMP_RET_ERRNO | ENOSYS)]
    for nrs in DENIED.values():
        prog += [ins(jeq, nrs[col], 0, 1), ins(ret, deny)]
    prog += [ins(jeq, NR_CLONE[machine], 0, 3), ins(ld, 16), ins(jset, CLONE_NEW_ANY, 0, 1), ins(ret, deny),
             ins(ret, SECCOMP_RET_ALLOW)]
    return b"".join(prog)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 40


def _capset(caps: list[int]) -> None:
    mask = 0
    for c in caps:
        mask |= 1 << c
    hdr = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    for i in range(2):
        word = (mask >> (32 * i)) & 0xFFFFFFFF
        data[i].effective = data[i].permitted = word
        data[i].inheritable = 0
    _check(_libc.capset(ctypes.byref(hdr), data), "capset")


def _fail(code: int, msg: str) -> None:
    try:
        os.write(2, f"sandbox: {msg}\n".encode(errors="replace"))
    finally:
        os._exit(code)


def main() -> None:
    fd = int(sys.argv[1])
    with os.fdopen(fd, "rb") as f:
        spec = json.loads(f.read())
    pid = int(spec["pid"])
    argv = [os.fsencode(a) for a in spec["argv"]]
    env = {os.fsencode(k): os.fsencode(v) for k, v in spec["env"].items()}
    keep = sorted(set(int(c) for c in spec["caps"]))
    uid, gid = int(spec.get("uid", 0)), int(spec.get("gid", 0))
    groups = [int(g) for g in spec.get("groups") or []]
    userns = bool(spec.get("userns"))
    last_cap = _last_cap()
    # no import may resolve inside the sandbox's tree later (its /root, /usr/lib/python3... are the task's)
    sys.path[:] = []
    sys.path_hooks[:] = []
    sys.path_importer_cache.clear()
    prog = None
    if spec.get("seccomp", True):
        raw = seccomp_filter(os.uname().machine)
        if raw is None:
            _fail(EXIT_ENTER_FAILED, f"no seccomp filter for {os.uname().machine}")
        buf = ctypes.create_string_buffer(raw, len(raw))
        prog = _SockFprog(len(raw) // 8, ctypes.cast(buf, ctypes.c_void_p))
    # 1. everything we need from the host side, opened while the host's /proc is ours
    try:  # the OOM killer picks the commands first, never the sandbox's PID 1 (-1000)
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("500")
    except OSError:
        pass
    try:
        fds = {}
        if userns:
            fds["user"] = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
        for name, _ in NAMESPACES:
            fds[name] = os.open(f"/proc/{pid}/ns/{name}", os.O_RDONLY)
        root_fd = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY)
    except (FileNotFoundError, ProcessLookupError):
        _fail(EXIT_SANDBOX_GONE, "the sandbox is not running any more (its PID 1 is gone)")
    except OSError as exc:
        _fail(EXIT_ENTER_FAILED, f"cannot open the sandbox's namespaces: {exc}")
    try:
        # 2. into the namespaces and the sandbox's root
        if userns:
            _check(_libc.setns(fds["user"], CLONE_NEWUSER), "setns user")
        for name, flag in NAMESPACES:
            _check(_libc.setns(fds[name], flag), f"setns {name}")
        for f in fds.values():
            os.close(f)
        os.fchdir(root_fd)
        _check(_libc.chroot(b"."), "chroot")
        os.close(root_fd)
        os.chdir("/")
        # 3. privileges: nothing of the sandbox has run yet
        for cap in range(last_cap + 1):
            if cap not in keep:
                rc = _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
                if rc != 0 and ctypes.get_errno() != 22:  # EINVAL: a capability this kernel lacks
                    _check(rc, f"drop capability {cap} from the bounding set")
        _libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
        if not userns:
            os.setgroups(groups)
            os.setgid(gid)
        if uid != 0:
            os.setresuid(uid, uid, uid)  # a non-root uid: permitted and effective capabilities are cleared
            _capset([])
        else:
            _capset(keep)
        _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
        if prog is not None:
            _check(_libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0), "seccomp")
    except OSError as exc:
        _fail(EXIT_ENTER_FAILED, f"cannot enter the sandbox: {exc}")
    # 4. the PID namespace applies to children
    child = os.fork()
    if child == 0:
        try:
            os.execve(argv[0], argv, env)
        except OSError as exc:
            _fail(127, f"cannot run {argv[0]!r}: {exc.strerror}")
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, lambda s, _f: os.kill(child, s))
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL, SIGSTOP
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
