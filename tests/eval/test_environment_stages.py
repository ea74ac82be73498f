"""Stages 2-3 of environments from trajectories (eval/from_trajectories.py): a model on loopback playing completion,
tests and judge (what it may write, what it is never shown, what is rejected), the source stand-in on a teacher's
deep jobs, and a dead endpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import run, scripted_teacher_job
from fastapi import FastAPI
from servers import ServerThread

from eval.from_trajectories import main

REPO = Path(__file__).resolve().parents[2]


def _call(i: int, name: str, **args) -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


CHAT = {"metadata": {"source_trajectory_uid": "ops-1"}, "messages": [
    {"role": "user", "content": "Write a summary of the config into summary.txt.\nWorking directory: /srv/app"},
    {"role": "assistant", "content": "", "tool_calls": [_call(1, "bash", command="cat config.ini")]},
    {"role": "tool", "tool_call_id": "c1", "content": "[job]\nname = nightly"},
    {"role": "assistant", "content": "", "tool_calls": [_call(2, "bash", command="head -n 1 notes.txt")]},
    {"role": "tool", "tool_call_id": "c2", "content": "first note"},
    {"role": "assistant", "content": "", "tool_calls": [_call(3, "bash", command="python3 tools/summarize.py")]},
    {"role": "tool", "tool_call_id": "c3", "content": "ok"},
    {"role": "assistant", "content": "", "tool_calls": [_call(4, "write_file", path="summary.txt",
                                                            content="FINAL-ANSWER-7431\n")]},
    {"role": "tool", "tool_call_id": "c4", "content": "written"}]}


def model_server(answers: dict, seen: list):
    """An OpenAI-compatible stand-in that answers each role's prompt with answers[role] (a dict, or raw text)."""
    app = FastAPI()

    @app.get("/v1/models")
    def models():
        return {"object": "list", "data": [{"id": "m", "object": "model"}]}

    @app.post("/v1/chat/completions")
    def chat(body: dict):
        prompt = body["messages"][0]["content"]
        role = ("completion" if prompt.startswith("You rebuild") else "tests" if prompt.startswith("Write the checks")
                else "judge")
        seen.append((role, prompt))
        answer = answers[role]
        text = answer if isinstance(answer, str) else f"```json\n{json.dumps(answer)}\n```"
        return {"choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]}

    return ServerThread(app)


GOOD = {"completion": {"files": {"/srv/app/tools/summarize.py": "print('ok')\n",
                                 "notes.txt": "first note\nsecond note\n",
                                 "/srv/app/summary.txt": "FINAL-ANSWER-7431\n",
                                 "/srv/app/config.ini": "[job]\nname = changed\n",
                                 "../../../../../../etc/x": "y",
                                 "/srv/app/config.ini/inner.txt": "under a file"}},
        "tests": {"checks": ["grep -q nightly summary.txt"]},
        "judge": {"sufficient": True, "reason": "the config and the script are there"}}


def run_stages(tmp_path: Path, answers: dict) -> tuple[dict, list, Path]:
    source = tmp_path / "chat.jsonl"
    source.write_text(json.dumps(CHAT) + "\n")
    seen: list = []
    server = model_server(answers, seen)
    url = server.start()
    try:
        out = tmp_path / "out"
        assert main(["--trajectories", str(source), "--out", str(out), "--model_url", f"{url}/v1", "--model", "m",
                     "--no_check", "--json"]) == 0
    finally:
        server.stop()
    return json.loads((out / "report.json").read_text()), seen, out


def test_a_model_completes_writes_tests_and_judges_within_the_rules(tmp_path):
    report, seen, out = run_stages(tmp_path, GOOD)
    stages = report["stages_2_3"]
    assert stages == {"roles": "endpoint", "kept": 1, "rejected": {}, "infra_failures": {}}
    task = out / "ops-1"
    info = json.loads((task / "rebuild" / "rebuild.json").read_text())
    completion = info["stages"]["completion"]
    # `..` folds at the sandbox's /, as a shell's does: /etc/x of the task's image, never a host path
    assert completion["written"] == ["/etc/x", "/srv/app/notes.txt", "/srv/app/tools/summarize.py"]
    assert completion["refused"] == {"/srv/app/summary.txt": "the agent created it",
                                     "/srv/app/config.ini": "changes what the trajectory showed",
                                     "/srv/app/config.ini/inner.txt": "a file and a folder at once"}
    files = task / "environment" / "files"
    assert (files / "srv/app/config.ini").read_text() == "[job]\nname = nightly\n"
    assert not (files / "srv/app/summary.txt").exists() and (files / "etc" / "x").read_text() == "y"
    assert not [p for p in tmp_path.rglob("x") if out not in p.parents]
    assert "COPY files/etc/ /etc/" in (task / "environment" / "Dockerfile").read_text()
    assert "grep -q nightly summary.txt" in (task / "tests" / "test.sh").read_text()
    assert info["stages"]["judge"] == {"sufficient": True, "reason": "the config and the script are there"}
    assert [role for role, _ in seen] == ["completion", "tests", "judge"]
    for role, prompt in seen:  # nobody sees the agent's answer; the test writer and judge not the trajectory either
        assert "FINAL-ANSWER-7431" not in prompt, role
        if role != "completion":
            assert "tools/summarize.py --" not in prompt and "python3 tools/summarize.py" not in prompt


@pytest.mark.parametrize("answers, reason", [
    ({**GOOD, "tests": {"checks": ["test -f config.ini"]}}, "the tests pass before any work"),
    ({**GOOD, "judge": {"sufficient": False, "reason": "no data"}}, "judged insufficient: no data"),
    ({**GOOD, "completion": "I think the files are fine."}, "the answer is not a JSON object"),
    ({**GOOD, "tests": {"checks": []}}, 'tests: "checks" is not a non-empty list of bash conditions'),
])
def test_what_is_rejected_is_moved_aside_with_its_reason(tmp_path, answers, reason):
    report, _, out = run_stages(tmp_path, answers)
    assert report["stages_2_3"]["kept"] == 0 and report["stages_2_3"]["rejected"]["ops-1"].startswith(reason)
    assert not (out / "ops-1").exists() and (out / "rejected" / "ops-1" / "task.toml").is_file()


def test_a_dead_endpoint_is_one_line_naming_it(tmp_path, capsys):
    source = tmp_path / "chat.jsonl"
    source.write_text(json.dumps(CHAT) + "\n")
    assert main(["--trajectories", str(source), "--out", str(tmp_path / "out"), "--model_url",
                 "http://127.0.0.1:9/v1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--model_url http://127.0.0.1:9/v1: no answer" in err
    assert not (tmp_path / "out").exists()


def test_the_source_stand_in_keeps_deep_tasks_its_own_solution_passes(tmp_path_factory, capsys):
    root = tmp_path_factory.mktemp("deep")
    job = scripted_teacher_job(root, 6, 2, ["log-trace", "json-join"])
    out = root / "out"
    assert main(["--trajectories", str(job), "--out", str(out), "--stand_in", "source", "--no_check", "--json"]) == 0
    stages = json.loads(capsys.readouterr().out)["stages_2_3"]
    assert stages["roles"].startswith("scripted stand-in") and stages["kept"] == 2, stages
    for task in (p for p in out.iterdir() if (p / "task.toml").is_file()):
        source = root / "tasks" / task.name.split("__")[0]
        assert (task / "environment" / "Dockerfile").read_text() == (source / "environment" / "Dockerfile").read_text()
        info = json.loads((task / "rebuild" / "rebuild.json").read_text())
        assert info["stages"]["judge"]["sufficient"] is True
    # re-solving: the kept tasks are a suite the scripted teacher solves (its deep policy from the source's metadata)
    result = run([sys.executable, "-m", "eval.scripted_teacher", "--tasks", str(out), "--collect", str(root / "again")])
    assert result.returncode == 0 and "solved 1.0" in result.stderr, result.stderr[-3000:]
