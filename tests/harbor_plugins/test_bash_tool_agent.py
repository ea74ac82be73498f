"""The bash-tool harness as an eval agent (harbor_plugins/bash_tool_agent.py, `eval.run --agent bash-tool`): one
definition shared with the agentic trainer (common/bash_harness.py), the scripted teacher answering in it, real Harbor
jobs in the local sandbox through the teacher and through a served checkpoint, and the trajectories as SFT records."""

import inspect
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, run
from servers import ServerThread

from common.bash_harness import BASH_TOOL, FINAL_ANSWER, call_error, clip, format_output, harness_prompt
from episodes.local import EpisodeLimits, TaskEnvironment, episode_reward, task_prompt
from eval.scripted_teacher import Teacher, create_app, load_tasks, solution_lines
from harbor_tasks.generate import generate
from harbor_tasks.solution import HEREDOC_END, bash_tool_commands

HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"
TERMINAL = REPO / "eval" / "tasks" / "terminal"
FAMILIES = "write-value,count-lines,rename-ext"
# commands whose output shows every rule of the tool's output: stdout and stderr, an exit code, a cut, nothing
PROBE_COMMANDS = ["printf 'to stdout\\n'; printf 'to stderr\\n' >&2", "seq 1 3000", "cat /app/no-such-file",
                  "pwd", "true"]


def tool_request(task, calls_done: int = 0, tools=(BASH_TOOL,)) -> dict:
    """A bash-tool agent's request after `calls_done` tool calls (their output elided)."""
    messages = [{"role": "user", "content": harness_prompt(task.instruction)}]
    for i in range(calls_done):
        messages += [{"role": "assistant", "content": None, "tool_calls": [{"id": f"call_{i}", "type": "function",
                      "function": {"name": "bash", "arguments": "{}"}}]},
                     {"role": "tool", "tool_call_id": f"call_{i}", "content": "(no output)"}]
    return {"model": "teacher", "messages": messages, "tools": list(tools)}


# ------------------------------------------------------------------------------ one definition, TRL's own

def test_the_tool_schema_is_what_trl_derives_from_the_trainers_tool(tokenizer):
    from transformers.utils import get_json_schema

    # TRL's environment_factory hands the bound method to the chat template, which derives this schema from it
    assert get_json_schema(TaskEnvironment.bash) == BASH_TOOL == get_json_schema(TaskEnvironment().bash)
    prompt = task_prompt(TERMINAL / "backup-cron-crlf")
    rendered = [tokenizer.apply_chat_template(prompt, tools=tools, tokenize=False, add_generation_prompt=True,
                                              enable_thinking=False)
                for tools in ([BASH_TOOL], [TaskEnvironment().bash])]
    assert rendered[0] == rendered[1] and '"name": "bash"' in rendered[0]


@pytest.mark.parametrize("python", [sys.executable, str(REPO / ".venv-harbor" / "bin" / "python")],
                         ids=["training-venv", "harbor-venv"])
def test_the_harness_imports_only_the_standard_library(python):
    if not Path(python).exists():
        pytest.skip(f"{python} missing")
    script = ("import json, sys; sys.path.insert(0, sys.argv[1]); before = set(sys.modules); import common.bash_harness; "
              "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before} "
              "- set(sys.stdlib_module_names) - {'common'})))")
    # -S: no site-packages, so a third-party import fails or shows up
    outside = subprocess.run([python, "-S", "-c", script, str(REPO)], capture_output=True, text=True, timeout=60,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert outside.returncode == 0 and json.loads(outside.stdout) == [], outside.stderr[-2000:]


def test_a_call_the_tool_cannot_take_gets_trls_error():
    from trl import GRPOTrainer

    env = TaskEnvironment()  # no sandbox: a call with bad arguments fails before it would need one
    for arguments in ({"cmd": "ls"}, {}, {"command": "ls", "timeout": 3}):
        with pytest.raises(TypeError) as raised:
            env.bash(**arguments)
        assert call_error("bash", arguments) == str({"error": str(raised.value)})  # TRL's tool message
    assert 'raise ValueError(f"Tool {name} not found.")' in inspect.getsource(GRPOTrainer)
    assert call_error("python", {"code": "1"}) == str({"error": "Tool python not found."})
    assert call_error("bash", {"command": "ls"}) is None


def test_output_formatting():
    assert format_output("a\n", "b\n", 0, 100) == "a\nb\n"
    assert format_output(None, "oops\n", 2, 100) == "oops\n\n[exit code 2]"
    assert format_output("", None, 0, 100) == "(no output)"
    long = format_output("x" * 1000, "", 0, 300)
    assert long == clip("x" * 1000, 300) and long.startswith("x" * 200) and "[... 700 characters cut ...]" in long


# ------------------------------------------------------------------------------ the teacher in this harness

@pytest.fixture(scope="module")
def teacher():
    return Teacher(load_tasks(TERMINAL))


def test_the_teacher_answers_tool_requests_with_one_call_per_command_then_a_sentence(teacher):
    task = next(t for t in teacher.tasks if t.name == "backup-cron-crlf")
    commands = bash_tool_commands(task.script)
    assert len(commands) > 1 and not any(c.startswith('cd "${APP_DIR') for c in commands)
    for turn, command in enumerate(commands):
        choice = teacher.answer(tool_request(task, turn))["choices"][0]
        assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
        [call] = choice["message"]["tool_calls"]
        assert call["type"] == "function" and call["function"]["name"] == "bash" and call["id"] == f"call_{turn}"
        assert json.loads(call["function"]["arguments"]) == {"command": command}
    last = teacher.answer(tool_request(task, len(commands)))["choices"][0]
    assert last["finish_reason"] == "stop" and last["message"] == {"role": "assistant", "content": FINAL_ANSWER}


def test_a_script_with_multi_line_constructs_is_one_call(teacher):
    task = next(t for t in teacher.tasks if t.name == "csv-etl-quoting")
    assert bash_tool_commands(task.script) == [f"bash <<'{HEREDOC_END}'\n{task.script}{HEREDOC_END}"]
    # each call is a new shell in the workdir: a command runs where the script would run it
    script = "\n".join(["#!/bin/bash", "set -e", 'cd "${APP_DIR:-/app}"', "ls", "cd work", "ls", "cd sub", "touch x",
                        'cd "${APP_DIR:-/app}"', "rm y"])
    assert bash_tool_commands(script) == ["ls", "cd work && ls", "cd work && cd sub && touch x", "rm y"]
    deploy = next(t for t in teacher.tasks if t.name == "deploy-perms-config")  # its solve.sh: cd "${APP_DIR}/deploy"
    assert all(c.startswith('cd "${APP_DIR:-/app}/deploy" && ') for c in bash_tool_commands(deploy.script))
    assert solution_lines("#!/bin/bash\n# note\nls\n") == ["ls"]


def test_bad_tool_requests_are_400(teacher):
    from fastapi.testclient import TestClient

    client = TestClient(create_app(teacher))
    task = teacher.tasks[0]
    for tools, words in [("bash", "tools must be a list"), ([{"type": "function"}], "tools[0] must be"),
                         ([{"type": "function", "function": {"name": "python"}}], "tools has none of that name")]:
        response = client.post("/v1/chat/completions", json={**tool_request(task), "tools": tools})
        assert response.status_code == 400 and words in response.json()["error"]["message"], response.text
    bad_choice = client.post("/v1/chat/completions", json={**tool_request(task), "tool_choice": "required"})
    assert bad_choice.status_code == 400 and "tool_choice" in bad_choice.json()["error"]["message"]


@pytest.mark.parametrize("name, n_calls", [("csv-etl-quoting", 1), ("deploy-perms-config", 7)])
def test_oracle_episodes_of_builtin_tasks_are_solved(tmp_path, name, n_calls):
    """A heredoc solution runs as one call; one that works in a subfolder runs every command there."""
    from episodes.oracle import oracle_episode

    task = tmp_path / name
    shutil.copytree(TERMINAL / name, task)
    record = oracle_episode(task, TaskEnvironment())
    calls = [m for m in record["messages"] if m.get("tool_calls")]
    assert len(calls) == n_calls and record["metadata"]["reward"] == 1.0


# --------------------------------------------------------------------------------------- eval.run wiring

def test_eval_run_gives_the_agent_terminus_2s_model_settings(tmp_path):
    from eval.run import RemoteModel, harbor_command
    from eval.settings import EvalSettings, choice_error
    from trainers.eval_callback import EvalArguments

    if not HARBOR.exists():
        pytest.skip(f"{HARBOR} missing")
    settings = EvalSettings(suite=str(tmp_path), agent="bash-tool", temperature=0.2, max_tokens=64, max_turns=5)
    command = harbor_command(settings, "job", tmp_path, RemoteModel("http://127.0.0.1:9/v1", "ckpt"))
    assert command[command.index("-a") + 1] == "harbor_plugins.bash_tool_agent:BashToolAgent"
    assert command[command.index("-m") + 1] == "hosted_vllm/ckpt"
    kwargs = [command[i + 1] for i, arg in enumerate(command) if arg == "--ak"]
    assert kwargs == ["api_base=http://127.0.0.1:9/v1", "temperature=0.2", "max_tokens=64", "max_turns=5"]
    # the agent calls api_base itself, so Harbor maps no provider (that mapping imports LiteLLM: ~8 s a job)
    assert "--skip-model-parsing-and-provider-mapping" in command
    # the recipes' eval_agent key: one definition, so the callback's evals take the same agent
    arguments = EvalArguments(eval_suites=["builtin:terminal"], eval_agent="bash-tool")
    assert choice_error(arguments.settings("builtin:terminal")) is None
    assert arguments.cli_args("builtin:terminal")[:4] == ["--suite", "builtin:terminal", "--agent", "bash-tool"]


# ------------------------------------------------------------------------- Harbor jobs (slow)

def make_suite(root: Path) -> list[Path]:
    """Generated tasks, plus a copy of one whose solution first runs PROBE_COMMANDS (it still solves the task)."""
    generate(root, 31, 3, FAMILIES.split(","))
    source = sorted(root.iterdir())[0]
    probe = root / f"probe-{source.name}"
    shutil.copytree(source, probe)
    # its own instruction (the teacher finds a task by the longest instruction in the prompt)
    instruction = probe / "instruction.md"
    instruction.write_text(instruction.read_text().rstrip("\n") + " First look at what the shell prints.\n")
    solve = probe / "solution" / "solve.sh"
    lines = solve.read_text().splitlines()
    cd = lines.index('cd "${APP_DIR:-/app}"')
    solve.write_text("\n".join(lines[:cd + 1] + PROBE_COMMANDS + lines[cd + 1:]) + "\n")
    return sorted(root.iterdir())


@pytest.fixture(scope="module")
def teacher_job(tmp_path_factory):
    if not HARBOR.exists():
        pytest.fail(f"{HARBOR} missing: `make test` creates it (bash eval/setup_harbor.sh)")
    root = tmp_path_factory.mktemp("bash-tool")
    tasks = make_suite(root / "tasks")
    with ServerThread(create_app(Teacher(load_tasks(root / "tasks")))) as url:
        result = run([sys.executable, "-m", "eval.run", "--model_url", f"{url}/v1", "--model", "teacher",
                      "--suite", str(root / "tasks"), "--agent", "bash-tool", "--jobs_dir", str(root / "jobs")],
                     timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    results = json.loads((root / "jobs" / "eval_results.json").read_text())
    trajectories = {path.parent.parent.name.split("__")[0]: json.loads(path.read_text())
                    for path in Path(results["harbor_job_dir"]).glob("*/agent/trajectory.json")}
    return {task.name: task for task in tasks}, results, trajectories


@pytest.mark.slow
def test_the_teacher_scores_one_on_every_task_through_the_bash_tool_agent(teacher_job):
    tasks, results, trajectories = teacher_job
    assert results["agent"] == "bash-tool" and results["model"] == "teacher"
    metrics = results["metrics"]
    assert metrics["n_trials"] == len(tasks) == 4 and metrics["exceptions"] == {}
    assert metrics["mean_reward"] == 1.0 and all(task["reward"] == 1.0 for task in results["tasks"])
    assert sorted(trajectories) == sorted(tasks)
    for trajectory in trajectories.values():
        assert trajectory["agent"]["name"] == "bash-tool" and trajectory["agent"]["tool_definitions"] == [BASH_TOOL]
        assert trajectory["final_metrics"]["total_prompt_tokens"] > 0


@pytest.mark.slow
def test_the_agent_prompts_and_answers_as_the_trainer_does(teacher_job):
    """The agent's one user message is the trainer's prompt, and each call's output is what TaskEnvironment.bash
    returns for the same commands in the same task (in the trainer's own sandbox, driven without Harbor)."""
    tasks, _, trajectories = teacher_job
    env = TaskEnvironment(EpisodeLimits())
    for name, trajectory in trajectories.items():
        steps = trajectory["steps"]
        assert steps[0]["source"] == "user" and steps[0]["message"] == task_prompt(tasks[name])[0]["content"]
        calls = []  # (command, output) of every tool call, in order
        for step in steps[1:]:
            results = (step.get("observation") or {}).get("results") or []
            calls += [(call["arguments"]["command"], result["content"])
                      for call, result in zip(step.get("tool_calls") or [], results, strict=True)]
        assert [command for command, _ in calls] == bash_tool_commands(
            (tasks[name] / "solution" / "solve.sh").read_text())
        env.reset(task_dir=str(tasks[name]))
        assert [env.bash(command) for command, _ in calls] == [output for _, output in calls]
        assert episode_reward(env) == 1.0
        if name.startswith("probe-"):
            outputs = dict(calls)
            assert outputs[PROBE_COMMANDS[0]] == "to stdout\nto stderr\n"
            assert "characters cut" in outputs["seq 1 3000"] and outputs["seq 1 3000"].endswith("3000\n")
            assert outputs["cat /app/no-such-file"].endswith("No such file or directory\n\n[exit code 1]")
            assert outputs["pwd"] == "/app\n" and outputs["true"] == "(no output)"


@pytest.mark.slow
def test_teacher_trajectories_are_sft_records_that_train_only_the_assistant_turns(teacher_job, tokenizer):
    from chat_corpus.masking import tokenize_chat, training_chat_template
    from chat_corpus.sources import Source, load_source

    tasks, results, _ = teacher_job
    loaded = load_source(Source(results["harbor_job_dir"]), "task")
    assert not loaded.problems and len(loaded.records) == len(tasks)
    template = training_chat_template(tokenizer)
    for record in loaded.records:
        assert record["tools"] == [BASH_TOOL]
        assistants = [m for m in record["messages"] if m["role"] == "assistant"]
        expected = [''.join('<tool_call>\n{"name": "bash", "arguments": '
                            + json.dumps(call["function"]["arguments"], ensure_ascii=False) + '}\n</tool_call>'
                            for call in m["tool_calls"]) if m.get("tool_calls") else m["content"]
                    for m in assistants]
        assert expected[-1] == FINAL_ANSWER and len(expected) > 1
        input_ids, mask = tokenize_chat(tokenizer, template, record)
        trained = tokenizer.decode([t for t, m in zip(input_ids, mask) if m], skip_special_tokens=False)
        turns = trained.split("<|im_end|>\n")
        assert turns[-1] == "" and [turn.removeprefix("<think>\n\n</think>\n\n") for turn in turns[:-1]] == expected
        untrained = tokenizer.decode([t for t, m in zip(input_ids, mask) if not m], skip_special_tokens=False)
        for tool in (m for m in record["messages"] if m["role"] == "tool"):
            assert f"<tool_response>\n{tool['content']}\n</tool_response>" in untrained  # the output: never trained
        assert "<tool_response>" not in trained and record["messages"][0]["content"] not in trained


@pytest.mark.slow
def test_model_errors_end_the_trial_as_agent_failures(tmp_path):
    """A context overflow (vLLM's 400) and a server that keeps failing (500) after the first tool call: each trial
    ends in the agent's exception, unscored (reward missing: 0 in the mean), as Terminus-2's do; the trajectory up to
    there is written and the tokens counted."""
    from common.errors import RequestError
    from eval.openai_api import create_app as openai_app

    generate(tmp_path / "tasks", 51, 2, ["write-value", "count-lines"])
    teacher = Teacher(load_tasks(tmp_path / "tasks"))

    async def complete(body):
        task = teacher.match(body["messages"][0]["content"])
        if any(m["role"] == "tool" for m in body["messages"]):
            if task.name.startswith("write-value"):
                raise RequestError("This model's maximum context length is 256 tokens. However, you requested 300 "
                                   "tokens. Please reduce the length of the messages or completion.")
            raise RuntimeError("the server broke")  # a 500
        return teacher.answer(body)

    app = openai_app("failing", lambda: {"status": "ok"}, teacher.models, complete)
    with ServerThread(app) as url:
        result = run([sys.executable, "-m", "eval.run", "--model_url", f"{url}/v1", "--model", "teacher", "--suite",
                      str(tmp_path / "tasks"), "--agent", "bash-tool", "--jobs_dir", str(tmp_path / "jobs")])
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    results = json.loads((tmp_path / "jobs" / "eval_results.json").read_text())
    assert results["metrics"]["exceptions"] == {"ContextLengthExceededError": 1, "ModelCallError": 1}
    assert results["metrics"]["mean_reward"] == 0.0 and all(task["reward"] is None for task in results["tasks"])
    for trial in Path(results["harbor_job_dir"]).glob("*__*"):
        trajectory = json.loads((trial / "agent" / "trajectory.json").read_text())
        assert [step["source"] for step in trajectory["steps"]] == ["user", "agent"]  # the call that ran, kept
        assert trajectory["steps"][1]["observation"]["results"][0]["content"] == "(no output)"
        agent_result = json.loads((trial / "result.json").read_text())["agent_result"]
        assert agent_result["n_input_tokens"] > 0 and agent_result["metadata"]["ended_by"] == "interrupted"


@pytest.mark.slow
def test_the_teacher_collects_bash_tool_trajectories(tmp_path):
    generate(tmp_path / "tasks", 61, 1, ["sum-numbers"])
    result = run([sys.executable, "-m", "eval.scripted_teacher", "--tasks", str(tmp_path / "tasks"), "--collect",
                  str(tmp_path / "jobs"), "--agent", "bash-tool"])
    assert result.returncode == 0 and "solved 1.0" in result.stderr, result.stderr[-3000:]
    [trajectory] = (tmp_path / "jobs").glob("*/*/agent/trajectory.json")
    assert json.loads(trajectory.read_text())["agent"]["name"] == "bash-tool"


# ------------------------------------------------- a served checkpoint that acts in this harness (slow)

def memorize(model_path: str, out: Path, turns: list[tuple[list[dict], str]], max_steps: int = 300,
             done_loss: float = 0.01) -> int:
    """Teach the tiny model each (conversation so far, assistant answer) pair of `turns` by heart, rendered exactly as
    the CPU server renders the bash-tool agent's requests (the tool in the prompt, thinking off), and save it. Stops
    when every answer's loss is under `done_loss`; returns the steps taken."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    examples = []
    for messages, answer in turns:
        prompt = tokenizer.apply_chat_template(messages, tools=[BASH_TOOL], tokenize=False, add_generation_prompt=True,
                                               enable_thinking=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
        examples.append((torch.tensor([prompt_ids + answer_ids]),
                         torch.tensor([[-100] * len(prompt_ids) + answer_ids])))
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for step in range(1, max_steps + 1):
        losses = []
        for input_ids, labels in examples:
            loss = model(input_ids=input_ids, labels=labels).loss
            loss.backward()
            losses.append(loss.item())
        optimizer.step()
        optimizer.zero_grad()
        if max(losses) < done_loss:
            break
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return step


@pytest.fixture(scope="module")
def taught_checkpoint(tmp_path_factory, tiny_model_path):
    """A tiny checkpoint that, in the bash-tool harness, calls the tool with a count-lines task's solution and then
    answers: its oracle episode (real tool output) learned turn by turn."""
    from episodes.oracle import oracle_episode

    root = tmp_path_factory.mktemp("taught")
    generate(root / "tasks", 41, 1, ["count-lines"])
    task = next((root / "tasks").iterdir())
    messages = oracle_episode(task, TaskEnvironment())["messages"]
    turns = []
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            answer = FINAL_ANSWER if not message.get("tool_calls") else "".join(
                '<tool_call>\n{"name": "bash", "arguments": ' + call["function"]["arguments"] + '}\n</tool_call>'
                for call in message["tool_calls"])
            turns.append((messages[:i], answer))
    checkpoint = root / "run" / "checkpoint-1"
    print(f"memorized {len(turns)} turns in {memorize(tiny_model_path, checkpoint, turns)} steps")
    return checkpoint, task, messages


@pytest.mark.slow
def test_the_cpu_server_returns_the_checkpoints_tool_call_as_an_openai_tool_call(taught_checkpoint):
    import httpx

    from eval.serve import serve_checkpoint

    checkpoint, task, messages = taught_checkpoint
    body = {"messages": messages[:1], "tools": [BASH_TOOL], "temperature": 0, "max_tokens": 128,
            "chat_template_kwargs": {"enable_thinking": False}}
    with serve_checkpoint(str(checkpoint), backend="cpu", max_model_len=4096, startup_timeout=120) as served:
        url = f"{served.base_url}/chat/completions"
        choice = httpx.post(url, json=body, timeout=120).json()["choices"][0]
        as_text = httpx.post(url, json={**body, "tool_choice": "none"}, timeout=120).json()["choices"][0]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "bash"
    taught = json.loads(messages[1]["tool_calls"][0]["function"]["arguments"])
    assert json.loads(call["function"]["arguments"]) == taught
    # tool_choice "none": the same generation, left as text (decoded as any answer: the tiny tokenizer's
    # <tool_call> is a special token, so it goes, as vLLM's decoding would drop it)
    assert as_text["finish_reason"] == "stop" and "tool_calls" not in as_text["message"]
    assert as_text["message"]["content"].strip() == json.dumps(
        {"name": "bash", "arguments": json.loads(call["function"]["arguments"])})


@pytest.mark.slow
def test_eval_run_scores_a_checkpoint_in_the_harness_it_was_taught(taught_checkpoint):
    checkpoint, task, messages = taught_checkpoint
    result = run([sys.executable, "-m", "eval.run", "--checkpoint", str(checkpoint), "--suite", str(task.parent),
                  "--agent", "bash-tool", "--temperature", "0", "--max_tokens", "128", "--max_turns", "4"], timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    results = json.loads((checkpoint / "eval_results.json").read_text())
    assert results["agent"] == "bash-tool" and results["global_step"] == 1 and results["model"] == "run-checkpoint-1"
    assert results["metrics"]["mean_reward"] == 1.0 and results["metrics"]["exceptions"] == {}
    [trajectory] = Path(results["harbor_job_dir"]).glob("*/agent/trajectory.json")
    steps = json.loads(trajectory.read_text())["steps"]
    assert [step.get("tool_calls", [{}])[0].get("arguments") for step in steps[1:]] == [
        json.loads(messages[1]["tool_calls"][0]["function"]["arguments"]), None]
    assert steps[-1]["message"] == FINAL_ANSWER
