"""The build cache (sandbox/build_cache.py) with real sandboxes: what a warm start sees equals a replay; a change of the
context or the Dockerfile rebuilds; concurrent starts build once; a failed build is not cached and is said once; the
layer cannot be written from inside a sandbox; eviction keeps the most recently used; an image root and a user
namespace cache as well."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
needs_namespaces = pytest.mark.skipif(
    not sys.platform.startswith("linux") or any(shutil.which(t) is None for t in ("unshare", "prlimit")),
    reason="the local sandbox needs Linux namespaces and util-linux (unshare, prlimit)")
pytestmark = needs_namespaces

DOCKERFILE = """FROM ubuntu:24.04
WORKDIR /app
ENV GREETING=hello
COPY data.txt /app/data.txt
RUN cat /proc/sys/kernel/random/uuid > /opt/build-id && rm -f /etc/issue.net && mkdir -p /usr/local/share/tr \\
    && echo y > /usr/local/share/tr/y && chmod 4750 /opt/build-id && ln -s /opt/build-id /usr/local/bin/tr-link \\
    && ln /opt/build-id /opt/hard && mkdir -p /etc/tr-opaque && rm -rf /etc/tr-opaque && mkdir /etc/tr-opaque \\
    && chown 1:2 /usr/local/share/tr/y
"""
# the file tree a build touched, as a command inside lists it: path, mode, owner, type, link target, content hash
LISTING = ("for d in /app /opt /usr/local/bin /usr/local/share /etc /var/lib/dpkg; do find $d -xdev "
           "-printf '%p %m %U:%G %y %l %n\\n'; done | sort; find /app /opt /usr/local/share/tr /etc/tr-opaque -type f "
           "-exec md5sum {} + | sort -k2; ls /etc/issue.net 2>&1; echo $GREETING; pwd")


def task(tmp_path: Path, dockerfile: str = DOCKERFILE, name: str = "task") -> Path:
    env = tmp_path / name / "environment"
    env.mkdir(parents=True, exist_ok=True)
    (env / "Dockerfile").write_text(dockerfile)
    (env / "data.txt").write_text("D\n")
    return env


def config(env: Path, cache: Path, **kw):
    from sandbox import SandboxConfig

    return SandboxConfig(memory_mb=256, storage_mb=128, max_processes=64, environment_dir=env, build_cache_dir=cache,
                         **kw)


def run(cfg, command: str) -> str:
    from sandbox import BlockingSandbox

    with BlockingSandbox(cfg) as sb:
        r = sb.exec(command)
        assert r.return_code == 0, r
        return r.stdout


def layers(cache: Path) -> list[str]:
    return sorted(p.name for p in cache.iterdir() if (p / "meta.json").is_file()) if cache.is_dir() else []


def folder_digest(path: Path) -> str:
    """Every entry under ``path``: name, mode, owner, link target, bytes (and nothing followed)."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in sorted(os.walk(path)):
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            h.update(f"{p} {st.st_mode:o} {st.st_uid}:{st.st_gid} {st.st_rdev} {st.st_size}".encode())
            if os.path.islink(p):
                h.update(os.readlink(p).encode())
            elif os.path.isfile(p):
                h.update(Path(p).read_bytes())
            if name != "used":  # the use-stamp's time is the only thing a start changes
                h.update(str(st.st_mtime_ns).encode())
    return h.hexdigest()


def test_a_warm_start_sees_what_a_replay_makes_and_changes_rebuild(tmp_path):
    env, cache = task(tmp_path), tmp_path / "cache"
    replayed = run(config(env, cache, build_cache=False), LISTING)
    assert layers(cache) == []  # build_cache=false: nothing cached, the Dockerfile replayed
    cold = run(config(env, cache), LISTING)
    assert len(layers(cache)) == 1
    meta = json.loads((cache / layers(cache)[0] / "meta.json").read_text())
    assert meta["env"] == {"GREETING": "hello"} and meta["inputs"]["base"] == "host userland"
    warm = run(config(env, cache), LISTING)
    build_id = lambda listing: listing.split("/opt/build-id\n")[0].rsplit("\n", 1)[-1].split()[0]  # md5 line
    # one build: both starts see its build id; the replay had its own (a uuid), the rest is the same tree
    assert cold == warm and build_id(cold) != build_id(replayed)
    assert cold.replace(build_id(cold), "X") == replayed.replace(build_id(replayed), "X")
    assert "cannot access '/etc/issue.net'" in warm  # deleted by the build: a whiteout in the layer
    assert "/opt/build-id 4750 0:0 f  2" in warm and "/usr/local/share/tr/y 644 1:2 f  1" in warm
    assert "/usr/local/bin/tr-link 777 0:0 l /opt/build-id 1" in warm and warm.endswith("hello\n/app\n")
    # build_cache=false replays every time
    assert build_id(run(config(env, cache, build_cache=False), LISTING)) != build_id(replayed)
    # a changed context file, then a changed Dockerfile: a new build each
    (env / "data.txt").write_text("E\n")
    assert build_id(run(config(env, cache), LISTING)) != build_id(warm) and len(layers(cache)) == 2
    (env / "Dockerfile").write_text(DOCKERFILE + "RUN true\n")
    assert build_id(run(config(env, cache), LISTING)) != build_id(warm) and len(layers(cache)) == 3
    (env / "sub").mkdir()  # a new file anywhere in the context (even one no COPY names)
    (env / "sub" / "x").write_text("")
    run(config(env, cache), "true")
    assert len(layers(cache)) == 4


def test_concurrent_starts_build_once(tmp_path):
    from sandbox import BlockingSandbox

    env, cache = task(tmp_path), tmp_path / "cache"

    def start(i: int) -> str:
        with BlockingSandbox(config(env, cache, name=f"bc-conc-{os.getpid()}-{i}")) as sb:
            return sb.exec("cat /opt/build-id").stdout

    with ThreadPoolExecutor(3) as pool:
        ids = list(pool.map(start, range(3)))
    assert len(set(ids)) == 1 and len(layers(cache)) == 1, ids
    assert not [p for p in cache.iterdir() if p.name.startswith(".")]  # no build folder left


def test_a_start_that_waited_for_a_build_mounts_it_while_the_builder_runs(tmp_path, monkeypatch):
    """Starts of one key that found no layer wait for the one build, then mount it, though the builder's sandbox
    (and every other that mounts the layer) keeps running: in a training step every episode's sandbox stays up
    until the step's last one has started. (A waiter once waited to take the key's lock exclusive, which a running
    sandbox holds shared: such a start never finished.) A third start holds the lock shared while two look for the
    layer, so both wait for the build; the build is faked (no sandbox)."""
    import asyncio
    import fcntl

    from sandbox import build_cache

    env, cache = task(tmp_path), tmp_path / "cache"
    cfg = config(env, cache)
    folder, key, _ = build_cache.locate(cfg)
    builds = []

    async def fake_build(sandbox, folder, key, inputs):
        builds.append(sandbox)
        await asyncio.sleep(0.2)
        (folder / key / "layer").mkdir(parents=True)
        (folder / key / "used").touch()
        (folder / key / "meta.json").write_text(json.dumps({"task": "task", "size_bytes": 1}))
        return True

    monkeypatch.setattr(build_cache, "_build", fake_build)
    starts = [type("Start", (), {"config": cfg, "logger": logging.getLogger("test")})() for _ in range(2)]
    third = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(third, fcntl.LOCK_SH)

    async def main():
        acquiring = asyncio.gather(*(build_cache.acquire(s) for s in starts))
        await asyncio.sleep(0.3)  # both have looked for the layer, found none, and wait for the build
        os.close(third)
        return await asyncio.wait_for(acquiring, 20)

    held = asyncio.run(main())
    try:
        assert len(builds) == 1 and [layer.path for layer in held] == [folder / key / "layer"] * 2
        assert all(layer.lock_fd is not None for layer in held)  # both held (shared) until released: not evicted
        assert build_cache.evict(cache, 0) == []
    finally:
        for layer in held:
            layer.release()
    assert build_cache.evict(cache, 0) == [key]


def test_a_start_waits_for_another_build_within_a_bound(tmp_path, monkeypatch):
    """A build of another start (here: its lock held by the test) waited for past ``wait_sec`` fails the start with a
    SandboxError naming it, and leaves no lock held."""
    import asyncio
    import fcntl

    from sandbox import SandboxError, build_cache

    env, cache = task(tmp_path), tmp_path / "cache"
    cfg = config(env, cache)
    folder, key, _ = build_cache.locate(cfg)
    assert build_cache.wait_sec(cfg) == cfg.build_timeout_sec + build_cache.BUILD_MARGIN_SEC  # one RUN
    monkeypatch.setattr(build_cache, "wait_sec", lambda config: 0.5)
    builder = os.open(folder / f"{key}.build", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(builder, fcntl.LOCK_EX)
    try:
        start = type("Start", (), {"config": cfg, "logger": logging.getLogger("test")})()
        with pytest.raises(SandboxError, match=r"gave up after waiting \d+ s for the build of task task by another "
                                               r"start \(its lock .*\.build held exclusive\)"):
            asyncio.run(asyncio.wait_for(build_cache.acquire(start), 20))
        probe = os.open(folder / f"{key}.lock", os.O_RDWR | os.O_CLOEXEC)
        fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the start let go of the layer's lock
        os.close(probe)
    finally:
        os.close(builder)


def test_a_build_that_leaves_files_in_tmp_is_replayed_not_cached(tmp_path, caplog):
    """Docker keeps a build's /tmp in the image; a start's /tmp is fresh, so such a build is replayed at every start
    (what the dockerfile tests' builds do), said once, and not built again for the cache."""
    env, cache = task(tmp_path, "FROM debian\nRUN echo kept > /tmp/from-build && echo v > /var/tmp/v\n",
                      name="tmp-task"), tmp_path / "cache"
    with caplog.at_level(logging.WARNING):
        assert run(config(env, cache), "cat /tmp/from-build /var/tmp/v") == "kept\nv\n"
        assert run(config(env, cache), "cat /tmp/from-build") == "kept\n"
    assert layers(cache) == [] and len(list(cache.glob("*.scratch"))) == 1
    said = [r.message for r in caplog.records if "leaves /tmp/from-build, /var/tmp/v" in r.message]
    assert len(said) == 1 and "replayed at every start" in said[0], said


def test_a_failed_build_is_not_cached_and_said_once(tmp_path, caplog):
    from sandbox import BlockingSandbox, SandboxError

    env, cache = task(tmp_path, "FROM scratch\nRUN echo half > /opt/half && exit 7\n", name="failing-task"), \
        tmp_path / "cache"
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            with pytest.raises(SandboxError, match="Dockerfile RUN failed .*exit 7"):
                with BlockingSandbox(config(env, cache)):
                    pass
    said = [r.message for r in caplog.records if "failed, not cached" in r.message]
    assert len(said) == 1 and "task failing-task" in said[0] and "RUN failed" in said[0], said
    assert layers(cache) == [] and not [p for p in cache.iterdir() if p.name.startswith(".build")]
    (env / "Dockerfile").write_text("FROM scratch\nRUN echo whole > /opt/half\n")  # fixed: built and cached
    assert run(config(env, cache), "cat /opt/half") == "whole\n" and len(layers(cache)) == 1


ATTACKS = r"""
echo w > /opt/build-id; truncate -s 0 /opt/hard; rm -f /usr/local/share/tr/y; chmod 777 /opt; chown 5 /app/data.txt
touch /usr/local/bin/planted; rm -rf /etc/tr-opaque; mknod /opt/wh c 0 0 2>/dev/null; mv /opt /opt2 2>/dev/null
setfattr -n trusted.overlay.opaque -v y /usr/local/share 2>/dev/null && echo XATTR
mount -o remount,rw / 2>/dev/null && echo REMOUNTED
mount -t tmpfs x /mnt 2>/dev/null && echo MOUNTED
unshare -m true 2>/dev/null && echo UNSHARED
echo w > /proc/self/root/opt2/via-proc-self-root; echo w > /proc/1/root/opt/via-proc-1 2>/dev/null && echo PROC1
readlink /proc/1/fd/* /proc/1/cwd /proc/1/root 2>/dev/null | grep . && echo PROC1FD
for l in $(grep -o 'lowerdir=[^,]*' /proc/self/mountinfo | cut -d= -f2 | tr ':' '\n' | grep layer); do
  ls $l >/dev/null 2>&1 && echo "SEEN $l"; done
echo done
"""


def test_the_cached_layer_cannot_be_written_from_a_sandbox(tmp_path):
    env, cache = task(tmp_path), tmp_path / "cache"
    first = run(config(env, cache), "cat /opt/build-id /usr/local/share/tr/y")
    before = folder_digest(cache)
    out = run(config(env, cache), ATTACKS)
    assert out.strip().splitlines()[-1] == "done" and not any(
        w in out for w in ("XATTR", "REMOUNTED", "MOUNTED", "UNSHARED", "PROC1", "SEEN")), out
    assert folder_digest(cache) == before  # the host's copy: not a byte, mode or owner changed
    assert str(cache) not in run(config(env, cache), "cat /proc/self/mountinfo")  # its path is not even named inside
    assert run(config(env, cache), "cat /opt/build-id /usr/local/share/tr/y; ls /etc/tr-opaque /opt") == \
        first + "/etc/tr-opaque:\n\n/opt:\nbuild-id\nhard\n"  # the next sandbox sees the original


def test_eviction_keeps_the_most_recently_used_and_never_one_in_use(tmp_path):
    from sandbox import BlockingSandbox, build_cache

    cache = tmp_path / "cache"
    big = "FROM scratch\nRUN head -c 3000000 /dev/urandom > /opt/blob # {}\n"  # 3 MB layers, 7 MB bound: two fit
    cfgs = [config(task(tmp_path, big.format(i), name=f"t{i}"), cache, build_cache_mb=7) for i in range(3)]
    tasks = lambda: sorted(e["task"] for e in build_cache.entries(cache))
    for i in (0, 1, 0):
        run(cfgs[i], "true")
    run(cfgs[2], "true")  # over the bound: t1, used least recently, goes
    assert tasks() == ["t0", "t2"]
    with BlockingSandbox(cfgs[0]):  # t0 is in use while t1 is built again: t2 goes, though t0 was used before it
        run(cfgs[1], "true")
        assert tasks() == ["t0", "t1"]
        t1 = [e["key"] for e in build_cache.entries(cache) if e["task"] == "t1"]
        assert build_cache.evict(cache, 0) == t1  # everything that is not in use
    assert len(build_cache.evict(cache, 0)) == 1 and tasks() == []


def test_an_image_root_caches_its_build(tmp_path):
    from rootfs import tiny_rootfs_tar

    from sandbox.images import ImageStore

    image = ImageStore({"x/tiny:1": str(tiny_rootfs_tar(tmp_path / "tiny.tar"))}, cache_dir=tmp_path / "images") \
        .root("x/tiny:1")
    env, cache = task(tmp_path, "FROM x/tiny:1\nRUN rm /usr/bin/wc && mkdir -p /srv && echo s > /srv/s\n"), \
        tmp_path / "cache"
    check = "ls /usr/bin/wc 2>&1 | head -c 31; echo; cat /srv/s"
    replayed = run(config(env, cache, rootfs=image.rootfs, build_cache=False), check)
    assert replayed == "ls: cannot access '/usr/bin/wc'\ns\n"
    assert run(config(env, cache, rootfs=image.rootfs), check) == replayed
    assert run(config(env, cache, rootfs=image.rootfs), check) == replayed and len(layers(cache)) == 1
    assert json.loads((cache / layers(cache)[0] / "meta.json").read_text())["inputs"]["base"] == str(image.rootfs)
    assert (image.rootfs / "usr" / "bin" / "wc").exists()


AS_NOBODY = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from pathlib import Path
    from sandbox import BlockingSandbox, SandboxConfig
    out = []
    for i in range(2):
        cfg = SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, environment_dir=Path(sys.argv[2]),
                            build_cache_dir=Path(sys.argv[3]), name=f"{sys.argv[4]}-{i}")
        with BlockingSandbox(cfg) as sb:
            out.append([sb.sandbox._userns, sb.sandbox._layer is not None,
                        sb.exec("cat /opt/build-id /opt/l data.txt").stdout])
    print(json.dumps(out))
""")


def test_a_user_namespace_caches_its_build(tmp_path, nobody_readable_repo):
    from test_sandbox import _python_for_nobody

    python = _python_for_nobody()
    if python is None:
        pytest.skip("needs root (to switch to 'nobody'), a Python >= 3.11 it can run, and user namespaces")
    work = Path(nobody_readable_repo).parent / f"bc-nobody-{os.getpid()}"
    env = task(work)
    # root inside is the user outside: the host's system folders are not its to change, /opt and /app are
    (env / "Dockerfile").write_text("FROM scratch\nWORKDIR /app\nCOPY data.txt .\n"
                                    "RUN cat /proc/sys/kernel/random/uuid > /opt/build-id && ln -s build-id /opt/l\n")
    subprocess.run(["chown", "-R", "65534:65534", str(work)], check=True)
    try:
        proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", python, "-S",
                               "-c", AS_NOBODY, str(nobody_readable_repo), str(env), str(work / "cache"),
                               f"bc-nobody-{os.getpid()}"],
                              capture_output=True, text=True, timeout=120, cwd="/", env={"PATH": os.environ["PATH"]})
        assert proc.returncode == 0, proc.stderr[-3000:]
        (userns, cached, first), (_, cached2, second) = json.loads(proc.stdout.strip().splitlines()[-1])
        assert userns and cached and cached2 and first == second and first.endswith("\nD\n"), (first, second)
        assert len(layers(work / "cache")) == 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
