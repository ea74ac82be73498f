"""Enter a running sandbox and run one command there with a task's privileges (replaces nsenter + setpriv).
Runs in: the host's Python (>= 3.11, standard library only), as ``python -I -S enter.py FD`` from sandbox.core.

FD is an inherited memfd holding the JSON spec (``pid``, ``pidfd``, ``userns``, ``uid``, ``gid``, ``groups``,
``caps``, ``seccomp``, ``argv``, ``env``). Everything is loaded before it enters; after the chroot only system calls
run.
The order of the steps: docs/sandbox.md#inside-the-modules.
"""

from __future__ import annotations

import ctypes
import json
import errno
import os
import select
import signal
import struct
import sys

EXIT_SANDBOX_GONE = 251  # the sandbox's PID 1 is not there (any more): core turns it into a command failure
EXIT_ENTER_FAILED = 252

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWCGROUP

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


# ---------------------------------------------------------------- seccomp: default-deny, like Docker's default
def _load_profile():
    """``sandbox/seccomp.py`` (the allow-list and syscall tables), by absolute path: run as ``python -I``,
    this file's folder is not on ``sys.path``; loaded at import time, before anything enters the sandbox."""
    if __package__:
        from sandbox import seccomp
        return seccomp
    import importlib.util
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seccomp.py")
    spec = importlib.util.spec_from_file_location("_sandbox_seccomp", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_profile = _load_profile()
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
CLONE_NEW_ANY = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_ERRNO = 0x00050000
EPERM, ENOSYS = 1, 38


def seccomp_filter(machine: str) -> bytes | None:
    """The classic BPF program of the filter for this architecture (None where unknown).

    Default-deny: EPERM for every system call not in ``seccomp.ALLOWED`` (or allowed by its
    arguments); ENOSYS for ``clone3`` and for numbers above the architecture's table. Every jump
    skips at most a few instructions (``JEQ nr, 0, 1; RET ALLOW`` per allowed call), so no offset
    comes near the 8-bit limit of classic BPF; the program stays far below 4096 instructions."""
    if machine not in AUDIT_ARCH:
        return None
    table = _profile.SYSCALLS[machine]

    def ins(code, k, jt=0, jf=0):
        return struct.pack("HBBI", code, jt, jf, k)

    ld, jeq, jgt, jge, jset, ret = 0x20, 0x15, 0x25, 0x35, 0x45, 0x06
    allow, deny, enosys = SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ERRNO | ENOSYS
    arg0 = 16  # the low 32 bits of args[0] (little-endian): clone flags, socket family, personality
    prog = [ins(ld, 4), ins(jeq, AUDIT_ARCH[machine], 1, 0), ins(ret, deny),  # another ABI (i386, arm32): no
            ins(ld, 0)]
    if machine == "x86_64":
        prog += [ins(jge, 0x40000000, 0, 1), ins(ret, deny)]  # the x32 ABI
    prog += [ins(jgt, max(table.values()), 0, 1), ins(ret, enosys)]  # newer than our table
    for name in _profile.ENOSYS_SYSCALLS:
        if name in table:
            prog += [ins(jeq, table[name], 0, 1), ins(ret, enosys)]
    # clone: no new namespaces (false branches keep the syscall number in A)
    prog += [ins(jeq, table["clone"], 0, 4), ins(ld, arg0), ins(jset, CLONE_NEW_ANY, 0, 1), ins(ret, deny),
             ins(ret, allow)]
    # socket: every family but those Docker refuses
    fams = _profile.SOCKET_FAMILIES_DENIED
    prog += [ins(jeq, table["socket"], 0, len(fams) + 3), ins(ld, arg0)]
    prog += [ins(jeq, fam, len(fams) - i, 0) for i, fam in enumerate(fams)]
    prog += [ins(ret, allow), ins(ret, deny)]
    # personality: the values Docker allows
    pers = _profile.PERSONALITIES
    prog += [ins(jeq, table["personality"], 0, len(pers) + 3), ins(ld, arg0)]
    prog += [ins(jeq, p, len(pers) - i, 0) for i, p in enumerate(pers)]
    prog += [ins(ret, deny), ins(ret, allow)]
    for nr in sorted(table[name] for name in _profile.ALLOWED if name in table):
        prog += [ins(jeq, nr, 0, 1), ins(ret, allow)]
    prog.append(ins(ret, deny))
    if len(prog) > 4096:  # BPF_MAXINSNS
        raise ValueError(f"the seccomp filter has {len(prog)} instructions, more than 4096")
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
    pid, pidfd = int(spec["pid"]), int(spec["pidfd"])
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
    # The sandbox's PID 1 is held by a pidfd: its pid alone may name another process once it is gone.
    poller = select.poll()
    poller.register(pidfd, select.POLLIN)
    try:
        root_fd = os.open(f"/proc/{pid}/root", os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        root_fd = -1
    if poller.poll(0) or root_fd < 0:  # running after the open: that root is PID 1's, not a reused pid's
        _fail(EXIT_SANDBOX_GONE, "the sandbox is not running any more (its PID 1 is gone)")
    flags = NAMESPACES | (CLONE_NEWUSER if userns else 0)
    if _libc.setns(pidfd, flags) != 0:  # all at once, those of the process the pidfd holds (Linux >= 5.8)
        e = ctypes.get_errno()
        if e == errno.ESRCH:
            _fail(EXIT_SANDBOX_GONE, "the sandbox is not running any more (its PID 1 is gone)")
        _fail(EXIT_ENTER_FAILED, f"cannot enter the sandbox's namespaces (setns by pidfd needs Linux >= 5.8): "
                                 f"{os.strerror(e)}")
    os.close(pidfd)
    try:
        # 2. into the sandbox's root
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
    # 4. the PID namespace applies to children. The signals forwarded to the command are blocked from before the fork
    # until their handlers are in (one its group gets meanwhile waits, then is forwarded); the command starts with
    # every signal at its default but SIGPIPE and SIGXFSZ (ignored, as Python ignores them) and none blocked, whatever
    # the host process ignored or blocked (nohup: SIGHUP), as the compiled helper leaves it.
    for sig in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:  # this process's too (SIGCHLD: waitpid)
        try:
            signal.signal(sig, signal.SIG_IGN if sig in (signal.SIGPIPE, signal.SIGXFSZ) else signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # the C library's own
    forwarded = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
    signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    child = os.fork()
    if child == 0:
        try:
            signal.pthread_sigmask(signal.SIG_SETMASK, ())
            os.execve(argv[0], argv, env)
        except OSError as exc:
            _fail(127, f"cannot run {argv[0]!r}: {exc.strerror}")
    def forward(sig, _frame):
        try:
            os.kill(child, sig)
        except ProcessLookupError:  # reaped already: Python runs a handler late, after the waitpid it interrupted
            pass

    for sig in forwarded:
        signal.signal(sig, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
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
