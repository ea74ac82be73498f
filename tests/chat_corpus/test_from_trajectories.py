"""Environments rebuilt from trajectories (chat_corpus/from_trajectories.py, Stage 1): the scripted teacher's real
Harbor jobs on deep tasks, hand-written tool-calling chats for each rule, bad records, and an attacker's paths."""

from __future__ import annotations

import json

import pytest
from conftest import scripted_teacher_job

from chat_corpus.from_trajectories import rebuild
from eval.from_trajectories import main


@pytest.fixture(scope="module")
def deep_job(tmp_path_factory):
    """Three deep tasks solved by the scripted teacher through Harbor's Terminus-2 (`--collect`)."""
    root = tmp_path_factory.mktemp("deep")
    return root / "tasks", scripted_teacher_job(root, 5, 3, ["find-owner", "hint-chain", "csv-header"])


def test_a_teachers_trajectories_become_tasks_with_what_they_read(deep_job, tmp_path):
    tasks, job = deep_job
    report = rebuild([str(job)], tmp_path / "out", progress=False)
    trials = sorted(p.name for p in job.glob("*__*"))
    assert report["rebuilt"] == 3 and sorted(report["tasks"]) == trials and not report["skipped"]
    for trial in trials:
        task = tmp_path / "out" / trial
        source = tasks / trial.split("__")[0]
        info = json.loads((task / "rebuild" / "rebuild.json").read_text())
        assert (task / "instruction.md").read_text().strip() == (source / "instruction.md").read_text().strip()
        assert info["source_task"] == str(source) and (task / "tests" / "test.sh").is_file()
        files = task / "environment" / "files"
        for path in info["recovered"]:  # what a whole read showed is the file, byte for byte
            assert path.startswith("/app/")
            assert (files / path[1:]).read_text() == (source / "environment" / path[1:]).read_text(), path
        for path in info["truncated"]:  # a partial read: the lines shown, from the first
            shown = (files / path[1:]).read_text()
            assert (source / "environment" / path[1:]).read_text().startswith(shown) and shown.count("\n") == 1
        for path in info["created"]:  # the agent's files: kept aside, never in the environment
            assert not (files / path[1:]).exists()
        family = trial.split("__")[0].rsplit("-", 2)[0]  # <family>-<seed>-<index>__<trial>
        check = info["check"]
        if family == "find-owner":  # grep -rl, cat the file it named, echo the owner into owner.txt
            assert len(info["recovered"]) == 1 and info["created"] == ["/app/owner.txt"]
            owner = (task / "rebuild" / "created" / "app" / "owner.txt").read_text()
            assert owner.strip() and owner.strip() in (files / info["recovered"][0][1:]).read_text()
            assert check["fidelity"] == 1.0 and check["own_commands_pass"] is True
        elif family == "hint-chain":  # a chain of cats: every file of it recovered, every look reproduced
            assert len(info["recovered"]) >= 2 and check["fidelity"] == 1.0 and check["own_commands_pass"] is True
        else:  # csv-header: `grep -l`, one header's columns numbered, a sum: no look shows a file's lines
            assert family == "csv-header" and not info["truncated"] and not info["recovered"]
            assert {m["why"] for m in info["missing"]} == {"named by a command, never shown"}
    assert report["source_known"] == 3 and report["fidelity"] is not None
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == report


def _chat(messages: list[dict], uid: str | None = "t-1") -> dict:
    return {"messages": messages, **({"metadata": {"source_trajectory_uid": uid}} if uid else {})}


def _call(i: int, name: str, **args) -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _tool(i: int, content: str) -> dict:
    return {"role": "tool", "tool_call_id": f"c{i}", "content": content}


def _turns(*calls: tuple[dict, str]) -> list[dict]:
    out = []
    for call, result in calls:
        out += [{"role": "assistant", "content": "", "tool_calls": [call]}, _tool(int(call["id"][1:]), result)]
    return out


WORKED = _chat([
    {"role": "system", "content": "You are an agent. Secret system words."},
    {"role": "user", "content": "Fix the report job.\nWorking directory: /srv/app"},
    *_turns((_call(1, "bash", command="cat config.ini"), "[job]\nname = nightly"),
            (_call(2, "read_file", path="src/main.py"), "     1\timport os\n     2\tprint(os.getcwd())\n"),
            (_call(3, "bash", command="head -n 2 notes.txt"), "line one\nline two"),
            (_call(4, "bash", command="echo done > hello.txt"), ""),
            (_call(5, "bash", command="cat hello.txt"), "done"),
            (_call(6, "write_file", path="out/report.txt", content="all good\n"), "written"),
            (_call(7, "edit_file", path="src/util.py", old_string="a", new_string="b"), "edited"),
            (_call(8, "bash", command="python3 tools/run.py --fast"), "ok")),
    {"role": "user", "content": "Also keep a copy of the config."},
    *_turns((_call(9, "bash", command="cp config.ini config.ini.bak"), ""),
            (_call(10, "bash", command="cat > app.cfg <<'EOF'\nport = 8080\nEOF"), "")),
])


def test_each_rule_of_the_replay_on_a_tool_calling_chat(tmp_path):
    source = tmp_path / "chats.jsonl"
    source.write_text(json.dumps(WORKED) + "\n")
    report = rebuild([str(source)], tmp_path / "out", progress=False)
    task = tmp_path / "out" / "t-1"
    info = json.loads((task / "rebuild" / "rebuild.json").read_text())
    files = task / "environment" / "files"
    assert info["workdir"] == "/srv/app" and info["harness"] == "tools"
    assert sorted(info["recovered"]) == ["/srv/app/config.ini", "/srv/app/src/main.py"]
    assert (files / "srv/app/config.ini").read_text() == "[job]\nname = nightly\n"
    assert (files / "srv/app/src/main.py").read_text() == "import os\nprint(os.getcwd())\n"  # numbers taken off
    assert info["truncated"] == ["/srv/app/notes.txt"]  # head -n 2 showed 2 lines: there may be more
    assert (files / "srv/app/notes.txt").read_text() == "line one\nline two\n"
    assert sorted(info["created"]) == ["/srv/app/app.cfg", "/srv/app/config.ini.bak", "/srv/app/hello.txt",
                                       "/srv/app/out/report.txt"]
    assert (task / "rebuild/created/srv/app/app.cfg").read_text() == "port = 8080\n"  # a heredoc's body
    assert (task / "rebuild/created/srv/app/hello.txt").read_text() == "done\n"
    assert (task / "rebuild/created/srv/app/config.ini.bak").read_text() == "[job]\nname = nightly\n"
    assert not (files / "srv/app/hello.txt").exists() and not (files / "srv/app/out").exists()
    missing = {m["path"]: m["why"] for m in info["missing"]}
    assert missing == {"/srv/app/src/util.py": "changed before anything showed it",
                       "/srv/app/tools/run.py": "named by a command, never shown"}
    # intent recovery: the user's own turns, in order; not the system prompt, not a tool's output
    assert (task / "instruction.md").read_text() == ("Fix the report job.\nWorking directory: /srv/app\n\n"
                                                    "Also keep a copy of the config.\n")
    assert "COPY files/srv/ /srv/" in (task / "environment" / "Dockerfile").read_text()
    check = info["check"]  # replayed in the rebuilt workspace: cat config.ini and the read come back the same
    assert check["looks_compared"] == 4 and check["looks_reproduced"] == 3, check  # cat hello.txt: also same
    assert "own_commands_pass" not in check  # no source task here: no tests
    assert report["rebuilt"] == 1


def test_a_terminus_chat_keeps_the_prompts_folder_and_marks_a_scrolled_read(tmp_path):
    first = ("You are an AI assistant...\n\nTask Description:\nCount the errors.\n\nCurrent terminal state:\n"
             "root@box:/srv/logs# ")
    action = {"analysis": "", "plan": "", "commands": [{"keystrokes": "cat log.txt\n"},
                                                        {"keystrokes": "cat big.txt\n"}], "task_complete": False}
    screen = ("New Terminal Output:\nroot@box:/srv/logs# cat log.txt\nERROR a\nok\nroot@box:/srv/logs# cat big.txt\n"
              "x\n[... output limited to 10000 bytes; 5 interior bytes omitted ...]\ny\nroot@box:/srv/logs# ")
    record = _chat([{"role": "user", "content": first}, {"role": "assistant", "content": json.dumps(action)},
                    {"role": "user", "content": screen}], uid="term")
    source = tmp_path / "t.jsonl"
    source.write_text(json.dumps(record) + "\n")
    rebuild([str(source)], tmp_path / "out", run_check=False, progress=False)
    info = json.loads((tmp_path / "out/term/rebuild/rebuild.json").read_text())
    assert info["harness"] == "terminus" and info["workdir"] == "/srv/logs"
    assert info["recovered"] == ["/srv/logs/log.txt"]
    assert (tmp_path / "out/term/environment/files/srv/logs/log.txt").read_text() == "ERROR a\nok\n"
    assert info["missing"] == [{"path": "/srv/logs/big.txt", "why": "only parts were shown, not from its first line",
                                "by": "cat big.txt"}]  # a cut output is not guessed
    assert (tmp_path / "out/term/instruction.md").read_text() == "Count the errors.\n"


def test_records_without_a_request_or_file_operations_are_skipped_and_a_bad_line_named(tmp_path, capsys):
    source = tmp_path / "mixed.jsonl"
    no_request = _chat([{"role": "user", "content": " "}, *_turns((_call(1, "bash", command="cat a.txt"), "x"))])
    no_files = _chat([{"role": "user", "content": "What time is it?"}, *_turns((_call(1, "bash", command="date"),
                                                                               "Fri"))])
    source.write_text("\n".join([json.dumps(no_request), json.dumps(no_files), "{not json",
                                 json.dumps({"text": "no chat"})]) + "\n")
    assert main(["--trajectories", str(source), "--out", str(tmp_path / "out"), "--no_check", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["rebuilt"] == 0 and report["trajectories"] == 4
    assert report["skipped"] == {"no_user_request": 1, "no_file_operations": 1, "unreadable": 2}
    assert report["unreadable"][0].startswith(f"{source}:3: invalid JSON")
    assert report["unreadable"][1].startswith(f"{source}:4: unknown record shape")
    assert main(["--trajectories", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o2")]) == 2
    assert "nope.jsonl: no such file" in capsys.readouterr().err


def test_an_attackers_paths_stay_inside_the_out_folder(tmp_path):
    out = tmp_path / "a" / "b" / "c" / "d" / "out"  # deep enough that an escape would land inside tmp_path
    out.parent.mkdir(parents=True)
    record = _chat([{"role": "user", "content": "Do it."},
                    *_turns((_call(1, "bash", command="cat ../../../../../../x/evil.txt"), "pwned"),
                            (_call(2, "write_file", path="../../../../../../../x/written.txt", content="w"), "ok"),
                            (_call(3, "read_file", path="/../../x/read.txt"), "r"))], uid="../../escape")
    source = tmp_path / "a.jsonl"
    source.write_text(json.dumps(record) + "\n")
    before = sorted(tmp_path.rglob("*"))
    report = rebuild([str(source)], out, run_check=False, progress=False)
    after = sorted(p for p in tmp_path.rglob("*") if out not in p.parents and p != out)
    assert after == before  # nothing written beside --out
    [name] = report["tasks"]
    assert name == "escape" and (out / name).is_dir()
    info = json.loads((out / name / "rebuild" / "rebuild.json").read_text())
    assert sorted(info["recovered"]) == ["/x/evil.txt", "/x/read.txt"]  # `..` folded at the root, as a shell does
    assert (out / name / "environment/files/x/evil.txt").read_text() == "pwned\n"
    assert info["created"] == ["/x/written.txt"]


def test_a_path_that_is_both_a_file_and_a_folder_is_named_not_a_crash(tmp_path):
    """A weak policy's garbage (`echo a >-183` then `echo b >-183/archive/x`, `cat` of both) makes one path a file and
    a folder at once; the first kept wins, the other is named in missing, and the next trajectory still rebuilds."""
    clash = _chat([{"role": "user", "content": "Do it.\nWorking directory: /app"},
                   *_turns((_call(1, "bash", command="echo Tartu >-183"), ""),
                           (_call(2, "bash", command="echo Gdansk >-183/archive/x"), ""),
                           (_call(3, "bash", command="cat data"), "one"),
                           (_call(4, "bash", command="cat data/inner.txt"), "two"))], uid="clash")
    fine = _chat([{"role": "user", "content": "Read it."}, *_turns((_call(1, "bash", command="cat a.txt"), "x"))],
                 uid="fine")
    source = tmp_path / "a.jsonl"
    source.write_text(json.dumps(clash) + "\n" + json.dumps(fine) + "\n")
    report = rebuild([str(source)], tmp_path / "out", run_check=False, progress=False)
    assert report["rebuilt"] == 2
    info = json.loads((tmp_path / "out/clash/rebuild/rebuild.json").read_text())
    assert (tmp_path / "out/clash/rebuild/created/app/-183").read_text() == "Tartu\n"
    assert (tmp_path / "out/clash/environment/files/app/data").read_text() == "one\n"
    missing = {m["path"]: m["why"] for m in info["missing"]}
    assert missing["/app/-183/archive/x"].startswith("a file and a folder at once")
    assert missing["/app/data/inner.txt"].startswith("a file and a folder at once")
    assert info["recovered"] == ["/app/data"]
