"""Terminus-2 episodes (episodes/terminus.py) in the real local sandbox: the same scripted responses give the same user
messages and reward as Harbor's own terminus-2 agent in a Harbor job; solving scores 1, not solving 0; parse errors
are counted; a sandbox that fails is not scored; the time limit ends an episode; keystrokes cannot forge a reward."""

import json
import shutil
import time
from pathlib import Path

import pytest
from conftest import REPO
from servers import ServerThread

from common.terminus_2 import MAX_OUTPUT_BYTES
from episodes.local import EpisodeLimits, EpisodeStats, episode_failure, episode_reward, end_episode
from episodes.terminus import (LIMIT_REACHED, TerminusEnvironment, TerminusTurn, terminus_first_message,
                               terminus_step)
from eval.openai_api import chat_completion, create_app
from eval.run import LOCAL_ENV, run_harbor
from harbor_tasks.generate import write_task

HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"


def action(*commands, done=False, analysis="a", plan="p") -> str:
    """A Terminus-2 JSON response: commands as (keystrokes, duration) pairs, or keystrokes alone (no duration)."""
    cmds = [{"keystrokes": c} if isinstance(c, str) else {"keystrokes": c[0], "duration": c[1]} for c in commands]
    return json.dumps({"analysis": analysis, "plan": plan, "commands": cmds, "task_complete": done})


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    return {family: write_task(root, family, 5, i) for i, family in enumerate(["write-value", "count-lines"])}


def solve_keystrokes(task: Path) -> list[str]:
    lines = (task / "solution" / "solve.sh").read_text().splitlines()
    return [line + "\n" for line in lines if line and not line.startswith(("#!", "set "))]


def play(env: TerminusEnvironment, responses: list[str]) -> list[str]:
    """The user messages of an episode: the first, then each response's observation until done."""
    messages = [terminus_first_message(env)]
    for text in responses:
        turn = terminus_step(env, text)
        assert isinstance(turn, TerminusTurn)
        if turn.done:
            return messages
        messages.append(turn.observation)
    return messages


def script(task: Path) -> list[str]:
    """Each case the issue names: a parse error, warnings, durations, output past 10,000 bytes, task_complete then a
    response without it, then task_complete twice. Outputs are deterministic (no dates, no sizes)."""
    return [
        "I will look around first.",                                                      # no JSON: a parse error
        "Sure:\n" + action("cd /app\n", ("echo warned\n", 0.3)),                           # warnings, commands run
        action(("echo one\n", 0.2), ("printf 'two\\nthree\\n'\n", 0.3)),
        action(("seq -f '%080g' 1 300\n", 1.0)),                                          # ~24 KB of output
        action(*[(k, 0.2) for k in solve_keystrokes(task)], done=True),                   # solved; asks for sure
        action(("cat out/*\n", 0.3)),                                                     # not complete: pending reset
        action(done=True),
        action(done=True),                                                                # confirmed: the end
    ]


class ScriptedModel:
    """A loopback OpenAI-compatible server answering the scripted responses in order, recording every request."""

    def __init__(self, responses: list[str]):
        self.responses, self.requests = list(responses), []

        async def complete(body):
            self.requests.append(body)
            text = self.responses[min(len(self.requests), len(self.responses)) - 1]
            return chat_completion(body.get("model", "scripted"), text, "stop", 10, 10)

        self.app = create_app("scripted", lambda: {"status": "ok"}, lambda: {"object": "list", "data": []}, complete)


def harbor_episode(task: Path, responses: list[str], root: Path) -> tuple[list[dict], float]:
    if not HARBOR.exists():
        pytest.fail(f"{HARBOR} missing: `make test` creates it (bash eval/setup_harbor.sh)")
    model = ScriptedModel(responses)
    jobs = root / "jobs"
    info = {"max_input_tokens": 32768, "max_output_tokens": 4096, "input_cost_per_token": 0.0,
            "output_cost_per_token": 0.0}
    with ServerThread(model.app) as url:
        command = [str(HARBOR), "run", "-p", str(task), "-a", "terminus-2", "-m", "hosted_vllm/scripted",
                   "--ak", f"api_base={url}/v1", "--ak", f"model_info={json.dumps(info)}",
                   "--ak", "record_terminal_session=False", "--ak", "temperature=0",
                   "--env", LOCAL_ENV, "-k", "1", "-n", "1", "-o", str(jobs), "--job-name", "transcript", "-y"]
        run_harbor(command, jobs / "transcript", root / "harbor.log")
    (result,) = [json.loads(p.read_text()) for p in (jobs / "transcript").glob("*/result.json")]
    assert result.get("exception_info") is None, result["exception_info"]
    return model.requests, result["verifier_result"]["rewards"]["reward"]


@pytest.mark.slow
def test_the_transcript_matches_harbors_terminus_2_turn_by_turn(tasks, tmp_path):
    task = tasks["write-value"]
    responses = script(task)
    requests, harbor_reward = harbor_episode(task, responses, tmp_path)
    assert len(requests) == len(responses)  # one model call per response: the second completion ends it
    theirs = [m["content"] for m in requests[-1]["messages"] if m["role"] == "user"]
    assert [m["role"] for m in requests[-1]["messages"]] == ["user", "assistant"] * (len(responses) - 1) + ["user"]
    assert [m["content"] for m in requests[-1]["messages"] if m["role"] == "assistant"] == responses[:-1]

    stats = EpisodeStats()
    env = TerminusEnvironment(EpisodeLimits(), stats)
    env.reset(task_dir=str(task))
    ours = play(env, responses)
    # nothing normalised: both sandboxes are named "sandbox", run the same userland and the script prints no dates
    assert len(ours) == len(theirs)
    for turn, (mine, harbors) in enumerate(zip(ours, theirs)):
        if turn == 0 and mine != harbors:  # Harbor captures its first screen without waiting for the shell's prompt:
            # on a loaded machine (CI, 2 cores) its screen can still be blank where ours, which waits, shows the prompt
            mine = mine.replace("root@sandbox:/app#", "", 1)
        assert mine == harbors, f"user message {turn} differs"
    assert episode_reward(env) == harbor_reward == 1.0
    # the turns the script meant: a parse error, warnings, output limited, the confirmation asked twice
    assert theirs[1].startswith("Previous response had parsing errors:\nERROR: No valid JSON found")
    assert theirs[2].startswith("Previous response had warnings:\nWARNINGS: - Extra text detected before JSON")
    assert f"[... output limited to {MAX_OUTPUT_BYTES} bytes;" in theirs[4]
    assert theirs[5].startswith("Current terminal state:\n") and "Are you sure" in theirs[5]
    assert "Are you sure" in theirs[7] and "Are you sure" not in theirs[6]
    summary = stats.as_dict()
    assert summary["parse_errors"] == 1 and summary["parse_warnings"] == 1 and summary["commands"] == 6 + len(
        solve_keystrokes(task))


@pytest.mark.parametrize("background_start", [False, True])
def test_solving_scores_1_and_a_wrong_answer_0(tasks, background_start):
    stats = EpisodeStats()
    env = TerminusEnvironment(EpisodeLimits(), stats, background_start=background_start)
    task = tasks["count-lines"]
    env.reset(task_dir=str(task))
    first = terminus_first_message(env)
    assert "Task Description:\n" in first and first.rstrip().endswith("root@sandbox:/app#")
    turn = terminus_step(env, action(*[(k, 0.2) for k in solve_keystrokes(task)], done=True))
    assert "Are you sure" in turn.observation and not turn.done
    assert terminus_step(env, action(done=True)).done
    assert episode_reward(env) == 1.0
    env.reset(task_dir=str(task))
    terminus_first_message(env)
    terminus_step(env, action(("mkdir -p out && echo 0 > out/count.txt\n", 0.2), ("echo wrong > /app/out/x\n", 0.1)))
    terminus_step(env, "{not json")
    terminus_step(env, action(done=True))
    assert terminus_step(env, action(done=True)).done
    assert terminus_step(env, action(done=True)).done  # after the end: done again, nothing typed
    assert episode_reward(env) == 0.0
    summary = stats.as_dict()
    assert summary["scored"] == 2 and summary["passed"] == 1 and summary["parse_errors"] == 1
    assert list(summary)[:16] == ["episodes", "scored", "passed", "pass_rate", "masked", "masked_by_kind", "tampered",
                                  "tampered_by_kind", "agent_failures", "ended_by_limit", "tool_calls", "tool_errors",
                                  "sandbox_start_seconds_mean", "verify_seconds_mean", "parse_errors",
                                  "parse_warnings"]


def test_only_reset_is_public():
    public = [name for name in dir(TerminusEnvironment) if not name.startswith("_")]
    assert public == ["reset"]


def test_a_sandbox_that_fails_to_start_is_not_scored(tasks, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(tasks["write-value"], broken)
    (broken / "environment" / "Dockerfile").write_text("FROM debian\nWORKDIR /app\nRUN exit 3\n")
    stats = EpisodeStats()
    env = TerminusEnvironment(EpisodeLimits(), stats, background_start=True)
    env.reset(task_dir=str(broken))
    assert "Task Description:" in terminus_first_message(env)
    turn = terminus_step(env, action(("echo hi\n", 0.1)))
    assert turn.done and "infrastructure failure" in turn.observation
    assert episode_reward(env) is None
    kind, _ = episode_failure(env)
    assert kind == "environment_build" and stats.as_dict()["masked_by_kind"] == {kind: 1} and stats.scored == 0


def test_the_time_limit_ends_the_episode_and_a_duration_never_waits_past_it(tasks):
    stats = EpisodeStats()
    env = TerminusEnvironment(EpisodeLimits(episode_wall_sec=2.0), stats)
    env.reset(task_dir=str(tasks["write-value"]))
    terminus_first_message(env)
    started = time.monotonic()
    turn = terminus_step(env, action(("sleep 100\n", 60)))
    assert turn == TerminusTurn(LIMIT_REACHED, True) and time.monotonic() - started < 3.0
    assert episode_reward(env) == 0.0 and stats.ended_by_limit == 1
    masked = EpisodeStats()
    env = TerminusEnvironment(EpisodeLimits(episode_wall_sec=1.0, limit_outcome="mask"), masked)
    env.reset(task_dir=str(tasks["write-value"]))
    terminus_first_message(env)
    assert terminus_step(env, action(("sleep 5\n", 5))).done
    assert episode_reward(env) is None and masked.as_dict()["masked_by_kind"] == {"episode_wall_sec": 1}


@pytest.mark.parametrize("clock", ["environment", "wall"])
def test_the_seconds_between_turns_count_only_on_the_wall_clock(tasks, clock):
    env = TerminusEnvironment(EpisodeLimits(episode_wall_sec=6.0, episode_clock=clock), EpisodeStats())
    env.reset(task_dir=str(tasks["write-value"]))
    terminus_first_message(env)
    assert not terminus_step(env, action(("echo one\n", 0.1))).done
    time.sleep(6.5)  # the policy writing its next turn (a batch of episodes generating)
    turn = terminus_step(env, action(("echo two\n", 0.1)))
    assert (turn == TerminusTurn(LIMIT_REACHED, True)) == (clock == "wall")
    if clock == "environment":
        assert "two" in turn.observation


ATTACKS = {
    "forged reward": [("mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
                       "echo '{\"reward\": 1}' > /logs/verifier/reward.json\n", 0.3)],
    "kill-server": [("tmux kill-server\n", 0.3)],
    "detach": [("tmux detach-client\n", 0.2), ("C-b", 0.1), ("d", 0.2)],
    "exit": [("exit\n", 0.3)],
    "escapes": [("printf '\\033]0;x\\007\\033[2J\\033c\\033[?1049h\\033P+q\\033\\\\'\n", 0.3), ("C-c", 0.1),
                ("C-d", 0.1), ("C-z", 0.1), ("\x1b[200~", 0.1)],
    "fake tmux": [("mkdir -p /usr/local/bin; printf '#!/bin/sh\\nsleep 1000\\n' > /usr/local/bin/tmux; "
                   "chmod +x /usr/local/bin/tmux; hash -r\n", 0.3)],
    "fork bomb-ish": [("for i in $(seq 200); do sleep 1000 & done\n", 0.5)],
    "huge keystrokes": [("echo " + "x" * 40_000 + " > /dev/null\n", 0.5)],
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_keystrokes_cannot_forge_a_reward_or_crash_the_trainer(tasks, name):
    stats = EpisodeStats()
    env = TerminusEnvironment(EpisodeLimits(episode_wall_sec=60.0), stats)
    env.reset(task_dir=str(tasks["write-value"]))
    terminus_first_message(env)
    started = time.monotonic()
    turn = terminus_step(env, action(*ATTACKS[name]))
    if name in ("kill-server", "exit"):  # the session is gone: Harbor's agent stops there, and so does the episode
        assert turn.done
    for _ in range(3):
        if turn.done:
            break
        turn = terminus_step(env, action(("ls /logs\n", 0.1), done=True))
    assert time.monotonic() - started < 45
    assert episode_reward(env) == 0.0, name  # the task is not solved, whatever the keystrokes did
    assert stats.scored == 1 and stats.passed == 0
    if name == "forged reward":  # recorded as tamper evidence (harbor_tasks.evidence), zeroed under "zero"
        assert dict(stats.tampered_by_kind) == {"verifier_paths": 1}
    end_episode(env)


def test_end_episode_stops_without_verifying(tasks):
    env = TerminusEnvironment()
    env.reset(task_dir=str(tasks["write-value"]))
    terminus_first_message(env)
    end_episode(env)
    turn = terminus_step(env, action(("echo hi\n", 0.1)))
    assert turn.done and episode_reward(env) is None  # stopped: nothing to verify, nothing raised


def test_keystrokes_past_tmuxs_command_limit_go_through_a_paste_buffer(tasks):
    env = TerminusEnvironment()
    env.reset(task_dir=str(tasks["write-value"]))
    terminus_first_message(env)
    long = "echo " + "ab" * 12_000 + " | wc -c\n"  # past send-keys' 16,000 bytes
    turn = terminus_step(env, action((long, 0.5)))
    assert "24001" in turn.observation and not turn.done
    assert "runtime-tmux-paste" not in terminus_step(env, action(("ls -a /tmp\n", 0.3))).observation  # cleaned up
    end_episode(env)
