"""Harbor tasks as TRL environments (episodes/local.py), in the real local sandbox: the task's tests are the reward,
infrastructure failures are not scores (None) and are counted by kind, limits end episodes, and no sandbox outlives
its episode or a killed trainer."""

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import process_gone, processes_matching

from episodes.local import EpisodeLimits, EpisodeStats, TaskEnvironment, episode_reward, episode_verdict
from harbor_tasks.generate import write_task

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    return {family: write_task(root, family, 5, i) for i, family in enumerate(["write-value", "count-lines"])}


def oracle_commands(task: Path) -> list[str]:
    lines = (task / "solution" / "solve.sh").read_text().splitlines()
    return [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]


@pytest.mark.parametrize("background_start", [False, True])
def test_the_oracle_scores_1_and_doing_nothing_scores_0(tasks, background_start):
    stats = EpisodeStats()
    env = TaskEnvironment(EpisodeLimits(), stats, background_start=background_start)
    for family, task in tasks.items():
        env.reset(task_dir=str(task), prompt=[{"role": "user", "content": "..."}])
        for command in oracle_commands(task):
            assert "[exit code" not in env.bash(command), command
        assert episode_reward(env) == 1.0, family
        assert episode_reward(env) == 1.0  # verified once, the sandbox already stopped
        env.reset(task_dir=str(task))
        assert env.bash("pwd") == "/app\n"
        assert episode_reward(env) == 0.0
    summary = stats.as_dict()
    assert summary["episodes"] == 4 and summary["scored"] == 4 and summary["passed"] == 2
    assert summary["masked"] == 0 and summary["sandbox_start_seconds_mean"] is not None


def test_a_reward_the_agent_writes_itself_does_not_count(tasks):
    env = TaskEnvironment()
    env.reset(task_dir=str(tasks["write-value"]))
    env.bash("mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt && echo '{\"reward\": 1}' > "
             "/logs/verifier/reward.json")
    assert episode_reward(env) == 0.0


def broken_copy(task: Path, tmp_path: Path, *, dockerfile: str | None = None, test_sh: str | None = None) -> Path:
    copy = tmp_path / task.name
    shutil.copytree(task, copy)
    if dockerfile is not None:
        (copy / "environment" / "Dockerfile").write_text(dockerfile)
    if test_sh is not None:
        (copy / "tests" / "test.sh").write_text(test_sh)
    return copy


def test_an_episode_runs_as_the_final_user_with_the_tasks_build_args(tasks, tmp_path):
    task = tasks["write-value"]
    test_sh = (task / "tests" / "test.sh").read_text().replace("ok=1\n", 'ok=1\n[ "$(id -un)" = player ] || ok=0\n')
    copy = broken_copy(task, tmp_path, test_sh=test_sh, dockerfile=(
        "FROM python:3.11-slim\nARG OWNER=nobody-by-default\nRUN useradd -m -u 4321 \"$OWNER\"\nUSER $OWNER\n"
        "WORKDIR /app\nCOPY --chown=$OWNER app/ /app/\n"))
    with open(copy / "task.toml", "a") as f:
        f.write('build_args = { OWNER = "player" }\n')  # the last section is [environment]
    env = TaskEnvironment()
    env.reset(task_dir=str(copy))
    assert env.bash("id -un; stat -c %U /app /app/README.txt") == "player\nplayer\nplayer\n"
    for command in oracle_commands(copy):
        assert "[exit code" not in env.bash(command), command
    assert episode_reward(env) == 1.0  # the tests ran as player too


@pytest.mark.parametrize("kind, dockerfile, test_sh", [
    ("environment_build", "FROM debian\nWORKDIR /app\nRUN exit 3\n", None),
    ("verifier_tools", None, "#!/bin/bash\nuvx pytest /tests/test_outputs.py\n"),
    ("network", None, "#!/bin/bash\npython3 -c 'import socket; socket.getaddrinfo(\"pypi.org\", 443)'\nexit 1\n"),
])
@pytest.mark.parametrize("background_start", [False, True])
def test_infrastructure_failures_are_not_scores_and_are_counted(tasks, tmp_path, kind, dockerfile, test_sh,
                                                                background_start):
    stats = EpisodeStats()
    env = TaskEnvironment(EpisodeLimits(), stats, background_start=background_start)
    env.reset(task_dir=str(broken_copy(tasks["write-value"], tmp_path, dockerfile=dockerfile, test_sh=test_sh)))
    if kind == "environment_build":
        assert "not scored" in env.bash("ls")
    assert episode_reward(env) is None
    summary = stats.as_dict()
    assert summary["masked_by_kind"] == {kind: 1} and summary["scored"] == 0 and summary["pass_rate"] is None


def test_a_background_start_that_raises_raises_where_the_episode_needs_its_sandbox(tasks, monkeypatch):
    import episodes.local

    class Exploding:
        def __init__(self, config):
            raise RuntimeError("not a sandbox error: a bug")

    monkeypatch.setattr(episodes.local, "BlockingSandbox", Exploding)
    env = TaskEnvironment(background_start=True)
    env.reset(task_dir=str(tasks["write-value"]))  # returns at once; the start fails in its thread
    with pytest.raises(RuntimeError, match="a bug"):
        env.bash("ls")
    assert env.bash("ls").startswith("error: the sandbox is not running")  # raised once, as reset() would have


@pytest.mark.parametrize("test_sh, timeout", [
    ("#!/bin/bash\necho 'the runner crashed before writing a reward'\nexit 1\n", None),
    ("#!/bin/bash\nmkdir -p /logs/verifier && echo maybe > /logs/verifier/reward.txt\n", None),
    ("#!/bin/bash\nsleep 30\n", 1.0),
])
def test_a_verifier_that_timed_out_or_wrote_no_reward_is_an_agent_failure_scored_0(tasks, tmp_path, test_sh, timeout):
    """As Harbor scores them (VerifierTimeoutError, RewardFileNotFoundError): the agent's doing unless the run
    measured the environment (the kinds above), so not a way out of a 0."""
    task = broken_copy(tasks["write-value"], tmp_path, test_sh=test_sh)
    if timeout is not None:
        toml = (task / "task.toml").read_text().replace("timeout_sec = 60.0", f"timeout_sec = {timeout}", 1)
        (task / "task.toml").write_text(toml)
    stats = EpisodeStats()
    env = TaskEnvironment(EpisodeLimits(), stats)
    env.reset(task_dir=str(task))
    assert episode_reward(env) == 0.0 and episode_verdict(env).outcome == "agent_failure"
    summary = stats.as_dict()
    assert summary["masked"] == 0 and summary["scored"] == 1 and summary["agent_failures"] == 1


def test_limits_cut_output_kill_slow_commands_and_end_the_episode(tasks):
    stats = EpisodeStats()
    env = TaskEnvironment(EpisodeLimits(max_output_chars=300, command_timeout_sec=1, episode_wall_sec=4,
                                        episode_clock="wall"), stats)
    env.reset(task_dir=str(tasks["write-value"]))
    long = env.bash("seq 1 5000")
    assert len(long) < 400 and long.startswith("1\n2\n") and long.rstrip().endswith("5000") and "cut" in long
    assert "killed" in env.bash("sleep 5")
    assert "[exit code 3]" in env.bash("exit 3")
    time.sleep(3.5)
    assert "time limit" in env.bash("ls")
    assert episode_reward(env) == 0.0  # limit_outcome "zero": ended by the limit, scored
    summary = stats.as_dict()
    assert summary["tool_calls"] == 3 and summary["tool_errors"] == 2 and summary["ended_by_limit"] == 1

    masked = EpisodeStats()
    env = TaskEnvironment(EpisodeLimits(episode_wall_sec=0.5, limit_outcome="mask", episode_clock="wall"), masked)
    env.reset(task_dir=str(tasks["write-value"]))
    time.sleep(0.6)
    assert "time limit" in env.bash("ls")
    assert episode_reward(env) is None and masked.as_dict()["masked_by_kind"] == {"episode_wall_sec": 1}


def test_on_the_environment_clock_only_the_sandbox_s_seconds_count(tasks):
    """The default clock: the seconds between calls (the policy writing its next turn, a batch generating) are not
    the episode's, so a slow trainer does not cut its episodes; its commands' seconds still end it."""
    stats = EpisodeStats()
    env = TaskEnvironment(EpisodeLimits(command_timeout_sec=1, episode_wall_sec=5), stats)
    env.reset(task_dir=str(tasks["write-value"]))
    assert "README.txt" in env.bash("ls")
    time.sleep(5.5)                            # the policy thinking: on the wall clock the episode would be over
    assert "README.txt" in env.bash("ls")
    replies = [env.bash("sleep 5") for _ in range(12)]  # each killed at 1 s: the commands' seconds reach the limit
    assert "killed" in replies[0] and any("time limit" in reply for reply in replies), replies
    assert episode_reward(env) == 0.0 and stats.ended_by_limit == 1


def test_bad_limits_are_refused():
    with pytest.raises(ValueError, match="limit_outcome"):
        EpisodeLimits(limit_outcome="skip")
    with pytest.raises(ValueError, match="episode_wall_sec"):
        EpisodeLimits(episode_wall_sec=0)
    with pytest.raises(ValueError, match="episode_clock 'cpu': one of environment, wall"):
        EpisodeLimits(episode_clock="cpu")


# a sleep no other test starts (the other worker's tests run `sleep 600` in their own sandboxes at the same time)
SLEEPER = f"sleep 600.{os.getpid()}"

KILLED_TRAINER = textwrap.dedent("""
    import os, signal, sys
    from episodes.local import TaskEnvironment
    envs = [TaskEnvironment() for _ in range(2)]
    for env in envs:
        env.reset(task_dir=sys.argv[1])
        env.bash(sys.argv[2] + " > /dev/null 2>&1 &")
    print(" ".join(str(env._box.sandbox._init_pid) for env in envs), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_no_sandbox_outlives_its_episode_or_a_killed_trainer(tasks):
    env = TaskEnvironment()
    env.reset(task_dir=str(tasks["count-lines"]))
    pid = env._box.sandbox._init_pid
    env.bash(f"{SLEEPER} > /dev/null 2>&1 &")
    episode_reward(env)
    assert process_gone(pid), "the sandbox outlived its verified episode"

    run = subprocess.run([sys.executable, "-c", KILLED_TRAINER, str(tasks["count-lines"]), SLEEPER], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    pids = [int(p) for p in run.stdout.split()]
    assert len(pids) == 2 and all(process_gone(p) for p in pids), "a sandbox outlived the killed trainer"
    assert processes_matching(re.escape(SLEEPER)) == []


def test_the_policy_sees_one_tool_and_cannot_call_its_verifier():
    import inspect

    public = [name for name, _ in inspect.getmembers(TaskEnvironment, predicate=inspect.isfunction)
              if not name.startswith("_") and name not in ("reset", "get_reward")]
    assert public == ["bash"]  # TRL's environment_factory exposes every other public method as a tool
