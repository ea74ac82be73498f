"""The scripted teacher (eval/scripted_teacher.py) and `python -m eval.run --model_url`: collecting Terminus-2
trajectories from a model served elsewhere, and loading them as SFT records."""

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import REPO, run
from servers import ServerThread

from eval.scripted_teacher import ScriptedTask, Teacher, action_text, create_app, load_tasks
from harbor_tasks.solution import HEREDOC_END

TERMINAL = REPO / "eval" / "tasks" / "terminal"
HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"
# per-line commands (backup-cron-crlf), a heredoc script (csv-etl-quoting), a quoted newline (make-build-c)
JOB_TASKS = ("backup-cron-crlf", "csv-etl-quoting", "make-build-c")


def prompt_for(task: ScriptedTask) -> str:
    return ("You are an AI assistant tasked with solving command-line tasks in a Linux environment.\n\n"
            f"Task Description:\n{task.instruction}\n\nCurrent terminal state:\nroot@sandbox:/app# \n")


@pytest.fixture(scope="module")
def teacher():
    return Teacher(load_tasks(TERMINAL))


# ------------------------------------------------------------------------------------------ fast unit tests

def test_every_builtin_task_is_matched_by_its_prompt(teacher):
    assert len(teacher.tasks) == 10
    for task in teacher.tasks:
        assert teacher.match(prompt_for(task)) is task
    assert teacher.match("Task Description:\nSort the files in /data by size.\n") is None


def test_answers_are_terminus_2_json_actions_then_completion(teacher):
    task = next(t for t in teacher.tasks if t.name == "backup-cron-crlf")
    messages = [{"role": "user", "content": prompt_for(task)}]
    first = json.loads(teacher.answer({"model": "teacher", "messages": messages})["choices"][0]["message"]["content"])
    assert set(first) == {"analysis", "plan", "commands", "task_complete"} and first["task_complete"] is False
    keystrokes = [c["keystrokes"] for c in first["commands"]]
    # plain per-line commands: no shebang, no `set -e` (it would end the interactive shell on an error)
    assert keystrokes[0] == 'cd "${APP_DIR:-/app}"\n' and "chmod 0755 backup.sh\n" in keystrokes
    assert all(k.endswith("\n") and k.count("\n") == 1 and not k.startswith(("#", "set ")) for k in keystrokes)
    assert all(isinstance(c["duration"], float) and 0 < c["duration"] <= 60 for c in first["commands"])
    for turn in range(1, 3):  # the completion, then the confirmation Terminus-2 asks for
        messages += [{"role": "assistant", "content": "..."}, {"role": "user", "content": "Are you sure?"}]
        later = json.loads(teacher.answer({"messages": messages})["choices"][0]["message"]["content"])
        assert later["task_complete"] is True and later["commands"] == []


def test_multi_line_scripts_run_as_one_heredoc(teacher):
    for name in ("csv-etl-quoting", "make-build-c", "service-config-crash"):
        task = next(t for t in teacher.tasks if t.name == name)
        (command,) = task.commands()
        assert command["keystrokes"] == f"bash <<'{HEREDOC_END}'\n{task.script}{HEREDOC_END}\n"


def test_server_answers_and_refuses_an_unknown_prompt(teacher):
    from fastapi.testclient import TestClient

    client = TestClient(create_app(teacher))
    assert client.get("/health").json()["status"] == "ok"
    assert client.get("/v1/models").json()["data"][0]["id"] == "teacher"
    task = teacher.tasks[0]
    ok = client.post("/v1/chat/completions", json={"model": "teacher", "messages": [
        {"role": "user", "content": prompt_for(task)}]})
    assert ok.status_code == 200
    assert ok.json()["choices"][0]["message"]["content"] == action_text(task.first_action())
    bad = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Write a poem."}]})
    assert bad.status_code == 400 and "matches none of the 10 tasks" in bad.json()["error"]["message"]


@pytest.mark.parametrize("args", [[], ["--checkpoint", "x", "--model_url", "http://127.0.0.1:1/v1", "--model", "m"]])
def test_eval_run_wants_exactly_one_of_checkpoint_and_model_url(args):
    result = run([sys.executable, "-m", "eval.run", "--suite", "builtin:terminal", *args], timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "exactly one of --checkpoint" in lines[0]


# ------------------------------------------------------------------------- Harbor jobs (slow)

@pytest.fixture(scope="module")
def teacher_job(tmp_path_factory):
    if not HARBOR.exists():
        pytest.fail(f"{HARBOR} missing: `make test` creates it (bash eval/setup_harbor.sh)")
    root = tmp_path_factory.mktemp("teacher")
    suite = root / "tasks"
    for name in JOB_TASKS:
        shutil.copytree(TERMINAL / name, suite / name)
    teacher = Teacher(load_tasks(suite))
    with ServerThread(create_app(teacher)) as url:
        result = run([sys.executable, "-m", "eval.run", "--model_url", f"{url}/v1", "--model", "teacher",
                      "--suite", str(suite), "--agent", "terminus-2", "--jobs_dir", str(root / "jobs")], timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return teacher, json.loads((root / "jobs" / "eval_results.json").read_text())


@pytest.mark.slow
def test_model_url_collects_the_teachers_trajectories_and_they_pass(teacher_job):
    _, results = teacher_job
    assert results["model"] == "teacher" and results["agent"] == "terminus-2" and results["global_step"] is None
    metrics = results["metrics"]
    assert metrics["n_trials"] == len(JOB_TASKS) and metrics["exceptions"] == {}
    assert metrics["mean_reward"] == 1.0 and all(task["reward"] == 1.0 for task in results["tasks"])


@pytest.mark.slow
def test_teacher_trajectories_train_exactly_the_teachers_actions(teacher_job, tokenizer):
    from chat_corpus.masking import tokenize_chat, training_chat_template
    from chat_corpus.sources import Source, load_source

    teacher, results = teacher_job
    loaded = load_source(Source(results["harbor_job_dir"]), "task")
    assert not loaded.problems and len(loaded.records) == len(JOB_TASKS)
    template = training_chat_template(tokenizer)
    for record in loaded.records:
        task = teacher.match(record["messages"][0]["content"])
        assert task is not None  # the first user turn is Terminus-2's prompt with the task's instruction
        # Terminus-2: the solution, the completion, the confirmation
        expected = [action_text(task.first_action()), action_text(task.done_action()),
                    action_text(task.done_action())]
        assert [m["content"] for m in record["messages"] if m["role"] == "assistant"] == expected
        input_ids, mask = tokenize_chat(tokenizer, template, record)
        trained = tokenizer.decode([t for t, m in zip(input_ids, mask) if m], skip_special_tokens=False)
        turns = trained.split("<|im_end|>\n")
        assert turns[-1] == "" and len(turns) == len(expected) + 1  # each turn ends with its end-of-turn token
        # the template's empty think block aside, each trained turn is the teacher's action
        assert [turn.removeprefix("<think>\n\n</think>\n\n") for turn in turns[:-1]] == expected
        # and the observations (the terminal screens) are not trained: the first one shows the commands ran
        screens = [m["content"] for m in record["messages"][1:] if m["role"] == "user"]
        assert screens and all(screen not in trained for screen in screens)


# ----------------------------------------------------------------- deep tasks: the teacher reads the screen (slow)

@pytest.mark.slow
@pytest.mark.parametrize("agent", ["terminus-2", "bash-tool"])
def test_the_deep_teacher_reads_each_screen_in_both_harnesses(tmp_path, agent):
    """`--collect` on one instance of every deep family, with mistakes: every trial solved, one command an action,
    the commands those of the world's solution (plus the mistyped ones), the summary by family."""
    from harbor_tasks.families import SETS
    from harbor_tasks.generate import generate
    from harbor_tasks.solution import solution_lines

    if not HARBOR.exists():
        pytest.fail(f"{HARBOR} missing: `make test` creates it (bash eval/setup_harbor.sh)")
    deep = SETS["deep"]
    tasks = generate(tmp_path / "tasks", 41, len(deep), deep)
    result = run([sys.executable, "-m", "eval.scripted_teacher", "--tasks", str(tmp_path / "tasks"), "--collect",
                  str(tmp_path / "jobs"), "--agent", agent, "--mistakes", "0.3", "--concurrency", "8"], timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert "solved by family: " + ", ".join(f"{f} 1/1" for f in sorted(deep)) in result.stderr
    assert "the teacher failed" not in result.stderr
    results = json.loads((tmp_path / "jobs" / "eval_results.json").read_text())
    assert results["metrics"]["mean_reward"] == 1.0 and results["metrics"]["exceptions"] == {}
    job = Path(results["harbor_job_dir"])
    typed_wrong = 0
    for task in tasks:
        trajectory = json.loads(next(job.glob(f"{task.name}__*/agent/trajectory.json")).read_text())
        calls = [call["arguments"] for step in trajectory["steps"] for call in step.get("tool_calls") or []]
        commands = [(c["keystrokes"].rstrip("\n") if agent == "terminus-2" else c["command"]) for c in calls
                    if c.get("keystrokes") or c.get("command")]
        solution = [line for line in solution_lines((task / "solution" / "solve.sh").read_text())
                    if not line.startswith("cd ")]
        assert [c for c in commands if c in solution] == solution, (task.name, commands)
        typed_wrong += len(commands) - len(solution)
    assert typed_wrong >= 2  # the mistakes were made, and recovered from


@pytest.mark.slow
def test_the_teacher_passes_every_round_of_multi_round_tasks_in_harbor(tmp_path):
    """Harbor's multi-step trials (a new Terminus-2 chat each round, one workspace): the teacher knows each round by
    its request and passes it; the eval reports MT@k, the Case score and the rounds reached."""
    from harbor_tasks.families import SETS
    from harbor_tasks.generate import generate

    if not HARBOR.exists():
        pytest.fail(f"{HARBOR} missing: `make test` creates it (bash eval/setup_harbor.sh)")
    generate(tmp_path / "tasks", 43, 2 * len(SETS["multi-round"]), SETS["multi-round"])
    result = run([sys.executable, "-m", "eval.scripted_teacher", "--tasks", str(tmp_path / "tasks"), "--collect",
                  str(tmp_path / "jobs"), "--mistakes", "0.2"], timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    metrics = json.loads((tmp_path / "jobs" / "eval_results.json").read_text())["metrics"]
    assert metrics["mean_reward"] == 1.0 and metrics["exceptions"] == {}
    assert metrics["mt_at_k"] == {"1": 1.0} and metrics["case_score"] == 1.0 and metrics["rounds_reached"] == 3.0
