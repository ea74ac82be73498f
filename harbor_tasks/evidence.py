"""What an agent did to its verifier's run, seen from the host: the verifier's paths, its tools, processes left writing.
Runs in: any Python >= 3.11, standard library only (sandbox.inside); the Harbor adapter and RL episodes alike.

    watch = VerifierWatch(sandbox.root, sandbox.command_path(), sandbox.command_sessions)  # built, before the agent
    watch.check_paths()                        # before the harness makes /logs/verifier fresh and uploads /tests
    watch.expect_tests([task / "tests"])       # what it uploads (host folders)
    watch.before_verifier()                    # then: the fresh folder, the uploaded tests, the tools, the processes
    ... run the tests, their output captured by the harness ...
    reward_json, reward_txt = watch.after_verifier()   # read from the host; watch.tamper: {TAMPER_KINDS kind: detail}
What each kind catches and what it misses: docs/sandbox.md#tamper-evidence.
"""

from __future__ import annotations

import os
import stat as statmod
import threading
from collections.abc import Callable
from pathlib import Path

from harbor_tasks.verdict import READ_LIMIT, TAMPER_KINDS, VERIFIER_DIR, VERIFIER_TOOLS
from sandbox.errors import SandboxError
from sandbox.inside import Root, host_parent, processes

TESTS_DIR = "/tests"
# what pytest reads from the root when it runs /tests/*.py (its rootdir and conftest search goes up from /tests)
ROOT_FILES = ("/conftest.py", "/pytest.ini", "/tox.ini", "/setup.cfg", "/pyproject.toml", "/setup.py")
SHELLS = ("/bin/sh", "/bin/bash", "/usr/bin/env", "/usr/bin/bash")  # shebang interpreters, not looked up on PATH
RUNNER_TOOLS = VERIFIER_TOOLS + ("sh", "env")
# the Python runner's files: its packages and the hooks every interpreter start runs (site dirs of the system, of
# /usr/local and of root's user site)
_SITE_PARENTS = ("/usr/lib", "/usr/local/lib", "/root/.local/lib", "/etc")
_SITE_SUBDIRS = ("", "site-packages", "dist-packages")
_RUNNER_PACKAGES = ("pytest", "_pytest", "pluggy", "py.py", "sitecustomize.py", "usercustomize.py")
_PYVENV = ("/usr/bin/pyvenv.cfg", "/usr/local/bin/pyvenv.cfg", "/usr/pyvenv.cfg", "/usr/local/pyvenv.cfg")
SAMPLE_SEC = 0.2
_MAX_ENTRIES = 4000


def _identity(st: os.stat_result | None):
    """What changes when a file is replaced or written (ctime cannot be set back from inside)."""
    if st is None:
        return None
    return (statmod.S_IFMT(st.st_mode), st.st_mode & 0o7777, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
            st.st_ctime_ns)


def _walk(root: Root, top: str, out: dict, limit: int = _MAX_ENTRIES, skip: tuple[str, ...] = ()) -> None:
    """lstat identities of `top` and everything beneath it (os.fwalk on fds beneath the root: no symlink followed),
    at most `limit` entries; folders named in `skip` are left out. A folder's own times change whenever its entries
    do, so only its type and mode count (its entries are compared instead)."""
    st = root.lstat(top)
    out[top] = _identity(st)[:2] if st is not None else None
    if st is None or not statmod.S_ISDIR(st.st_mode):
        out[top] = _identity(st)
        return
    try:
        fd = root.open(top, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        for folder, dirs, files, dir_fd in os.fwalk(".", dir_fd=fd):
            dirs[:] = sorted(d for d in dirs if d not in skip)
            base = top.rstrip("/") + folder[1:]
            for name in dirs + sorted(files):
                try:
                    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                except OSError:
                    continue
                out[f"{base}/{name}"] = _identity(st)[:2] if statmod.S_ISDIR(st.st_mode) else _identity(st)
            if len(out) >= limit:
                break
    finally:
        os.close(fd)


def paths_state(root: Root) -> dict:
    """The verifier's paths as they stand: /logs/verifier and /tests (all of them) and ROOT_FILES."""
    state: dict = {}
    for top in (VERIFIER_DIR, TESTS_DIR):
        _walk(root, top, state)
    for path in ROOT_FILES:
        state[path] = _identity(root.lstat(path))
    return state


def _python_dirs(root: Root) -> list[str]:
    return [f"{parent}/{name}" for parent in _SITE_PARENTS for name in root.listdir(parent) or []
            if name.startswith("python3")]


def tools_state(root: Root, path_env: str) -> dict:
    """The verifier's tools as they stand: every program of every PATH folder (``PATH:`` name -> the folder that
    provides it first, and its identity), what each runner tool resolves to, the shells, the Python runner's files
    (the standard library, pytest's packages and the site hooks: sitecustomize, usercustomize, .pth)."""
    state: dict = {}
    for folder in [d for d in path_env.split(":") if d.startswith("/")]:
        listing: dict = {}
        _walk(root, folder, listing, limit=_MAX_ENTRIES * 4)
        for path, identity in listing.items():
            name = path[len(folder.rstrip("/")) + 1:]
            if name and "/" not in name and f"PATH:{name}" not in state:
                state[f"PATH:{name}"] = (path, identity)
    for name in RUNNER_TOOLS:  # what a symlinked tool points at, too
        found = root.which(name, path_env)
        state[f"RUNS:{name}"] = (found, _identity(root.stat(found)) if found else None)
    for shell in SHELLS + _PYVENV:
        state[shell] = _identity(root.stat(shell))
    for python in _python_dirs(root):
        _walk(root, python, state, limit=len(state) + _MAX_ENTRIES * 4, skip=_SITE_SUBDIRS[1:])
        for site in (f"{python}/{sub}" for sub in _SITE_SUBDIRS[1:]):
            for name in root.listdir(site) or []:
                if name in _RUNNER_PACKAGES or name.endswith(".pth"):
                    _walk(root, f"{site}/{name}", state, limit=len(state) + _MAX_ENTRIES)
    return state


def _changes(before: dict, now: dict, limit: int = 5) -> str:
    changed = [p for p in sorted(set(before) | set(now)) if before.get(p) != now.get(p)]
    words = []
    for path in changed[:limit]:
        was, is_ = before.get(path), now.get(path)
        how = "appeared" if not was else "removed" if not is_ else "changed"
        words.append(f"{path} {how}")
    more = f" (+{len(changed) - limit} more)" if len(changed) > limit else ""
    return ", ".join(words) + more


def _tool_changes(before: dict, now: dict) -> str:
    """What differs: a program of PATH that existed as built and now resolves elsewhere (a shim earlier on PATH) or
    changed or is gone, a runner tool that appeared, a changed shell or runner file (new programs are not counted:
    tasks install tools; nor new bytecode in __pycache__, which Python writes itself)."""
    words = []
    for key in sorted(set(before) | set(now)):
        was, is_ = before.get(key), now.get(key)
        if was == is_:
            continue
        if key.startswith(("PATH:", "RUNS:")):
            name, was_path, now_path = key[5:], (was or (None,))[0], (is_ or (None,))[0]
            if key.startswith("PATH:") and was is None:
                continue  # a new program: a runner tool's is its RUNS: entry
            if was_path != now_path:
                words.append(f"{name} on PATH is {now_path or 'gone'} (was {was_path or 'absent'})")
            elif now_path is not None:
                words.append(f"{now_path} changed")
        elif not was and "/__pycache__/" in key:
            continue
        else:
            words.append(f"{key} {'appeared' if not was else 'removed' if not is_ else 'changed'}")
    words = list(dict.fromkeys(words))
    return ", ".join(words[:5]) + (f" (+{len(words) - 5} more)" if len(words) > 5 else "")


class _ProcessWatch:
    """Samples the sandbox's processes from the host while the verifier runs: those outside the verifier's own (not
    of the session of a command the sandbox started since the watch began, nor children of one) whose write counter
    grew."""

    def __init__(self, init_pid: int, command_sessions: Callable[[int], list[int]]):
        self.init_pid = init_pid
        # the sessions of the sandbox's commands from the verifier's on, as the sandbox recorded them: a process first
        # seen once the command that ran the tests has ended (its helper gone) is still told by its session
        self._command_sessions, self._since = command_sessions, len(command_sessions(0))
        # (pid, start) -> [comm, first wchar, last wchar, why it is not the verifier's, as first seen]
        self.outside: dict[tuple[int, str], list] = {}
        self.verifier: set[tuple[int, str]] = set()
        for proc in processes(init_pid).values():        # left behind: alive before the verifier started
            self.outside[(proc.pid, proc.start)] = [proc.comm, proc.wchar, proc.wchar, "running before the verifier"]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="verifier-watch", daemon=True)
        self._thread.start()

    def sample(self) -> None:
        procs = processes(self.init_pid)
        ours = set(self._command_sessions(self._since))  # after the look: a command seen running is among them
        verifier_pids = {pid for pid, _ in self.verifier}
        for proc in sorted(procs.values(), key=lambda p: p.pid):
            key = (proc.pid, proc.start)
            if key in self.outside:
                self.outside[key][2] = proc.wchar
            elif key not in self.verifier:
                if proc.session in ours or proc.ppid in verifier_pids:
                    self.verifier.add(key)
                    verifier_pids.add(proc.pid)
                else:  # born during the verification outside it: every byte it wrote counts
                    self.outside[key] = [proc.comm, 0, proc.wchar, self._why_outside(proc, procs)]

    def _why_outside(self, proc, procs: dict) -> str:
        """Started during the run, yet neither in the session of a command the sandbox started since the watch began
        nor a child of the verifier's: its parent and its session's leader, so that a report that is wrong explains
        itself."""
        leader_parent = host_parent(proc.session)
        parent = procs.get(proc.ppid)
        return (f"started during the run by pid {proc.ppid}{f' ({parent.comm})' if parent else ''}, session "
                f"{proc.session} led by a child of {leader_parent if leader_parent is not None else 'a gone process'}"
                f", not a command's of this run")

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SEC):
            self.sample()

    def stop(self) -> str | None:
        self._stop.set()
        self._thread.join()
        self.sample()
        wrote = [(comm, pid, last - first, why) for (pid, _), (comm, first, last, why) in self.outside.items()
                 if last > first]
        if not wrote:
            return None
        return "; ".join(f"{comm} (pid {pid}, {why}) wrote {n} bytes" for comm, pid, n, why in wrote[:5]) + \
            (f" (+{len(wrote) - 5} more)" if len(wrote) > 5 else "")


def _expected_tests(sources: list[Path]) -> dict[str, bytes]:
    files: dict[str, bytes] = {}
    for source in sources:
        for path in sorted(Path(source).rglob("*")):
            if path.is_file() and not path.is_symlink():
                files[f"{TESTS_DIR}/{path.relative_to(source).as_posix()}"] = path.read_bytes()[:READ_LIMIT * 256]
    return files


class VerifierWatch:
    """The tamper evidence of a sandbox's verifier runs (one or several, a multi-step task's rounds): `tamper` is
    {kind: detail} of the last run; `absent_tools` the VERIFIER_TOOLS its PATH lacked."""

    def __init__(self, root_of: Callable[[], Root], path_env: str, command_sessions: Callable[[int], list[int]]):
        self._root_of, self.path_env, self._command_sessions = root_of, path_env, command_sessions
        self.tamper: dict[str, str] = {}
        self.absent_tools: list[str] = []
        self._tests: dict[str, bytes] = {}
        self._procs: _ProcessWatch | None = None
        self._kept: list[str] = []  # changes made before a harness reset of the paths, for the next run's evidence
        with self._root_of() as root:
            self._paths = paths_state(root)
            self._tools = tools_state(root, path_env)

    def _note(self, kind: str, detail: str) -> None:
        assert kind in TAMPER_KINDS
        if detail and kind not in self.tamper:
            self.tamper[kind] = detail

    def check_paths(self) -> None:
        """Before the harness resets the verifier's paths: whatever changed there since the environment was built
        (or since the last verifier run, or the harness's last reset of them) is the agent's doing."""
        self.tamper = {}
        with self._root_of() as root:
            changes = _changes(self._paths, paths_state(root))
        kept, self._kept = self._kept, []
        changes = "; ".join(kept + ([changes] if changes else []))
        if changes:
            self._note("verifier_paths", f"changed before the verifier ran: {changes}")
        self._tests = {}

    def before_harness_reset(self) -> None:
        """The harness is about to empty the verifier's folders outside a verifier run (Harbor's shared multi-step
        mode does, before each round and before its verifier): what changed there until now is kept as the next
        run's evidence."""
        with self._root_of() as root:
            changes = _changes(self._paths, paths_state(root))
        if changes:
            self._kept.append(changes)

    def after_harness_reset(self) -> None:
        """The folders the harness emptied are the baseline from now on (what it made is not the agent's doing)."""
        with self._root_of() as root:
            self._paths = paths_state(root)

    def expect_tests(self, sources: list[Path]) -> None:
        """The host folders the harness uploads into /tests (later ones over earlier ones, as the upload does)."""
        self._tests.update(_expected_tests(sources))

    def before_verifier(self) -> None:
        """After the harness made /logs/verifier fresh and uploaded the tests, just before the verifier starts: the
        folder is empty, the tests are the task's, the tools are as built; then the sandbox's processes are watched
        until after_verifier()."""
        with self._root_of() as root:
            st = root.lstat(VERIFIER_DIR)
            if st is None or not statmod.S_ISDIR(st.st_mode) or root.listdir(VERIFIER_DIR):
                self._note("verifier_paths", f"{VERIFIER_DIR} was not an empty folder after the harness made it "
                                             f"fresh: {root.listdir(VERIFIER_DIR) or 'not a folder'}")
            self._check_tests(root, "when the verifier started")
            tools = tools_state(root, self.path_env)
            changes = _tool_changes(self._tools, tools)
            if changes:
                self._note("shadowed_tools", changes)
            self.absent_tools = [t for t in VERIFIER_TOOLS if tools[f"RUNS:{t}"][0] is None]
            self._procs = _ProcessWatch(root.init_pid, self._command_sessions)

    def _check_tests(self, root: Root, when: str) -> None:
        differ = [p for p, data in self._tests.items() if root.read(p, len(data) + 1) != data]
        if differ:
            self._note("verifier_paths", f"{', '.join(differ[:5])} not the task's {when}")

    def after_verifier(self) -> tuple[str | None, str | None]:
        """Once the tests exited: (reward.json, reward.txt) read from the host, and what happened meanwhile."""
        procs, self._procs = self._procs, None
        try:
            with self._root_of() as root:
                texts = [root.read(f"{VERIFIER_DIR}/{name}", READ_LIMIT) for name in ("reward.json", "reward.txt")]
                self._check_tests(root, "after the verifier ran")
                self._paths = paths_state(root)           # the verifier's own changes are the next run's baseline
                self._tools = tools_state(root, self.path_env)
        finally:
            wrote = procs.stop() if procs is not None else None
        if wrote:
            self._note("background_writes", f"while the verifier ran: {wrote}")
        return tuple(t.decode(errors="replace") if t is not None else None for t in texts)

    def abandon(self) -> None:
        """Stop watching (the verifier's run failed)."""
        procs, self._procs = self._procs, None
        if procs is not None:
            try:
                procs.stop()
            except SandboxError:
                pass
