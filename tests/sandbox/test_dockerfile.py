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
            sb._call(dockerfile.replay(sb.sandbox, dockerfile.plan(df), context, 60, logging.getLogger("test")))
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
        sb._call(dockerfile.replay(sb.sandbox, dockerfile.plan(df), context, 60, logging.getLogger("test")))
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
    for call in (dockerfile.parse, dockerfile.base_image, dockerfile.plan):
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


# ---------------------------------------------------------------- Docker's semantics, through a sandbox's start
def _started(ctx: Path, dockerfile: str, **config):
    """A BlockingSandbox (started by ``with``) whose build context is ``ctx``, its Dockerfile ``dockerfile``; a build
    cache of its own (beside the context), so no test sees another's layers."""
    from sandbox import BlockingSandbox, SandboxConfig

    (ctx / "Dockerfile").write_text(dockerfile)
    config.setdefault("build_cache_dir", Path(f"{ctx}-build-cache"))
    return BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, environment_dir=ctx, **config))


@needs_namespaces
def test_arg_and_env_follow_docker(tmp_path):
    box = _started(tmp_path, textwrap.dedent("""\
        ARG BASE=debian
        ARG FLAVOUR=slim
        FROM ${BASE}:12
        ARG FLAVOUR
        ARG NAME=world
        ARG UNSET
        ENV GREETING="hello ${NAME}" KIND=$FLAVOUR OLD=${BASE:-not-in-this-stage}
        ENV GREETING=bye COPY_OF=$GREETING
        RUN echo "$NAME|${UNSET:-none}|$GREETING|$COPY_OF|$KIND|$OLD" > /built.txt
        WORKDIR /srv/${NAME}
        WORKDIR sub
        """), build_args={"NAME": "bench"}, image_env={"IMG": "img", "KIND": "the image's"})
    with box:
        r = box.exec('cat /built.txt; pwd; echo "${NAME-unset}|$GREETING|$COPY_OF|$KIND|$IMG"')
    assert r.stdout == ("bench|none|bye|hello bench|slim|not-in-this-stage\n"  # a RUN sees ARG and ENV
                        "/srv/bench/sub\n"                                        # WORKDIR: expanded, relative
                        "unset|bye|hello bench|slim|img\n"), r  # ENV persists over the image's, ARG does not


@needs_namespaces
def test_user_runs_later_steps_and_is_the_default_user(tmp_path):
    (tmp_path / "owned.txt").write_text("o\n")
    box = _started(tmp_path, textwrap.dedent("""\
        FROM debian:12
        RUN groupadd -g 4300 crew && useradd -m -u 4321 -G crew agent
        USER agent
        RUN id -un > /tmp/who && echo "$HOME" >> /tmp/who
        WORKDIR /home/agent/work
        COPY --chown=agent:crew owned.txt ./
        COPY --chmod=0640 owned.txt /opt/ro/
        USER 4242:4300
        RUN id -u > /tmp/numeric && id -g >> /tmp/numeric
        USER agent
        """))
    with box:
        who = box.exec("cat /tmp/who /tmp/numeric; id -un; pwd; stat -c '%U:%G %a' . owned.txt /opt/ro/owned.txt")
        root = box.exec("id -u", user="root")
    assert who.stdout == ("agent\n/home/agent\n4242\n4300\n"  # later RUNs as the USER of their time
                          "agent\n/home/agent/work\n"            # exec's default: the final USER
                          "agent:agent 755\nagent:crew 644\nroot:root 640\n"), who
    assert root.stdout == "0\n"  # an explicit user still wins


@needs_namespaces
def test_copy_and_add_follow_docker(tmp_path):
    (tmp_path / "a.txt").write_text("A\n")
    (tmp_path / "b.txt").write_text("B\n")
    (tmp_path / "tree" / "sub").mkdir(parents=True)
    (tmp_path / "tree" / "sub" / "c.txt").write_text("C\n")
    payload = tmp_path / "payload"
    (payload / "inner").mkdir(parents=True)
    (payload / "inner" / "x.txt").write_text("X\n")
    subprocess.run(["tar", "-czf", str(tmp_path / "bundle.tgz"), "-C", str(payload), "inner"], check=True)
    box = _started(tmp_path, textwrap.dedent("""\
        FROM debian:12
        WORKDIR /w
        COPY a.txt /newdir/
        COPY a.txt b.txt /two/
        COPY *.txt rel/
        COPY tree /copied
        COPY ["tree/sub", "/json dest/"]
        ADD bundle.tgz /unpacked/
        ADD a.txt /added.txt
        """))
    with box:
        r = box.exec("cat /newdir/a.txt /two/a.txt /two/b.txt rel/a.txt rel/b.txt /copied/sub/c.txt "
                     "'/json dest/c.txt' /unpacked/inner/x.txt /added.txt; test -d /newdir && echo dir")
    assert r.stdout == "A\nA\nB\nA\nB\nC\nC\nX\nA\ndir\n", r


@needs_namespaces
def test_shell_changes_later_runs(tmp_path):
    box = _started(tmp_path, textwrap.dedent("""\
        FROM debian:12
        RUN echo "sh:${BASH_VERSION:-none}" > /shells
        SHELL ["/bin/bash", "-o", "pipefail", "-c"]
        RUN [[ -n "$BASH_VERSION" ]] && echo bash >> /shells
        RUN ["/bin/sh", "-c", "echo exec-form >> /shells"]
        RUN <<EOF
        #!/usr/bin/env python3
        open("/shells", "a").write("a heredoc with its own interpreter\\n")
        EOF
        RUN cat >> /shells <<'EOF'
        a heredoc as input, $NOT_EXPANDED
        EOF
        """))
    with box:
        r = box.exec("cat /shells")
    assert r.stdout == ("sh:none\nbash\nexec-form\na heredoc with its own interpreter\n"
                        "a heredoc as input, $NOT_EXPANDED\n"), r


@needs_namespaces
@pytest.mark.parametrize("dockerfile, named", [
    ("FROM debian:12\nUSER nobody-here\nRUN true\n", "USER nobody-here"),
    ("FROM debian:12\nRUN true\nUSER ghost\n", "USER ghost"),
    ("FROM debian:12\nCOPY --chown=ghost Dockerfile /x\n", "--chown=ghost"),
    ("FROM debian:12\nCOPY --chmod=u+x Dockerfile /x\n", "--chmod=u+x"),
    ("FROM debian:12\nRUNN true\n", "RUNN"),
    ("FROM debian:12\nCOPY Dockerfile Dockerfile /x\n", "end with a /"),
    ("FROM debian:12\nSHELL /bin/bash -c\n", "JSON"),
    ("FROM debian:12\nENV A=${B\n", "${B"),
])
def test_a_dockerfile_mistake_is_one_message_naming_the_line(tmp_path, dockerfile, named):
    from sandbox import EnvironmentBuildError

    with pytest.raises(EnvironmentBuildError) as err:
        with _started(tmp_path, dockerfile):
            pass
    line = dockerfile.count("\n")
    assert f"{tmp_path / 'Dockerfile'}:{line}" in str(err.value) and named in str(err.value), err.value


@needs_namespaces
@pytest.mark.parametrize("line", [
    "COPY e*/shadow /x",              # a glob through a context symlink to a host folder
    "COPY etc/* /x/",                 # listing a folder the context links out to
    "COPY [.][.]/[.][.]/host/shadow /x",  # a glob that spells ..
    "COPY */../../../host/shadow /x",
    "COPY ../*/shadow /x/",
    "COPY s?adow /x",                 # a glob matching a context symlink to a host file
])
def test_globs_stay_in_the_build_context(context, line):
    from sandbox import EnvironmentBuildError

    with pytest.raises(EnvironmentBuildError) as err:
        with _started(context, f"FROM debian:12\nWORKDIR /app\n{line}\n"):
            pass
    assert f"{context / 'Dockerfile'}:3" in str(err.value) and "build context" in str(err.value), err.value


@needs_namespaces
def test_chmod_chown_and_user_raise_no_privileges(tmp_path):
    """An attacker's Dockerfile: a set-uid root copy of `id` and a folder owned by someone else, then an unprivileged
    USER; neither a later RUN nor the agent's commands become root (no_new_privs), nor keep a capability."""
    shutil.copy("/usr/bin/id", tmp_path / "id")
    box = _started(tmp_path, textwrap.dedent("""\
        FROM debian:12
        COPY --chown=0:0 --chmod=4755 id /usr/local/bin/suid-id
        USER nobody
        RUN suid-id -u > /tmp/build-uid; grep CapEff /proc/self/status >> /tmp/build-uid
        """))
    with box:
        r = box.exec("stat -c '%U %a' /usr/local/bin/suid-id; cat /tmp/build-uid; suid-id -u; "
                     "grep CapEff /proc/self/status")
    assert r.stdout.split("\n") == ["root 4755", "65534", "CapEff:\t0000000000000000", "65534",
                                    "CapEff:\t0000000000000000", ""], r


# ---------------------------------------------------------------- the plan, without a sandbox
PLANNED = r"""# escape=\
ARG TAG=12
FROM debian:${TAG} AS base
ARG TARGETARCH
ENV A=1 Q='$A stays' E=\$A S="x y"
ENV A=2 B=$A
ENV OLD a value with blanks
ENV C=${UNSET:-d} D=${A:+set} F=${UNSET-}
RUN echo hi \
    # a comment inside a continuation

    && echo "$TARGETARCH"
RUN <<EOF
echo from a heredoc
EOF
COPY <<EOF /etc/motd
hello ${A}
EOF
COPY --chown=app:staff --chmod=0640 a b dir/
USER 1000
WORKDIR app
"""


def test_the_plan_expands_and_scopes_as_docker(tmp_path):
    from sandbox import dockerfile

    (tmp_path / "Dockerfile").write_text(PLANNED)
    build = dockerfile.plan(tmp_path / "Dockerfile", {"TAG": "13"})
    assert build.base == "debian:13"  # a global ARG, overridden, in FROM
    assert build.env == {"A": "2", "Q": "$A stays", "E": "$A", "S": "x y", "B": "1", "OLD": "a value with blanks",
                         "C": "d", "D": "set", "F": ""}  # ENV only: ARG values are not kept
    assert build.user == "1000" and build.workdir == "/app" and build.not_obeyed == []
    runs = [s for s in build.steps if s.op == "RUN"]
    assert runs[0].line == 9 and runs[0].args == ("/bin/sh", "-c", 'echo hi && echo "$TARGETARCH"')
    assert runs[0].env["TARGETARCH"] and runs[0].env["A"] == "2"  # a RUN sees ARG values
    assert runs[1].args == ("/bin/sh", "-c", "echo from a heredoc\n")
    copies = [s for s in build.steps if s.op == "COPY"]
    assert copies[0].heredocs == {"EOF": "hello 2\n"} and copies[0].args == ("<<EOF", "/etc/motd")
    assert (copies[1].args, copies[1].chown, copies[1].chmod, copies[1].into) == (("a", "b", "/dir"), "app:staff",
                                                                                   0o640, True)
    assert [(s.op, s.args) for s in build.steps if s.op in ("USER", "WORKDIR")] == [("USER", ("1000",)),
                                                                                     ("WORKDIR", ("/app",))]


NOT_OBEYED = """FROM golang AS builder
RUN --mount=type=cache,target=/root/.cache go build -o /out/app
FROM debian
COPY --from=builder /out/app /usr/local/bin/
ADD https://example.com/x.tgz /opt/
HEALTHCHECK CMD true
VOLUME /data
ENTRYPOINT ["/start.sh"]
COPY --exclude=*.md . /src/
ONBUILD RUN true
CMD ["bash"]
LABEL a=b
EXPOSE 80
STOPSIGNAL SIGTERM
"""


def test_what_is_not_obeyed_is_named_by_line(tmp_path):
    from sandbox import dockerfile

    (tmp_path / "Dockerfile").write_text(NOT_OBEYED)
    (tmp_path / ".dockerignore").write_text("*.md\n")
    build = dockerfile.plan(tmp_path / "Dockerfile", {"UNUSED": "1"})
    assert [(n.line, n.what) for n in build.not_obeyed] == [
        (2, "RUN --mount"), (3, "FROM (a second stage)"), (4, "COPY --from"), (5, "ADD of a URL"), (6, "HEALTHCHECK"),
        (7, "VOLUME"), (8, "ENTRYPOINT"), (9, "COPY --exclude"), (None, "the whole file")]
    assert str(build.not_obeyed[0]) == "Dockerfile:2: RUN --mount: the flag is not obeyed: the command runs without it"
    assert build.unused_args == ["UNUSED"]
    assert [s.op for s in build.steps] == ["RUN", "COPY"]  # COPY --from and ADD of a URL are skipped


def test_a_stage_inherits_the_stage_it_names(tmp_path):
    from sandbox import dockerfile

    (tmp_path / "Dockerfile").write_text("FROM debian AS base\nENV X=1\nUSER app\nWORKDIR /w\n"
                                         "FROM base AS final\nARG LATE=late\nENV Y=$X$LATE\n")
    build = dockerfile.plan(tmp_path / "Dockerfile", image_env={"PATH": "/img/bin"}, image_workdir="/img")
    assert build.env == {"PATH": "/img/bin", "X": "1", "Y": "1late"} and build.user == "app"
    assert build.workdir == "/w"
    alone = dockerfile.plan(tmp_path / "nothing", image_env={"PATH": "/img/bin"}, image_workdir="/img",
                            image_user="5:5")
    assert (alone.env, alone.workdir, alone.user, alone.steps) == ({"PATH": "/img/bin"}, "/img", "5:5", [])


@needs_namespaces
def test_in_a_user_namespace_a_user_is_root_and_said_once(tmp_path, caplog):
    """An ordinary user's sandbox maps only root: USER, later RUNs, --chown and WORKDIR's owner are root there."""
    (tmp_path / "f.txt").write_text("x\n")
    box = _started(tmp_path, "FROM debian\nRUN useradd -u 4321 app\nUSER app\nWORKDIR /w\nCOPY --chown=app f.txt ./\n"
                             "RUN id -u > /tmp/uid\n", mode="userns", limits="best-effort",
                   build_cache=False)  # one sandbox's warnings (a cache's build sandbox would say it too)
    with caplog.at_level(logging.WARNING), box:
        r = box.exec("cat /tmp/uid; id -u; stat -c %u /w /w/f.txt")
    assert r.stdout == "0\n0\n0\n0\n", r
    assert len([m for m in caplog.messages if "only root is mapped; 'app' is root here" in m]) == 1
