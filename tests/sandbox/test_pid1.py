"""The root a sandbox's PID 1 (sandbox/pid1.py) builds, tried as an attacker would: an image's symlinks never lead
its writes to host files, root-only host /etc files stay unreadable, and what Docker masks stays masked (the host's
cgroup paths, /sys/firmware, PID 1's own command line)."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from rootfs import symlink, tiny_rootfs_tar

REPO = Path(__file__).resolve().parents[2]
needs_namespaces = pytest.mark.skipif(
    not sys.platform.startswith("linux") or any(shutil.which(t) is None for t in ("unshare", "prlimit")),
    reason="the local sandbox needs Linux namespaces and util-linux (unshare, prlimit)")
SMALL = {"memory_mb": 256, "storage_mb": 64, "max_processes": 32}


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.fixture
def outside_tmp():
    """A fresh host folder outside /tmp (PID 1 covers the host's /tmp with its own tmpfs before it builds the root,
    so an image's symlink into tmp_path would never reach the host's files) and outside /var (the image's
    ``var -> /var/...`` would loop)."""
    if not os.access("/dev/shm", os.W_OK):
        pytest.skip("no writable /dev/shm on this host")
    path = Path(tempfile.mkdtemp(prefix="tr-pid1-", dir="/dev/shm"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@needs_namespaces
def test_image_symlinks_never_lead_pid1_to_host_files(tmp_path, outside_tmp):
    from sandbox import BlockingSandbox, SandboxConfig, SandboxError
    from sandbox.images import ImageStore

    host_etc, host_var, victim = outside_tmp / "host-etc", outside_tmp / "host-var", outside_tmp / "victim"
    for d in (host_etc, host_var, victim):
        d.mkdir()
    (host_etc / "resolv.conf").write_text("nameserver 192.0.2.1  # the host's\n")
    exposed = tmp_path / "exposed"
    exposed.mkdir()
    (exposed / "data").write_text("shared")
    (tmp_path / "exposed-file").write_text("one file")
    # /etc and /var of the image point at host folders (PID 1 writes /etc/resolv.conf and makes /var/tmp), and
    # its /tmp at a host folder under which the exposed paths lie (PID 1 makes their mount points)
    images = {"x/etc:1": [symlink("etc", str(host_etc)), symlink("var", str(host_var))],
              "x/tmp:1": [symlink("tmp", str(victim))]}
    store = ImageStore({ref: str(tiny_rootfs_tar(tmp_path / f"{ref[2:5]}.tar", extra=extra,
                                                 programs=("bash", "sh", "mkdir", "cat")))
                        for ref, extra in images.items()}, cache_dir=tmp_path / "cache")
    with BlockingSandbox(SandboxConfig(**SMALL, rootfs=store.root("x/etc:1").rootfs)) as sb:
        assert sb.exec("echo up").stdout == "up\n"
    assert (host_etc / "resolv.conf").read_text() == "nameserver 192.0.2.1  # the host's\n"
    assert _tree(host_etc) == ["resolv.conf"] and _tree(host_var) == []
    config = SandboxConfig(**SMALL, rootfs=store.root("x/tmp:1").rootfs,
                           expose=[str(exposed), str(tmp_path / "exposed-file")])
    with BlockingSandbox(config) as sb:  # the exposed paths where the sandbox's own /tmp symlink leads
        r = sb.exec(f"cat {exposed}/data {tmp_path}/exposed-file")
        assert r.stdout == "sharedone file", r
    assert _tree(victim) == [], "PID 1 made folders or files in a host folder"
    # a symlink that loops inside the image: refused, with the path named
    store = ImageStore({"x/loop:1": str(tiny_rootfs_tar(tmp_path / "loop.tar", extra=[symlink("dev", "/dev/x")],
                                                        programs=("bash", "sh", "mkdir")))},
                       cache_dir=tmp_path / "cache")
    with pytest.raises(SandboxError, match="/dev in the sandbox"):
        BlockingSandbox(SandboxConfig(**SMALL, rootfs=store.root("x/loop:1").rootfs)).start()


def _root_only(top: str = "/etc") -> list[str]:
    """Files and folders under ``top`` that other users may not read (folders: not list or enter)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        for name in list(dirnames) + filenames:
            path = os.path.join(dirpath, name)
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode) and mode & 0o005 != 0o005:
                out.append(path)
                dirnames.remove(name)
            elif stat.S_ISREG(mode) and not mode & 0o004:
                out.append(path)
    return out


@needs_namespaces
@pytest.mark.skipif(os.geteuid() != 0, reason="root-only files are readable inside only as root (root mode)")
def test_root_only_host_etc_files_are_not_readable_inside(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig
    from sandbox.pid1 import ETC_KEPT, ETC_SANITIZED

    # the password databases are rewritten (hashes replaced), the few policy files of ETC_KEPT hold no secret
    spared = tuple(f"/etc/{name}" for name in ETC_SANITIZED + ETC_KEPT)
    secret = [p for p in _root_only() if p not in spared and not p.startswith(tuple(f"{x}/" for x in spared))]
    if not secret:
        pytest.skip("this host's /etc holds no root-only file besides the password databases")
    with BlockingSandbox(SandboxConfig(**SMALL)) as sb:
        for path in secret:
            r = sb.exec(f"cat {shlex.quote(path)} 2>/dev/null || ls -A {shlex.quote(path)} 2>/dev/null", cwd="/")
            assert r.stdout == "", f"{path} is readable inside: {r.stdout[:200]!r}"
        shadow = sb.exec("cat /etc/shadow").stdout  # rewritten, not removed: useradd & co. keep working
        assert "root:*:" in shadow, shadow


def test_the_etc_walk_finds_every_file_others_cannot_read(tmp_path):
    from sandbox.pid1 import not_world_readable

    etc = tmp_path / "etc"
    for d, mode in (("", 0o755), ("default", 0o755), ("ssl", 0o755), ("ssl/private", 0o700), ("pg", 0o750)):
        (etc / d).mkdir(exist_ok=True)
        os.chmod(etc / d, mode)
    for f, mode in (("hosts", 0o644), ("default/cacerts", 0o600), ("default/grub", 0o640), ("pg/hba.conf", 0o644),
                    ("ssl/private/key.pem", 0o600), ("ssl/cert.pem", 0o644), ("sudo.conf", 0o604)):
        (etc / f).write_text("x")
        os.chmod(etc / f, mode)
    (etc / "link").symlink_to("default/cacerts")  # its target is the one to mask
    assert sorted(not_world_readable(str(etc))) == ["default/cacerts", "default/grub", "pg", "ssl/private"]


def _cgroup_lines(text: str) -> list[tuple[str, str]]:
    return [(line.split(":", 2)[1], line.split(":", 2)[2]) for line in text.splitlines() if line.count(":") >= 2]


@needs_namespaces
def test_what_docker_masks_stays_masked(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig
    from sandbox.cgroup import CGROUP_BASE

    exposed = tmp_path / "exposed"
    exposed.mkdir()
    name = f"masks-{os.getpid()}"
    config = SandboxConfig(**SMALL, name=name, expose=[str(exposed)], hide=[str(tmp_path / "hidden")])
    with BlockingSandbox(config) as sb:
        # the host's cgroup paths: a cgroup namespace rooted at the sandbox's own cgroup
        inside = _cgroup_lines(sb.exec("cat /proc/self/cgroup").stdout)
        assert inside, "no /proc/self/cgroup"
        host = {path for _, path in _cgroup_lines(Path("/proc/self/cgroup").read_text()) if path != "/"}
        for controllers, path in inside:
            assert not any(h in path for h in host), (controllers, path)
            # a v1 memory cgroup holds the commands, not PID 1 (docs/sandbox.md): it shows as the sandbox's own
            assert path == "/" or (controllers == "memory" and path == f"/{CGROUP_BASE}/{name}"), (controllers, path)
        # /sys/firmware (ACPI tables, memory map): an empty folder, as Docker masks it
        assert sb.exec("ls -A /sys/firmware").stdout == ""
        # PID 1's command line names no host path: not the repo, the venv, its config, the exposed or hidden paths
        cmdline = sb.exec("tr '\\0' ' ' < /proc/1/cmdline").stdout
        assert cmdline and "sandbox_init:" in cmdline, cmdline
        for leak in (str(REPO), sys.prefix, sys.executable, os.path.realpath(sys.executable), str(tmp_path), "{"):
            assert leak not in cmdline, (leak, cmdline)
