"""harbor_tasks/teacher.py: the teacher is a policy that reads what each command printed. In the local sandbox it
solves the deep instances, its commands are the ones the world needs (the solution's, values typed literally), the
same commands fail on another world of the same instruction, and with mistakes it recovers."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter

import pytest

from conftest import REPO
from episodes.local import EpisodeLimits, EpisodeStats, TaskEnvironment, episode_reward
from episodes.oracle import oracle_episode
from harbor_tasks.families import SETS
from harbor_tasks.generate import write_task
from harbor_tasks.solution import solution_lines
from harbor_tasks.teacher import decide, mistyped, shown_output

DEEP = SETS["deep"]
PAIRS = 10  # instances per family, each also replayed on another world


def _toy():
    seen = yield "cat notes/a.txt"
    yield f"echo {seen.split()[-1]} > out.txt"


def test_decide_follows_the_policy_over_the_history():
    assert decide(_toy, []).command == "cat notes/a.txt"
    assert decide(_toy, [("cat notes/a.txt", "the value is 42")]).command == "echo 42 > out.txt"
    done = decide(_toy, [("cat notes/a.txt", "is 42"), ("echo 42 > out.txt", "")])
    assert done.command is None and not done.mistake
    # a command that is not the policy's (a mistake, a deviation) is read and passed over
    after = decide(_toy, [("cat notes/b.txt", "cat: notes/b.txt: No such file or directory")])
    assert after.command == "cat notes/a.txt" and after.after_mistake == "cat: notes/b.txt: No such file or directory"


def test_mistakes_are_looking_commands_mistyped_never_twice_running_and_the_same_each_time():
    made = [decide(_toy, [], mistakes=0.5, key=f"task-{i}") for i in range(40)]
    wrong = [d for d in made if d.mistake]
    assert 10 <= len(wrong) <= 30
    assert all(d.command != "cat notes/a.txt" and d.command.startswith("cat ") for d in wrong)
    assert made == [decide(_toy, [], mistakes=0.5, key=f"task-{i}") for i in range(40)]
    after = decide(_toy, [(wrong[0].command, "No such file")], mistakes=0.999, key="x")
    assert after.command == "cat notes/a.txt" and not after.mistake
    rng = random.Random(0)
    assert mistyped("echo 42 > out.txt", rng) is None and mistyped("rm run/x.lock", rng) is None
    assert mistyped("sed -i 's/a/b/' conf/x.conf", rng) is None
    typo = mistyped("grep -l SKU-12 inventory/*.json", rng)
    assert typo != "grep -l SKU-12 inventory/*.json" and typo.startswith("grep -l SKU-12 ") and "*.json" in typo


def test_shown_output_is_what_the_command_printed_on_the_screen():
    screen = ("New Terminal Output:\n\nroot@sandbox:/app# cat notes/a.txt\nold line\nroot@sandbox:/app# grep -rl "
              "'ticket: A-1' archive\narchive/q1/cedar.txt\nroot@sandbox:/app#\n\n\n")
    assert shown_output(screen, "grep -rl 'ticket: A-1' archive") == "archive/q1/cedar.txt"
    assert shown_output("root@sandbox:/app# ls\nroot@sandbox:/app# ", "ls") == ""


@pytest.fixture(scope="module")
def taught(tmp_path_factory):
    """Every deep family's teacher in the local sandbox on PAIRS instances (world = seed), and their commands
    replayed on the same instruction over another world."""
    root = tmp_path_factory.mktemp("deep")
    env = TaskEnvironment(EpisodeLimits(), EpisodeStats())
    runs = []
    for family in DEEP:
        for index in range(PAIRS):
            task = write_task(root / "a", family, 21, index)
            other = write_task(root / "b", family, 21, index, world_seed=9021)
            record = oracle_episode(task, env)
            commands = [json.loads(m["tool_calls"][0]["function"]["arguments"])["command"]
                        for m in record["messages"] if m.get("tool_calls")]
            env.reset(task_dir=str(other))
            for command in commands:
                env.bash(command)
            runs.append({"family": family, "task": task, "record": record, "commands": commands,
                         "replayed": episode_reward(env)})  # verified, its sandbox stopped
    return runs


def test_the_teacher_solves_the_deep_instances(taught):
    solved = Counter(run["family"] for run in taught if run["record"]["metadata"]["reward"] == 1.0)
    assert sum(solved.values()) >= 0.95 * len(taught), solved
    assert all(solved[family] >= PAIRS - 1 for family in DEEP), solved
    assert not any(run["record"]["metadata"]["teacher_error"] for run in taught)


def test_the_teachers_commands_are_the_worlds_solution_values_typed(taught):
    """What the teacher read and typed is what the world's solution types: no `$(...)` doing the looking."""
    for run in taught:
        solution = [line for line in solution_lines((run["task"] / "solution" / "solve.sh").read_text())
                    if not line.startswith("cd ")]
        assert run["commands"] == solution, run["task"].name
        assert not any("$(" in command or "`" in command for command in run["commands"])


def test_the_same_commands_fail_on_another_world(taught):
    for family in DEEP:
        replays = [run["replayed"] for run in taught if run["family"] == family]
        assert all(r is not None for r in replays), (family, replays)
        assert sum(r < 1.0 for r in replays) >= 0.9 * len(replays), (family, replays)


def test_with_mistakes_the_teacher_reads_the_failure_and_recovers(tmp_path):
    env = TaskEnvironment(EpisodeLimits(), EpisodeStats())
    mistaken = 0
    for family in DEEP:
        record = oracle_episode(write_task(tmp_path, family, 33, 0), env, mistakes=0.5)
        assert record["metadata"]["reward"] == 1.0, (family, record["messages"][-6:])
        messages = record["messages"]
        for i, message in enumerate(messages):
            if message.get("train") is False:
                mistaken += 1
                wrong = json.loads(message["tool_calls"][0]["function"]["arguments"])["command"]
                failure, retry = messages[i + 1]["content"], messages[i + 2]
                assert "No such file" in failure or "cannot access" in failure or "can't open" in failure, failure
                right = json.loads(retry["tool_calls"][0]["function"]["arguments"])["command"]
                assert right != wrong and "train" not in retry
    assert mistaken >= 3


def test_the_summary_names_a_family_whose_teacher_failed(tmp_path):
    tasks = tmp_path / "tasks"
    write_task(tasks, "find-owner", 5, 0)
    broken = write_task(tasks, "hint-chain", 5, 1)
    (broken / "environment" / "app" / "notes" / "start.txt").write_text("nothing here\n")
    done = subprocess.run([sys.executable, "-m", "episodes.oracle", "--tasks", str(tasks), "--collect",
                           str(tmp_path / "out.jsonl")], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "solved by family: find-owner 1/1, hint-chain 0/1" in done.stdout
    assert "the teacher failed tasks of: hint-chain (1 of 1)" in done.stdout
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert records[1]["metadata"]["teacher_error"] == "the output shows no note of " + \
        records[1]["messages"][0]["content"].split("`")[1]


def test_the_teacher_passes_every_round_of_the_multi_round_instances(tmp_path):
    env = TaskEnvironment(EpisodeLimits(), EpisodeStats())
    rounds = []
    for family in SETS["multi-round"]:
        for index in range(5):
            record = oracle_episode(write_task(tmp_path, family, 12, index), env, mistakes=0.2)
            assert record["metadata"]["teacher_error"] is None, record["metadata"]
            rounds += record["metadata"]["rounds"]
            users = [m["content"] for m in record["messages"] if m["role"] == "user"]
            assert len(users) == 3 and not any("not right yet" in u for u in users)  # nothing failed: no feedback
    assert len(rounds) == 30 and sum(r == 1.0 for r in rounds) >= 0.9 * len(rounds), rounds


def test_after_a_failed_round_the_next_turn_quotes_the_failing_check(tmp_path):
    """Round 1's verifier expects another count than the world's: the round fails, and round 2's user turn opens
    with that case's words before the next request (round 2's own verifier, right, passes: no feedback after it)."""
    task = write_task(tmp_path, "orders-rounds", 13, 0)
    test = task / "steps" / "round-1" / "tests" / "test.sh"
    test.write_text(test.read_text().replace('[ "$(tr -d \'[:space:]\' < report/count.txt)" = ',
                                             '[ "$(tr -d \'[:space:]\' < report/count.txt)" = 99', 1))
    record = oracle_episode(task, TaskEnvironment(EpisodeLimits(), EpisodeStats()))
    assert record["metadata"]["rounds"] == [0.0, 1.0, 1.0]
    users = [m["content"] for m in record["messages"] if m["role"] == "user"]
    status = users[0].split("status is `")[1].split("`")[0]
    assert users[1].startswith(f"That is not right yet: report/count.txt should hold how many orders are {status}, "
                               "and it doesn't. Please fix it too.\n\nNext: also write the total")
    assert users[2].startswith("Change: the orders of customer")
