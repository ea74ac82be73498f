"""`python -m trainers.data pivots` (chat_corpus/pivots.py): terminal-pivot rows from Harbor Terminus-2 jobs. Each
row's input is what Terminus-2 sent at that turn, byte for byte (a job the scripted teacher collected, slow); every
rule drops and counts what it should on trials cut from the shipped sample job; the reward server scores the teacher's
own action 1.0 on every row; the split keeps trajectories whole; `inspect --strict` accepts the files; errors are one
line."""

from __future__ import annotations

import json
import shutil
import sys
import uuid
from collections import Counter
from pathlib import Path

import httpx
import pytest
from conftest import REPO, run, scripted_teacher_job
from servers import ServerThread

from chat_corpus.pivots import DEFAULT_AGENT_NAME, ROW_RULES, PivotOptions, build_pivots
from rewards.app import create_app
from rewards.config import load_config
from rewards.environments import AGENT_NAMES
from rewards.protocol import make_response
from trainers.data import main as data_main

SAMPLE = REPO / "data" / "harbor" / "sample-job"
CSV, MAKE, NGINX = "csv-pipeline__8mDN0LU", "make-link-error__FZSQ85v", "nginx-config__c74c3ZZ"  # reward 1.0
FAILED = "git-move-commits__kmtB9dp"  # reward 0.0
CLI = [sys.executable, "-m", "trainers.data", "pivots"]


def copy_trial(src: Path, job: Path, name: str, *, edit=None, result_edit=None, agent: str | None = None) -> Path:
    """A trial folder copied into `job` as trial `name` (its own id); `edit(steps)` changes its trajectory's steps,
    `result_edit(result)` its result.json, `agent` its agent's name."""
    trial = job / name
    shutil.copytree(src, trial)
    result = json.loads((trial / "result.json").read_text())
    result.update(id=str(uuid.uuid5(uuid.NAMESPACE_URL, name)), trial_name=name)
    if result_edit:
        result_edit(result)
    (trial / "result.json").write_text(json.dumps(result, indent=2))
    if edit or agent:
        trajectory = json.loads((trial / "agent" / "trajectory.json").read_text())
        if edit:
            edit(trajectory["steps"])
        if agent:
            trajectory["agent"]["name"] = agent
        (trial / "agent" / "trajectory.json").write_text(json.dumps(trajectory, indent=2))
    return trial


def agent_steps(steps: list[dict]) -> list[dict]:
    return [step for step in steps if step["source"] == "agent"]


def by_trial(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for row in rows:
        out.setdefault(row["metadata"]["trial_name"], []).append(row)
    return out


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def reward_url():
    config = load_config(REPO / "configs" / "rewards" / "terminus_judge_string_only.yaml")
    with ServerThread(create_app(config)) as url:
        yield url


def assert_teacher_scores_one(url: str, rows: list[dict]) -> None:
    """POST /verify of each row with its own expected_answer as the policy's answer (the GRPO client's body)."""
    assert rows
    with httpx.Client(base_url=url, timeout=60) as client:
        for row in rows:
            reply = client.post("/verify", json=dict(row, response=make_response(row["expected_answer"])))
            assert reply.status_code == 200, reply.text
            body = reply.json()
            assert (body["reward"], body["failure_reason"], body["schema_check_passed"]) == (1.0, "none", True), \
                (row["uuid"], body["failure_reason"])


# ------------------------------------------------------------------------------ the shipped sample job (fast)

def test_the_sample_job_gives_one_row_per_action_of_its_passing_trials(reward_url):
    train, val, report = build_pivots([str(SAMPLE)], PivotOptions())
    assert val == [] and report.trials == 5 and report.kept_trajectories == 3
    assert +report.dropped_trajectories == Counter(below_min_reward=2)  # a failed trial, a timed-out one
    assert +report.dropped_rows == Counter(confirmation=3) and report.rows == len(train) == 15
    assert report.turns_from["trajectory_rebuilt"] == 3  # Harbor 0.25's trajectory.json keeps parsed actions only
    rows = by_trial(train)
    assert {name: len(r) for name, r in rows.items()} == {CSV: 6, MAKE: 4, NGINX: 5}
    for name, trial_rows in rows.items():
        steps = json.loads((SAMPLE / name / "agent" / "trajectory.json").read_text())["steps"]
        result = json.loads((SAMPLE / name / "result.json").read_text())
        for index, row in enumerate(trial_rows):
            meta = row["metadata"]
            assert row["uuid"] == f"{result['id']}-{index + 1}" and meta["pivot_agent_turn_index"] == index
            assert meta["source_trajectory_uid"] == result["id"] and meta["task"] == result["task_name"]
            assert meta["category"] == ("first_round" if index == 0 else "others")
            assert (meta["harness"], meta["episode"], meta["trial_name"]) == ("terminus_2", f"episode-{index}", name)
            assert meta["run_id"] == result["config"]["job_id"]
            messages = row["responses_create_params"]["input"]
            assert len(messages) == 2 * index + 1 and messages[-1]["role"] == "user"
            assert [m["role"] for m in messages] == ["user", "assistant"] * index + ["user"]
            assert messages[0]["content"] == steps[0]["message"]
            action = json.loads(row["expected_answer"])  # a string holding the action, as the published set
            calls = [c["arguments"] for c in agent_steps(steps)[index].get("tool_calls", [])
                     if c["function_name"] == "bash_command"]
            assert [c["keystrokes"] for c in action["commands"]] == [c["keystrokes"] for c in calls]
            assert meta["keystroke_lens"] == [len(c["keystrokes"]) for c in calls]
            assert meta["total_keystroke_len"] == sum(meta["keystroke_lens"])
            assert meta["num_commands"] == len(calls) and meta["task_complete"] is action["task_complete"]
            assert row["agent_ref"] == {"type": "responses_api_agents", "name": DEFAULT_AGENT_NAME}
        assert trial_rows[-1]["metadata"]["task_complete"] is True  # the confirmation that follows has no row
    assert AGENT_NAMES[DEFAULT_AGENT_NAME] == "terminus_judge"
    assert_teacher_scores_one(reward_url, train)


def test_each_rule_drops_and_counts_what_it_should(tmp_path):
    job = tmp_path / "job"
    copy_trial(SAMPLE / CSV, job, "a-clean")
    copy_trial(SAMPLE / CSV, job, "b-same-as-a")  # every input repeats a's
    copy_trial(SAMPLE / NGINX, job, "c-failed",
               result_edit=lambda r: r.update(verifier_result={"rewards": {"reward": 0.0}}))

    def recorder_on_screen(steps):
        agent_steps(steps)[0]["observation"]["results"][0]["content"] += \
            "\nasciinema: recording asciicast to /logs/agent/recording.cast\n"
    copy_trial(SAMPLE / NGINX, job, "d-infra", edit=recorder_on_screen)

    def long_heredoc(steps):
        heredoc = "cat > big.txt <<'EOF'\n" + "x" * 3000 + "\nEOF\n"
        agent_steps(steps)[0]["tool_calls"][0]["arguments"]["keystrokes"] = heredoc
    copy_trial(SAMPLE / MAKE, job, "e-long", edit=long_heredoc)

    def host_path_on_screen(steps):
        agent_steps(steps)[2]["observation"]["results"][0]["content"] += f"\ncat: {job.resolve()}/f-host/x: denied\n"
    copy_trial(SAMPLE / MAKE, job, "f-host", edit=host_path_on_screen)

    junk = "I will look at the configuration first."

    def unparseable_first_response(steps):
        steps.insert(1, {"step_id": 2, "timestamp": steps[1]["timestamp"], "source": "agent", "message": junk,
                         "observation": {"results": [{"content": "Previous response had parsing errors:\nERROR: No "
                                                      "valid JSON found in response\n\nPlease fix these issues and "
                                                      "provide a proper JSON response."}]}})
    copy_trial(SAMPLE / NGINX, job, "g-parse-error", edit=unparseable_first_response)
    copy_trial(SAMPLE / CSV, job, "h-bash-tool", agent="bash-tool")
    copy_trial(SAMPLE / CSV, job, "i-tampered")
    (job / "i-tampered" / "verifier" / "tamper.json").write_text('{"verifier_paths": "/tests/test.sh changed"}')
    copy_trial(SAMPLE / CSV, job, "j-no-network",
               result_edit=lambda r: r.update(exception_info={"exception_type": "NetworkNeededError"}))

    def summarized_after_two_turns(steps):
        index = steps.index(agent_steps(steps)[2])
        steps.insert(index, {"step_id": 0, "timestamp": steps[1]["timestamp"], "source": "system",
                             "message": "Performed context summarization and handoff to continue task."})
    copy_trial(SAMPLE / MAKE, job, "k-summarized", edit=summarized_after_two_turns)

    train, _, report = build_pivots([str(job)], PivotOptions())
    assert report.trials == 11 and report.kept_trajectories == 7
    assert +report.dropped_trajectories == Counter(below_min_reward=1, other_agent=1, tampered=1, infra_failure=1)
    written = {name: len(rows) for name, rows in by_trial(train).items()}
    assert written == {"a-clean": 6, "d-infra": 1, "e-long": 3, "f-host": 3, "g-parse-error": 5}
    # a: 1 confirmation; b: 6 repeated + 1 confirmation; d: 4 past the recorder's line + 1 confirmation; e: its first
    # action's 3,000+ keystrokes + 1 confirmation; f: 1 past the host path + 1 confirmation; g: the unparseable
    # response + 1 confirmation; k: 2 repeated (f's first two inputs), 3 after the summarization
    assert +report.dropped_rows == Counter(confirmation=6, repeated_prompt=8, infra_observation=5, long_keystrokes=1,
                                           invalid_action=1, context_summarized=3)
    assert report.turns == report.rows + sum(report.dropped_rows.values()) == 42
    assert set(report.as_dict()["rows"]["dropped"]) == set(ROW_RULES)
    # the unparseable response has no row but stays in the later prompts, as Terminus-2 sent them
    later = by_trial(train)["g-parse-error"][0]
    assert later["metadata"]["pivot_agent_turn_index"] == 1
    assert later["responses_create_params"]["input"][1] == {"role": "assistant", "content": junk}
    # a stricter keystroke limit and a pattern of one's own
    _, _, strict = build_pivots([str(job)], PivotOptions(max_keystroke_chars=100, infra_patterns=(r"\bnginx -t\b",)))
    assert strict.dropped_rows["long_keystrokes"] > 1 and strict.dropped_rows["infra_observation"] > 5


def test_the_per_task_cap_keeps_a_seeded_choice(tmp_path):
    def marked(i):  # a copy whose prompt differs, so that no row repeats another's
        return lambda steps: steps[0].update(message=steps[0]["message"] + f"\n# copy {i}\n")
    job = tmp_path / "job"
    for i in range(4):
        copy_trial(SAMPLE / CSV, job, f"csv-{i}", edit=marked(i))
    kept = {}
    for seed in (0, 0, 1, 2, 3):
        train, _, report = build_pivots([str(job)], PivotOptions(max_per_task=2, seed=seed))
        assert report.kept_trajectories == 2 and report.dropped_trajectories["over_task_cap"] == 2
        kept.setdefault(seed, set()).add(frozenset(by_trial(train)))
    assert all(len(choices) == 1 for choices in kept.values())  # the same seed keeps the same trajectories
    assert len({choice for choices in kept.values() for choice in choices}) > 1  # another seed, another choice
    _, _, everything = build_pivots([str(job)], PivotOptions(max_per_task=0))
    assert everything.kept_trajectories == 4 and everything.dropped_trajectories["over_task_cap"] == 0


def test_the_most_faithful_record_of_the_chat_wins(tmp_path, reward_url):
    """result.json's all_messages (Harbor's store_all_messages) over episode-N/ files over the trajectory; raw
    responses stay verbatim in the prompts (a think block too); expected_answer is the action after it."""
    job = tmp_path / "job"
    base, _, _ = build_pivots([str(SAMPLE / MAKE)], PivotOptions())
    sent = [m["content"] for m in base[-1]["responses_create_params"]["input"]]  # the rebuilt chat up to the last row
    steps = agent_steps(json.loads((SAMPLE / MAKE / "agent" / "trajectory.json").read_text())["steps"])
    raw = [f"<think>turn {i}</think>\n" + json.dumps(json.loads(a)) for i, a in enumerate(sent[1::2])]
    raw += [f"<think>turn {len(raw)}</think>\n" + base[-1]["expected_answer"].replace("\n", " ")]
    raw += ['{"analysis": "Done.", "plan": "", "commands": [], "task_complete": true}']  # the confirmation
    prompts = sent[0::2] + [steps[-2]["observation"]["results"][0]["content"]]
    assert len(prompts) == len(raw) == len(steps)
    chat = [m for prompt, answer in zip(prompts, raw) for m in ({"role": "user", "content": prompt},
                                                                 {"role": "assistant", "content": answer})]
    copy_trial(SAMPLE / MAKE, job, "messages",
               result_edit=lambda r: r["agent_result"]["metadata"].update(all_messages=chat))
    episodes = copy_trial(SAMPLE / MAKE, job, "episodes")
    for index, (prompt, answer) in enumerate(zip(prompts, raw)):
        (episodes / "agent" / f"episode-{index}").mkdir()
        (episodes / "agent" / f"episode-{index}" / "prompt.txt").write_text(prompt)
        (episodes / "agent" / f"episode-{index}" / "response.txt").write_text(answer)

    def raw_content(steps):  # Terminus-2's trajectory_config raw_content: the response as the message, no tool calls
        for step, answer in zip(agent_steps(steps), raw):
            step["message"] = answer
            step.pop("tool_calls")
    copy_trial(SAMPLE / MAKE, job, "raw", edit=raw_content)
    rows: dict[str, list] = {}
    for name, record in (("messages", "all_messages"), ("episodes", "episode_files"), ("raw", "trajectory_raw")):
        rows[name], _, report = build_pivots([str(job / name)], PivotOptions())
        assert report.turns_from[record] == 1 and {r["metadata"]["turns_from"] for r in rows[name]} == {record}
    for name, trial_rows in rows.items():
        assert len(trial_rows) == 4
        for index, row in enumerate(trial_rows):
            assert [m["content"] for m in row["responses_create_params"]["input"]] == [
                text for pair in zip(prompts[:index], raw[:index]) for text in pair] + [prompts[index]]
            assert row["expected_answer"] == raw[index].split("</think>")[1].strip()
    assert_teacher_scores_one(reward_url, [row for trial_rows in rows.values() for row in trial_rows] + base)


# ---------------------------------------------------------------------------- the command, its files and errors

@pytest.fixture(scope="module")
def split_files(tmp_path_factory):
    """`pivots --val_fraction 0.3` over 9 trajectories (the sample job's 3 passing ones, each with a marked prompt)."""
    root = tmp_path_factory.mktemp("split")
    for name in (CSV, MAKE, NGINX):
        for i in range(3):
            copy_trial(SAMPLE / name, root / "job", f"{name}-{i}",
                       edit=lambda steps, i=i: steps[0].update(message=steps[0]["message"] + f"\n# copy {i}\n"))
    out = root / "out" / "pivots.jsonl"
    args = ["pivots", "--jobs", str(root / "job"), "--out", str(out), "--val_fraction", "0.3", "--json"]
    return root, out, args


def test_the_split_keeps_each_trajectory_whole_on_one_side(split_files, capsys):
    root, out, args = split_files
    assert data_main(args) == 0
    report = json.loads(capsys.readouterr().out)
    val = out.with_name("pivots.val.jsonl")
    assert report["files"] == {"train": str(out), "val": str(val)}
    train_rows, val_rows = read_rows(out), read_rows(val)
    assert report["rows"]["written"] == len(train_rows) + len(val_rows) == 45
    assert (report["rows"]["train"], report["rows"]["val"]) == (len(train_rows), len(val_rows))
    train_ids = {r["metadata"]["source_trajectory_uid"] for r in train_rows}
    val_ids = {r["metadata"]["source_trajectory_uid"] for r in val_rows}
    assert not train_ids & val_ids and len(train_ids) == 6 and len(val_ids) == 3  # ceil(0.3 * 9) trajectories
    everything, _, _ = build_pivots([str(root / "job")], PivotOptions())
    expected = {}
    for row in everything:
        expected.setdefault(row["metadata"]["source_trajectory_uid"], []).append(row["uuid"])
    for rows in (train_rows, val_rows):  # every row of a trajectory, in order, on its side
        for uid in {r["metadata"]["source_trajectory_uid"] for r in rows}:
            assert [r["uuid"] for r in rows if r["metadata"]["source_trajectory_uid"] == uid] == expected[uid]
    before = out.read_bytes(), val.read_bytes()
    assert data_main(args) == 0 and (out.read_bytes(), val.read_bytes()) == before  # deterministic
    capsys.readouterr()


def test_inspect_strict_accepts_the_rows_as_pivot_records(split_files):
    _, out, args = split_files
    if not out.exists():
        assert data_main(args) == 0
    result = run([sys.executable, "-m", "trainers.data", "inspect", "--strict", str(out),
                  str(out.with_name("pivots.val.jsonl"))], timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("0 invalid; formats {'pivot':") == 2


def test_the_summary_names_the_counts_and_files(tmp_path):
    result = run(CLI + ["--jobs", str(SAMPLE), "--out", str(tmp_path / "p.jsonl")], timeout=300)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("pivots: 5 trials read from 1 path(s); 3 trajectories kept (min_reward 1.0, at most 5 "
                               "per task), dropped: below_min_reward 2")
    assert "rows: 18 agent turns -> 15 rows of 3 tasks; dropped: context_summarized 0, invalid_action 0, " \
           "confirmation 3, infra_observation 0, long_keystrokes 0, repeated_prompt 0" in lines[2]
    assert lines[3].endswith(f"-> {tmp_path / 'p.jsonl'}") and len(read_rows(tmp_path / "p.jsonl")) == 15


def _bad_trajectory(tmp_path):
    copy_trial(SAMPLE / CSV, tmp_path / "job", "ok")
    trial = copy_trial(SAMPLE / MAKE, tmp_path / "job", "broken")
    (trial / "agent" / "trajectory.json").write_text('{"schema_version": "ATIF-v1.8", "steps": [')
    return tmp_path / "job", (f"{trial / 'agent' / 'trajectory.json'}: invalid JSON", "--skip_invalid")


def _no_steps(tmp_path):
    trial = copy_trial(SAMPLE / CSV, tmp_path / "job", "no-steps")
    (trial / "agent" / "trajectory.json").write_text(json.dumps({"schema_version": "ATIF-v1.8", "steps": [],
                                                                 "agent": {"name": "terminus-2", "version": "2.0.0"}}))
    return tmp_path / "job", ("not a Terminus-2 trajectory as Harbor writes it (no 'steps' list)", "--skip_invalid")


def _bash_tool_only(tmp_path):
    copy_trial(SAMPLE / CSV, tmp_path / "job", "bash", agent="bash-tool")
    return tmp_path / "job", ("1 trial(s), none by Terminus-2", "collect with --agent terminus-2")


def _failed_only(tmp_path):
    copy_trial(SAMPLE / FAILED, tmp_path / "job", "failed")
    return tmp_path / "job", ("no trajectory to build rows from (1 trials: below_min_reward 1)", "--min_reward 1.0")


def _empty(tmp_path):
    (tmp_path / "job").mkdir()
    return tmp_path / "job", ("no Harbor trials under it", "pass a job directory")


@pytest.mark.parametrize("make", [_empty, lambda tmp: (tmp / "missing", ("no such directory",)), _bash_tool_only,
                                  _bad_trajectory, _no_steps, _failed_only],
                         ids=["empty", "missing", "bash-tool", "bad-json", "no-steps", "all-failed"])
def test_a_user_error_is_one_line_naming_the_path(tmp_path, make):
    jobs, fragments = make(tmp_path)
    result = run(CLI + ["--jobs", str(jobs), "--out", str(tmp_path / "p.jsonl")], timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"error: {jobs}") and all(fragment in line for fragment in fragments), line
    assert not (tmp_path / "p.jsonl").exists()


def test_bad_options_and_skip_invalid(tmp_path, capsys):
    jobs, _ = _bad_trajectory(tmp_path)
    out = str(tmp_path / "p.jsonl")
    for option, fragment in ((["--agent_name", "verifif_simple_agent"], "not a name the reward server routes"),
                             (["--val_fraction", "1"], "must be in [0, 1)"),
                             (["--infra_pattern", "(unclosed"], "not a regular expression"),
                             (["--threshold", "1.5"], "must be in (0, 1]")):
        assert data_main(["pivots", "--jobs", str(jobs), "--out", out, *option]) == 2
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith("error: ") and fragment in line
    assert data_main(["pivots", "--jobs", str(jobs), "--out", out, "--skip_invalid", "--json",
                      "--agent_name", "terminus_judge_simple_agent"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["trajectories"]["dropped"]["invalid_trajectory"] == 1 and report["rows"]["written"] == 6
    assert {row["agent_ref"]["name"] for row in read_rows(Path(out))} == {"terminus_judge_simple_agent"}
    assert all("threshold" not in row for row in read_rows(Path(out)))
    assert data_main(["pivots", "--jobs", str(jobs), "--out", out, "--skip_invalid", "--threshold", "1.0"]) == 0
    capsys.readouterr()
    assert {row["threshold"] for row in read_rows(Path(out))} == {1.0}


# ------------------------------------------------------------ a job the scripted teacher collected (Harbor, slow)

@pytest.fixture(scope="module")
def teacher_job(tmp_path_factory):
    """Three generated tasks solved by the scripted teacher through Harbor's Terminus-2 (`--collect`)."""
    return scripted_teacher_job(tmp_path_factory.mktemp("teacher"), 91, 3, ["count-lines", "replace-config",
                                                                            "make-tree"])


@pytest.mark.slow
def test_each_row_is_what_terminus_2_sent_at_that_turn(teacher_job, tmp_path, reward_url):
    """Rows from a real job against Harbor's own record of each chat (result.json's all_messages, the messages
    Terminus-2 sent and got back); and the same rows from the trajectory alone (its actions rebuilt)."""
    out = tmp_path / "p.jsonl"
    assert data_main(["pivots", "--jobs", str(teacher_job), "--out", str(out)]) == 0
    rows = by_trial(read_rows(out))
    trials = sorted(teacher_job.glob("*__*"))
    assert len(trials) == 3 and set(rows) == {trial.name for trial in trials}
    for trial in trials:
        sent = json.loads((trial / "result.json").read_text())["agent_result"]["metadata"]["all_messages"]
        assert [m["role"] for m in sent] == ["user", "assistant"] * 3  # the solution, the completion, the confirmation
        trial_rows = rows[trial.name]
        assert [r["metadata"]["pivot_agent_turn_index"] for r in trial_rows] == [0, 1]  # the confirmation: no row
        for turn, row in enumerate(trial_rows):
            assert row["metadata"]["turns_from"] == "all_messages"
            assert row["responses_create_params"]["input"] == [
                {"role": m["role"], "content": m["content"]} for m in sent[:2 * turn + 1]]
            assert row["expected_answer"] == sent[2 * turn + 1]["content"]
    # without that record (a job eval.run collected): the trajectory, with the actions rebuilt, gives the same rows
    bare = tmp_path / "bare"
    shutil.copytree(teacher_job, bare)
    for result_file in bare.glob("*__*/result.json"):
        result = json.loads(result_file.read_text())
        del result["agent_result"]["metadata"]["all_messages"]
        result_file.write_text(json.dumps(result))
    rebuilt, _, report = build_pivots([str(bare)], PivotOptions())
    assert report.turns_from["trajectory_rebuilt"] == 3
    for row in rebuilt:
        assert row["metadata"].pop("turns_from") == "trajectory_rebuilt"
    originals = [row for trial in trials for row in rows[trial.name]]
    for row in originals:
        row["metadata"].pop("turns_from")
    assert rebuilt == originals
    assert_teacher_scores_one(reward_url, originals)


def test_functional_rows_carry_their_task_folder_and_the_teachers_keystrokes(tmp_path):
    """--environment terminus_functional: a trial whose task folder is on this machine gives rows with the folder and
    the teacher's keystrokes before and after each turn (the row's own action between them); one whose folder is not
    here is dropped and counted (its reward could not rebuild it)."""
    job = tmp_path / "job"
    job.mkdir()
    task = tmp_path / "tasks" / "csv-pipeline"
    (task / "tests").mkdir(parents=True)
    (task / "tests" / "test.sh").write_text("#!/bin/bash\n")

    def here(result):
        result.setdefault("config", {}).setdefault("task", {})["path"] = str(task)

    def gone(result):
        result.setdefault("config", {}).setdefault("task", {})["path"] = str(tmp_path / "nowhere")

    copy_trial(SAMPLE / CSV, job, "csv-here", result_edit=here)
    copy_trial(SAMPLE / MAKE, job, "make-gone", result_edit=gone)
    options = PivotOptions(environment="terminus_functional", max_per_task=0)  # the agent name follows it
    rows, _, report = build_pivots([str(job)], options)
    assert report.kept_trajectories == 1 and report.dropped_trajectories["no_task_folder"] == 1
    assert rows and {row["metadata"]["task_dir"] for row in rows} == {str(task.resolve())}
    assert {AGENT_NAMES[row["agent_ref"]["name"]] for row in rows} == {"terminus_functional"}
    typed = [json.loads(m["content"]) for m in rows[-1]["responses_create_params"]["input"] if m["role"] == "assistant"]
    typed = [c["keystrokes"] for action in typed + [json.loads(rows[-1]["expected_answer"])] for c in action["commands"]]
    for row in rows:
        meta, own = row["metadata"], [c["keystrokes"] for c in json.loads(row["expected_answer"])["commands"]]
        whole = meta["prefix_keystrokes"] + own + meta["remaining_keystrokes"]
        assert whole[:len(typed)] == typed  # every turn's keystrokes in order, the last row's later turns after them
        earlier = [json.loads(m["content"]) for m in row["responses_create_params"]["input"] if m["role"] == "assistant"]
        assert meta["prefix_keystrokes"] == [c["keystrokes"] for a in earlier for c in a["commands"]]
    # the string-similarity rows do not carry them
    plain, _, _ = build_pivots([str(job)], PivotOptions(max_per_task=0))
    assert plain and all("task_dir" not in row["metadata"] for row in plain)
    assert {row["agent_ref"]["name"] for row in plain} == {DEFAULT_AGENT_NAME}
