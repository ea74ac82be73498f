"""Terminal-Universe's Stage 1: a trajectory's file operations replayed in order into the workspace it started from.
Runs in: any Python >= 3.11 (standard library); chat_corpus/from_trajectories.py writes what it recovers.

Each path keeps its earliest observed version: a whole read (`cat`, `less`, a short `head`, a file tool's read)
recovers the file, a partial one (`head -n N`, `sed -n 'A,Bp'`, a ranged read) its lines, marked truncated. A path
whose first operation writes it (`>`, a heredoc, `tee`, `touch`, `cp`/`mv` to it, a write tool) was created by the
agent: left out, its content kept for checks. A path first edited, appended to, moved, removed or chmod-ed existed
but was never seen: missing. So is a path an unparsed command names that nothing showed. Nothing is guessed.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from dataclasses import dataclass, field

from chat_corpus.trajectory_steps import Step

HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_]\w*)\1")
SEPARATORS = ("&&", "||", ";", "|", "&", "(", ")")
WHOLE_READERS = ("cat", "less", "more", "bat")
PATHISH = re.compile(r"^(?:[\w.~-]*/)*[\w-]+\.[\w]+$|^[\w.~-]*/[\w./-]*$")  # a word that names a file or folder
GLOB = re.compile(r"[*?\[\]{}$`]")
BLOCK = re.compile(r"^==> (.+) <==$")  # head/tail's header before each of several files
MAX_FILE_CHARS = 1 << 20  # a recovered file's text at most (a longer one is left out as too large)


@dataclass
class PathState:
    """What the trajectory showed of one path: `origin` read / created / existed, and what it knows."""

    origin: str
    source: str  # the command or tool call that first touched it
    content: str | None = None  # read: the whole file as first shown; created: the agent's last known version
    lines: dict[int, str] = field(default_factory=dict)  # read partly: line number -> text
    truncated: bool = False  # some of what was shown was cut (a screen that scrolled, a limited output)
    changed: bool = False  # the agent wrote it after its first observation: later reads show the agent's version

    @property
    def known_prefix(self) -> str | None:
        """A partly read file's lines 1..n when they run unbroken from the first, as text."""
        n = 0
        while n + 1 in self.lines:
            n += 1
        return "\n".join(self.lines[i] for i in range(1, n + 1)) + "\n" if n else None


@dataclass
class Workspace:
    paths: dict[str, PathState] = field(default_factory=dict)
    referenced: dict[str, str] = field(default_factory=dict)  # path -> the command that named it
    unparsed: list[str] = field(default_factory=list)  # commands the replay could not read
    operations: int = 0  # file operations seen (reads, writes, edits, moves)

    # --- events ---------------------------------------------------------------------------------------------------
    def read(self, path: str, source: str, content: str | None = None, lines: dict[int, str] | None = None,
             truncated: bool = False) -> None:
        self.operations += 1
        state = self.paths.get(path)
        if state is None:
            self.paths[path] = PathState("read", source, content, dict(lines or {}), truncated)
        elif state.origin == "read" and not state.changed and state.content is None:
            if content is not None and not truncated:
                state.content, state.lines = content, {}
            else:
                state.lines = {**(lines or {}), **state.lines}

    def write(self, path: str, source: str, content: str | None, append: bool = False) -> None:
        self.operations += 1
        state = self.paths.get(path)
        if state is None:
            self.paths[path] = PathState("created", source, content)
            return
        state.changed = True
        if state.origin == "created":
            state.content = (state.content + content if append and None not in (state.content, content)
                             else None if append else content)

    def touched(self, path: str, source: str, changes: bool = True) -> None:
        """An operation that needs the path to exist (edit, append, chmod, the source of cp/mv, rm)."""
        self.operations += 1
        state = self.paths.setdefault(path, PathState("existed", source))
        state.changed = state.changed or changes
        if changes and state.origin == "created":
            state.content = None

    def moved(self, src: str, dst: str, source: str, copy: bool) -> None:
        state = self.paths.get(src)
        known = state.content if state is not None and (state.origin == "created" or not state.changed) else None
        self.touched(src, source, changes=not copy)
        self.write(dst, source, known)


def resolve(cwd: str, path: str) -> str | None:
    """An absolute, normalised path (`..` folded in), or None for one with shell expansions left in it."""
    if not path or GLOB.search(path):
        return None
    if path.startswith("~"):
        path = "/root" + path[1:]
    return posixpath.normpath(posixpath.join(cwd, path))


def _tokens(text: str) -> list[str] | None:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError:
        return None


def _segments(tokens: list[str]) -> list[tuple[list[str], bool]]:
    """(words, piped) of each simple command; redirections stay in the words."""
    out, words, piped = [], [], False
    for token in tokens:
        if token in SEPARATORS or token in ("||", "|&"):
            if words:
                out.append((words, piped))
            piped = token in ("|", "|&")
            words = []
            if out and piped:
                out[-1] = (out[-1][0], True)
        else:
            words.append(token)
    if words:
        out.append((words, piped))
    return out


def _redirects(words: list[str]) -> tuple[list[str], list[tuple[str, bool]]]:
    """The words less their redirections, and each output redirection's (target, appends)."""
    kept, targets, i = [], [], 0
    while i < len(words):
        w = words[i]
        if w in (">", ">>", ">|") and i + 1 < len(words):
            if kept and kept[-1].isdigit():
                kept.pop()
            if words[i + 1] not in ("&",) and not words[i + 1].startswith("&"):
                targets.append((words[i + 1], w == ">>"))
            i += 2 + (words[i + 1] == "&")
            continue
        if w in ("<", ">&", "<<", "<<<") and i + 1 < len(words):
            i += 2
            continue
        kept.append(w)
        i += 1
    return kept, targets


def replay_step(ws: Workspace, step: Step) -> str:
    """Apply one step to the workspace; the working folder after it."""
    if step.tool is not None:
        _tool_step(ws, step)
        return step.cwd
    command = step.command or ""
    heredoc = HEREDOC.search(command.split("\n", 1)[0])
    if heredoc is not None:
        return _heredoc(ws, step, command, heredoc)
    cwd = step.cwd
    for line in command.split("\n"):
        cwd = _line(ws, step, line, cwd, attribute=command.count("\n") == 0)
    return cwd


def _heredoc(ws: Workspace, step: Step, command: str, marker: re.Match) -> str:
    head, _, rest = command.partition("\n")
    body_lines, after = [], []
    lines = rest.split("\n")
    for i, line in enumerate(lines):
        if line.strip() == marker.group(2):
            after = lines[i + 1:]
            break
        body_lines.append(line)
    body = "\n".join(body_lines) + "\n"
    words = _tokens(HEREDOC.sub(" ", head)) or []
    cwd = step.cwd
    for simple, _ in _segments(words):
        kept, targets = _redirects(simple)
        if kept and kept[0] == "cd" and len(kept) == 2:
            cwd = resolve(cwd, kept[1]) or cwd
            continue
        if kept and kept[0] in ("cat", "tee"):
            tee_targets = [(w, "-a" in kept) for w in kept[1:] if not w.startswith("-")] if kept[0] == "tee" else []
            for target, append in targets + tee_targets:
                if (path := resolve(cwd, target)) is not None:
                    ws.write(path, head, body, append)
        else:
            ws.unparsed.append(head)
    for line in after:
        cwd = _line(ws, step, line, cwd, attribute=False)
    return cwd


def _line(ws: Workspace, step: Step, line: str, cwd: str, attribute: bool) -> str:
    """One line of shell: its simple commands' effects; the output is attributed to a read when it is the only
    command that prints."""
    if not line.strip():
        return cwd
    tokens = _tokens(line)
    if tokens is None:
        ws.unparsed.append(line)
        return cwd
    simples = _segments(tokens)
    printing = [s for s in simples if s[0] and s[0][0] != "cd"]
    sole = attribute and len(printing) == 1 and not printing[0][1]
    for words, piped in simples:
        kept, targets = _redirects(words)
        if not kept:
            continue
        if kept[0] == "cd":
            cwd = resolve(cwd, kept[1] if len(kept) > 1 else "/root") or cwd
            continue
        shown = step.output if sole and not targets and step.output is not None else None
        _simple(ws, kept, targets, cwd, line, shown, step.truncated)
    return cwd


def _simple(ws: Workspace, argv: list[str], targets: list[tuple[str, bool]], cwd: str, source: str,
            shown: str | None, cut: bool) -> None:
    name, args = posixpath.basename(argv[0]), argv[1:]
    files = [a for a in args if not a.startswith("-")]
    if shown is not None and name in WHOLE_READERS and len(files) == 1 and set(args) <= {files[0], "-n"}:
        if (path := resolve(cwd, files[0])) is not None:
            text = "\n".join(re.sub(r"^\s*\d+\t", "", x) for x in shown.split("\n")) if "-n" in args else shown
            ws.read(path, source, None if cut else _as_file(text), None if not cut else {}, cut)
    elif shown is not None and name in ("head", "tail"):
        _head_tail(ws, name, args, cwd, source, shown, cut)
    elif shown is not None and name == "sed" and len(args) == 3 and args[0] == "-n":
        m = re.fullmatch(r"(\d+)(?:,(\d+))?p", args[1])
        if m and (path := resolve(cwd, args[2])) is not None:
            start, end = int(m.group(1)), int(m.group(2) or m.group(1))
            got = shown.split("\n") if shown else []
            ws.read(path, source, lines={start + i: x for i, x in enumerate(got[:end - start + 1])}, truncated=True)
    elif name in ("touch", "mkdir", "chmod", "chown", "rm", "cp", "mv", "sed", "tee", "ln"):
        _changing(ws, name, args, files, cwd, source)
    else:
        for word in files:
            if PATHISH.match(word) and (path := resolve(cwd, word)) is not None:
                ws.referenced.setdefault(path, source)
    for target, append in targets:
        if (path := resolve(cwd, target)) is not None and not path.startswith("/dev/"):
            content = _echoed(name, args) if not append or path in ws.paths else None
            if append and path not in ws.paths:
                ws.touched(path, source)
            else:
                ws.write(path, source, content, append)


def _changing(ws: Workspace, name: str, args: list[str], files: list[str], cwd: str, source: str) -> None:
    paths = [p for p in (resolve(cwd, f) for f in files) if p is not None]
    if name == "sed":
        if any(a == "-i" or a.startswith("-i") for a in args) and paths:
            ws.touched(paths[-1], source)
    elif name == "touch":
        for p in paths:
            if p not in ws.paths:
                ws.write(p, source, "")
    elif name in ("chmod", "chown", "rm"):
        for p in paths[1:] if name in ("chmod", "chown") else paths:
            ws.touched(p, source)
    elif name in ("cp", "mv", "ln") and len(paths) == 2:
        ws.moved(paths[0], paths[1], source, copy=name != "mv")
    elif name == "tee":
        for p in paths:
            ws.write(p, source, None, "-a" in args)


def _echoed(name: str, args: list[str]) -> str | None:
    """What `echo WORDS` writes (no options but -n); None for anything else."""
    if name != "echo" or any(a.startswith("-") and a != "-n" for a in args[:1]):
        return None
    if args[:1] == ["-n"]:
        return " ".join(args[1:])
    return " ".join(args) + "\n"


def _head_tail(ws: Workspace, name: str, args: list[str], cwd: str, source: str, shown: str, cut: bool) -> None:
    n, files, i = 10, [], 0
    while i < len(args):
        a = args[i]
        if a == "-n" and i + 1 < len(args) and args[i + 1].isdigit():
            n, i = int(args[i + 1]), i + 2
            continue
        if re.fullmatch(r"-n?\d+", a):
            n = int(a.lstrip("-n"))
        elif a.startswith("-"):
            return  # -c, -f, --bytes: not lines of a file
        else:
            files.append(a)
        i += 1
    blocks: list[tuple[str, list[str]]] = []
    if len(files) == 1 and not GLOB.search(files[0]):
        blocks = [(files[0], shown.split("\n") if shown else [])]
    else:  # several files: `==> f <==` before each, a blank line between
        for line in shown.split("\n"):
            m = BLOCK.match(line)
            if m:
                blocks.append((m.group(1), []))
            elif blocks:
                blocks[-1][1].append(line)
        blocks = [(f, lines[:-1] if lines and not lines[-1] and len(lines) > n else lines) for f, lines in blocks]
    for file, lines in blocks:
        path = resolve(cwd, file)
        if path is None:
            continue
        if len(lines) < n and not cut:  # the file ended first: all of it was shown
            ws.read(path, source, _as_file("\n".join(lines)) if lines else "")
        elif name == "head" and not cut:
            ws.read(path, source, lines={k + 1: x for k, x in enumerate(lines[:n])}, truncated=True)
        else:  # a tail's last lines sit at an unknown offset; a cut output's lines at unknown places
            ws.read(path, source, lines={}, truncated=True)


def _tool_step(ws: Workspace, step: Step) -> None:
    path = resolve(step.cwd, step.args.get("path", ""))
    if path is None:
        return
    source = f"{step.tool}({step.args.get('path')})"
    if step.tool == "read" and step.output is not None:
        ranged = step.args.get("range") or step.first_line > 1 or step.truncated
        if ranged:
            ws.read(path, source, lines={step.first_line + i: x for i, x in enumerate(step.output.split("\n"))},
                    truncated=True)
        else:
            ws.read(path, source, _as_file(step.output))
    elif step.tool == "write":
        ws.write(path, source, step.args.get("content"))
    elif step.tool == "edit":
        ws.touched(path, source)


def _as_file(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"
