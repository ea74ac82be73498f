"""The episode server (episodes/, `python -m episodes.server`) and its trainer side (episodes/remote.py),
with real parts: uvicorn on loopback, real local sandboxes, generated tasks. The remote episode is the local one
(same tool, rewards, failure kinds); what the network adds is never a score; sessions are capped, leased and torn
down, by a shutdown too and when the server is killed."""

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml
from conftest import REPO, process_gone, processes_matching
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from servers import ServerThread

from common.errors import ConfigError
from common.net import free_port, stop_process, wait_until_healthy
from episodes import TOKEN_ENV
from episodes.app import EpisodeServerConfig, create_app
from episodes.local import (
    NOT_RUNNING,
    SANDBOX_FAILED,
    EpisodeLimits,
    EpisodeStats,
    TaskEnvironment,
    episode_failure,
    episode_reward,
)
from episodes.remote import EpisodeServers, RemoteTaskEnvironment
from harbor_tasks.folder import TaskFolder
from harbor_tasks.generate import generate, write_task
from harbor_tasks.solution import solution_lines


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Two generated tasks, a copy whose Dockerfile fails and one whose verifier's runner is missing."""
    root = tmp_path_factory.mktemp("tasks")
    for i, family in enumerate(["write-value", "count-lines"]):
        write_task(root, family, 5, i)
    for name, rel, text in [("broken-start", "environment/Dockerfile", "FROM debian\nWORKDIR /app\nRUN exit 3\n"),
                            ("broken-tests", "tests/test.sh", "#!/bin/bash\nuvx pytest /tests/test_outputs.py\n")]:
        shutil.copytree(root / "write-value-5-0", root / name)
        (root / name / rel).write_text(text)
    return root


@pytest.fixture(scope="module")
def server(root):
    with ServerThread(create_app(EpisodeServerConfig(tasks=[root], max_sessions=8, lease_sec=60))) as url:
        yield url


def remote(urls, stats=None, limits=None, **options) -> RemoteTaskEnvironment:
    return RemoteTaskEnvironment(EpisodeServers(urls if isinstance(urls, list) else [urls], **options),
                                 limits or EpisodeLimits(), stats if stats is not None else EpisodeStats())


def reset(env, task: Path) -> None:
    env.reset(task_dir=str(task), task=task.name, prompt=[{"role": "user", "content": "..."}])


def oracle(task: Path) -> list[str]:
    return [line for line in solution_lines((task / "solution" / "solve.sh").read_text()) if not line.startswith("cd ")]


def test_the_policy_sees_the_same_one_tool():
    import inspect

    from transformers.utils import get_json_schema

    assert get_json_schema(RemoteTaskEnvironment.bash) == get_json_schema(TaskEnvironment.bash)
    public = [name for name, _ in inspect.getmembers(RemoteTaskEnvironment, predicate=inspect.isfunction)
              if not name.startswith("_") and name not in ("reset", "get_reward")]
    assert public == ["bash"]


def test_the_oracle_scores_1_and_doing_nothing_scores_0_over_http(root, server):
    stats = EpisodeStats()
    env = remote(server, stats)
    for name in ("write-value-5-0", "count-lines-5-1"):
        reset(env, root / name)
        assert env.bash("pwd") == "/app\n"  # what TaskEnvironment.bash returns, as it returns it
        for command in oracle(root / name):
            assert "[exit code" not in env.bash(command), command
        assert episode_reward(env) == 1.0, name
        assert episode_reward(env) == 1.0  # verified once
        reset(env, root / name)
        assert episode_reward(env) == 0.0
    summary = stats.as_dict()
    assert summary["episodes"] == 4 and summary["scored"] == 4 and summary["passed"] == 2
    assert summary["masked"] == 0 and summary["tool_calls"] > 2 and summary["tool_errors"] == 0
    assert len(stats.start_seconds) == 4 and len(stats.verify_seconds) == 4
    health = httpx.get(f"{server}/health").json()
    assert health["live_sessions"] == 0 and health["episodes"]["scored"] >= 4


@pytest.mark.parametrize("name, kind", [("broken-start", "environment_build"), ("broken-tests", "verifier_tools")])
def test_the_servers_own_failures_are_the_local_kinds_and_not_scores(root, server, name, kind):
    stats = EpisodeStats()
    env = remote(server, stats)
    reset(env, root / name)
    if kind == "environment_build":
        assert env.bash("ls") == NOT_RUNNING
    assert episode_reward(env) is None and episode_failure(env)[0] == kind
    assert stats.as_dict()["masked_by_kind"] == {kind: 1} and stats.scored == 0


def test_bad_requests_are_4xx_naming_the_field(root, server):
    def post(path, body=None, **kw):
        return httpx.post(f"{server}{path}", json=body, **kw)

    unknown = post("/seed_session", {"task_id": "no-such-task-1"})
    assert unknown.status_code == 404 and "no-such-task-1" in unknown.json()["detail"]
    assert post("/seed_session", {"task_id": "../etc"}).status_code == 422
    assert post("/seed_session", {}).json()["detail"].startswith("task_id: Field required")
    other = post("/seed_session", {"task_id": "write-value-5-0", "task_digest": "0" * 64})
    assert other.status_code == 409 and "differs from the trainer's" in other.json()["detail"]
    limits = post("/seed_session", {"task_id": "write-value-5-0", "limits": {"limit_outcome": "skip"}})
    assert limits.status_code == 422 and "limit_outcome" in limits.json()["detail"]
    gone = post("/bash", {"resources_session_id": "nope", "command": "ls"})
    assert gone.status_code == 404 and "no live session nope" in gone.json()["detail"]
    assert post("/bash", {"resources_session_id": "nope"}).status_code == 422
    assert post("/bash", {"resources_session_id": "nope", "command": 5}).status_code == 422
    assert httpx.post(f"{server}/verify", content=b"{not json").status_code == 400
    assert post("/keepalive", {"resources_session_ids": "x"}).status_code == 422
    # the trainer side: a task the server lacks stops the run with one line naming it
    missing = root.parent / "trainer-only" / "write-value-9-0"
    shutil.copytree(root / "write-value-5-0", missing)
    with pytest.raises(ConfigError, match="no task 'write-value-9-0'"):
        reset(remote(server), missing)


def test_an_unreachable_server_is_a_masked_sandbox_start():
    stats = EpisodeStats()
    env = remote(f"http://127.0.0.1:{free_port()}", stats, retries=1)
    env.reset(task_dir="/nonexistent/write-value-1-0", task="write-value-1-0")
    assert env.bash("ls") == NOT_RUNNING
    assert episode_reward(env) is None and episode_failure(env) == ("sandbox", episode_failure(env)[1])
    assert "no episode server took the session" in episode_failure(env)[1]
    assert stats.as_dict()["masked_by_kind"] == {"sandbox": 1} and stats.episodes == 1


def broken_server(calls: list, seed: int = 200, bash: int = 200, verify: int = 200) -> FastAPI:
    """A stand-in episode server answering each endpoint with a fixed status (what a real one cannot be made to)."""
    app = FastAPI()

    def answer(path: str, status: int, body: dict):
        calls.append(path)
        return JSONResponse(body if status == 200 else {"detail": "broken"}, status_code=status)

    app.post("/seed_session")(lambda: answer("seed", seed, {"resources_session_id": "s", "lease_sec": 60}))
    app.post("/bash")(lambda: answer("bash", bash, {"output": "ok\n"}))
    app.post("/verify")(lambda: answer("verify", verify, {"reward": 1.0, "counts": {"scored": 1}}))
    app.post("/close_session")(lambda: answer("close", 200, {"closed": True, "counts": {}}))
    app.post("/keepalive")(lambda: answer("keepalive", 200, {}))
    return app


@pytest.mark.parametrize("statuses, kind, tries", [
    ({"seed": 503}, "no episode server took", {"seed": 3}),
    ({"bash": 500}, "a bash call failed", {"bash": 1}),   # a command is never re-run once it reached the server
    ({"verify": 502}, "/verify failed", {"verify": 3}),   # verify is idempotent: retried
])
def test_5xx_from_the_server_are_not_scores(tmp_path, statuses, kind, tries):
    calls: list = []
    generate(tmp_path, 3, 1, ["write-value"])
    task = next(tmp_path.iterdir())
    stats = EpisodeStats()
    with ServerThread(broken_server(calls, **statuses)) as url:
        env = remote(url, stats, retries=2)
        reset(env, task)
        output = env.bash("ls")
        reward = episode_reward(env)
    assert reward is None and episode_failure(env)[0] == "sandbox" and kind in episode_failure(env)[1]
    assert stats.as_dict()["masked_by_kind"] == {"sandbox": 1}
    assert output == {"a bash call failed": SANDBOX_FAILED, "no episode server took": NOT_RUNNING}.get(kind, "ok\n")
    for path, n in tries.items():
        assert calls.count(path) == n, calls


def test_sessions_past_the_cap_get_429_and_go_to_the_next_server(root):
    config = EpisodeServerConfig(tasks=[root], max_sessions=1, lease_sec=60)
    with ServerThread(create_app(config)) as full, ServerThread(create_app(config)) as spare:
        body = {"task_id": "write-value-5-0"}
        first = httpx.post(f"{full}/seed_session", json=body, timeout=60)
        assert first.status_code == 200
        refused = httpx.post(f"{full}/seed_session", json=body, timeout=60)
        assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
        assert httpx.get(f"{full}/health").json()["sessions"]["refused_at_capacity"] == 1

        stats = EpisodeStats()
        env = remote([full], stats, start_timeout=2.0)  # only the full one: waits, then not scored
        reset(env, root / "write-value-5-0")
        assert episode_reward(env) is None and stats.as_dict()["masked_by_kind"] == {"sandbox": 1}
        for _ in range(3):  # wherever the round-robin starts, the full server passes the seed on
            env = remote([full, spare])
            reset(env, root / "write-value-5-0")
            assert episode_reward(env) == 0.0
        session = first.json()["resources_session_id"]
        assert httpx.post(f"{full}/close_session", json={"resources_session_id": session}).json()["closed"]
        env = remote([full])
        reset(env, root / "write-value-5-0")
        assert episode_reward(env) == 0.0


def test_an_idle_session_is_torn_down_after_its_lease_and_a_live_trainer_keeps_its_own(root):
    app = create_app(EpisodeServerConfig(tasks=[root], lease_sec=2))
    with ServerThread(app) as url:
        seeded = httpx.post(f"{url}/seed_session", json={"task_id": "count-lines-5-1"}, timeout=60).json()
        session = seeded["resources_session_id"]
        pid = app.state.sessions._live[session].env._box.sandbox._init_pid
        httpx.post(f"{url}/bash", json={"resources_session_id": session, "command": "sleep 617 >/dev/null 2>&1 &"},
                   timeout=60)
        env = remote(url)  # this trainer's keepalive renews its session's lease while it "generates"
        reset(env, root / "write-value-5-0")
        deadline = time.monotonic() + 60
        while httpx.get(f"{url}/health").json()["sessions"].get("expired", 0) < 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert process_gone(pid), "the expired session's sandbox is still running"
        assert processes_matching("sleep 617") == []
        late = httpx.post(f"{url}/bash", json={"resources_session_id": session, "command": "ls"})
        assert late.status_code == 404 and "expired" in late.json()["detail"]
        time.sleep(4)  # twice the lease without a call from the trainer
        assert env.bash("pwd") == "/app\n" and episode_reward(env) == 0.0
        health = httpx.get(f"{url}/health").json()
        assert health["live_sessions"] == 0 and health["sessions"]["expired"] == 1


def test_the_token_is_required_but_for_health(root):
    with ServerThread(create_app(EpisodeServerConfig(tasks=[root], auth_token="s3cret"))) as url:
        assert httpx.get(f"{url}/health").status_code == 200
        assert httpx.post(f"{url}/seed_session", json={"task_id": "write-value-5-0"}).status_code == 401
        with pytest.raises(ConfigError, match="refused the token"):
            reset(remote(url), root / "write-value-5-0")
        env = remote(url, auth_token="s3cret")
        reset(env, root / "write-value-5-0")
        assert env.bash("pwd") == "/app\n" and episode_reward(env) == 0.0


def seed(url: str, task: str = "write-value-5-0", **limits) -> dict:
    reply = httpx.post(f"{url}/seed_session", json={"task_id": task, "limits": limits}, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def health(url: str) -> dict:
    return httpx.get(f"{url}/health", timeout=10).json()


def wait_for(predicate, timeout: float = 30.0) -> bool:
    """Poll until `predicate()` holds or `timeout` passes (a liveness bound, not a measurement)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def abandoned_bash(url: str, session: str, command: str, wait: float = 2.0) -> None:
    """A /bash call whose client gives up (and, without a keepalive, looks like a dead trainer)."""
    try:
        httpx.post(f"{url}/bash", json={"resources_session_id": session, "command": command}, timeout=wait)
    except httpx.HTTPError:
        pass


def test_limits_over_the_servers_caps_are_refused_naming_the_key_and_the_cap(root, server):
    """A client asked for a 5 TB tmpfs and got it: every limit a client sends is capped by the server's flags."""
    for key, value in [("storage_mb", 5 << 20), ("memory_mb", 5 << 20), ("episode_wall_sec", 1e9),
                       ("command_timeout_sec", 1e9), ("max_output_chars", 10 ** 9)]:
        reply = httpx.post(f"{server}/seed_session", json={"task_id": "write-value-5-0", "limits": {key: value}},
                           timeout=60)
        if reply.status_code == 200:  # granted: close it before failing
            httpx.post(f"{server}/close_session", json=reply.json(), timeout=60)
        flag = "--max_" + key.removeprefix("max_")
        assert reply.status_code == 422, f"{key}={value} was granted: {reply.text}"
        caps = health(server)["caps"]  # what /health says the server allows
        assert reply.json()["detail"] == (f"limits.{key}: {value:.0f} is over this server's cap, {caps[key]:.0f} "
                                          f"({flag}); ask for less, or start the server with a larger {flag}")
    assert caps == {"command_timeout_sec": 1800.0, "episode_wall_sec": 7200.0, "max_output_chars": 65536,
                    "memory_mb": 16384, "storage_mb": 32768}
    reply = httpx.post(f"{server}/seed_session", json={"task_id": "write-value-5-0", "limits": {"episode_clock": "cpu"}},
                       timeout=60)
    assert reply.status_code == 422 and "episode_clock 'cpu': one of environment, wall" in reply.json()["detail"]
    # the trainer side: a run asking for more than its servers allow stops with that line
    with pytest.raises(ConfigError, match=r"limits\.storage_mb: .* --max_storage_mb"):
        reset(remote(server, limits=EpisodeLimits(storage_mb=5 << 20)), root / "write-value-5-0")
    assert health(server)["live_sessions"] == 0


def test_a_busy_session_ends_at_its_lease_once_its_trainer_is_gone(root):
    """A trainer that died in the middle of a long command left its session busy, so never expired."""
    app = create_app(EpisodeServerConfig(tasks=[root], lease_sec=2))
    with ServerThread(app) as url:
        session = seed(url, command_timeout_sec=900, episode_wall_sec=1200)["resources_session_id"]
        pid = app.state.sessions._live[session].env._box.sandbox._init_pid
        abandoned_bash(url, session, "sleep 623")
        assert wait_for(lambda: health(url)["sessions"].get("expired", 0) == 1), "the busy session never expired"
        assert process_gone(pid) and processes_matching("sleep 623") == []
        late = httpx.post(f"{url}/bash", json={"resources_session_id": session, "command": "ls"}, timeout=10)
        assert late.status_code == 404 and "expired" in late.json()["detail"]
        # a live trainer's command longer than the lease runs to its end: its keepalive renews the lease
        env = remote(url, limits=EpisodeLimits(command_timeout_sec=30))
        reset(env, root / "write-value-5-0")
        assert env.bash("sleep 5; echo done") == "done\n" and episode_reward(env) == 0.0
        assert health(url)["sessions"]["expired"] == 1


def test_a_session_ends_at_its_deadline_whatever_its_keepalives(root):
    """The wall holds on the server: episode_wall_sec plus the grace after its seed, keepalives or not."""
    app = create_app(EpisodeServerConfig(tasks=[root], lease_sec=60, wall_grace_sec=1))
    with ServerThread(app) as url:
        seeded = seed(url, episode_wall_sec=2)
        session = seeded["resources_session_id"]
        assert seeded["deadline_sec"] == 3
        pid = app.state.sessions._live[session].env._box.sandbox._init_pid
        abandoned_bash(url, session, "sleep 627 >/dev/null 2>&1 &")

        def renewed_and_ended():
            httpx.post(f"{url}/keepalive", json={"resources_session_ids": [session]}, timeout=10)
            return health(url)["sessions"].get("past_deadline", 0) == 1

        assert wait_for(renewed_and_ended), "keepalives kept the session past its deadline"
        assert process_gone(pid) and processes_matching("sleep 627") == []
        late = httpx.post(f"{url}/verify", json={"resources_session_id": session}, timeout=10)
        assert late.status_code == 404 and "deadline" in late.json()["detail"]


def test_one_clients_abandoned_calls_starve_neither_another_seed_nor_the_reaper(root):
    """One client's pile of abandoned /bash calls held every thread of the server's one pool: another trainer's
    seed waited 31 s, and the reaper with it."""
    app = create_app(EpisodeServerConfig(tasks=[root], max_sessions=3, lease_sec=10))
    with ServerThread(app) as url:
        busy = seed(url, command_timeout_sec=900, episode_wall_sec=1200)["resources_session_id"]
        idle = seed(url)["resources_session_id"]
        idle_pid = app.state.sessions._live[idle].env._box.sandbox._init_pid
        alive = threading.Event()

        def keepalive():  # the abusive client is alive: its session is not the reaper's
            while not alive.wait(0.5):
                httpx.post(f"{url}/keepalive", json={"resources_session_ids": [busy]}, timeout=10)

        threading.Thread(target=keepalive, daemon=True).start()
        try:
            calls = [threading.Thread(target=abandoned_bash, args=(url, busy, "sleep 631")) for _ in range(33)]
            for call in calls:
                call.start()
            for call in calls:
                call.join()
            stats = EpisodeStats()
            env = remote(url, stats, start_timeout=30)  # another trainer's episode, start to verdict
            reset(env, root / "write-value-5-0")
            assert env.bash("pwd") == "/app\n" and episode_reward(env) == 0.0, stats.as_dict()
            assert wait_for(lambda: health(url)["sessions"].get("expired", 0) == 1), health(url)["sessions"]
            assert process_gone(idle_pid)
        finally:
            alive.set()
            try:
                httpx.post(f"{url}/close_session", json={"resources_session_id": busy}, timeout=30)
            except httpx.HTTPError:
                pass  # a server that cannot answer: the failure above says why
        assert wait_for(lambda: processes_matching("sleep 631") == [])


def test_a_server_other_machines_can_reach_needs_a_token(root, tmp_path):
    """Deployed as the docs showed (--host 0.0.0.0, no token), the server ran anyone's commands."""
    env = {key: value for key, value in os.environ.items() if key != TOKEN_ENV}
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "episodes.server", "--tasks", str(root), "--host", "0.0.0.0",
                                "--port", str(port)], cwd=REPO, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        def served():
            try:
                return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(lambda: process.poll() is not None or served(), timeout=60)
        assert process.poll() is not None, "the server serves on 0.0.0.0 without a token"
        _, stderr = process.communicate(timeout=30)
    finally:
        stop_process(process)
    assert process.returncode == 2 and stderr.strip() == (
        f"error: --host 0.0.0.0 can be reached from other machines, and this server runs the commands it is sent: "
        f"give it a bearer token (--auth_token T, or ${TOKEN_ENV}) and its clients the same, or bind to 127.0.0.1")
    # with the token in the environment (as launch/slurm/grpo_agentic.sbatch passes it) it serves, and only to it
    process, url = start_server(root, tmp_path / "server.log", "--host", "0.0.0.0", env={**env, TOKEN_ENV: "t0k"})
    try:
        assert httpx.post(f"{url}/seed_session", json={"task_id": "write-value-5-0"}).status_code == 401
        with_token = remote(url, auth_token="t0k")
        reset(with_token, root / "write-value-5-0")
        assert with_token.bash("pwd") == "/app\n" and episode_reward(with_token) == 0.0
    finally:
        stop_process(process)


def start_server(root: Path, log: Path, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "episodes.server", "--tasks", str(root), "--port", str(port),
                                *args], cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT,
                               start_new_session=True, env=env)
    url = f"http://127.0.0.1:{port}"
    wait_until_healthy(url, process, timeout=60, details=lambda: "\n" + log.read_text()[-2000:])
    return process, url


def test_a_shutdown_tears_down_every_sandbox(root, tmp_path):
    process, url = start_server(root, tmp_path / "server.log")
    try:
        envs = [remote(url) for _ in range(2)]
        for env in envs:
            reset(env, root / "write-value-5-0")
            env.bash("sleep 619 >/dev/null 2>&1 &")
        assert httpx.get(f"{url}/health").json()["live_sessions"] == 2
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once shut down
    finally:
        stop_process(process)
    assert "shutdown: 2 live session(s) closed" in (tmp_path / "server.log").read_text()
    assert processes_matching("sleep 619") == []


def test_a_killed_server_leaves_no_sandbox_and_its_episodes_are_not_scored(root, tmp_path):
    process, url = start_server(root, tmp_path / "server.log")
    stats = EpisodeStats()
    acting, verifying = remote(url, stats, retries=1), remote(url, stats, retries=1)
    try:
        for env in (acting, verifying):
            reset(env, root / "count-lines-5-1")
            env.bash("sleep 621 >/dev/null 2>&1 &")
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        stop_process(process)
    assert acting.bash("ls") == SANDBOX_FAILED and episode_reward(acting) is None
    assert episode_reward(verifying) is None
    assert stats.as_dict()["masked_by_kind"] == {"sandbox": 2}
    deadline = time.monotonic() + 30
    while processes_matching("sleep 621") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_matching("sleep 621") == [], "a sandbox outlived the killed server"


def test_the_server_command_refuses_a_missing_task_folder(tmp_path):
    run = subprocess.run([sys.executable, "-m", "episodes.server", "--tasks", str(tmp_path / "none")], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and run.stderr.strip() == f"error: --tasks: {tmp_path / 'none'} is not a folder " \
                                                         "(give folders of Harbor task folders)"


def test_a_digest_is_of_the_whole_task_folder(root, tmp_path):
    copy = tmp_path / "write-value-5-0"
    shutil.copytree(root / "write-value-5-0", copy)
    assert TaskFolder.of(copy).digest == TaskFolder.of(root / "write-value-5-0").digest
    changed = tmp_path / "changed" / "write-value-5-0"
    shutil.copytree(root / "write-value-5-0", changed)
    (changed / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    assert TaskFolder.of(changed).digest != TaskFolder.of(root / "write-value-5-0").digest


@pytest.mark.slow
def test_agentic_grpo_runs_its_episodes_on_an_episode_server(tmp_path):
    from conftest import AGENTIC_FAMILIES as FAMILIES
    from conftest import agentic_config, launch

    generate(tmp_path / "tasks", 11, 8, FAMILIES)  # the embedded default's tasks, here and on the "CPU node"
    served = tmp_path / "served"
    shutil.copytree(tmp_path / "tasks", served / "tasks")  # another path: tasks go by name and digest
    process, url = start_server(served / "tasks", tmp_path / "server.log", "--max_sessions", "8")
    try:
        run = launch("recipes/grpo_agentic.py", agentic_config(tmp_path, sandbox_urls=[url]), tmp_path)
        health = httpx.get(f"{url}/health").json()
    finally:
        stop_process(process)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((tmp_path / "grpo-agentic" / "run_summary.json").read_text())
    assert summary["global_step"] == 2 and summary["episodes"] == 8 and summary["masked_by_kind"] == {}
    assert summary["scored"] == 8 and summary["sandbox_start_seconds_mean"] is not None
    assert health["episodes"]["episodes"] == 8 and health["sessions"]["verified"] == 8
    assert health["live_sessions"] == 0
    assert yaml.safe_load((tmp_path / "grpo_agentic.yaml").read_text())["sandbox_urls"] == [url]
