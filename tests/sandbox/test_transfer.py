"""Files into and out of a sandbox (sandbox/transfer.py, Sandbox.upload_*/download_*), tried as an attacker inside
would: planted tools, crafted archives, symlinks and magic links out, a tool that supplies its own reward.txt."""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

needs_namespaces = pytest.mark.skipif(
    not sys.platform.startswith("linux") or any(shutil.which(t) is None for t in ("unshare", "prlimit")),
    reason="the local sandbox needs Linux namespaces and util-linux (unshare, prlimit)")

CONFIG = dict(memory_mb=256, storage_mb=64, max_processes=32)


def _member(tar: tarfile.TarFile, name: str, data: bytes | None = None, **fields) -> None:
    info = tarfile.TarInfo(name)
    for key, value in fields.items():
        setattr(info, key, value)
    if data is not None:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def crafted_archive(dest: Path, outside: Path) -> bytes:
    """What a planted ``tar -c`` emits: its own reward.txt, then the PATH_MAX symlink chain of CVE-2025-4517 (which
    ``tarfile``'s data filter passes on Python 3.11.7/3.12.1) to write a new host file in ``outside`` and to
    overwrite ``outside/victim`` through a hardlink, then absolute names and a symlink out."""
    buf = io.BytesIO()
    steps = "abcdefghijklmnop"
    component = "d" * ((os.pathconf("/", "PC_PATH_MAX") - len(str(dest)) - 1) // (len(steps) + 1))
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        _member(tar, "reward.txt", b"1\n")
        path = ""
        for step in steps:
            _member(tar, os.path.join(path, component), type=tarfile.DIRTYPE, mode=0o777)
            _member(tar, os.path.join(path, step), type=tarfile.SYMTYPE, linkname=component)
            path = os.path.join(path, component)
        linkpath = os.path.join(*steps, "l" * 254)
        _member(tar, linkpath, type=tarfile.SYMTYPE, linkname="/".join([".."] * len(steps)))
        _member(tar, "escape", type=tarfile.SYMTYPE, linkname=linkpath + "/.." * (len(steps) + 1) + str(outside))
        _member(tar, "escape/new-host-file", b"written from inside\n")
        _member(tar, "victimlink", type=tarfile.LNKTYPE, linkname="escape/victim")
        _member(tar, "victimlink", b"overwritten from inside\n")
        _member(tar, str(outside / "absolute-name"), b"absolute\n")
        _member(tar, "out", type=tarfile.SYMTYPE, linkname=str(outside))
        _member(tar, "out/through-link", b"through a link\n")
    return buf.getvalue()


PLANT = r"""
set -e
mkdir -p /usr/local/bin
for tool in tar find; do
  cat > /usr/local/bin/$tool <<EOF
#!/bin/bash
echo "$tool \$*" >> /tmp/planted-ran
case " \$* " in *" -cf "*|*" -c "*) exec /usr/bin/head -c 100000000 /tmp/evil.tar;; esac
exec /usr/bin/$tool "\$@"
EOF
  chmod 755 /usr/local/bin/$tool
done
cat=$(readlink -f /bin/cat)
cp "$cat" "$cat.real"
cat > "$cat.new" <<EOF
#!/bin/bash
echo "cat \$*" >> /tmp/planted-ran
case "\$*" in *reward.txt*) echo 1; exit 0;; esac
exec $cat.real "\$@"
EOF
chmod 755 "$cat.new" && mv "$cat.new" "$cat"
"""


@needs_namespaces
def test_a_planted_tar_find_or_cat_cannot_write_host_files_or_supply_the_reward(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("original\n")
    dest = tmp_path / "verifier"
    (tmp_path / "evil.tar").write_bytes(crafted_archive(dest, outside))
    errors = []
    with BlockingSandbox(SandboxConfig(**CONFIG)) as sb:
        sb.upload_file(tmp_path / "evil.tar", "/tmp/evil.tar")
        # the real verifier wrote 0; then the agent's tools are in place
        assert sb.exec("mkdir -p /logs/verifier && echo 0 > /logs/verifier/reward.txt").return_code == 0
        assert sb.exec(PLANT).return_code == 0
        assert sb.exec("tar --version >/dev/null && cat /etc/hostname >/dev/null && cat /tmp/planted-ran").stdout \
            == "tar --version\ncat /etc/hostname\ncat /tmp/planted-ran\n"  # the planted tools are what commands find
        sb.exec("rm /tmp/planted-ran")
        for call in (lambda: sb.download_dir("/logs/verifier", dest),
                     lambda: sb.download_file("/logs/verifier/reward.txt", tmp_path / "reward.txt")):
            try:
                call()
            except Exception as err:  # noqa: BLE001 - what matters is what reached the host
                errors.append(err)
        ran = sb.exec("[ ! -e /tmp/planted-ran ] || printf '%s' \"$(< /tmp/planted-ran)\"").stdout  # no cat
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").read_text() == "original\n"
    assert (dest / "reward.txt").read_text() == "0\n"
    assert (tmp_path / "reward.txt").read_text() == "0\n"
    assert sorted(p.name for p in dest.iterdir()) == ["reward.txt"], errors
    assert ran == ""  # no tool of the sandbox ran for a transfer
    assert errors == []


@needs_namespaces
def test_a_planted_tar_cannot_swap_what_the_host_uploads(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig

    tests = tmp_path / "tests"
    (tests / "sub").mkdir(parents=True)
    (tests / "test.sh").write_text("#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n")
    (tests / "test.sh").chmod(0o755)
    (tests / "sub" / "data.txt").write_text("expected\n")
    (tests / "rel-link").symlink_to("sub/data.txt")
    forge = ('#!/bin/bash\necho "tar $*" >> /tmp/planted-ran\n/usr/bin/tar "$@"; rc=$?\n'
             'for f in $(/usr/bin/find "${@: -1}" -type f); do echo "echo 1 > /logs/verifier/reward.txt" > "$f"; done\n'
             'exit $rc\n')
    with BlockingSandbox(SandboxConfig(**CONFIG)) as sb:
        sb.exec(f"mkdir -p /usr/local/bin && printf %s {shlex.quote(forge)} > /usr/local/bin/tar && "
                "chmod 755 /usr/local/bin/tar")
        sb.upload_dir(tests, "/tests")
        sb.upload_file(tests / "test.sh", "/solution/solve.sh")
        sb.upload_file(tests / "test.sh", "/tests")  # into a folder: /tests/test.sh again
        got = sb.exec("cat /tests/test.sh /tests/sub/data.txt /solution/solve.sh; readlink /tests/rel-link; "
                      "stat -c %a /tests/test.sh; cat /tmp/planted-ran 2>/dev/null").stdout
    assert got == (tests / "test.sh").read_text() + "expected\n" + (tests / "test.sh").read_text() + \
        "sub/data.txt\n755\n"


@needs_namespaces
def test_uploads_through_links_out_land_inside_the_sandbox(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig

    host = tmp_path / "host"  # where links planted inside point: on the host, a folder the host owns
    host.mkdir()
    src = tmp_path / "src"
    src.mkdir()
    (src / "f").write_text("payload\n")
    deep = "../" * 40
    with BlockingSandbox(SandboxConfig(**CONFIG)) as sb:
        # inside, the host's path is the sandbox's own (empty) folder: where the links really lead
        r = sb.exec(f"mkdir -p {host} && ln -s {host} /abs && ln -s {deep}{host} /rel && "
                    f"ln -s /proc/self/root{host} /magic && ln -s /proc/1/cwd/../../..{host} /magic1 && "
                    f"mkdir -p /d && ln -s {host} /d/link")
        assert r.return_code == 0, r
        for target in ("/abs", "/rel", "/d/link"):
            sb.upload_dir(src, target)
            sb.upload_file(src / "f", f"{target}/g")
        for target in ("/magic", "/magic/x", "/magic1/x"):
            try:
                sb.upload_file(src / "f", target)
            except Exception:  # noqa: BLE001 - refusing is fine; writing the host is not
                pass
        inside = sb.exec(f"cat {host}/f {host}/g").stdout
    assert list(host.iterdir()) == []
    assert inside == "payload\npayload\n"  # the links resolved inside the sandbox's root


@needs_namespaces
def test_downloads_copy_links_only_when_they_stay_inside(tmp_path, caplog):
    from sandbox import BlockingSandbox, SandboxConfig

    host = tmp_path / "host"
    host.mkdir()
    (host / "secret").write_text("host secret\n")
    dest = tmp_path / "down"
    with BlockingSandbox(SandboxConfig(**CONFIG)) as sb:
        r = sb.exec(f"mkdir -p /o/a/b && cd /o && echo in > a/b/f && ln -s a/b/f ok && ln -s ../b/f a/b/up-ok && "
                    f"ln -s {host}/secret abs && ln -s ../../../../..{host}/secret rel && ln -s . self && "
                    f"ln -s self/../../..{host}/secret chain && ln -s /proc/self/root{host} magic && "
                    f"mkfifo fifo && ln -s {host} a/dirlink")
        assert r.return_code == 0, r
        with caplog.at_level("WARNING"):
            sb.download_dir("/o", dest)
        sb.download_dir("/o/self", tmp_path / "via-link")  # the folder asked for is resolved inside the sandbox
        sb.download_file("/o/ok", tmp_path / "ok")
    links = {p.relative_to(dest).as_posix(): os.readlink(p) for p in dest.rglob("*") if p.is_symlink()}
    assert links == {"ok": "a/b/f", "a/b/up-ok": "../b/f", "self": "."}
    for p in dest.rglob("*"):
        assert p.resolve().is_relative_to(dest.resolve()), p
    assert sorted(p.name for p in dest.iterdir()) == ["a", "ok", "self"]
    assert (tmp_path / "via-link" / "a" / "b" / "f").read_text() == "in\n"
    assert (tmp_path / "ok").read_text() == "in\n"
    assert "abs" in caplog.text and "chain" in caplog.text  # each skipped link is named


HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"


@needs_namespaces
@pytest.mark.skipif(not HARBOR.exists(), reason=".venv-harbor missing: `bash eval/setup_harbor.sh` (make test runs it)")
def test_a_harbor_trial_reads_the_reward_the_verifier_wrote_not_a_planted_tars(tmp_path):
    """The issue's reproduction: the oracle of tests/fixtures/harbor_tasks/planted-tar leaves the task undone and
    plants a tar that emits reward.txt = 1; Harbor downloads /logs/verifier after the verifier wrote 0."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(REPO))
    task = REPO / "tests" / "fixtures" / "harbor_tasks" / "planted-tar"
    proc = subprocess.run([str(HARBOR), "run", "-p", str(task),
                           "--env", "harbor_plugins.local_sandbox:LocalSandboxEnvironment", "-a", "oracle",
                           "-o", str(tmp_path), "--job-name", "planted", "-y"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    results = list((tmp_path / "planted").glob("*/result.json"))
    assert len(results) == 1, f"harbor failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    trial = json.loads(results[0].read_text())
    assert trial.get("exception_info") is None, trial.get("exception_info")
    assert trial["verifier_result"]["rewards"]["reward"] == 0.0
    assert (results[0].parent / "verifier" / "reward.txt").read_text() == "0\n"
