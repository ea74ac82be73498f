"""A sandbox's users and groups: a ``USER`` or ``--chown`` value -> numeric ids, by Docker's rules.
Runs in: any Python >= 3.11, standard library only; the host's side (nothing of the sandbox runs).

Read from the sandbox's ``/etc/passwd`` and ``/etc/group`` through its held root (sandbox/inside.py), as runc reads
them for ``docker exec`` (``exec_user``) and BuildKit for ``COPY --chown`` (``owner``).
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.inside import Root

DB_MAX_BYTES = 4 * 1024 * 1024
MAX_ID = 2**31 - 1
ROOT_SPECS = ("root", "0", "root:root", "0:0")  # root, without reading /etc/passwd


@dataclass(frozen=True)
class ExecUser:
    """Whom a command runs as: uid, gid, supplementary groups, HOME, and the name asked for."""

    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    name: str


ROOT = ExecUser(0, 0, (), "/root", "root")


def _entries(root: Root, path: str, fields: int) -> list[list[str]]:
    data = root.read(path, DB_MAX_BYTES) or b""
    rows = [line.split(":") for line in data.decode(errors="replace").splitlines() if not line.startswith("#")]
    return [row for row in rows if len(row) >= fields and row[2].isdigit()]


def _number(text: str) -> int | None:
    if not text.isdigit():
        return None
    if int(text) > MAX_ID:
        raise LookupError(f"{text} is past the largest id ({MAX_ID})")
    return int(text)


def _group(root: Root, group: str) -> int:
    gid = _number(group)
    if gid is None:
        gid = next((int(g[2]) for g in _entries(root, "/etc/group", 4) if g[0] == group), None)
    if gid is None:
        raise LookupError(f"no group {group!r} in the sandbox's /etc/group")
    return gid


def exec_user(root: Root, spec: str) -> ExecUser:
    """``name``, ``uid``, ``name:group`` or ``uid:gid`` as ``docker exec -u`` resolves it: a uid /etc/passwd lacks
    runs with gid 0 and HOME ``/``; a name it lacks is a ``LookupError``; an explicit group is the only group, else
    the user's own gid and every group of /etc/group that lists the name."""
    name, _, group = spec.partition(":")
    uid = _number(name)
    entry = next((e for e in _entries(root, "/etc/passwd", 7)
                  if e[0] == name or (uid is not None and int(e[2]) == uid)), None)
    if entry is None and uid is None:
        raise LookupError(f"no user {name!r} in the sandbox's /etc/passwd")
    if entry is not None:
        uid, gid, home, name = int(entry[2]), _number(entry[3]) or 0, entry[5] or "/", entry[0]
    else:
        gid, home = 0, "/"
    if group:
        return ExecUser(uid, _group(root, group), (), home, name)
    groups = tuple(int(g[2]) for g in _entries(root, "/etc/group", 4)
                   if entry is not None and name in g[3].split(","))
    return ExecUser(uid, gid, groups, home, name)


def owner(root: Root, spec: str) -> tuple[int, int]:
    """``uid``/``gid`` of ``COPY --chown=spec`` as BuildKit resolves it: a name takes its /etc/passwd uid and gid, a
    number is the uid and, without a group, the gid too; a name the sandbox lacks is a ``LookupError``."""
    name, _, group = spec.partition(":")
    uid = _number(name)
    gid = uid
    if uid is None:
        entry = next((e for e in _entries(root, "/etc/passwd", 7) if e[0] == name), None)
        if entry is None:
            raise LookupError(f"no user {name!r} in the sandbox's /etc/passwd")
        uid, gid = int(entry[2]), _number(entry[3]) or 0
    return uid, _group(root, group) if group else gid
