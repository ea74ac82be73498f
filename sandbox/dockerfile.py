"""The Dockerfile subset a sandbox replays: parse a Dockerfile, and replay it through a running sandbox.
Runs in: any Python >= 3.11, standard library only.

Replayed: ``WORKDIR``, ``ENV``, ``COPY``/``ADD`` from the build context (sources resolved beneath it), ``RUN``; a
failed step raises ``NetworkNeededError`` or ``EnvironmentBuildError``. The rules: docs/sandbox.md#inside-the-modules.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import shlex
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from sandbox.errors import NETWORK_FIX, EnvironmentBuildError, NetworkNeededError
from sandbox.transfer import in_root, read_regular_file

if TYPE_CHECKING:
    from sandbox.core import Sandbox

IGNORED = ("FROM", "ARG", "LABEL", "CMD", "ENTRYPOINT", "EXPOSE", "USER", "SHELL",
           "HEALTHCHECK", "VOLUME", "STOPSIGNAL", "MAINTAINER", "ONBUILD")


def base_image(path: Path) -> str | None:
    """The image of the Dockerfile's last ``FROM`` (its build stage's base), without ``--platform`` or ``AS``."""
    ref = None
    for op, rest in parse(path):
        if op == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            ref = words[0] if words else None
    return ref


def parse(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` per instruction, continuation lines joined; [] without the file."""
    return [(op, rest) for _, op, rest in instructions(path)]


def instructions(path: Path) -> list[tuple[int, str, str]]:
    """``(line number, INSTRUCTION, arguments)`` per instruction (the line it starts on); [] without the file. A
    Dockerfile that is no regular file (a link to ``/dev/zero``, a FIFO) or is over ``TASK_FILE_MAX_BYTES`` is an
    ``EnvironmentBuildError`` naming it."""
    if not path.exists():
        return []
    try:
        text = read_regular_file(path).decode(errors="replace")
    except ValueError as err:
        raise EnvironmentBuildError(str(err)) from None
    lines, cur, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        s = raw.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if not cur:
            start = number
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        if cur.strip():
            op, _, rest = cur.strip().partition(" ")
            lines.append((start, op.upper(), rest.strip()))
        cur = ""
    return lines


def workdir(path: Path) -> str | None:
    """The Dockerfile's final ``WORKDIR`` (relative ones resolved), or None."""
    wd = None
    for op, rest in parse(path):
        if op == "WORKDIR":
            wd = str(PurePosixPath(wd or "/") / rest)
    return wd


async def replay(sandbox: Sandbox, path: Path, context: Path, env: dict[str, str], timeout_sec: float,
                 logger: logging.Logger) -> None:
    """Replay the Dockerfile at ``path`` in ``sandbox`` (build context ``context``). ``ENV`` lines go into
    ``env``, the dict the sandbox adds to every command, so later ``RUN`` lines see them too."""
    wd = "/"
    for number, op, rest in instructions(path):
        if op == "WORKDIR":
            wd = str(PurePosixPath(wd) / rest)
            await sandbox.exec(f"mkdir -p {shlex.quote(wd)}", cwd="/", user="root")
        elif op == "ENV":
            parts = shlex.split(rest)
            if parts and "=" not in parts[0]:
                env[parts[0]] = " ".join(parts[1:])
            else:
                env.update(p.split("=", 1) for p in parts if "=" in p)
        elif op in ("COPY", "ADD"):
            args = [a for a in (json.loads(rest) if rest.startswith("[") else shlex.split(rest))
                    if not a.startswith("--")]
            if any(a.startswith("--from") for a in shlex.split(rest)) or len(args) < 2:
                logger.warning(f"local sandbox: skipping Dockerfile {op} {rest}")
                continue
            *srcs, dst = args
            dst = str(PurePosixPath(wd) / dst)
            for name, src in _sources(srcs, context, f"{path}:{number}: {op} {rest}"):
                if src.is_dir():
                    await sandbox.upload_dir(src, dst)
                elif dst.endswith("/") or len(srcs) > 1:
                    await sandbox.upload_file(src, dst.rstrip("/") + "/" + name)
                else:
                    await sandbox.upload_file(src, dst)
        elif op == "RUN":
            cmd = " ".join(shlex.quote(a) for a in json.loads(rest)) if rest.startswith("[") else rest
            mark = sandbox.network_mark()
            res = await sandbox.exec(cmd, cwd=wd, user="root", timeout_sec=timeout_sec)
            names = sandbox.names_asked(mark)
            if res.return_code != 0:
                tail = (res.stderr or res.stdout).strip()[-1500:]
                if names:
                    raise NetworkNeededError(
                        f"Dockerfile RUN needed the network (it asked for {', '.join(names[:5])}) and failed "
                        f"(exit {res.return_code}): {cmd}\n{NETWORK_FIX}\n{tail}", phase="build", names=names)
                raise EnvironmentBuildError(f"Dockerfile RUN failed in the local sandbox (exit {res.return_code}; "
                                            f"{sandbox.userland}): {cmd}\n{tail}")
            if names:
                logger.warning(f"local sandbox: Dockerfile RUN asked for {', '.join(names[:5])} (no network) but "
                               f"succeeded: {cmd}")
        elif op not in IGNORED:
            logger.warning(f"local sandbox: ignoring Dockerfile {op}")


def _sources(patterns: list[str], context: Path, step: str) -> list[tuple[str, Path]]:
    """``(name, host path)`` of each source of a ``COPY``/``ADD`` (``step``: the Dockerfile, line and instruction, for
    messages), as Docker confines them: relative to the build context (a leading ``/`` too), no ``..`` out of it,
    every link resolved beneath it (``etc -> /etc`` in the context names the context's own ``etc/``, which it lacks)."""
    out: list[tuple[str, Path]] = []
    root = os.open(context, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for pattern in patterns:
            rel = posixpath.normpath(pattern.lstrip("/") or ".")
            if rel == ".." or rel.startswith("../"):
                raise EnvironmentBuildError(f"{step}: {pattern} is outside the build context {context} (Docker "
                                            "refuses it too): put the file into the build context")
            found = sorted(context.glob(rel)) if any(c in rel for c in "*?[") else [context / rel]
            for match in found or [context / rel]:
                try:
                    fd = in_root(root, match.relative_to(context).as_posix())
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
                out.append((match.name, real))
    finally:
        os.close(root)
    return out
