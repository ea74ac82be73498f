"""A sandbox's users and groups (sandbox/users.py): ``USER`` as ``docker exec`` resolves it, ``--chown`` as BuildKit
does, read beneath the sandbox's root (a planted link to a host file names nothing of the host)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

PASSWD = "root:x:0:0:root:/root:/bin/bash\napp:x:1000:1001::/home/app:/bin/sh\n# a comment\nbroken line\n"
GROUP = "root:x:0:\napp:x:1001:\nstaff:x:50:app,other\ndocker:x:999:app\nwheel:x:10:other\n"


@pytest.fixture
def root(tmp_path):
    from sandbox.inside import Root

    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "passwd").write_text(PASSWD)
    (tmp_path / "etc" / "group").write_text(GROUP)
    with Root(os.open(tmp_path, os.O_PATH | os.O_DIRECTORY), 0) as r:
        yield r


def test_exec_user_follows_docker_exec(root):
    from sandbox.users import ExecUser, exec_user

    assert exec_user(root, "app") == ExecUser(1000, 1001, (50, 999), "/home/app", "app")
    assert exec_user(root, "1000") == exec_user(root, "app")  # a uid of /etc/passwd is that user
    assert exec_user(root, "app:staff") == ExecUser(1000, 50, (), "/home/app", "app")  # an explicit group alone
    assert exec_user(root, "4242") == ExecUser(4242, 0, (), "/", "4242")  # a uid it lacks: gid 0, HOME /
    assert exec_user(root, "4242:77") == ExecUser(4242, 77, (), "/", "4242")
    for spec, missing in (("ghost", "no user 'ghost'"), ("app:ghosts", "no group 'ghosts'"),
                          ("99999999999", "past the largest id")):
        with pytest.raises(LookupError, match=missing):
            exec_user(root, spec)


def test_chown_follows_buildkit(root):
    from sandbox.users import owner

    assert owner(root, "app") == (1000, 1001)   # a name: its uid and gid
    assert owner(root, "4242") == (4242, 4242)  # a number: the uid, and the gid too
    assert owner(root, "app:staff") == (1000, 50)
    assert owner(root, "4242:docker") == (4242, 999)
    with pytest.raises(LookupError, match="no user 'ghost'"):
        owner(root, "ghost")


def test_a_planted_link_reads_nothing_of_the_host(tmp_path):
    from sandbox.inside import Root
    from sandbox.users import exec_user

    host = tmp_path / "host"
    host.mkdir()
    (host / "passwd").write_text("evil:x:0:0::/:/bin/sh\n")
    sandbox_root = tmp_path / "root"
    (sandbox_root / "etc").mkdir(parents=True)
    (sandbox_root / "etc" / "passwd").symlink_to(host / "passwd")  # absolute: resolved beneath the root
    with Root(os.open(sandbox_root, os.O_PATH | os.O_DIRECTORY), 0) as root:
        with pytest.raises(LookupError, match="no user 'evil'"):
            exec_user(root, "evil")
    assert Path(host / "passwd").read_text().startswith("evil")
