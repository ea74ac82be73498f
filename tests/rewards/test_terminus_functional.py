"""terminus_functional, through a real reward server on loopback: deep tasks generated here, the teacher's policy played
in the local sandbox to make each decision point's row, and the policy's action judged by its effect. Held-out
behaviour (the issue's): the teacher's action 1; the same action written differently 1; one character changed in a
value the terminal showed 0; a no-op 0 where the teacher's work needs what its action did or showed. Then what an
attacker would send, rows from elsewhere (task_roots), rows that no longer replay (masked, never 0), rows without a
task (terminus_judge's string similarity), and a missing task folder (a 422 naming the key)."""

import json
import textwrap

import httpx
import pytest

from harbor_tasks.families import select
from harbor_tasks.folder import TaskFolder
from harbor_tasks.generate import write_task
from harbor_tasks.teacher import task_policy
from rewards.local import local_reward_server
from rewards.protocol import make_response
from sandbox import BlockingSandbox, SandboxConfig


def teacher_run(task) -> list[tuple[str, str]]:
    """(command, what it printed) of the teacher's policy played to the end in a fresh sandbox."""
    folder = TaskFolder.of(task)
    steps, played = task_policy(task)(), []
    with BlockingSandbox(SandboxConfig(environment_dir=folder.environment_dir, workdir=folder.workdir,
                                       build_args=folder.build_args)) as box:
        command = next(steps)
        while True:
            result = box.exec(command)
            played.append((command, result.stdout + result.stderr))
            try:
                command = steps.send(result.stdout + result.stderr)
            except StopIteration:
                return played


def action(command: str | None, complete: bool = False) -> str:
    commands = [] if command is None else [{"keystrokes": command + "\n", "duration": 0.5}]
    return json.dumps({"analysis": "a", "plan": "p", "commands": commands, "task_complete": complete})


def rows_of(task, played) -> list[dict]:
    """One row per teacher command, as `pivots --environment terminus_functional` writes them."""
    conversation = [{"role": "user", "content": "Task:\n" + TaskFolder.of(task).instruction}]
    rows = []
    for index, (command, printed) in enumerate(played):
        rows.append({"responses_create_params": {"input": [dict(m) for m in conversation]},
                     "expected_answer": action(command), "uuid": f"{task.name}-{index}",
                     "agent_ref": {"type": "responses_api_agents", "name": "terminus_functional_simple_agent"},
                     "metadata": {"harness": "terminus_2", "task_dir": str(task),
                                  "prefix_keystrokes": [c + "\n" for c, _ in played[:index]],
                                  "remaining_keystrokes": [c + "\n" for c, _ in played[index + 1:]]}})
        conversation += [{"role": "assistant", "content": action(command)},
                         {"role": "user", "content": f"New Terminal Output:\n$ {command}\n{printed}"}]
    return rows


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("tasks")
    task = write_task(root, "find-owner", 7, 0)
    played = teacher_run(task)
    config = tmp_path_factory.mktemp("config") / "functional.yaml"
    config.write_text(textwrap.dedent(f"""\
        environment: terminus_functional
        terminus_functional:
          command_timeout_sec: 3
          task_roots: {{"/elsewhere/tasks": "{root}"}}
        """))
    with local_reward_server(str(config)) as url:
        yield task, played, rows_of(task, played), url


def verify(url: str, row: dict, answer: str) -> dict:
    reply = httpx.post(f"{url}/verify", json=dict(row, response=make_response(answer)), timeout=120)
    assert reply.status_code == 200, reply.text
    return reply.json()


def steps(played) -> dict[str, int]:
    """The find-owner teacher's steps by what they do: grep (looks: which file), cat (looks: the owner), echo
    (writes the owner), cat (checks)."""
    kinds = [c.split()[0] for c, _ in played]
    assert kinds[:3] == ["grep", "cat", "echo"], played
    return {"grep": 0, "cat": 1, "echo": 2}


def test_the_teachers_action_and_the_same_action_written_differently_score_1(world):
    task, played, rows, url = world
    for row, (command, _) in zip(rows, played):
        assert verify(url, row, row["expected_answer"])["reward"] == 1.0
        judged = verify(url, row, action(f"export LC_ALL=C; {command}"))
        assert judged["reward"] == 1.0 and judged["mask_sample"] is False, (command, judged["functional"])
        assert judged["functional"]["judged_by"] in ("same_state", "shown")
    at = steps(played)
    owner = played[at["echo"]][0].split()[1]
    judged = verify(url, rows[at["echo"]], action(f"printf '%s\\n' {owner} > owner.txt"))
    assert judged["reward"] == 1.0 and judged["functional"]["judged_by"] == "same_state"
    seconds = judged["functional"]["seconds"]  # where the policy side's sandbox time went
    assert set(seconds) == {"start", "prefix", "action", "rest", "total"} and seconds["prefix"] > 0
    assert seconds["total"] >= seconds["start"] + seconds["prefix"] + seconds["action"] - 0.001  # each rounded


def test_one_character_changed_in_a_value_the_terminal_showed_scores_0(world):
    task, played, rows, url = world
    at = steps(played)
    path_command = played[at["cat"]][0]  # cat archive/<dir>/<file>.txt: the path the grep showed
    wrong_path = path_command[:-5] + ("x" if path_command[-5] != "x" else "y") + path_command[-4:]
    judged = verify(url, rows[at["cat"]], action(wrong_path))
    assert judged["reward"] == 0.0 and judged["failure_reason"] == "not_shown", judged["functional"]
    owner = played[at["echo"]][0].split()[1]
    wrong_owner = owner[:-1] + ("z" if owner[-1] != "z" else "y")
    judged = verify(url, rows[at["echo"]], action(f"echo {wrong_owner} > owner.txt"))
    assert judged["reward"] == 0.0 and judged["functional"]["judged_by"] == "continuation"


def test_a_no_op_scores_0_where_the_work_needs_what_the_teachers_action_did_or_showed(world):
    task, played, rows, url = world
    at = steps(played)
    for step in ("grep", "cat", "echo"):
        judged = verify(url, rows[at[step]], action("true"))
        assert judged["reward"] == 0.0 and judged["mask_sample"] is False, (step, judged["functional"])
    assert verify(url, rows[at["echo"]], action("true"))["failure_reason"] == "no_effect_where_the_work_needs_one"


def test_what_an_attacker_sends(world):
    task, played, rows, url = world
    at = steps(played)
    owner = played[at["echo"]][0].split()[1]
    # a wrong answer and a reward file of its own: the verifier's folder is the agent's doing (tamper evidence)
    judged = verify(url, rows[at["echo"]], action("echo nobody > owner.txt; mkdir -p /logs/verifier; "
                                                  "echo 1 > /logs/verifier/reward.txt"))
    assert judged["reward"] == 0.0 and judged["failure_reason"] == "tamper_evidence", judged
    # the value shown, then scrolled off the screen by a flood: not shown
    judged = verify(url, rows[at["cat"]], action(played[at["cat"]][0] + "; seq 1 200"))
    assert judged["reward"] == 0.0 and judged["failure_reason"] == "not_shown"
    # the whole archive dumped so that the value is somewhere in it: only the last screen counts
    judged = verify(url, rows[at["grep"]], action("grep -r . archive; seq 1 100"))
    assert judged["reward"] == 0.0
    # a command that never ends: killed, 0 (the policy's doing, not the infrastructure's)
    judged = verify(url, rows[at["echo"]], action(f"echo {owner} > owner.txt; sleep 600"))
    assert judged["reward"] == 0.0 and judged["failure_reason"] == "action_timed_out" and not judged["mask_sample"]
    # marking the task complete before the work is done: judged by the tests now
    judged = verify(url, rows[at["echo"]], action(None, complete=True))
    assert judged["reward"] == 0.0 and judged["failure_reason"] == "completed_before_the_work"
    # not a Terminus action
    assert verify(url, rows[at["echo"]], "echo hi")["failure_reason"] == "model_output_invalid"


def test_rows_from_elsewhere_stale_rows_rows_without_a_task_and_missing_folders(world):
    task, played, rows, url = world
    at = steps(played)
    moved = json.loads(json.dumps(rows[at["echo"]]))
    moved["metadata"]["task_dir"] = f"/elsewhere/tasks/{task.name}"  # built on another machine: task_roots maps it
    assert verify(url, moved, action(f"export X=1; {played[at['echo']][0]}"))["reward"] == 1.0
    # a row whose teacher work no longer passes here (its later keystrokes lost): masked, never a 0
    stale = json.loads(json.dumps(rows[at["cat"]]))
    stale["metadata"]["remaining_keystrokes"] = []
    judged = verify(url, stale, action("true"))
    assert judged["mask_sample"] is True and judged["failure_kind"] == "prefix_replay"
    # no task: terminus_judge's string similarity, as for NVIDIA's rows
    bare = json.loads(json.dumps(rows[at["echo"]]))
    for key in ("task_dir", "prefix_keystrokes", "remaining_keystrokes"):
        bare["metadata"].pop(key)
    assert verify(url, bare, bare["expected_answer"])["reward"] == 1.0
    assert verify(url, bare, action("rm -rf /tmp/nothing-alike-at-all"))["similarity_score"] < 0.9
    # a folder that is not here: a 422 naming the key and the fix
    missing = json.loads(json.dumps(rows[at["echo"]]))
    missing["metadata"]["task_dir"] = "/nowhere/find-owner-7-0"
    reply = httpx.post(f"{url}/verify", json=dict(missing, response=make_response(action("true"))), timeout=60)
    assert reply.status_code == 422 and "metadata.task_dir: /nowhere/find-owner-7-0" in reply.text
    assert "task_roots" in reply.text
    bad = json.loads(json.dumps(rows[at["echo"]]))
    bad["metadata"]["prefix_keystrokes"] = "grep"
    reply = httpx.post(f"{url}/verify", json=dict(bad, response=make_response(action("true"))), timeout=60)
    assert reply.status_code == 422 and "metadata.prefix_keystrokes" in reply.text


def test_every_deep_family_the_teachers_steps_written_differently_score_1(tmp_path):
    """Each deep family's teacher, step by step: its command behind `export ...;` is judged by its effect (the
    same workdir, or a screen that shows what the later steps type) and scores 1."""
    families = select(["deep"])
    assert len(families) >= 8
    with local_reward_server("configs/rewards/terminus_functional.yaml") as url:
        for family in families:
            task = write_task(tmp_path, family, 11, 0)
            played = teacher_run(task)
            for row, (command, _) in zip(rows_of(task, played), played):
                judged = verify(url, row, action(f"export LC_ALL=C; {command}"))
                assert judged["reward"] == 1.0 and not judged["mask_sample"], (family, command, judged)
