"""Reading a running sandbox from the host (sandbox/inside.py), as an attacker inside would have it: symlinks and `..`
planted where the harness reads resolve inside the sandbox, never to a host file; a FIFO or a device is not read; a
gone PID 1 is refused; the processes listed are the sandbox's, each with its session and write counter."""

import os
import time
from pathlib import Path

import pytest

from sandbox import BlockingSandbox, SandboxConfig, SandboxError
from sandbox.inside import processes


@pytest.fixture(scope="module")
def box():
    with BlockingSandbox(SandboxConfig(memory_mb=512)) as sb:
        yield sb


def test_planted_links_resolve_inside_the_sandbox_and_nothing_blocks(box, tmp_path):
    host = tmp_path / "host-secret"
    host.write_text("host only\n")
    box.exec(f"mkdir -p /logs/verifier && cd /logs/verifier && echo inside > /inside && ln -s {host} abs && "
             "ln -s ../../../../../../inside up && ln -s /proc/1/root/inside magic && mkfifo fifo && "
             "ln -s /dev/zero zero && echo 0.5 > reward.txt")
    with box.root() as root:
        assert root.read(str(host), 100) is None  # the host's path names nothing inside
        assert root.read("/logs/verifier/abs", 100) is None
        assert root.read("/logs/verifier/up", 100) == b"inside\n"
        assert root.read("/logs/verifier/magic", 100) is None  # no magic links
        assert root.read("/logs/verifier/fifo", 100) is None and root.read("/logs/verifier/zero", 100) is None
        assert root.read("/logs/verifier/reward.txt", 100) == b"0.5\n"
        assert root.listdir("/logs/verifier") == ["abs", "fifo", "magic", "reward.txt", "up", "zero"]
        assert root.which("sh", "/nowhere:/usr/bin:/bin") in ("/usr/bin/sh", "/bin/sh")
    assert host.read_text() == "host only\n"


def test_the_processes_are_the_sandboxs_with_their_writes(box):
    box.exec("nohup sh -c 'while :; do echo x > /tmp/w; sleep 0.02; done' >/dev/null 2>&1 &")
    # the exec returns once the job is forked; under load nohup may not have become the writing `sh` yet
    assert box.exec("for i in $(seq 100); do [ -s /tmp/w ] && exit 0; sleep 0.05; done; exit 1").return_code == 0
    with box.root() as root:
        before = processes(root.init_pid)
        time.sleep(0.3)
        after = processes(root.init_pid)
    writer = next(p for p in before.values() if p.comm == "sh")
    assert after[writer.pid].wchar > writer.wchar
    assert all(Path(f"/proc/{pid}").exists() for pid in after) and box.sandbox.init_pid not in after


def test_a_stopped_sandbox_is_refused():
    sb = BlockingSandbox(SandboxConfig(memory_mb=256))
    sb.start()
    sb.stop()
    with pytest.raises(SandboxError):
        sb.root()
    sb.close()


def test_a_lookup_through_dotdot_holds_while_the_host_renames(tmp_path):
    """openat2's RESOLVE_IN_ROOT answers EAGAIN when any rename or mount on the machine races a `..` step (other
    sandboxes starting, a build renaming its layer into place): the tool look-ups of the tamper evidence saw a
    symlinked tool (npx -> ../lib/...) vanish and called it shadowed. The look-up retries instead."""
    import subprocess
    import sys

    from sandbox.transfer import in_root

    root = tmp_path / "root"
    (root / "usr" / "lib" / "tool").mkdir(parents=True)
    (root / "usr" / "lib" / "tool" / "cli.js").write_text("x")
    (root / "usr" / "bin").mkdir()
    (root / "usr" / "bin" / "npx").symlink_to("../lib/tool/cli.js")
    churn = tmp_path / "churn"
    churn.mkdir()
    renamer = subprocess.Popen([sys.executable, "-c", "import os, sys\nd = sys.argv[1]\nopen(f'{d}/a', 'w').close()\n"
                                "while True:\n    os.rename(f'{d}/a', f'{d}/b'); os.rename(f'{d}/b', f'{d}/a')\n",
                                str(churn)])
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        time.sleep(0.2)
        for _ in range(20000):
            os.close(in_root(fd, "usr/bin/npx"))
    finally:
        os.close(fd)
        renamer.kill()
        renamer.wait()
