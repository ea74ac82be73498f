"""Terminus-2 episodes on an episode server (episodes/app.py's /terminus_first and /terminus_step, episodes/remote.py's
RemoteTerminusEnvironment), with real parts: uvicorn on loopback, real local sandboxes, a generated task. The remote
episode is the local one turn by turn; another harness's calls are 4xx naming the session's harness; a server that
dies mid-episode leaves it unscored (kind sandbox), never a 0; the server's counts reach the trainer's."""

import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from conftest import REPO
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from servers import ServerThread

from common.errors import ConfigError
from common.net import free_port, stop_process, wait_until_healthy
from episodes.app import EpisodeServerConfig, create_app
from episodes.local import NOT_RUNNING, SANDBOX_FAILED, EpisodeLimits, EpisodeStats, episode_failure, episode_reward
from episodes.remote import EpisodeServers, RemoteTerminusEnvironment
from episodes.terminus import TerminusEnvironment, terminus_first_message, terminus_step
from eval.scripted_teacher import ScriptedTask, action_text, load_tasks
from harbor_tasks.generate import generate

GARBAGE = "I will look around first."  # no JSON: Terminus-2 answers with its parse-error message


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tasks")
    generate(root, 31, 1, ["write-value"])
    return root


@pytest.fixture(scope="module")
def task(root) -> ScriptedTask:
    return load_tasks(root)[0]


@pytest.fixture(scope="module")
def server(root):
    with ServerThread(create_app(EpisodeServerConfig(tasks=[root], max_sessions=4, lease_sec=60))) as url:
        yield url


def reset(env, root: Path, task: ScriptedTask) -> None:
    env.reset(task_dir=str(root / task.name), task=task.name)


def remote(url: str, stats: EpisodeStats, **options) -> RemoteTerminusEnvironment:
    return RemoteTerminusEnvironment(EpisodeServers([url], **options), EpisodeLimits(), stats)


def solving(task: ScriptedTask) -> list[str]:
    """A parse error, a response with a warning (text before the JSON), then act, complete and confirm."""
    done = action_text(ScriptedTask.done_action())
    warned = "Sure:\n" + action_text({"analysis": "a", "plan": "p", "task_complete": False,
                                      "commands": [{"keystrokes": "echo warned\n", "duration": 0.3}]})
    return [GARBAGE, warned, action_text(task.first_action()), done, done]


def play(env, responses: list[str]) -> list[tuple[str, bool]]:
    """The user messages of an episode and whether each ended it: the first, then each response's."""
    turns = [(terminus_first_message(env), False)]
    for text in responses:
        turn = terminus_step(env, text)
        turns.append((turn.observation, turn.done))
        if turn.done:
            break
    return turns


def test_trl_sees_no_tool():
    import inspect

    for cls in (RemoteTerminusEnvironment, TerminusEnvironment):
        public = [name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if not name.startswith("_")]
        assert public == ["reset"], cls


def test_a_remote_episode_is_the_local_one_turn_by_turn_and_its_counts_reach_the_trainer(root, task, server):
    local_stats, remote_stats = EpisodeStats(), EpisodeStats()
    local, env = TerminusEnvironment(EpisodeLimits(), local_stats), remote(server, remote_stats)
    reset(local, root, task)
    reset(env, root, task)
    ours, theirs = play(local, solving(task)), play(env, solving(task))
    assert len(ours) == len(theirs) == 6 and theirs[-1][1] and not any(done for _, done in theirs[:-1])
    for turn, (mine, served) in enumerate(zip(ours, theirs)):
        assert mine == served, f"user message {turn} differs"
    assert theirs[1][0].startswith("Previous response had parsing errors")
    assert theirs[2][0].startswith("Previous response had warnings") and "warned" in theirs[2][0]
    assert episode_reward(local) == episode_reward(env) == 1.0 and episode_failure(env) is None
    mine, served = local_stats.as_dict(), remote_stats.as_dict()
    for key in ("episodes", "scored", "passed", "parse_errors", "parse_warnings", "commands", "masked"):
        assert mine[key] == served[key], key
    assert served["parse_errors"] == 1 and served["parse_warnings"] == 1 and served["commands"] >= 2
    assert len(remote_stats.start_seconds) == len(remote_stats.verify_seconds) == 1
    health = httpx.get(f"{server}/health").json()
    assert health["live_sessions"] == 0 and health["episodes"]["parse_errors"] >= 1


def test_another_harness_calls_are_4xx_naming_the_sessions_harness(task, server):
    def post(path, body):
        return httpx.post(f"{server}{path}", json=body, timeout=60)

    seed = {"task_id": task.name}
    terminus = post("/seed_session", {**seed, "harness": "terminus-2"}).json()
    bash = post("/seed_session", seed).json()  # bash-tool, the default
    assert terminus["harness"] == "terminus-2" and bash["harness"] == "bash-tool"
    t, b = terminus["resources_session_id"], bash["resources_session_id"]
    try:
        first = post("/terminus_first", {"resources_session_id": t})
        assert first.status_code == 200 and "Current terminal state:" in first.json()["message"]
        again = post("/terminus_first", {"resources_session_id": t})  # idempotent: the same message, tmux as it was
        assert again.json() == first.json()
        wrong = post("/bash", {"resources_session_id": t, "command": "ls"})
        assert wrong.status_code == 409 and "is a terminus-2 episode" in wrong.json()["detail"]
        assert "/terminus_first and /terminus_step" in wrong.json()["detail"]
        for path, body in (("/terminus_first", {}), ("/terminus_step", {"response": "{}"})):
            wrong = post(path, {"resources_session_id": b, **body})
            assert wrong.status_code == 409 and "is a bash-tool episode" in wrong.json()["detail"], path
        unknown = post("/seed_session", {**seed, "harness": "xml"})
        assert unknown.status_code == 422 and unknown.json()["detail"].startswith("harness: 'xml' is not one of")
        assert post("/seed_session", {**seed, "harness": 2}).json()["detail"].startswith("harness: must be a string")
        assert post("/terminus_step", {"resources_session_id": t}).json()["detail"] == "response: Field required"
        assert post("/terminus_step", {"resources_session_id": t, "response": 3}).status_code == 422
        assert post("/terminus_first", {}).status_code == 422
        assert post("/terminus_step", {"resources_session_id": "nope", "response": ""}).status_code == 404
        step = post("/terminus_step", {"resources_session_id": t, "response": GARBAGE}).json()
        assert step["done"] is False and "parsing errors" in step["observation"]
    finally:
        for session in (t, b):
            post("/close_session", {"resources_session_id": session})
    assert post("/close_session", {"resources_session_id": t}).json()["closed"] is False


def start_server(root: Path, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "episodes.server", "--tasks", str(root), "--port", str(port)],
                               cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_until_healthy(url, process, timeout=60, details=lambda: "\n" + log.read_text()[-2000:])
    return process, url


def test_a_server_killed_mid_episode_leaves_it_unscored_not_zero(root, task, tmp_path):
    process, url = start_server(root, tmp_path / "server.log")
    stats = EpisodeStats()
    env = remote(url, stats, retries=1)
    try:
        reset(env, root, task)
        assert "Current terminal state:" in terminus_first_message(env)
        assert terminus_step(env, action_text(task.first_action())).done is False
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        stop_process(process)
    turn = terminus_step(env, action_text(ScriptedTask.done_action()))
    assert turn.observation == SANDBOX_FAILED and turn.done
    assert terminus_step(env, GARBAGE).done  # the episode stays over
    assert episode_reward(env) is None and episode_failure(env)[0] == "sandbox"
    assert "a /terminus_step call failed on its episode server" in episode_failure(env)[1]
    assert stats.as_dict()["masked_by_kind"] == {"sandbox": 1} and stats.scored == 0

    # no server at all: the seed fails, the first message says the sandbox is not running, nothing is scored
    reset(env, root, task)
    assert NOT_RUNNING in terminus_first_message(env)
    assert terminus_step(env, GARBAGE).done and episode_reward(env) is None
    assert stats.as_dict()["masked_by_kind"] == {"sandbox": 2} and stats.episodes == 2


def test_a_server_that_predates_terminus_2_sessions_stops_the_run(root, task):
    """A server that ignores `harness` opens a bash-tool session: closed at once, and the run stops saying why
    (rather than every episode's /terminus_first answering 404 and going unscored)."""
    calls: list = []
    app = FastAPI()

    @app.post("/seed_session")
    def seed():
        calls.append("seed")
        return JSONResponse({"resources_session_id": "s", "lease_sec": 60})

    @app.post("/close_session")
    def close():
        calls.append("close")
        return JSONResponse({"closed": True, "counts": {}})

    with ServerThread(app) as url:
        with pytest.raises(ConfigError, match="opened a bash-tool session when asked for terminus-2"):
            reset(remote(url, EpisodeStats()), root, task)
    assert calls == ["seed", "close"]
