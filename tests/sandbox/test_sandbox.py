"""The local sandbox: the standard-library package `sandbox/` driven directly from the training venv, and
its Harbor adapter (harbor_plugins/local_sandbox.py) driven through real Harbor jobs in .venv-harbor.

Harbor lives in its own Python 3.12 venv (eval/setup_harbor.sh, run by `make test`), so the Harbor tests
run it as subprocesses: `.venv-harbor/bin/harbor run ... --env harbor_plugins.local_sandbox:LocalSandboxEnvironment`
with PYTHONPATH set to the repo root, and read the job's result.json files back.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from host_processes import host_processes

REPO = Path(__file__).resolve().parents[2]
HARBOR_VENV = REPO / ".venv-harbor"
HARBOR = HARBOR_VENV / "bin" / "harbor"
HARBOR_PY = HARBOR_VENV / "bin" / "python"
TASKS = REPO / "tests" / "fixtures" / "harbor_tasks"
ENV_CLASS = "harbor_plugins.local_sandbox:LocalSandboxEnvironment"
HOST_PROBES = [Path(p) / "tr-sandbox-probe" for p in ("/etc", "/root", "/tmp", "/var/tmp", "/usr")]
MAX_PROCESSES = 64

needs_namespaces = pytest.mark.skipif(
    not sys.platform.startswith("linux") or any(shutil.which(t) is None for t in ("unshare", "nsenter", "prlimit", "setpriv")),
    reason="the local sandbox needs Linux namespaces and util-linux (unshare, nsenter, prlimit, setpriv)")
needs_harbor = pytest.mark.skipif(not HARBOR.exists(),
                                  reason=".venv-harbor missing: run `bash eval/setup_harbor.sh` (make test does)")


def harbor_e2e(test):
    """A test that runs Harbor (in .venv-harbor) with the local sandbox."""
    return needs_harbor(needs_namespaces(test))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(REPO), **extra)
    return env


def harbor_run(task: Path, agent: str, jobs: Path, name: str, *args: str, env=None) -> Path:
    cmd = [str(HARBOR), "run", "-p", str(task), "--env", ENV_CLASS, "-a", agent,
           "-o", str(jobs), "--job-name", name, "-y", *args]
    proc = subprocess.run(cmd, cwd=REPO, env=env or _env(), capture_output=True, text=True, timeout=180)
    job = jobs / name
    assert (job / "result.json").exists(), f"harbor failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return job


def trials(job: Path) -> dict[str, dict]:
    """task folder name -> trial result.json (trial dirs are named <task folder>__<id>)"""
    out = {}
    for res in job.glob("*/result.json"):
        r = json.loads(res.read_text())
        out[res.parent.name.rsplit("__", 1)[0]] = r | {"_dir": res.parent}
    return out


def exception_type(trial: dict) -> str | None:
    return (trial.get("exception_info") or {}).get("exception_type")


def reward(trial: dict):
    return ((trial.get("verifier_result") or {}).get("rewards") or {}).get("reward")


# ---------------------------------------------------------------- hello-world: oracle 1.0, nop 0.0
@pytest.fixture(scope="module")
def hello_jobs(tmp_path_factory):
    jobs = tmp_path_factory.mktemp("hello-jobs")
    with ThreadPoolExecutor(2) as pool:  # two harbor processes side by side
        futs = {a: pool.submit(harbor_run, TASKS / "hello-world", a, jobs, f"hello-{a}") for a in ("oracle", "nop")}
        return {a: f.result() for a, f in futs.items()}


@harbor_e2e
@pytest.mark.parametrize("agent,expected", [("oracle", 1.0), ("nop", 0.0)])
def test_hello_world_reward(hello_jobs, agent, expected):
    job = hello_jobs[agent]
    result = json.loads((job / "result.json").read_text())
    (key, ev), = result["stats"]["evals"].items()
    assert key.startswith(f"{agent}__")
    assert ev["metrics"][0]["mean"] == expected
    assert ev["n_errors"] == 0 and ev["exception_stats"] == {}
    (trial,) = trials(job).values()
    assert reward(trial) == expected and exception_type(trial) is None
    # the verifier's outputs came back from the sandbox into the trial dir
    assert (trial["_dir"] / "verifier" / "reward.txt").read_text().strip() == str(int(expected))


# ---------------------------------------------------------------- isolation: one job, four probe tasks
@pytest.fixture(scope="module")
def isolation_job(tmp_path_factory):
    for p in HOST_PROBES:
        assert not p.exists(), f"{p} exists before the test; remove it"
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    jobs = tmp_path_factory.mktemp("isolation-jobs")
    try:
        job = harbor_run(TASKS / "isolation", "oracle", jobs, "isolation", "-n", "4",
                         "--ek", f"max_processes={MAX_PROCESSES}", env=_env(TR_PROBE_PORT=str(port)))
        try:
            conn, _ = listener.accept()
            conn.close()
            connected = True
        except BlockingIOError:
            connected = False
    finally:
        listener.close()
    return {"job": job, "trials": trials(job), "host_listener_connected": connected, "port": port}


def _probe(trial: dict) -> list[str]:
    return (trial["_dir"] / "agent" / "probe.txt").read_text().splitlines()


@harbor_e2e
def test_writes_outside_the_workspace_never_reach_the_host(isolation_job):
    t = isolation_job["trials"]["escape"]
    probe = _probe(t)
    # inside the sandbox each write succeeded (it landed in the tmpfs overlay) ...
    assert [line.split()[0] for line in probe[:5]] == ["write_ok"] * 5, probe
    # ... and the host is unchanged
    assert not [p for p in HOST_PROBES if p.exists()]
    assert reward(t) == 1.0 and exception_type(t) is None


@harbor_e2e
def test_no_network_and_no_privileges(isolation_job):
    probe = _probe(isolation_job["trials"]["escape"])
    net = [line for line in probe if line.startswith("net_")]
    assert len(net) == 3 and all(line.startswith("net_blocked") for line in net), net
    assert f"net_blocked 127.0.0.1 {isolation_job['port']} " in "\n".join(net) + " "
    assert not isolation_job["host_listener_connected"], "the sandbox reached a port on the host's loopback"
    for expected in ("mem_blocked", "mount_blocked", "mknod_blocked", "proc1_is_sandbox_init", "proc1_root_denied",
                     "unshare_blocked", "host_dirs_hidden", "capbnd 00000000a00425fb"):
        assert any(line.startswith(expected) for line in probe), (expected, probe)
    planted = isolation_job["trials"]["escape"]["_dir"] / "verifier" / "planted.txt"
    if planted.exists():  # a helper planted by the agent ran later: never with more than the task's privileges
        assert all(int(line.split()[1], 16) & ~ALLOWED_CAPS == 0 for line in planted.read_text().splitlines())


@harbor_e2e
def test_fork_bomb_is_bounded_and_ends_with_the_agent_timeout(isolation_job):
    t = isolation_job["trials"]["fork-bomb"]
    assert exception_type(t) == "AgentTimeoutError"
    bomb = json.loads((t["_dir"] / "agent" / "bomb.json").read_text())
    assert bomb["errno"] == 11 and bomb["forked"] < MAX_PROCESSES, bomb  # EAGAIN at the process limit
    # the bomb was killed with the agent phase, so the verifier could still run in the same sandbox
    assert reward(t) == 1.0


@harbor_e2e
def test_agent_past_its_time_is_killed(isolation_job):
    t = isolation_job["trials"]["agent-timeout"]
    assert exception_type(t) == "AgentTimeoutError"
    assert "timed out after 2.0 seconds" in t["exception_info"]["exception_message"]
    assert reward(t) == 0.0  # Harbor still runs the verifier after an agent timeout


@harbor_e2e
def test_verifier_past_its_time_is_killed(isolation_job):
    t = isolation_job["trials"]["verifier-timeout"]
    assert exception_type(t) == "VerifierTimeoutError"
    assert t["verifier_result"] is None


@harbor_e2e
def test_no_process_of_a_trial_survives(isolation_job):
    assert len(isolation_job["trials"]) == 4
    # sleep 31337 (agent, foreground), 31338 (agent, setsid-detached), 31339 (verifier); the
    # sandboxes' PID 1 carries the session's name (the trial's) in its command line
    ours = {t["_dir"].name for t in isolation_job["trials"].values()}
    assert host_processes("sleep 3133", str(isolation_job["job"]), *(f"sandbox_init:{t}__" for t in ours)) == []
    leftover = [p for p in Path("/sys/fs/cgroup").glob("**/local-sandbox/*")
                if p.is_dir() and p.name.rsplit("__", 1)[0] in ours]
    assert leftover == []  # per-trial cgroups (root mode) are removed


# ---------------------------------------------------------------- the environment class used directly
DIRECT = textwrap.dedent(
    """
    import asyncio, json, logging, os, sys, tempfile
    from pathlib import Path
    from harbor.models.task.config import EnvironmentConfig
    from harbor.models.trial.paths import TrialPaths
    from harbor_plugins.local_sandbox import LocalSandboxEnvironment
    from sandbox import SandboxExecTimeoutError

    async def main():
        tmp = Path(tempfile.mkdtemp())
        (tmp / "task" / "environment").mkdir(parents=True)
        trial = TrialPaths(tmp / "jobs" / "t__1"); trial.mkdir()
        env = LocalSandboxEnvironment(tmp / "task" / "environment", "t", "t__1__env", trial,
                                      EnvironmentConfig(memory_mb=256, storage_mb=64), max_processes=32)
        out = {}
        await env.start(force_build=False)
        try:
            r = await env.exec("pwd; id -u; echo hi > /etc/direct-probe && cat /etc/direct-probe; "
                               "echo $OPENAI_API_KEY; ls /proc | grep -cE '^[0-9]+$'")
            out["exec"] = [r.return_code, r.stdout]
            (tmp / "up").mkdir(); (tmp / "up" / "a.txt").write_text("A"); (tmp / "up" / "sub").mkdir()
            (tmp / "up" / "sub" / "b.sh").write_text("echo B"); os.chmod(tmp / "up" / "sub" / "b.sh", 0o755)
            await env.upload_dir(tmp / "up", "/data")
            await env.upload_file(tmp / "up" / "a.txt", "/data/c.txt")
            r = await env.exec("cat /data/a.txt /data/c.txt; /data/sub/b.sh")
            out["upload"] = r.stdout
            await env.download_dir("/data", tmp / "down")
            out["download"] = sorted(str(p.relative_to(tmp / "down")) for p in (tmp / "down").rglob("*"))
            try:
                await env.exec("sleep 31340", timeout_sec=1)
                out["timeout"] = "no exception"
            except SandboxExecTimeoutError as e:
                out["timeout"] = type(e).__name__
            await env.exec("setsid sleep 31341 </dev/null >/dev/null 2>&1 &")
        finally:
            await env.stop(delete=True)
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def _run_direct(preexec=None) -> dict:
    proc = subprocess.run([str(HARBOR_PY), "-c", DIRECT], cwd=REPO, capture_output=True, text=True, timeout=60,
                          env=_env(OPENAI_API_KEY="sk-must-not-leak"), preexec_fn=preexec)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check_direct(out: dict) -> None:
    rc, stdout = out["exec"]
    lines = stdout.split("\n")
    assert rc == 0 and lines[0] == "/app" and lines[1] == "0" and lines[2] == "hi", stdout
    assert lines[3] == "", "the Harbor process's environment leaked into the sandbox"
    assert int(lines[4]) < 10  # own PID namespace: only the sandbox's processes are visible
    assert out["upload"] == "AAB\n"
    assert out["download"] == ["a.txt", "c.txt", "sub", "sub/b.sh"]
    assert out["timeout"] == "SandboxExecTimeoutError"
    assert not Path("/etc/direct-probe").exists()
    assert host_processes("sleep 3134") == []


@harbor_e2e
def test_environment_class_directly():
    _check_direct(_run_direct())


def _nobody_can_run_harbor() -> bool:
    if os.geteuid() != 0 or not HARBOR.exists() or shutil.which("setpriv") is None:
        return False
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                            str(HARBOR_PY), "-c", "import harbor"], capture_output=True, env=_env(), cwd="/")
    userns = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                             "unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    return probe.returncode == 0 and userns.returncode == 0


@harbor_e2e
@pytest.mark.skipif(not _nobody_can_run_harbor(),
                    reason="needs root (to switch to 'nobody'), a .venv-harbor that 'nobody' can execute "
                           "(e.g. not under a 0700 /root) and unprivileged user namespaces")
def test_environment_class_as_an_ordinary_user():
    def drop():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    _check_direct(_run_direct(preexec=drop))


# ---------------------------------------------------------------- the sandbox package directly: training venv, no Harbor
def _cgroups_named(name: str) -> list[Path]:
    return [p for p in Path("/sys/fs/cgroup").glob("**/local-sandbox/*") if p.is_dir() and p.name == name]


@needs_namespaces
def test_blocking_sandbox_in_the_training_venv(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig, SandboxError, SandboxExecTimeoutError

    name = f"direct-{os.getpid()}"
    probes = [Path(p) / "tr-direct-probe" for p in ("/etc", "/root", "/tmp", "/var/tmp", "/usr")]
    assert not [p for p in probes if p.exists()], "a probe file exists before the test; remove it"
    payload = b"payload\x00\xff\n" * 1000
    (tmp_path / "in.bin").write_bytes(payload)
    config = SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, workdir="/work",
                           env={"TR_GREETING": "hi"}, name=name)
    with BlockingSandbox(config) as sb:
        r = sb.exec("pwd; echo $TR_GREETING; echo oops >&2; exit 3")
        assert (r.return_code, r.stdout, r.stderr) == (3, "/work\nhi\n", "oops\n")
        r = sb.exec(" && ".join(f"echo x > {p} && cat {p}" for p in probes))
        assert (r.return_code, r.stdout) == (0, "x\n" * len(probes)), r  # writable inside ...
        sb.upload_file(tmp_path / "in.bin", "/data/in.bin")
        assert sb.exec("wc -c < /data/in.bin").stdout.strip() == str(len(payload))
        sb.download_file("/data/in.bin", tmp_path / "back" / "in.bin")
        assert (tmp_path / "back" / "in.bin").read_bytes() == payload
        with pytest.raises(SandboxExecTimeoutError) as timeout:
            sb.exec("sleep 31346", timeout_sec=1)
        assert isinstance(timeout.value, TimeoutError)
        assert host_processes("sleep 31346") == []  # the command's process group was killed
        assert sb.exec("echo still-up").stdout == "still-up\n"
        sb.exec("setsid sleep 31347 </dev/null >/dev/null 2>&1 &")
        init_pid = sb.sandbox.init_pid
        assert host_processes(f"sandbox_init:{name}"), "the sandbox's PID 1 is not running"
    assert not Path(f"/proc/{init_pid}").exists()
    assert host_processes("sleep 31347", f"sandbox_init:{name}") == []
    assert not [p for p in probes if p.exists()], "... and nothing reached the host"
    assert _cgroups_named(name) == []
    with pytest.raises(SandboxError, match="closed"):
        sb.exec("true")
    assert "harbor" not in sys.modules


LIFELINE = textwrap.dedent(
    """
    import os, sys
    from sandbox import BlockingSandbox, SandboxConfig
    sb = BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, name=sys.argv[1]))
    sb.start()
    sb.exec("setsid sleep 31348 </dev/null >/dev/null 2>&1 &")
    print(sb.sandbox.init_pid, flush=True)
    os.kill(os.getpid(), 9)  # dies without close()
    """
)


@needs_namespaces
def test_blocking_sandbox_dies_with_its_process():
    name = f"lifeline-{os.getpid()}"
    try:
        proc = subprocess.run([sys.executable, "-c", LIFELINE, name], cwd=REPO, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == -9, proc.stderr[-3000:]
        init_pid = int(proc.stdout.split()[-1])
        for _ in range(1500):  # the lifeline pipe closed: PID 1 exits, the kernel kills the rest
            if not Path(f"/proc/{init_pid}").exists():
                break
            time.sleep(0.02)
        assert not Path(f"/proc/{init_pid}").exists(), "the sandbox outlived the process that started it"
        assert host_processes("sleep 31348", f"sandbox_init:{name}") == []
    finally:
        for d in _cgroups_named(name):  # nothing in the dead process could remove it
            for _ in range(100):  # its last processes (unshare) may still be exiting
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.05)


STDLIB_ONLY = textwrap.dedent(
    """
    import importlib, json, pkgutil, sys
    sys.path.insert(0, sys.argv[1])
    before = set(sys.modules)
    import sandbox
    names = [m.name for m in pkgutil.iter_modules(sandbox.__path__, "sandbox.")]
    for name in names:
        importlib.import_module(name)
    loaded = {m.split(".")[0] for m in set(sys.modules) - before}
    print(json.dumps({"modules": names, "outside": sorted(loaded - set(sys.stdlib_module_names) - {"sandbox"})}))
    """
)


@pytest.mark.parametrize("python", [sys.executable, str(HARBOR_PY)], ids=["training-venv", "harbor-venv"])
def test_sandbox_package_imports_only_the_standard_library(python):
    if not Path(python).exists():
        pytest.skip(f"{python} missing")
    # -S: no site-packages (and no .pth hooks), so a third-party import fails or shows up below
    proc = subprocess.run([python, "-S", "-c", STDLIB_ONLY, str(REPO)], capture_output=True, text=True, timeout=60,
                          env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert {"sandbox.core", "sandbox.blocking", "sandbox.pid1", "sandbox.cgroup", "sandbox.dockerfile"} <= set(out["modules"])
    assert out["outside"] == []


def _python_for_nobody() -> str | None:
    """A Python >= 3.11 that user 'nobody' can run, when we are root and user namespaces are allowed."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None or shutil.which("unshare") is None:
        return None
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    if subprocess.run(nobody + ["unshare", "--user", "--map-root-user", "--mount", "true"],
                      capture_output=True).returncode != 0:
        return None
    for python in (sys.executable, str(HARBOR_PY), "/usr/bin/python3", shutil.which("python3") or ""):
        # the sandbox's PID 1 runs this Python inside the user namespace: probe it there
        if python and Path(python).exists() and subprocess.run(
                nobody + ["unshare", "--user", "--map-root-user", "--", python, "-S", "-c",
                          "import sys; sys.exit(sys.version_info < (3, 11))"],
                capture_output=True, cwd="/").returncode == 0:
            return python
    return None


AS_NOBODY = textwrap.dedent(
    """
    import json, os, sys, tempfile
    sys.path.insert(0, sys.argv[1])
    from sandbox import BlockingSandbox, SandboxConfig, SandboxExecTimeoutError
    tmp = tempfile.mkdtemp()
    with open(os.path.join(tmp, "a.txt"), "w") as f:
        f.write("A")
    out = {}
    with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, name=sys.argv[2])) as sb:
        out["userns"] = sb.sandbox._userns
        r = sb.exec("id -u; echo x > /etc/tr-nobody-probe && cat /etc/tr-nobody-probe")
        out["exec"] = [r.return_code, r.stdout]
        sb.upload_file(os.path.join(tmp, "a.txt"), "/data/a.txt")
        sb.exec("mkdir /data/sub && echo B > /data/sub/b.txt")
        sb.download_dir("/data", os.path.join(tmp, "down"))
        out["download"] = sorted(os.path.relpath(os.path.join(d, f), os.path.join(tmp, "down"))
                                 for d, _, fs in os.walk(os.path.join(tmp, "down")) for f in fs)
        try:
            sb.exec("sleep 31349", timeout_sec=1)
        except SandboxExecTimeoutError:
            out["timeout"] = True
    print(json.dumps(out))
    """
)


@needs_namespaces
@pytest.mark.skipif(_python_for_nobody() is None,
                    reason="needs root (to switch to 'nobody'), a Python >= 3.11 that 'nobody' can run "
                           "and unprivileged user namespaces")
def test_sandbox_as_an_ordinary_user_uses_a_user_namespace(nobody_readable_repo):
    name = f"nobody-{os.getpid()}"
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                           _python_for_nobody(), "-S", "-c", AS_NOBODY, str(nobody_readable_repo), name],
                          capture_output=True, text=True, timeout=60, cwd="/", env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["userns"] is True
    assert out["exec"] == [0, "0\nx\n"]  # root inside (the only mapped user), writes land in the overlay
    assert out["download"] == ["a.txt", "sub/b.txt"]
    assert out["timeout"] is True
    assert not Path("/etc/tr-nobody-probe").exists()
    assert host_processes("sleep 31349", f"sandbox_init:{name}") == []


@needs_namespaces
def test_dockerfile_subset_is_replayed_at_start(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig, SandboxError

    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "data.txt").write_text("D\n")
    (tmp_path / "setup.sh").write_text('echo "$GREETING from setup" > made.txt\n')
    (tmp_path / "Dockerfile").write_text(
        "FROM ubuntu:24.04\nWORKDIR /srv\nENV GREETING=hello \\\n    OTHER=x\nCOPY app/ /srv/app/\n"
        "COPY setup.sh /tmp/setup.sh\nRUN bash /tmp/setup.sh && rm /tmp/setup.sh\n")
    config = SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, environment_dir=tmp_path)
    with BlockingSandbox(config) as sb:
        assert sb.workdir == "/srv"  # the Dockerfile's WORKDIR, as no workdir was given
        r = sb.exec("pwd; cat app/data.txt made.txt; echo $GREETING $OTHER; ls /tmp/setup.sh 2>&1 >/dev/null | wc -l")
        assert r.stdout == "/srv\nD\nhello from setup\nhello x\n1\n", r
    (tmp_path / "Dockerfile").write_text("FROM scratch\nRUN exit 7\n")
    failing = BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, environment_dir=tmp_path,
                                            name=f"df-fail-{os.getpid()}"))
    with pytest.raises(SandboxError, match="Dockerfile RUN failed .*exit 7"):
        with failing:
            pass
    assert not failing._thread.is_alive()  # __enter__ failed: the sandbox and its thread are closed
    assert host_processes(f"sandbox_init:df-fail-{os.getpid()}") == []  # a failed start leaves nothing running


# ---------------------------------------------------------------- adversarial review: privileges, host files, floods
ALLOWED_CAPS = 0xa00425fb  # Docker's default set minus CAP_MKNOD
PRELOAD_C = r"""
#include <stdio.h>
#include <string.h>
__attribute__((constructor)) static void record(void) {
    char line[256];
    FILE *in = fopen("/proc/self/status", "r"), *out = fopen("/tmp/preload-caps.txt", "a");
    if (!in || !out) return;
    while (fgets(line, sizeof line, in)) if (!strncmp(line, "CapEff:", 7)) fputs(line, out);
    fclose(in); fclose(out);
}
"""


def _cap_masks(text: str) -> list[int]:
    return [int(line.split()[1], 16) for line in text.splitlines() if line.startswith(("CapEff:", "CapBnd:"))]


@needs_namespaces
def test_a_planted_helper_or_preload_never_gets_host_privileges(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig

    preload = None
    if shutil.which("gcc"):
        (tmp_path / "p.c").write_text(PRELOAD_C)
        if subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(tmp_path / "p.so"), str(tmp_path / "p.c")],
                          capture_output=True).returncode == 0:
            preload = tmp_path / "p.so"
    with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32)) as sb:
        for tool in ("setpriv", "nsenter", "sh", "bash"):  # helpers a host-side tool might look up inside
            sb.exec(f"mkdir -p /usr/local/sbin && printf '#!/bin/sh\\ngrep CapEff /proc/self/status "
                    f">> /tmp/planted.txt\\nexec /usr/bin/{tool} \"$@\"\\n' > /usr/local/sbin/{tool} && "
                    f"chmod 755 /usr/local/sbin/{tool}")
        if preload is not None:
            sb.upload_file(preload, "/usr/local/lib/p.so")
            assert sb.exec("echo /usr/local/lib/p.so > /etc/ld.so.preload").return_code == 0
        later = sb.exec("grep -E 'CapEff|CapBnd' /proc/self/status", user="root")
        as_user = sb.exec("grep -E 'CapEff|CapBnd' /proc/self/status", user="nobody")
        sb.exec("true")  # and the transfers
        sb.download_file("/etc/hostname", tmp_path / "hostname")
        records = sb.exec("cat /tmp/planted.txt /tmp/preload-caps.txt 2>/dev/null").stdout
    assert later.return_code == 0 and _cap_masks(later.stdout) == [ALLOWED_CAPS, ALLOWED_CAPS], later
    assert _cap_masks(as_user.stdout) == [0, ALLOWED_CAPS], as_user
    if preload is not None:
        assert "CapEff" in records, "the preload library was never loaded: the test proves nothing"
    # whatever of the sandbox ran, it ran with no more than the allowed set
    assert all(m & ~ALLOWED_CAPS == 0 for m in _cap_masks(records)), records


@needs_namespaces
def test_host_files_outside_the_system_folders_are_invisible(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig

    hidden = tmp_path / "hidden"  # under the host's /tmp
    hidden.mkdir()
    (hidden / "marker").write_text("secret")
    exposed = tmp_path / "exposed"
    exposed.mkdir()
    (exposed / "data").write_text("shared")
    git_dir = REPO / ".git"
    with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32,
                                       expose=[str(exposed)])) as sb:
        def visible(path) -> bool:
            return sb.exec(f"test -e {shlex.quote(str(path))}").return_code == 0

        assert not visible(hidden / "marker") and not visible(hidden)
        assert not visible(git_dir) and not visible(REPO / "sandbox" / "init.py")
        assert not visible(Path(sys.executable).resolve())  # the host's pyenv Python under /root
        assert sb.exec("ls -A /root /home /srv /mnt /media /opt").stdout.split() == \
            ["/home:", "/media:", "/mnt:", "/opt:", "/root:", "/srv:"]
        shadow = sb.exec("cat /etc/shadow /etc/gshadow 2>/dev/null")
        assert all(line.split(":")[1] in ("*", "") for line in shadow.stdout.splitlines() if ":" in line), shadow
        assert sb.exec("ls /etc/ssh/ssh_host_*_key 2>/dev/null").stdout == ""
        r = sb.exec(f"cat {shlex.quote(str(exposed / 'data'))} && ! touch {shlex.quote(str(exposed / 'new'))} 2>/dev/null")
        assert (r.return_code, r.stdout) == (0, "shared"), r  # exposed: readable, read-only
        r = sb.exec("python3 -c 'print(6*7)' && bash -c 'echo ok' && tar --version | head -1 | cut -c1-3 && "
                    "ls /usr/bin/env && echo x > /root/f && cat /root/f && dpkg -s coreutils >/dev/null && echo dpkg")
        assert r.return_code == 0 and r.stdout.split() == ["42", "ok", "tar", "/usr/bin/env", "x", "dpkg"], r
    assert not (exposed / "new").exists()


@needs_namespaces
def test_sparse_files_and_output_floods_stay_bounded(tmp_path, caplog):
    from sandbox import BlockingSandbox, SandboxConfig, SandboxError

    cap = 4 * 1024 * 1024
    config = SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, max_output_bytes=cap,
                           max_download_bytes=8 * 1024 * 1024)
    with BlockingSandbox(config) as sb:
        r = sb.exec("head -c 100M /dev/zero; echo done >&2")
        assert r.return_code == 0 and r.stderr == "done\n"
        assert cap <= len(r.stdout) <= cap + 200 and "output truncated" in r.stdout[cap:], r.stdout[cap:]
        assert sb.exec("mkdir -p /logs/agent && truncate -s 1G /logs/agent/sparse && echo hi > /logs/agent/small "
                       "&& head -c 1M /dev/urandom > /logs/agent/mid").return_code == 0
        with caplog.at_level("WARNING"):
            sb.download_dir("/logs/agent", tmp_path / "agent")
        assert sorted(p.name for p in (tmp_path / "agent").iterdir()) == ["mid", "small"]  # the sparse one skipped
        assert (tmp_path / "agent" / "mid").stat().st_size == 1024 * 1024
        assert "sparse" in caplog.text and "max_download_bytes" in caplog.text
        with pytest.raises(SandboxError, match="max_download_bytes"):
            sb.download_file("/logs/agent/sparse", tmp_path / "sparse")
        assert not (tmp_path / "sparse").exists()
        # a tar stream over the cap in all (many files, each under it) fails too
        sb.exec("for i in 1 2 3; do head -c 5M /dev/zero > /logs/agent/z$i; done")
        with pytest.raises(SandboxError, match="max_download_bytes"):
            sb.download_dir("/logs/agent", tmp_path / "again")
        assert sum(p.stat().st_size for p in (tmp_path / "again").rglob("*")) <= 10 * 1024 * 1024


FILL_TMPFS = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from sandbox import BlockingSandbox, SandboxConfig
    with BlockingSandbox(SandboxConfig(memory_mb=64, storage_mb=1024, max_processes=32, name=sys.argv[2])) as sb:
        r = sb.exec("for d in /tmp /var/tmp /dev/shm /run /root /app; do head -c 100M /dev/zero > $d/fill 2>/dev/null; "
                    "done; du -cm --apparent-size /tmp/fill /var/tmp/fill /dev/shm/fill /run/fill /root/fill "
                    "/app/fill | tail -1 | cut -f1")
        print(json.dumps({"userns": sb.sandbox._userns, "written_mb": int(r.stdout.strip())}))
    """
)


def test_tmpfs_sizes_share_one_budget():
    from sandbox import SandboxConfig

    for storage, memory in ((64, 4096), (10240, 4096), (10240, 256), (1024, 64)):
        cfg = SandboxConfig(storage_mb=storage, memory_mb=memory)
        for userns in (False, True):
            sizes = cfg.tmpfs_sizes_mb(userns)
            budget = min(storage, memory * 7 // 8)
            assert sum(sizes.values()) <= max(budget, 8) and min(sizes.values()) >= 1, (storage, memory, sizes)
            assert sizes["root"] >= budget * 2 // 5 and sizes["shm"] <= 1024


@needs_namespaces
@pytest.mark.skipif(_python_for_nobody() is None,
                    reason="needs root (to switch to 'nobody'), a Python >= 3.11 that 'nobody' can run "
                           "and unprivileged user namespaces")
def test_tmpfs_writes_in_a_user_namespace_stay_within_memory_mb(nobody_readable_repo):
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                           _python_for_nobody(), "-S", "-c", FILL_TMPFS, str(nobody_readable_repo),
                           f"fill-{os.getpid()}"],
                          capture_output=True, text=True, timeout=120, cwd="/", env={"PATH": os.environ["PATH"]})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["userns"] is True
    assert out["written_mb"] <= 64, out  # all tmpfs together: within memory_mb, not 6 x 100 MiB


@needs_namespaces
@pytest.mark.skipif(os.geteuid() != 0, reason="root mode (cgroup memory limit) needs root")
def test_the_sandbox_survives_a_full_tmpfs_and_its_death_is_a_command_failure():
    import threading

    from sandbox import BlockingSandbox, SandboxConfig

    # storage_mb within 7/8 of memory_mb: the tmpfs root (past it the root would be on disk)
    with BlockingSandbox(SandboxConfig(memory_mb=64, storage_mb=56, max_processes=32)) as sb:
        # tmpfs pages count against the cgroup's 64 MiB: the writer fails or is OOM-killed, PID 1 is not
        sb.exec("head -c 300M /dev/zero > /tmp/fill; head -c 300M /dev/zero > /app/fill")
        sb.exec("rm -f /tmp/fill /app/fill")
        assert sb.exec("echo alive").stdout == "alive\n"
        # and a command that needs more memory than is left: it is killed, not PID 1
        sb.exec("head -c 20M /dev/zero > /tmp/fill; head -c 20M /dev/zero > /app/fill; "
                "python3 -c 'b = bytearray(200 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096])'")
        assert sb.exec("echo alive; rm -f /tmp/fill /app/fill").stdout == "alive\n"
        assert sb.exec("cat /proc/self/oom_score_adj").stdout == "500\n"  # commands: the OOM killer's first pick
        results = []
        t = threading.Thread(target=lambda: results.append(sb.exec("echo started; sleep 3077")))
        t.start()
        for _ in range(500):
            if host_processes("sleep 3077"):
                break
            time.sleep(0.02)
        os.kill(sb.sandbox.init_pid, 9)  # the sandbox dies under a running command ...
        t.join(20)
        (r,) = results  # ... which fails, it does not raise
        assert r.return_code != 0 and "sandbox died" in r.stderr, r
        r = sb.exec("echo later")
        assert r.return_code != 0 and "sandbox died" in r.stderr, r


def _loops_backed_in(folder: Path) -> list[str]:
    """The loop devices whose backing file lies in ``folder`` (a sandbox's disk-backed root)."""
    out = []
    for f in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            if f.read_text().startswith(str(folder) + "/"):
                out.append(f.parent.parent.name)
        except OSError:
            continue
    return out


def _wait_until_no_loops_in(folder: Path) -> list[str]:
    for _ in range(500):  # the namespace's mounts go with its last process, the loop device with its mount
        if not _loops_backed_in(folder):
            break
        time.sleep(0.02)
    return _loops_backed_in(folder)


@pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/loop-control").exists() or shutil.which("unshare") is None,
                    reason="a disk-backed root needs root and loop devices (and unshare, to mount as a sandbox does)")
def test_disks_attach_while_the_disks_of_ending_sandboxes_go(tmp_path):
    """Sandboxes start beside sandboxes that end (an RL step's 32 episodes): the device the kernel offers as free can
    refuse every try at once (EBUSY; as far as we can tell, one whose last mount is still going). Before the fix 31 of
    2,605 disks made in 30 s this way failed with `no free loop device` (their roots fell back to a tmpfs)."""
    import asyncio
    import collections
    import threading

    from sandbox.storage import make_disk

    errors, made, stop = collections.Counter(), [0], threading.Event()
    mnt = tmp_path / "mnt"
    mnt.mkdir()

    def ending_sandboxes():  # a disk mounted in a mount namespace of its own, let go when that namespace goes
        while not stop.is_set():
            try:
                disk = asyncio.run(make_disk(str(tmp_path), 64))
            except OSError as exc:
                errors[f"ending: {exc}"] += 1
                continue
            proc = subprocess.Popen(["unshare", "-m", "sh", "-c", f"mount {disk.device} {mnt} && sleep 0.05"],
                                    stderr=subprocess.DEVNULL)
            time.sleep(0.02)
            disk.close()
            proc.wait()

    def starting_sandboxes():
        held = []
        while not stop.is_set():
            try:
                held.append(asyncio.run(make_disk(str(tmp_path), 64)))
                made[0] += 1
            except OSError as exc:
                errors[str(exc)] += 1
            if len(held) > 6:
                for disk in held:
                    disk.close()
                held = []
        for disk in held:
            disk.close()

    threads = [threading.Thread(target=f) for f in [ending_sandboxes] * 3 + [starting_sandboxes] * 3]
    for t in threads:
        t.start()
    time.sleep(10)
    stop.set()
    for t in threads:
        t.join(60)
    assert made[0] > 100 and not errors, (made[0], dict(errors))
    assert _wait_until_no_loops_in(tmp_path) == []


@needs_namespaces
@pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/loop-control").exists(),
                    reason="a disk-backed root needs root and loop devices")
def test_storage_beyond_memory_is_on_disk_and_bounded_by_storage_mb(tmp_path):
    from sandbox import BlockingSandbox, SandboxConfig

    # a tmpfs would hold about 40 MiB of these 96 (memory), as the 840 MB root of a 10G task did; dpkg ran out
    cfg = SandboxConfig(memory_mb=96, storage_mb=256, max_processes=32, disk_dir=tmp_path)
    with BlockingSandbox(cfg) as sb:
        r = sb.exec("head -c 150M /dev/zero > /app/big && head -c 20M /dev/zero > /usr/local/big "
                    "&& head -c 20M /dev/zero > /tmp/big && head -c 10M /dev/zero > /var/tmp/big && echo ok")
        assert (r.return_code, r.stdout) == (0, "ok\n"), r  # past memory: the writable layers are on disk
        assert _loops_backed_in(tmp_path), "no disk-backed root"
        r = sb.exec("head -c 200M /dev/zero > /root/more; echo rc=$?; "
                    "du -cm /app/big /usr/local/big /tmp/big /var/tmp/big /root/more | tail -1")
        assert "No space left on device" in r.stderr and "rc=1" in r.stdout, r  # ... and storage_mb bounds them
        assert 200 < int(r.stdout.split()[-2]) <= 256, r
        assert sb.exec("echo alive").stdout == "alive\n"
        assert not list(tmp_path.iterdir())  # the image file has no name on the host
    assert _wait_until_no_loops_in(tmp_path) == []  # freed by the stop (its release thread, just after)


DISK_LIFELINE = textwrap.dedent(
    """
    import os, sys
    from sandbox import BlockingSandbox, SandboxConfig
    sb = BlockingSandbox(SandboxConfig(memory_mb=96, storage_mb=256, max_processes=32, disk_dir=sys.argv[1]))
    sb.start()
    print(sb.exec("head -c 100M /dev/zero > /app/big && echo wrote").stdout.strip(), sb.sandbox.init_pid, flush=True)
    os.kill(os.getpid(), 9)  # dies without close()
    """
)


@needs_namespaces
@pytest.mark.skipif(os.geteuid() != 0 or not Path("/dev/loop-control").exists(),
                    reason="a disk-backed root needs root and loop devices")
def test_a_disk_backed_root_is_freed_when_its_process_is_killed(tmp_path):
    proc = subprocess.run([sys.executable, "-c", DISK_LIFELINE, str(tmp_path)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == -9 and proc.stdout.split()[0] == "wrote", proc.stderr[-3000:]
    init_pid = int(proc.stdout.split()[-1])
    assert _wait_until_no_loops_in(tmp_path) == []  # the lifeline closed, PID 1 and its mounts went, and the disk
    assert not Path(f"/proc/{init_pid}").exists() and not list(tmp_path.iterdir())


SYSCALL_PROBE = r"""
import ctypes, errno, threading
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": {"io_uring_setup": 425, "bpf": 321, "keyctl": 250, "userfaultfd": 323},
      "aarch64": {"io_uring_setup": 425, "bpf": 280, "keyctl": 219, "userfaultfd": 282}}[__import__("os").uname().machine]
params = ctypes.create_string_buffer(120)
for name, n in nr.items():
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(n), ctypes.c_long(8), params if name == "io_uring_setup" else None, 0, 0)
    print(name, rc, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()))
t = threading.Thread(target=lambda: print("thread ok")); t.start(); t.join()
"""


@needs_namespaces
def test_seccomp_denies_namespaces_io_uring_and_kernel_interfaces():
    from sandbox import BlockingSandbox, SandboxConfig

    with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32)) as sb:
        for cmd in ("unshare -Urm true", "unshare -U true", "unshare -n true"):
            r = sb.exec(cmd)
            assert r.return_code != 0, (cmd, r)
        r = sb.exec(f"python3 - <<'EOF'\n{SYSCALL_PROBE}\nEOF")
        lines = r.stdout.splitlines()
        assert r.return_code == 0 and lines[-1] == "thread ok", r
        for line in lines[:-1]:
            name, rc, err = line.split()
            assert rc == "-1" and err in ("EPERM", "ENOSYS"), line
        # ordinary work still runs: processes, threads, pipes, subshells
        r = sb.exec("(sleep 0.1 &) ; echo a | tr a b; python3 -c 'import subprocess; print(subprocess.run([\"true\"]).returncode)'")
        assert (r.return_code, r.stdout) == (0, "b\n0\n"), r


DEFAULT_DENY_PROBE = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
machine = os.uname().machine
# not on Docker's default allow-list (CAP_SYS_NICE, CAP_SYS_PTRACE, CAP_SYSLOG, CAP_SYS_PACCT) and,
# but for syslog/acct, not on the old deny list either; "unassigned": a number no system call has
nr = {"x86_64": {"get_mempolicy": 239, "move_pages": 279, "kcmp": 312, "syslog": 103, "acct": 163,
                 "unassigned": 400, "newer_than_table": 999},
      "aarch64": {"get_mempolicy": 236, "move_pages": 239, "kcmp": 272, "syslog": 116, "acct": 89,
                  "unassigned": 300, "newer_than_table": 999}}[machine]
args = {"kcmp": (os.getpid(), os.getpid(), 0, 0, 0), "syslog": (10, 0, 0)}  # KCMP_FILE fd 0 / fd 0; SIZE_BUFFER
for name, n in nr.items():
    a = [ctypes.c_long(x) for x in args.get(name, (0, 0, 0, 0, 0, 0))]
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(n), *a)
    print(name, rc, errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno()) if rc == -1 else "-")
"""


@needs_namespaces
def test_seccomp_is_default_deny():
    """A system call on no list at all fails with EPERM (the old deny list let these through)."""
    from sandbox import BlockingSandbox, SandboxConfig

    with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32)) as sb:
        r = sb.exec(f"python3 - <<'EOF'\n{DEFAULT_DENY_PROBE}\nEOF")
        assert r.return_code == 0, r
        got = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()}
        for name in ("get_mempolicy", "move_pages", "kcmp", "syslog", "acct", "unassigned"):
            assert got[name] == ["-1", "EPERM"], (name, got)
        assert got["newer_than_table"] == ["-1", "ENOSYS"], got  # a newer C library falls back


@needs_namespaces
def test_seccomp_allow_list_runs_everyday_tools():
    from sandbox import BlockingSandbox, SandboxConfig

    script = textwrap.dedent("""\
        set -e
        cd /tmp
        echo '#include <stdio.h>' > h.c; echo 'int main(void) { printf("cc%d ", 6 * 7); return 0; }' >> h.c
        if command -v gcc >/dev/null; then gcc -O1 -o h h.c && ./h; else echo cc42; fi
        git init -q repo && git -C repo -c user.name=a -c user.email=a@b commit -q --allow-empty -m m && echo git
        tar czf a.tgz h.c && tar tzf a.tgz
        mkfifo fifo && (echo fifo > fifo &) && cat fifo
        set +e; timeout 0.3 sleep 5; echo "timeout $?"; sleep 30 & kill $!; wait $!; echo "kill $?"; set -e
        if command -v sqlite3 >/dev/null; then sqlite3 :memory: 'select 6*7'; else echo 42; fi
        dpkg -s coreutils >/dev/null && echo dpkg
        python3 -c 'import ctypes; print("ctypes", ctypes.CDLL(None).getpid() > 0)'
        nohup python3 -m http.server --bind 127.0.0.1 8765 >/dev/null 2>&1 &
        get='import urllib.request as u; print("http", u.urlopen("http://127.0.0.1:8765/").status)'
        for i in $(seq 50); do python3 -c "$get" >/dev/null 2>&1 && break; sleep 0.1; done
        python3 -c "$get"
        kill %1 2>/dev/null || kill $(jobs -p)
        if command -v tmux >/dev/null; then
          tmux -S /tmp/tm new-session -d -x 80 -y 24 -s s
          tmux -S /tmp/tm send-keys -t s 'echo tm$((6*7))' Enter
          for i in $(seq 50); do tmux -S /tmp/tm capture-pane -p -t s | grep -q tm42 && break; sleep 0.1; done
          tmux -S /tmp/tm capture-pane -p -t s | grep -q tm42 && echo tmux
          tmux -S /tmp/tm kill-server
        else echo tmux; fi
    """)
    with BlockingSandbox(SandboxConfig(memory_mb=1024, storage_mb=256, max_processes=128)) as sb:
        r = sb.exec(script, timeout_sec=120)
        assert r.return_code == 0, r
        assert r.stdout.split() == ["cc42", "git", "h.c", "fifo", "timeout", "124", "kill", "143", "42", "dpkg",
                                    "ctypes", "True", "http", "200", "tmux"], r


@needs_namespaces
@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are used in root mode only")
def test_no_cgroup_is_left_after_a_stop_or_a_killed_run(monkeypatch):
    from sandbox import BlockingSandbox, SandboxConfig
    from sandbox.cgroup import Cgroup

    dead = f"killed-{os.getpid()}"
    proc = subprocess.run([sys.executable, "-c", LIFELINE, dead], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr[-3000:]
    init_pid = int(proc.stdout.split()[-1])
    for _ in range(1500):
        if not Path(f"/proc/{init_pid}").exists():
            break
        time.sleep(0.02)
    assert _cgroups_named(dead), "the killed run left no cgroup: the test proves nothing"
    for _ in range(200):  # its last processes (unshare) may still be exiting
        if not any((d / "cgroup.procs").read_text().strip() for d in _cgroups_named(dead)):
            break
        time.sleep(0.05)
    monkeypatch.setattr(Cgroup, "STALE_AFTER_SEC", 0.0)  # the killed run's cgroup counts as left over at once
    name = f"sweeper-{os.getpid()}"
    with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32)) as idle:
        with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, name=name)) as sb:
            assert sb.exec("true").return_code == 0
        # the sweeps (start and stop of the other) left a live, idle sandbox's cgroups alone
        assert idle.exec("echo still").stdout == "still\n"
    assert _cgroups_named(dead) == [] and _cgroups_named(name) == []
    bases = [p for p in Path("/sys/fs/cgroup").glob("**/local-sandbox") if p.is_dir()]
    assert [b for b in bases if not any(c.is_dir() for c in b.iterdir())] == [], "an empty base cgroup is left"


# ---------------------------------------------------------------- the names asked, user-mode networking, image roots
@needs_namespaces
def test_the_resolver_answers_no_name_and_records_who_asked():
    from sandbox import BlockingSandbox, SandboxConfig

    host_resolv = Path("/etc/resolv.conf").read_bytes() if Path("/etc/resolv.conf").exists() else None
    with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32)) as sb:
        r = sb.exec("getent hosts pypi.org; echo rc=$?; python3 -c 'import socket; socket.getaddrinfo(\"astral.sh\", 443)' "
                    "2>&1 | tail -1; grep nameserver /etc/resolv.conf", timeout_sec=30)
        assert r.stdout.splitlines()[0] == "rc=2" and "name resolution" in r.stdout, r  # refused at once
        assert r.stdout.splitlines()[-1] == "nameserver 127.0.0.1"
        assert sb.names_asked() == ["pypi.org", "astral.sh"]
        assert {q["comm"] for q in sb.queries()} == {"getent", "python3"}
        # a daemon an earlier command left behind asks later: recorded, but not as a running command's
        sb.exec("(sleep 1; getent hosts leftover.example) >/dev/null 2>&1 &")
        mark = sb.network_mark()
        sb.exec("sleep 2; getent hosts verifier.example")
        assert sb.names_asked(mark) == ["leftover.example", "verifier.example"]
        assert sb.names_asked(mark, commands_only=True) == ["verifier.example"]
        assert sb.names_asked(0, until=mark) == ["pypi.org", "astral.sh"]
    assert (Path("/etc/resolv.conf").read_bytes() if Path("/etc/resolv.conf").exists() else None) == host_resolv


# asks the sandbox's resolver for N names (one socket, each query answered before the next), as an offline
# `apt-get install` does with its retries across mirrors
ASK_NAMES = """
import socket, struct, sys
n, stem = int(sys.argv[1]), sys.argv[2]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(5)
for i in range(n):
    labels = f"{stem}{i % 50}.example".encode().split(b".")
    q = struct.pack(">HHHHHH", i & 0xFFFF, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(x)]) + x for x in labels)
    q += b"\\0" + struct.pack(">HH", 1, 1)
    s.sendto(q, ("127.0.0.1", 53))
    s.recvfrom(512)
print("asked", n)
"""


@needs_namespaces
def test_the_resolver_still_records_the_verifier_after_thousands_of_queries():
    from sandbox import BlockingSandbox, SandboxConfig

    with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32)) as sb:
        # the build or the agent asks more names than any fixed cap of records (2,000 used to be PID 1's) ...
        r = sb.exec(f"python3 -c {shlex.quote(ASK_NAMES)} 2500 mirror", timeout_sec=120)
        assert r.stdout == "asked 2500\n", r
        mark = sb.network_mark()
        # ... and the verifier's download after it is still seen: its names make its failure a network one
        sb.exec("getent hosts astral.sh")
        assert sb.names_asked(mark, commands_only=True) == ["astral.sh"]
        assert sb.names_asked(0, until=mark) == [f"mirror{i}.example" for i in range(50)]  # distinct, first-asked
        assert sb.asked_count(0, until=mark, commands_only=True) == 2500  # counted, every one
        assert sb.asked_count(mark) >= 1


@needs_namespaces
def test_build_failures_are_named(tmp_path):
    from sandbox import BlockingSandbox, EnvironmentBuildError, NetworkNeededError, SandboxConfig

    def start(dockerfile: str):
        (tmp_path / "Dockerfile").write_text(dockerfile)
        with BlockingSandbox(SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, environment_dir=tmp_path)):
            pass

    with pytest.raises(NetworkNeededError, match="asked for deb.debian.org") as err:
        start("FROM debian:bookworm\nRUN getent hosts _http._tcp.deb.debian.org || exit 100\n")
    assert err.value.phase == "build" and err.value.names == ("deb.debian.org",)
    with pytest.raises(EnvironmentBuildError, match="exit 7") as err:
        start("FROM debian:bookworm\nRUN exit 7\n")
    assert not isinstance(err.value, NetworkNeededError)
    with pytest.raises(EnvironmentBuildError, match="not in the build context"):
        start("FROM debian:bookworm\nCOPY missing.txt /app/\n")


def _host_address() -> str | None:
    """A non-loopback IPv4 address of this host (the source address of a route out), or None."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # no packet is sent
        address = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if address.startswith("127.") else address


@needs_namespaces
@pytest.mark.parametrize("tool", ["pasta", "slirp4netns"])
def test_user_mode_network_never_reaches_the_hosts_loopback(tool):
    from sandbox import BlockingSandbox, SandboxConfig

    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is missing (make test installs it: apt-get install {'passt' if tool == 'pasta' else tool})")
    address = _host_address()
    loopback = socket.socket()
    loopback.bind(("127.0.0.1", 0))
    loopback.listen(8)
    loopback.setblocking(False)
    lport = loopback.getsockname()[1]
    outside = None
    if address:
        outside = socket.socket()
        outside.bind((address, 0))
        outside.listen(8)
    config = SandboxConfig(memory_mb=256, storage_mb=64, max_processes=32, network=tool, name=f"net-{tool}-{os.getpid()}")
    try:
        with BlockingSandbox(config) as sb:
            targets = ["127.0.0.1", "10.0.2.2"] + ([address] if address else [])
            probe = "; ".join(f"timeout 5 bash -c 'echo > /dev/tcp/{h}/{lport}' 2>/dev/null && echo reached {h}"
                              for h in targets)
            r = sb.exec(f"grep nameserver /etc/resolv.conf; ip -4 route 2>/dev/null | head -1; {probe}; true",
                        timeout_sec=60)
            assert "nameserver 10.0.2.3" in r.stdout, r
            with pytest.raises(BlockingIOError):
                loopback.accept()  # nothing of the sandbox reached the host's loopback
            if outside is not None:  # a service on the host's network address is reachable, like any on the network
                oport = outside.getsockname()[1]
                r = sb.exec(f"timeout 5 bash -c 'echo hi > /dev/tcp/{address}/{oport}' && echo sent", timeout_sec=30)
                assert r.stdout.strip() == "sent", r
                outside.settimeout(5)
                conn, _ = outside.accept()
                conn.close()
            assert sb.names_asked() == []  # with a network there is no recording resolver
            helper = sb.sandbox._net_proc.pid
        assert not Path(f"/proc/{helper}").exists() or Path(f"/proc/{helper}/stat").read_text().split(") ")[1][0] == "Z"
    finally:
        loopback.close()
        if outside is not None:
            outside.close()


@pytest.fixture(scope="module")
def debian_rootfs_tar():
    from conftest import debian_image

    return debian_image("minbase")


@pytest.mark.slow  # the first run builds a Debian image with mmdebstrap (about a minute)
@needs_namespaces
def test_an_image_root_file_system_replaces_the_hosts_userland(tmp_path, debian_rootfs_tar):
    from sandbox import BlockingSandbox, SandboxConfig
    from sandbox.images import ImageStore

    if shutil.which("umoci") is None or shutil.which("skopeo") is None:
        pytest.skip("umoci and skopeo are needed for OCI images (make test installs them)")
    # the same root file system as a tarball, an OCI layout (with an image config) and a docker-archive
    layout = tmp_path / "oci"
    for argv in (["umoci", "init", "--layout", str(layout)], ["umoci", "new", "--image", f"{layout}:task"],
                 ["umoci", "raw", "add-layer", "--image", f"{layout}:task", str(debian_rootfs_tar)],
                 ["umoci", "config", "--image", f"{layout}:task", "--config.env", "TASK_VAR=from-image",
                  "--config.workingdir", "/srv/work"],
                 ["skopeo", "copy", "-q", f"oci:{layout}:task", f"docker-archive:{tmp_path / 'saved.tar'}:x/task:1"]):
        subprocess.run(argv, check=True, capture_output=True, timeout=300)
    store = ImageStore({"registry.invalid/x/tar:1": str(debian_rootfs_tar), "x/oci:1": str(layout),
                        "docker.io/x/saved:1": str(tmp_path / "saved.tar")}, cache_dir=tmp_path / "cache")
    assert store.has("registry.invalid/x/tar:1") and store.has("x/saved:1") and not store.has("ubuntu")
    for ref, env, workdir in (("registry.invalid/x/tar:1", {}, None),
                              ("x/oci:1", {"TASK_VAR": "from-image"}, "/srv/work"),
                              ("x/saved:1", {"TASK_VAR": "from-image"}, "/srv/work")):
        image = store.root(ref)
        assert {k: v for k, v in image.env.items() if k != "PATH"} == env and image.workdir == workdir
        config = SandboxConfig(memory_mb=256, storage_mb=128, max_processes=32, rootfs=image.rootfs, env=image.env,
                               workdir=image.workdir)
        with BlockingSandbox(config) as sb:
            r = sb.exec("pwd; echo ${TASK_VAR:-none}; . /etc/os-release; echo $ID $VERSION_ID; "
                        "command -v python3 || echo no-python3; echo x > /usr/bin/planted && echo wrote")
            lines = r.stdout.splitlines()
            assert lines[:4] == [workdir or "/app", env.get("TASK_VAR", "none"), "debian 12", "no-python3"], r
            assert lines[-1] == "wrote"  # into the sandbox's overlay ...
            sb.upload_file(REPO / "README.md", "/tmp/readme")
            assert sb.exec("head -c 16 /tmp/readme").stdout == (REPO / "README.md").read_text()[:16]
            sb.download_dir("/etc/apt", tmp_path / f"apt-{ref.replace('/', '_')}")
        assert not (image.rootfs / "usr" / "bin" / "planted").exists()  # ... never into the unpacked image
    # unpacked once, then shared
    assert store.root("registry.invalid/x/tar:1").rootfs == store.root("registry.invalid/x/tar:1").rootfs
