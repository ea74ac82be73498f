"""The Dockerfile a sandbox replays: parsed, planned by Docker's rules, then replayed through a running sandbox.
Runs in: any Python >= 3.11, standard library only.

``plan`` runs nothing: ``ARG`` (scopes, defaults, ``build_args``), ``ENV``, ``USER``, ``WORKDIR`` and ``SHELL`` are
applied and every argument is expanded as Docker expands it; what the sandbox does not obey is listed by line
(``Build.not_obeyed``). ``replay`` runs the plan: ``RUN`` as the ``USER`` and through the ``SHELL`` of its time,
``COPY``/``ADD`` from the build context (sources resolved beneath it), ``WORKDIR`` made. A Dockerfile mistake is one
``EnvironmentBuildError`` naming the file and line; a failed ``RUN`` that or ``NetworkNeededError``.
The rules, and what is not obeyed: docs/sandbox.md#the-dockerfile.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
import platform
import posixpath
import re
import shlex
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from sandbox.errors import NETWORK_FIX, EnvironmentBuildError, NetworkNeededError, SandboxError
from sandbox.transfer import in_root, read_regular_file

DEFAULT_SHELL = ("/bin/sh", "-c")
PLANNED = frozenset(("FROM", "ARG", "ENV", "RUN", "COPY", "ADD", "WORKDIR", "USER", "SHELL"))
# no effect on this build, nor on a Harbor run (Harbor runs its own command; ONBUILD acts on later builds)
NO_EFFECT = frozenset(("CMD", "LABEL", "EXPOSE", "STOPSIGNAL", "MAINTAINER", "ONBUILD"))
NOT_OBEYED = {"ENTRYPOINT": "the sandbox starts no entrypoint (under Docker, Harbor's command runs through it)",
              "HEALTHCHECK": "no health check runs", "VOLUME": "no volume is mounted (the folder is the root's)"}
COPY_FLAGS = ("chown", "chmod", "link")  # --link changes how Docker caches a layer, not what it holds
PROXY_ARGS = frozenset(n for name in ("HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "ALL_PROXY")
                       for n in (name, name.lower()))  # Docker's predefined ARGs: no declaration needed
USER_FIX = "make the user in an earlier RUN (useradd) or give a numeric uid[:gid]"
ARCHIVE_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd")  # gzip, bzip2, xz, zstd
_HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)(['\"]?)([A-Za-z_][\w.-]*)\2")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_URL = re.compile(r"(?:https?|git|ssh)://|git@")


# ---------------------------------------------------------------------------------------------------------- parse
@dataclass(frozen=True)
class Heredoc:
    name: str
    body: str          # its lines, each ending in a newline (leading tabs gone for ``<<-``)
    expand: bool       # an unquoted delimiter: variables expand in a COPY/ADD of it


@dataclass(frozen=True)
class Instruction:
    line: int          # where it starts
    op: str            # upper case
    args: str          # its arguments, continuation lines joined
    heredocs: tuple[Heredoc, ...] = ()
    escape: str = "\\"

    @property
    def rest(self) -> str:
        """The arguments as a shell reads them: each heredoc's body and closing line after them."""
        return self.args + "".join(f"\n{d.body}{d.name}" for d in self.heredocs)


def instructions(path: Path) -> list[Instruction]:
    """The instructions of the Dockerfile at ``path`` ([] without the file): the ``escape`` parser directive obeyed,
    comments and empty lines left out (inside continuations too), heredocs of ``RUN``/``COPY``/``ADD`` read. A
    Dockerfile that is no regular file (a link to ``/dev/zero``, a FIFO) or is over ``TASK_FILE_MAX_BYTES`` is an
    ``EnvironmentBuildError`` naming it."""
    if not path.exists():
        return []
    try:
        lines = read_regular_file(path).decode(errors="replace").splitlines()
    except ValueError as err:
        raise EnvironmentBuildError(str(err)) from None
    out: list[Instruction] = []
    escape, i, directives = "\\", 0, True
    while i < len(lines):
        s, i = lines[i].strip(), i + 1
        directive = re.fullmatch(r"#\s*([A-Za-z]+)\s*=\s*(\S+)", s) if directives else None
        if directive and directive.group(1).lower() == "escape" and directive.group(2) in ("\\", "`"):
            escape = directive.group(2)
        directives = directives and directive is not None
        if not s or s.startswith("#"):
            continue
        start, more = i, s.endswith(escape)
        text = s[:-1].rstrip() if more else s
        while more and i < len(lines):
            s, i = lines[i].strip(), i + 1
            if s and not s.startswith("#"):
                more = s.endswith(escape)
                text += " " + (s[:-1].rstrip() if more else s)
        op, args = (re.split(r"\s+", text, maxsplit=1) + [""])[:2]
        op = op.upper()
        docs = []
        for marker in _HEREDOC.finditer(args) if op in ("RUN", "COPY", "ADD") else ():
            strip, name, body = marker.group(1), marker.group(3), []
            while i < len(lines) and (lines[i].lstrip("\t") if strip else lines[i]) != name:
                body.append((lines[i].lstrip("\t") if strip else lines[i]) + "\n")
                i += 1
            if i >= len(lines):
                raise EnvironmentBuildError(f"{path}:{start}: {op} {args}: the heredoc <<{name} is never closed (a "
                                            f"line holding only {name})")
            i += 1
            docs.append(Heredoc(name, "".join(body), not marker.group(2)))
        out.append(Instruction(start, op, args, tuple(docs), escape))
    return out


def parse(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` per instruction (heredocs after the arguments); [] without the file."""
    return [(ins.op, ins.rest) for ins in instructions(path)]


# --------------------------------------------------------------------------------------------- words and variables
class _Words:
    """Docker's word processing: quotes removed (``'...'`` literal), the escape character, ``$NAME``, ``${NAME}``,
    ``${NAME:-word}``, ``${NAME:+word}``, ``${NAME:?word}`` (and the same without the colon, for unset only)."""

    def __init__(self, text: str, env: dict[str, str], escape: str, quotes: bool = True):
        self.s, self.i, self.env, self.esc, self.quotes = text, 0, env, escape, quotes

    def run(self, split: bool, stop: str = "") -> list[str]:
        out, cur, started = [], [], False
        while self.i < len(self.s) and self.s[self.i] != stop:
            c, self.i = self.s[self.i], self.i + 1
            if split and c in " \t\n":
                if started:
                    out.append("".join(cur))
                cur, started = [], False
                continue
            started = True
            if c == self.esc and self.quotes and self.i < len(self.s):
                cur.append(self.s[self.i])
                self.i += 1
            elif c == "'" and self.quotes:
                end = self.s.find("'", self.i)
                if end < 0:
                    raise ValueError("a single quote is never closed")
                cur.append(self.s[self.i:end])
                self.i = end + 1
            elif c == '"' and self.quotes:
                cur.append(self._double())
            else:
                cur.append(self._dollar() if c == "$" else c)
        if started or not split:
            out.append("".join(cur))
        return out

    def _double(self) -> str:
        cur = []
        while self.i < len(self.s) and self.s[self.i] != '"':
            c, self.i = self.s[self.i], self.i + 1
            if c == self.esc and self.i < len(self.s) and self.s[self.i] in ('"', "$", self.esc):
                cur.append(self.s[self.i])
                self.i += 1
            else:
                cur.append(self._dollar() if c == "$" else c)
        if self.i >= len(self.s):
            raise ValueError("a double quote is never closed")
        self.i += 1
        return "".join(cur)

    def _dollar(self) -> str:
        if self.s.startswith("{", self.i):
            name = _NAME.match(self.s, self.i + 1)
            if not name:
                raise ValueError(f"bad substitution at ${self.s[self.i:self.i + 20]}")
            self.i = name.end()
            rest = self.s[self.i:self.i + 2]
            colon = rest.startswith(":")
            modifier = rest[1:2] if colon else rest[:1]
            if modifier == "}" and not colon:
                self.i += 1
                return self.env.get(name.group(), "")
            if "}" not in self.s[self.i:]:
                raise ValueError(f"${{{name.group()}...: the }} is missing")
            if modifier not in ("-", "+", "?"):
                raise ValueError(f"${{{name.group()}{rest}...}}: only ${{NAME}}, ${{NAME:-word}}, ${{NAME:+word}} and "
                                 "${NAME:?word} (with or without the colon) are obeyed here")
            self.i += 1 + colon
            word = self.run(split=False, stop="}")[0]
            if self.i >= len(self.s):
                raise ValueError(f"${{{name.group()}...: the }} is missing")
            self.i += 1
            value = self.env.get(name.group())
            is_set = value is not None and (value != "" or not colon)
            if modifier == "?" and not is_set:
                raise ValueError(f"{name.group()}: {word or 'is not set'}")
            return (value if is_set else word) if modifier in "-?" else (word if is_set else "")
        name = _NAME.match(self.s, self.i)
        if not name:
            return "$"
        self.i = name.end()
        return self.env.get(name.group(), "")


def words(text: str, env: dict[str, str], escape: str = "\\") -> list[str]:
    """``text`` split into words at unquoted blanks, each expanded as Docker expands ``COPY``/``ENV`` arguments."""
    return _Words(text, env, escape).run(split=True)


def word(text: str, env: dict[str, str], escape: str = "\\") -> str:
    """``text`` as one word (blanks kept), expanded as Docker expands ``WORKDIR``/``USER``."""
    return _Words(text, env, escape).run(split=False)[0]


def _platform_args() -> dict[str, str]:
    """BuildKit's automatic platform ARGs, for this machine."""
    machine = platform.machine()
    arch = {"x86_64": "amd64", "aarch64": "arm64", "armv7l": "arm", "i686": "386"}.get(machine, machine)
    return {f"{side}{key}": value for side in ("TARGET", "BUILD") for key, value in
            (("PLATFORM", f"linux/{arch}"), ("OS", "linux"), ("ARCH", arch), ("VARIANT", ""))}


def _json_list(text: str) -> list[str] | None:
    """The exec (JSON) form's list of strings, or None when ``text`` is the shell form (as Docker decides)."""
    if not text.startswith("["):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, list) and value and all(isinstance(v, str) for v in value) else None


def _flags(args: str) -> tuple[list[str], str]:
    """The leading ``--name[=value]`` words of an instruction's arguments, and the rest."""
    flags = []
    while (m := re.match(r"--(\S*)\s*", args)) and not args.startswith("-- "):
        flags.append(m.group(1))
        args = args[m.end():]
    return flags, args


# ------------------------------------------------------------------------------------------------------------ plan
@dataclass
class Step:
    """One action of the build: ``RUN``, ``COPY``, ``ADD``, ``WORKDIR`` or ``USER`` (expanded)."""

    line: int
    op: str
    text: str                      # the instruction as written (its first line), for messages
    user: str | None               # the USER of its time (None: root)
    user_line: int | None          # where that USER was set (None: the image's, or none)
    workdir: str                   # the WORKDIR of its time
    args: tuple[str, ...] = ()     # RUN: argv; COPY/ADD: sources, then the absolute destination; WORKDIR/USER: one
    env: dict[str, str] = field(default_factory=dict)  # RUN: the image's Env, ARG values and ENV over them
    chown: str | None = None
    chmod: int | None = None
    into: bool = False             # COPY/ADD: the destination is a folder (a trailing /, several sources)
    heredocs: dict[str, str] = field(default_factory=dict)  # COPY/ADD sources given inline: name -> content


@dataclass(frozen=True)
class NotObeyed:
    """What the sandbox skips or runs otherwise than Docker: ``file:line: what: why``."""

    file: str
    line: int | None
    what: str
    why: str

    def __str__(self) -> str:
        return f"{self.file}{f':{self.line}' if self.line else ''}: {self.what}: {self.why}"


@dataclass
class Build:
    """A Dockerfile's plan: the steps to replay, and what the commands run in the result get."""

    path: Path
    steps: list[Step]
    env: dict[str, str]            # the final stage's ENV over the image's Env (ARG values are not kept)
    user: str | None               # the final USER (None: root)
    user_line: int | None
    workdir: str | None            # the final WORKDIR (None: neither the Dockerfile nor the image set one)
    base: str | None               # the final FROM's image, ARGs expanded
    not_obeyed: list[NotObeyed]
    unused_args: list[str]         # build_args that no ARG declares (Docker warns of them too)


@dataclass
class _Stage:
    env: dict[str, str]
    user: str | None
    user_line: int | None
    workdir: str | None
    shell: tuple[str, ...] = DEFAULT_SHELL
    args: dict[str, str | None] = field(default_factory=dict)


class _Planner:
    def __init__(self, path: Path, build_args: dict[str, str], image: _Stage):
        self.path, self.build_args, self.image = path, build_args, image
        self.globals: dict[str, str | None] = dict(_platform_args())
        self.stage: _Stage | None = None
        self.stages: dict[str, _Stage] = {}
        self.steps: list[Step] = []
        self.skipped: list[NotObeyed] = []
        self.declared: set[str] = set()
        self.base: str | None = None

    def vars(self) -> dict[str, str]:
        """The variables an argument expands with: ARG values in scope, ENV over them."""
        if self.stage is None:
            return {k: v for k, v in self.globals.items() if v is not None}
        return {**{k: v for k, v in self.stage.args.items() if v is not None}, **self.stage.env}

    def apply(self, ins: Instruction) -> None:
        if ins.op not in PLANNED | NO_EFFECT | NOT_OBEYED.keys():
            raise ValueError("unknown instruction (Docker refuses it too; a typo?)")
        if self.stage is None and ins.op not in ("ARG", "FROM"):
            raise ValueError("only ARG may come before the first FROM (as in Docker)")
        if ins.op in NOT_OBEYED:
            self.skip(ins, ins.op, NOT_OBEYED[ins.op])
        elif ins.op in PLANNED:
            getattr(self, f"_{ins.op.lower()}")(ins)

    def skip(self, ins: Instruction, what: str, why: str) -> None:
        self.skipped.append(NotObeyed("Dockerfile", ins.line, what, why))

    def step(self, ins: Instruction, op: str, **kw) -> None:
        st = self.stage
        self.steps.append(Step(ins.line, op, f"{ins.op} {ins.args}".strip(), st.user, st.user_line,
                               st.workdir or "/", **kw))

    def _from(self, ins: Instruction) -> None:
        flags, rest = _flags(ins.args)
        ws = words(rest, {k: v for k, v in self.globals.items() if v is not None}, ins.escape)  # global ARGs only
        if not ws or (len(ws) > 1 and (len(ws) != 3 or ws[1].lower() != "as")):
            raise ValueError("expected FROM image [AS name]")
        if self.stage is not None:
            self.skip(ins, "FROM (a second stage)", "every stage is replayed, in order, into the one root")
        parent = self.stages.get(ws[0].lower())
        self.stage = replace(parent, env=dict(parent.env), args={}) if parent else replace(
            self.image, env=dict(self.image.env), args={})
        if len(ws) == 3:
            self.stages[ws[2].lower()] = self.stage
        self.base = ws[0]

    def _arg(self, ins: Instruction) -> None:
        for w in words(ins.args, self.vars(), ins.escape):
            name, eq, default = w.partition("=")
            if not _NAME.fullmatch(name):
                raise ValueError(f"{name!r} is no variable name")
            self.declared.add(name)
            value = self.build_args[name] if name in self.build_args else default if eq else self.globals.get(name)
            (self.stage.args if self.stage is not None else self.globals)[name] = value

    def _env(self, ins: Instruction) -> None:
        env, parts = self.vars(), ins.args.split(None, 1)
        if parts and "=" not in parts[0]:  # the old form: ENV NAME value with blanks
            if len(parts) < 2:
                raise ValueError("ENV needs a value: ENV NAME=value")
            pairs = [(parts[0], word(parts[1], env, ins.escape))]
        else:
            pairs = [(w.partition("=")[0], w.partition("=")[2]) for w in words(ins.args, env, ins.escape)]
        if not pairs or any(not k for k, _ in pairs):
            raise ValueError("ENV takes NAME=value pairs")
        self.stage.env.update(pairs)  # expanded with the values before this line, as Docker does

    def _workdir(self, ins: Instruction) -> None:
        path = word(ins.args, self.vars(), ins.escape)
        if not path:
            raise ValueError("WORKDIR needs a path")
        self.stage.workdir = "/" + posixpath.normpath(posixpath.join(self.stage.workdir or "/", path)).lstrip("/")
        self.step(ins, "WORKDIR", args=(self.stage.workdir,))

    def _user(self, ins: Instruction) -> None:
        spec = word(ins.args, self.vars(), ins.escape)
        if not spec or spec.startswith(":") or spec.endswith(":"):
            raise ValueError("USER needs a user and maybe a group: USER app, USER app:staff or USER 1000:1000")
        self.stage.user, self.stage.user_line = spec, ins.line
        self.step(ins, "USER", args=(spec,))

    def _shell(self, ins: Instruction) -> None:
        argv = _json_list(ins.args)
        if argv is None:
            raise ValueError('SHELL takes the JSON form: SHELL ["/bin/bash", "-c"]')
        self.stage.shell = tuple(argv)

    def _run(self, ins: Instruction) -> None:
        flags, body = _flags(ins.args)
        for flag in flags:
            self.skip(ins, f"RUN --{flag.partition('=')[0]}", "the flag is not obeyed: the command runs without it")
        argv = None if ins.heredocs else _json_list(body)
        if argv is None:
            script = body + "".join(f"\n{d.body}{d.name}" for d in ins.heredocs)
            if ins.heredocs and _HEREDOC.fullmatch(body):  # RUN <<EOF alone: the heredoc is the script
                script = ins.heredocs[0].body
                if script.startswith("#!"):  # run by its own interpreter, as BuildKit runs it
                    script = (f"f=$(mktemp) && cat > \"$f\" <<'TR_HEREDOC_EOF'\n{script}TR_HEREDOC_EOF\n"
                              "chmod +x \"$f\" && \"$f\"; rc=$?; rm -f \"$f\"; exit $rc")
            argv = [*self.stage.shell, script]
        env = {k: v for k, v in self.build_args.items() if k in PROXY_ARGS}
        self.step(ins, "RUN", args=tuple(argv), env={**env, **self.vars()})

    def _copy(self, ins: Instruction) -> None:
        flags, body = _flags(ins.args)
        env, opts = self.vars(), {}
        for flag in flags:
            name, _, value = flag.partition("=")
            opts[name] = word(value, env, ins.escape)
        if "from" in opts:
            self.skip(ins, f"{ins.op} --from", "no other stage or image is kept: the step is skipped")
            return
        for name in [n for n in opts if n not in COPY_FLAGS]:
            self.skip(ins, f"{ins.op} --{name}", "the flag is not obeyed: the files are copied without it")
        chmod = opts.get("chmod")
        if chmod is not None and not re.fullmatch(r"[0-7]{3,4}", chmod):
            raise ValueError(f"--chmod={chmod}: give an octal mode such as 0755 (symbolic modes are not obeyed here)")
        args = _json_list(body)
        args = [word(a, env, ins.escape) for a in args] if args is not None else words(body, env, ins.escape)
        if len(args) < 2:
            raise ValueError(f"{ins.op} needs a source and a destination")
        *srcs, dst = args
        if len(srcs) > 1 and not dst.endswith("/"):
            raise ValueError("with several sources the destination is a folder and must end with a / (as Docker "
                             "requires)")
        if ins.op == "ADD" and any(_URL.match(s) for s in srcs):
            self.skip(ins, "ADD of a URL", "nothing is downloaded: the URL's file is missing")
            srcs = [s for s in srcs if not _URL.match(s)]
        docs = {d.name: _Words(d.body, env, ins.escape, quotes=False).run(False)[0] if d.expand else d.body
                for d in ins.heredocs}
        into = dst.endswith("/") or posixpath.basename(dst) in (".", "..") or len(srcs) > 1
        dst = "/" + posixpath.normpath(posixpath.join(self.stage.workdir or "/", dst)).lstrip("/")
        if srcs:
            self.step(ins, ins.op, args=(*srcs, dst), chown=opts.get("chown") or None,
                      chmod=int(chmod, 8) if chmod else None, into=into, heredocs=docs)

    _add = _copy


def plan(path: Path, build_args: dict[str, str] | None = None, image_env: dict[str, str] | None = None,
         image_workdir: str | None = None, image_user: str | None = None) -> Build:
    """The Dockerfile at ``path`` planned as Docker would build it with ``--build-arg`` ``build_args``, on an image
    whose config sets ``image_env``, ``image_workdir`` and ``image_user`` (the host userland sets none); runs
    nothing. ``EnvironmentBuildError`` names the line of a mistake (one Docker would refuse too)."""
    image = _Stage(dict(image_env or {}), image_user, None, image_workdir)
    planner = _Planner(path, dict(build_args or {}), image)
    for ins in instructions(path):
        try:
            planner.apply(ins)
        except ValueError as err:
            raise EnvironmentBuildError(f"{path}:{ins.line}: {ins.op} {ins.args}: {err}") from None
    final = planner.stage or image
    if (path.parent / ".dockerignore").exists():
        planner.skipped.append(NotObeyed(".dockerignore", None, "the whole file", "every file of the build context "
                                         "can be copied, the ignored ones too"))
    return Build(path, planner.steps, dict(final.env), final.user, final.user_line, final.workdir, planner.base,
                 planner.skipped, sorted(k for k in planner.build_args if k not in planner.declared | PROXY_ARGS))


def base_image(path: Path, build_args: dict[str, str] | None = None) -> str | None:
    """The image of the Dockerfile's last ``FROM`` (ARGs expanded), or None."""
    return plan(path, build_args).base


# ---------------------------------------------------------------------------------------------------------- replay
class ReplayTarget(Protocol):
    """What the replay asks of the running sandbox it builds in (sandbox/core.py's ``Sandbox``, which runs above
    this module: what builds a layer sits below what runs in it)."""

    userns: bool
    userland: str

    async def exec(self, command: str, cwd: str | None = None, env: dict[str, str] | None = None,
                   timeout_sec: float | None = None, user: str | int | None = None): ...
    async def upload_file(self, source_path: Path, target_path: str, owner: tuple[int, int] | None = None,
                          mode: int | None = None) -> None: ...
    async def upload_dir(self, source_dir: Path, target_dir: str, owner: tuple[int, int] | None = None,
                         mode: int | None = None) -> None: ...
    async def make_dir(self, path: str, owner: tuple[int, int] | None = None) -> None: ...
    def owner(self, spec: str | None) -> tuple[int, int] | None: ...
    def exec_user(self, user: str | int | None = None): ...
    def network_mark(self) -> int: ...
    def names_asked(self, since: int = 0) -> list[str]: ...


async def replay(sandbox: ReplayTarget, build: Build, context: Path, timeout_sec: float, logger: logging.Logger) -> None:
    """Run ``build``'s steps in ``sandbox`` (build context ``context``); what it does not obey is logged."""
    for item in build.not_obeyed:
        logger.warning(f"local sandbox: not obeyed: {context}/{item}")
    if build.unused_args:
        logger.warning(f"local sandbox: build_args {', '.join(build.unused_args)}: no ARG of {build.path} declares "
                       "them (Docker warns too)")
    for step in build.steps:
        where = f"{build.path}:{step.line}: {step.text}"
        if step.op == "WORKDIR":
            await sandbox.make_dir(step.args[0], _owner(sandbox, step.user, where, step))
        elif step.op == "RUN":
            await _run(sandbox, step, where, timeout_sec, logger)
        elif step.op in ("COPY", "ADD"):
            await _copy(sandbox, step, context, where, timeout_sec)
    if build.user is not None:
        try:
            sandbox.exec_user(build.user)
        except SandboxError as err:
            raise EnvironmentBuildError(f"{build.path}:{build.user_line or 0}: USER {build.user}: {err}; the commands "
                                        f"run as that user: {USER_FIX}") from None


def _as_user(step: Step) -> str:
    return f"USER {step.user} (line {step.user_line})" if step.user_line else f"the image's user {step.user}"


def _owner(sandbox: ReplayTarget, spec: str | None, where: str, step: Step) -> tuple[int, int] | None:
    try:
        return sandbox.owner(spec)
    except SandboxError as err:
        whose = f"--chown={spec}" if spec == step.chown else _as_user(step)
        raise EnvironmentBuildError(f"{where}: {whose}: {err}: {USER_FIX}") from None


async def _run(sandbox: ReplayTarget, step: Step, where: str, timeout_sec: float, logger: logging.Logger) -> None:
    try:
        sandbox.exec_user(step.user or "root")
    except SandboxError as err:
        raise EnvironmentBuildError(f"{where}: it runs as {_as_user(step)}: {err}: {USER_FIX}") from None
    mark = sandbox.network_mark()
    res = await sandbox.exec("exec " + shlex.join(step.args), cwd=step.workdir, env=step.env,
                             user=step.user or "root", timeout_sec=timeout_sec)
    names = sandbox.names_asked(mark)
    if res.return_code != 0:
        tail = (res.stderr or res.stdout).strip()[-1500:]
        if names:
            raise NetworkNeededError(
                f"{where}: Dockerfile RUN needed the network (it asked for {', '.join(names[:5])}) and failed "
                f"(exit {res.return_code})\n{NETWORK_FIX}\n{tail}", phase="build", names=names)
        raise EnvironmentBuildError(f"{where}: Dockerfile RUN failed in the local sandbox (exit {res.return_code}; "
                                    f"{sandbox.userland})\n{tail}")
    if names:
        logger.warning(f"local sandbox: {where}: asked for {', '.join(names[:5])} (no network) but succeeded")


async def _copy(sandbox: ReplayTarget, step: Step, context: Path, where: str, timeout_sec: float) -> None:
    owner = _owner(sandbox, step.chown, where, step) if step.chown else None
    *srcs, dst = step.args
    inline = [s for s in srcs if s.lstrip("<-").strip("'\"") in step.heredocs and s.startswith("<<")]
    found = _sources([s for s in srcs if s not in inline], context, where)
    into = step.into or len(found) + len(inline) > 1
    with tempfile.TemporaryDirectory() as tmp:
        for src in inline:
            name = src.lstrip("<-").strip("'\"")
            (Path(tmp) / name).write_text(step.heredocs[name])
            found.append((name, Path(tmp) / name))
        for name, src in found:
            target = f"{dst.rstrip('/')}/{name}" if into else dst
            if src.is_dir():
                await sandbox.upload_dir(src, dst, owner=owner, mode=step.chmod)
            elif step.op == "ADD" and _is_archive(src):
                await _extract(sandbox, src, dst, where, timeout_sec)
            else:
                await sandbox.upload_file(src, target, owner=owner, mode=step.chmod)


def _is_archive(path: Path) -> bool:
    """Whether ADD unpacks the file: a tar archive, plain or compressed, known by its content (as Docker knows it)."""
    with open(path, "rb") as f:
        head = f.read(512)
    return head.startswith(ARCHIVE_MAGIC) or head[257:262] == b"ustar"


async def _extract(sandbox: ReplayTarget, archive: Path, dst: str, where: str, timeout_sec: float) -> None:
    """ADD of a local archive: unpacked into ``dst`` by the sandbox's own tar, as its root (nothing on the host), in
    ``timeout_sec`` (a RUN's bound)."""
    await sandbox.make_dir(dst)
    inside = f"/tmp/.tr-add-{os.urandom(6).hex()}"
    await sandbox.upload_file(archive, inside)
    owners = " --no-same-owner" if sandbox.userns else ""  # only root is mapped there
    res = await sandbox.exec(f"tar -x -f {inside} -C {shlex.quote(dst)}{owners}; rc=$?; rm -f {inside}; exit $rc",
                             cwd="/", user="root", timeout_sec=timeout_sec)
    if res.return_code != 0:
        raise EnvironmentBuildError(f"{where}: the sandbox's tar could not unpack {archive.name} (exit "
                                    f"{res.return_code}): {(res.stderr or res.stdout).strip()[-500:]}")


def _sources(patterns: list[str], context: Path, step: str) -> list[tuple[str, Path]]:
    """``(name, host path)`` of each source of a ``COPY``/``ADD`` (``step``: the Dockerfile, line and instruction, for
    messages), as Docker confines them: relative to the build context (a leading ``/`` too), no ``..`` out of it,
    glob patterns matched against folders listed beneath it, every link resolved beneath it (``etc -> /etc`` in the
    context names the context's own ``etc/``, which it lacks)."""
    out: list[tuple[str, Path]] = []
    root = os.open(context, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for pattern in patterns:
            rel = posixpath.normpath(pattern.lstrip("/") or ".")
            if rel == ".." or rel.startswith("../"):
                raise EnvironmentBuildError(f"{step}: {pattern} is outside the build context {context} (Docker "
                                            "refuses it too): put the file into the build context")
            matches = _glob(root, rel) if any(c in rel for c in "*?[") else [rel]
            if not matches:
                raise EnvironmentBuildError(f"{step}: {pattern} matches no file of the build context {context}")
            for match in matches:
                try:
                    fd = in_root(root, match)
                except OSError:
                    raise EnvironmentBuildError(
                        f"{step}: {pattern} is not in the build context {context} (links are resolved inside "
                        "it, as Docker does)") from None
                try:
                    real = Path(os.readlink(f"/proc/self/fd/{fd}"))
                finally:
                    os.close(fd)
                if not (real.is_dir() or real.is_file()):
                    raise EnvironmentBuildError(f"{step}: {pattern} is not a regular file or folder of the build "
                                                f"context {context}")
                out.append((posixpath.basename(match) if match != "." else context.name, real))
    finally:
        os.close(root)
    return out


def _glob(root: int, rel: str) -> list[str]:
    """The paths beneath the context (fd ``root``) that ``rel`` matches, a name at a time as Go's ``filepath.Match``
    (``[^...]`` as ``[!...]``), each folder listed through an fd resolved beneath the context (never outside)."""
    paths = [""]
    for part in rel.split("/"):
        if not any(c in part for c in "*?["):
            paths = [f"{p}/{part}" if p else part for p in paths]
            continue
        pattern, found = part.replace("[^", "[!"), []
        for p in paths:
            try:
                fd = in_root(root, p or ".", os.O_RDONLY | os.O_DIRECTORY)
            except OSError:
                continue
            try:
                names = sorted(os.listdir(fd))
            finally:
                os.close(fd)
            found += [f"{p}/{n}" if p else n for n in names if fnmatch.fnmatchcase(n, pattern)]
        paths = found
    return paths
