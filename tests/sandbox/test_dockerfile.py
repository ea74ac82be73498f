"""The Dockerfile subset (sandbox/dockerfile.py) given a hostile task folder: COPY/ADD sources that leave the build
context (``..``, absolute names, context symlinks to host files and folders), and a Dockerfile that is no regular
file (a link to /dev/zero, a FIFO, a sparse giant)."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import UNBOUNDED_FILE_KINDS, make_unbounded_file

REPO = Path(__file__).resolve().parents[2]
needs_namespaces = pytest.mark.skipif(
    not sys.platform.startswith("linux") or any(shutil.which(t) is None for t in ("unshare", "prlimit")),
    reason="the local sandbox needs Linux namespaces and util-linux (unshare, prlimit)")


@pytest.fixture
def context(tmp_path) -> Path:
    """A task's environment/ beside a host folder holding a secret (tmp_path/host)."""
    host = tmp_path / "host"
    host.mkdir()
    (host / "shadow").write_text("root:$6$secret-hash:19000::::::\n")
    ctx = tmp_path / "task" / "environment"
    (ctx / "data").mkdir(parents=True)
    (ctx / "data" / "ok.txt").write_text("ok\n")
    (ctx / "data" / "link-out").symlink_to(host / "shadow")
    (ctx / "etc").symlink_to(host)
    (ctx / "shadow").symlink_to(host / "shadow")
    (ctx / "up").symlink_to("../../host")
    (ctx / "inside").symlink_to("data/ok.txt")
    return ctx


@needs_namespaces
@pytest.mark.parametrize("line", [
    "COPY ../../host/shadow /x",       # a `..` escape
    "ADD ../../host /x/",
    "COPY data/../../../host/shadow /x",
    "COPY etc/shadow /x",              # through a context symlink to a host folder
    "COPY etc /x/",                    # a context symlink to a host folder, as the source itself
    "COPY shadow /x",                  # a context symlink to a host file
    "COPY up/shadow /x",
    "COPY [\"etc/shadow\", \"/x\"]",
])
def test_copy_sources_stay_in_the_build_context(context, line):
    from sandbox import BlockingSandbox, EnvironmentBuildError, SandboxConfig, dockerfile

    df = context / "Dockerfile"
    df.write_text(f"FROM debian:12\nWORKDIR /app\n{line}\n")
    with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32)) as sb:
        with pytest.raises(EnvironmentBuildError) as err:
            sb._call(dockerfile.replay(sb.sandbox, df, context, {}, 60, logging.getLogger("test")))
        leaked = sb.exec("grep -rl secret-hash /x /app 2>/dev/null; true").stdout
    assert leaked == ""
    assert f"{df}:3" in str(err.value) and line in str(err.value), err.value  # names the file, line and step
    assert "build context" in str(err.value)


@needs_namespaces
def test_copy_inside_the_context_still_works_and_links_stay_links(context):
    from sandbox import BlockingSandbox, SandboxConfig, dockerfile

    df = context / "Dockerfile"
    df.write_text("FROM debian:12\nWORKDIR /app\nCOPY data /app/data\nCOPY inside /app/followed.txt\n"
                  "COPY /data/ok.txt d*/ok.txt /app/many/\n")
    with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32)) as sb:
        sb._call(dockerfile.replay(sb.sandbox, df, context, {}, 60, logging.getLogger("test")))
        got = sb.exec("cat data/ok.txt followed.txt many/ok.txt; readlink data/link-out; "
                      "cat data/link-out 2>/dev/null || echo dangling").stdout
    assert got == f"ok\nok\nok\n{context.parent.parent / 'host' / 'shadow'}\ndangling\n"


BOUNDED = textwrap.dedent(
    """
    import resource, sys
    from pathlib import Path
    resource.setrlimit(resource.RLIMIT_AS, (1 << 31, 1 << 31))  # a read without a bound dies here, not the machine
    sys.path.insert(0, sys.argv[1])
    from sandbox import EnvironmentBuildError
    from sandbox import dockerfile
    for call in (dockerfile.parse, dockerfile.base_image, dockerfile.workdir):
        try:
            call(Path(sys.argv[2]))
            print("read")
        except EnvironmentBuildError as err:
            print(type(err).__name__, err)
    """
)


@pytest.mark.parametrize("kind", UNBOUNDED_FILE_KINDS)
def test_a_dockerfile_that_is_no_regular_file_or_huge_is_refused(tmp_path, kind):
    df = tmp_path / "environment" / "Dockerfile"
    make_unbounded_file(df, kind)
    proc = subprocess.run([sys.executable, "-c", BOUNDED, str(REPO), str(df)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert len(lines) == 3, proc.stdout
    for line in lines:
        assert line.startswith(f"EnvironmentBuildError {df}: "), line  # one message, naming the file
        assert ("not a regular file" if kind != "sparse" else "bytes") in line, line
