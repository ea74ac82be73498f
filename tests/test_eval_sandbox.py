"""The local sandbox (eval/sandbox.py) driven through real Harbor jobs in .venv-harbor.

Harbor lives in its own Python 3.12 venv (eval/setup_harbor.sh, run by `make test`), so these tests
run it as subprocesses: `.venv-harbor/bin/harbor run ... --env eval.sandbox:LocalSandboxEnvironment`
with PYTHONPATH set to the repo root, and read the job's result.json files back.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HARBOR_VENV = REPO / ".venv-harbor"
HARBOR = HARBOR_VENV / "bin" / "harbor"
HARBOR_PY = HARBOR_VENV / "bin" / "python"
TASKS = REPO / "tests" / "fixtures" / "harbor_tasks"
ENV_CLASS = "eval.sandbox:LocalSandboxEnvironment"
HOST_PROBES = [Path(p) / "tr-sandbox-probe" for p in ("/etc", "/root", "/tmp", "/var/tmp", "/usr")]
MAX_PROCESSES = 64

pytestmark = [
    pytest.mark.skipif(not HARBOR.exists(), reason=".venv-harbor missing: run `bash eval/setup_harbor.sh` (make test does)"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the local sandbox needs Linux namespaces"),
    pytest.mark.skipif(any(shutil.which(t) is None for t in ("unshare", "nsenter", "prlimit", "setpriv")),
                       reason="util-linux tools (unshare, nsenter, prlimit, setpriv) missing"),
]


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


def host_processes(*needles: str) -> list[str]:
    hits = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in text for n in needles):
            hits.append(f"{cmdline.parent.name}: {text}")
    return hits


# ---------------------------------------------------------------- hello-world: oracle 1.0, nop 0.0
@pytest.fixture(scope="module")
def hello_jobs(tmp_path_factory):
    jobs = tmp_path_factory.mktemp("hello-jobs")
    with ThreadPoolExecutor(2) as pool:  # two harbor processes side by side
        futs = {a: pool.submit(harbor_run, TASKS / "hello-world", a, jobs, f"hello-{a}") for a in ("oracle", "nop")}
        return {a: f.result() for a, f in futs.items()}


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


def test_writes_outside_the_workspace_never_reach_the_host(isolation_job):
    t = isolation_job["trials"]["escape"]
    probe = _probe(t)
    # inside the sandbox each write succeeded (it landed in the tmpfs overlay) ...
    assert [line.split()[0] for line in probe[:5]] == ["write_ok"] * 5, probe
    # ... and the host is unchanged
    assert not [p for p in HOST_PROBES if p.exists()]
    assert reward(t) == 1.0 and exception_type(t) is None


def test_no_network_and_no_privileges(isolation_job):
    probe = _probe(isolation_job["trials"]["escape"])
    net = [line for line in probe if line.startswith("net_")]
    assert len(net) == 3 and all(line.startswith("net_blocked") for line in net), net
    assert f"net_blocked 127.0.0.1 {isolation_job['port']} " in "\n".join(net) + " "
    assert not isolation_job["host_listener_connected"], "the sandbox reached a port on the host's loopback"
    for expected in ("mem_blocked", "mount_blocked", "mknod_blocked", "proc1_is_sandbox_init", "proc1_root_denied"):
        assert any(line.startswith(expected) for line in probe), (expected, probe)


def test_fork_bomb_is_bounded_and_ends_with_the_agent_timeout(isolation_job):
    t = isolation_job["trials"]["fork-bomb"]
    assert exception_type(t) == "AgentTimeoutError"
    bomb = json.loads((t["_dir"] / "agent" / "bomb.json").read_text())
    assert bomb["errno"] == 11 and bomb["forked"] < MAX_PROCESSES, bomb  # EAGAIN at the process limit
    # the bomb was killed with the agent phase, so the verifier could still run in the same sandbox
    assert reward(t) == 1.0


def test_agent_past_its_time_is_killed(isolation_job):
    t = isolation_job["trials"]["agent-timeout"]
    assert exception_type(t) == "AgentTimeoutError"
    assert "timed out after 2.0 seconds" in t["exception_info"]["exception_message"]
    assert reward(t) == 0.0  # Harbor still runs the verifier after an agent timeout


def test_verifier_past_its_time_is_killed(isolation_job):
    t = isolation_job["trials"]["verifier-timeout"]
    assert exception_type(t) == "VerifierTimeoutError"
    assert t["verifier_result"] is None


def test_no_process_of_a_trial_survives(isolation_job):
    assert len(isolation_job["trials"]) == 4
    # sleep 31337 (agent, foreground), 31338 (agent, setsid-detached), 31339 (verifier); the
    # sandboxes' PID 1 carries the job dir in its command line (hidden paths)
    assert host_processes("sleep 3133", str(isolation_job["job"])) == []
    ours = {t["_dir"].name for t in isolation_job["trials"].values()}
    leftover = [p for p in Path("/sys/fs/cgroup").glob("**/harbor-local-sandbox/*")
                if p.is_dir() and p.name.rsplit("__", 1)[0] in ours]
    assert leftover == []  # per-trial cgroups (root mode) are removed


# ---------------------------------------------------------------- the environment class used directly
DIRECT = textwrap.dedent(
    """
    import asyncio, json, logging, os, sys, tempfile
    from pathlib import Path
    from harbor.models.task.config import EnvironmentConfig
    from harbor.models.trial.paths import TrialPaths
    from eval.sandbox import LocalSandboxEnvironment, SandboxExecTimeoutError

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


def test_environment_class_directly():
    _check_direct(_run_direct())


def _nobody_can_run_harbor() -> bool:
    if os.geteuid() != 0:
        return False
    probe = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                            str(HARBOR_PY), "-c", "import harbor"], capture_output=True, env=_env(), cwd="/")
    userns = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                             "unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    return probe.returncode == 0 and userns.returncode == 0


@pytest.mark.skipif(not _nobody_can_run_harbor(),
                    reason="needs root (to switch to 'nobody'), a .venv-harbor that 'nobody' can execute "
                           "(e.g. not under a 0700 /root) and unprivileged user namespaces")
def test_environment_class_as_an_ordinary_user():
    def drop():
        os.setgroups([])
        os.setgid(65534)
        os.setuid(65534)

    _check_direct(_run_direct(preexec=drop))
