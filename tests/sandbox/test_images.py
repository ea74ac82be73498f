"""Image root file systems (sandbox/images.py) and what a task's image may carry into the sandbox: tried as an
attacker would, with tiny rootfs tarballs built by tests/rootfs.py."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tarfile
from pathlib import Path

import pytest

from rootfs import device, tiny_rootfs_tar

needs_namespaces = pytest.mark.skipif(
    not sys.platform.startswith("linux") or any(shutil.which(t) is None for t in ("unshare", "prlimit")),
    reason="the local sandbox needs Linux namespaces and util-linux (unshare, prlimit)")
SMALL = {"memory_mb": 256, "storage_mb": 64, "max_processes": 32}


def _devices(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            mode = os.lstat(os.path.join(dirpath, name)).st_mode
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                out.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(out)


@needs_namespaces
def test_device_nodes_of_an_image_never_work_in_the_sandbox(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig
    from sandbox.images import ImageStore

    # kmsg (a write reaches the host's dmesg), kvm, a block device, and /dev/zero's numbers to read back harmlessly
    nodes = [device("usr/kmsg", 1, 11), device("usr/kvm", 10, 232), device("usr/loop", 7, 0, tarfile.BLKTYPE),
             device("usr/zero", 1, 5)]
    store = ImageStore({"x/devices:1": str(tiny_rootfs_tar(tmp_path / "image.tar", extra=nodes))},
                       cache_dir=tmp_path / "cache")
    image = store.root("x/devices:1")
    assert _devices(image.rootfs) == [], "the unpacked image holds device nodes"
    if os.geteuid() == 0:  # a cache unpacked before device nodes were dropped loses them at its next use
        os.mknod(image.rootfs / "usr" / "kvm", 0o666 | stat.S_IFCHR, os.makedev(10, 232))
        (image.rootfs.parent / "no-device-nodes").unlink()
        assert _devices(store.root("x/devices:1").rootfs) == []
    probe = "head -c 3 /usr/zero | wc -c; ls /usr/kmsg /usr/kvm /usr/loop 2>/dev/null | wc -l"
    with BlockingSandbox(SandboxConfig(**SMALL, rootfs=image.rootfs)) as sb:
        r = sb.exec(probe)
        assert r.stdout.split() == ["0", "0"], r
    # an unpacked folder used as it is (nothing unpacks it): a node in it opens nowhere (the root is nodev)
    folder = tmp_path / "folder"
    folder.mkdir()
    with tarfile.open(tmp_path / "image.tar") as tar:
        tar.extractall(folder, members=[m for m in tar if not m.isdev()], filter="fully_trusted")  # our own
    if os.geteuid() == 0:
        os.mknod(folder / "usr" / "zero", 0o666 | stat.S_IFCHR, os.makedev(1, 5))
        with BlockingSandbox(SandboxConfig(**SMALL, rootfs=folder)) as sb:
            r = sb.exec("test -c /usr/zero && echo node; head -c 3 /usr/zero | wc -c")
            assert r.stdout.split() == ["node", "0"], r  # there, but it opens nothing
            r = sb.exec("head -c 3 /dev/zero | wc -c")  # Docker's default devices in /dev still work
            assert r.stdout.split() == ["3"], r
