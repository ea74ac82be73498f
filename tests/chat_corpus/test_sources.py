"""Corpus shapes users have: OpenThoughts-Agent `conversations`, ShareGPT turns, JSON-string columns, and NeMo Gym
GRPO prompt rows. Each loads with the same validation, trains exactly its assistant turns, and is refused with a
reason that names what is missing when it cannot be used."""

import json
import shutil
import sys
from types import SimpleNamespace

import pytest
from conftest import REPO, chat_row, run, write_jsonl
from test_masking import expected_trained_text, trained_text

from chat_corpus.grpo_prompts import build_grpo_prompts
from chat_corpus.masking import tokenize_chat, training_chat_template
from chat_corpus.sft_corpus import CorpusArguments, build_sft_corpus
from chat_corpus.sources import Source, load_source, to_record
from common.errors import CorpusError

CLI = [sys.executable, "-m", "trainers.data"]
NEW_SAMPLES = ["data/sft/terminus2_conversations.jsonl", "data/sft/sharegpt_tool_calls.jsonl",
               "data/sft/swe_json_strings.jsonl"]
GRPO_SAMPLES = ["data/grpo/multichallenge.jsonl", "data/grpo/verifif.jsonl"]
TOOL = {"name": "bash", "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}


def record_of(row, fmt="auto"):
    return to_record(row, fmt)[1]


def problems_of(tmp_path, rows, fmt="auto"):
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    return load_source(Source(str(path), format=fmt), "metadata.source_trajectory_uid").problems


def openthoughts_row():
    return {"conversations": [
        {"content": "You are an AI assistant tasked with solving command-line tasks...\nTask Description: fix cron", "role": "user"},
        {"content": "{\"analysis\": \"look\", \"plan\": \"ls\", \"commands\": [], \"task_complete\": false}", "role": "assistant"},
        {"content": "New Terminal Output:\n\nroot@box:/# ", "role": "user"},
        {"content": "{\"analysis\": \"done\", \"plan\": \"\", \"commands\": [], \"task_complete\": true}", "role": "assistant"}],
        "agent": "terminus-2", "model": "hosted_vllm/glm", "model_provider": "hosted_vllm", "date": "2024-06-20T08:00:00",
        "task": "cron-crlf", "episode": "episode-1", "run_id": "r-1", "trial_name": "cron-crlf__abc", "result": None}


def sharegpt_row():
    return {"conversations": [
        {"from": "human", "value": "Why does make fail?"},
        {"from": "function_call", "value": json.dumps({"name": "bash", "arguments": {"command": "make 2>&1 | tail"}})},
        {"from": "observation", "value": "undefined reference to `sqrt'"},
        {"from": "function_call", "value": json.dumps([{"name": "bash", "arguments": {"command": "grep LDLIBS Makefile"}},
                                                       {"name": "bash", "arguments": "{\"command\": \"make\"}"}])},
        {"from": "observation", "value": "LDLIBS ="},
        {"from": "tool", "value": "build/rasterkit"},
        {"from": "gpt", "value": "Added -lm to LDLIBS; the build links."}],
        "system": "You are a build engineer.", "tools": json.dumps([TOOL])}


# --- each shape as a chat record ---------------------------------------------------------------------------------

def test_openthoughts_conversations_are_chats_and_their_columns_metadata():
    row = openthoughts_row()
    assert to_record(row)[0] == "chat"
    record = record_of(row)
    assert record["messages"] == [{"role": m["role"], "content": m["content"]} for m in row["conversations"]]
    assert record["tools"] is None


def test_sharegpt_turns_map_to_roles_tool_calls_and_tool_results():
    record = record_of(sharegpt_row())
    roles = [m["role"] for m in record["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "tool", "assistant"]
    assert record["messages"][0]["content"] == "You are a build engineer."  # LLaMA-Factory's system column
    calls = record["messages"][4]["tool_calls"]
    assert [c["function"] for c in calls] == [{"name": "bash", "arguments": {"command": "grep LDLIBS Makefile"}},
                                              {"name": "bash", "arguments": {"command": "make"}}]
    assert record["tools"] == [TOOL]
    assert record["messages"][-1] == {"role": "assistant", "content": "Added -lm to LDLIBS; the build links."}


def test_sharegpt_user_assistant_names_and_system_turn():
    row = {"conversations": [{"from": "system", "value": "Be brief."}, {"from": "user", "value": "hi"},
                             {"from": "assistant", "value": "hello"}], "system": "ignored: a system turn is there"}
    assert [(m["role"], m["content"]) for m in record_of(row)["messages"]] == [
        ("system", "Be brief."), ("user", "hi"), ("assistant", "hello")]


def test_json_string_columns():
    messages = chat_row(0)["messages"]
    tools = [{"type": "function", "function": TOOL}]
    as_list = record_of({"messages": messages, "tools": tools})
    assert record_of({"messages": json.dumps(messages), "tools": [json.dumps(t) for t in tools]}) == as_list
    assert record_of({"messages": json.dumps(messages), "tools": json.dumps(tools)}) == as_list
    assert record_of({"conversations": json.dumps(messages)}) == dict(as_list, tools=None)


@pytest.mark.parametrize("row, fmt, reason", [
    ({"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "x"}]}, "auto",
     "conversations[1]: from 'bot' is not one of system, human, user, gpt, assistant, function_call, observation, tool"),
    ({"conversations": [{"from": "human", "value": "hi"}, {"from": "function_call", "value": "{\"name\": "}]}, "auto",
     "conversations[1]: function_call value is not valid JSON"),
    ({"conversations": [{"from": "human", "value": "hi"}, {"from": "observation", "value": "out"},
                        {"from": "gpt", "value": "a"}], "system": "sys"}, "auto",
     "conversations[1]: tool message that answers no assistant tool call"),  # indices stay the row's
    ({"conversations": [{"role": "user", "content": "hi"}]}, "auto", "conversations: no assistant turn to train on"),
    ({"conversations": [{"from": "human"}, {"from": "gpt", "value": "a"}]}, "auto", "conversations[0]: ShareGPT turn has no 'value'"),
    ({"messages": "[{\"role\": \"user\""}, "auto", "messages: must be a list of messages (or that list as a JSON string)"),
    ({"messages": chat_row(0)["messages"], "tools": [json.dumps(TOOL), "{bad"]}, "auto", "tools[1]: not valid JSON"),
    ({"responses_create_params": {"input": [{"role": "user", "content": "t"}]}, "expected_answer": "{}"}, "chat",
     "not a chat record: no 'messages', 'conversations' or 'prompt'/'completion' key; keys: "
     "['expected_answer', 'responses_create_params']"),
    (chat_row(0), "pivot", "not a pivot record: no 'responses_create_params' or 'expected_answer' key; keys: "
                           "['messages', 'metadata']"),
    ({"responses_create_params": {"input": [{"role": "user", "content": "t"}]}}, "auto",
     "a GRPO prompt (responses_create_params without expected_answer): it has no target to train on; use it with "
     "recipes/grpo.py"),
    ({"responses_create_params": {"input": [{"role": "tool", "content": "t"}]}, "expected_answer": "{}"}, "auto",
     "responses_create_params.input[0]: role 'tool' is not one of system, developer, user, assistant"),
])
def test_reasons_name_what_is_wrong(tmp_path, row, fmt, reason):
    problems = problems_of(tmp_path, [chat_row(1), row], fmt)
    assert len(problems) == (2 if fmt == "pivot" else 1), problems
    assert problems[-1].startswith(f"{tmp_path / 'rows.jsonl'}:2: ") and reason in problems[-1], problems


# --- GRPO prompt rows --------------------------------------------------------------------------------------------

def test_grpo_rows_are_detected_and_read_as_the_grpo_recipe_reads_them():
    for path in GRPO_SAMPLES:
        rows = [json.loads(line) for line in (REPO / path).read_text().splitlines()]
        for row in rows:
            fmt, record = to_record(row, prompts=True)
            assert fmt == "grpo" and record["prompt"][-1]["role"] == "user"
            assert [m["content"] for m in record["prompt"]] == [m["content"] for m in row["responses_create_params"]["input"]]
    pivot = json.loads((REPO / "data/pivot/terminal_pivot.jsonl").read_text().splitlines()[0])
    as_prompt = to_record(pivot, "grpo", prompts=True)[1]["prompt"]  # the same parser as the pivot's SFT context
    assert as_prompt == [{"role": m["role"], "content": m["content"]} for m in record_of(pivot)["messages"][:-1]]


def test_sft_refuses_grpo_rows_and_grpo_shares_the_loader_and_its_refusal(tmp_path, tokenizer):
    with pytest.raises(CorpusError, match=r"multichallenge.jsonl:1: a GRPO prompt .* use it with recipes/grpo.py"):
        build_sft_corpus(CorpusArguments(datasets=[str(REPO / GRPO_SAMPLES[0])]), tokenizer, 4096, show_progress=False)
    prompts = build_grpo_prompts(CorpusArguments(datasets=[str(REPO / p) for p in GRPO_SAMPLES]), tokenizer, 4096)
    assert len(prompts.train) == 7 and prompts.problems == []
    assert [s.environments for s in prompts.stats] == [{"multichallenge_simple_agent": 4}, {"turing_vif_simple_agent": 3}]
    ends_on_answer = {"responses_create_params": {"input": [{"role": "user", "content": "q"},
                                                            {"role": "assistant", "content": "a"}]},
                      "agent_ref": {"name": "multichallenge_simple_agent"}}
    bad = write_jsonl(tmp_path / "bad.jsonl", [ends_on_answer, chat_row(0)])
    args = CorpusArguments(datasets=[str(REPO / GRPO_SAMPLES[0]), str(bad)])
    with pytest.raises(CorpusError) as err:
        build_grpo_prompts(args, tokenizer, 4096)
    message = str(err.value)
    assert message.startswith("2 invalid record(s) of 6; the run does not start on bad records:")
    assert f"{bad}:1: responses_create_params.input: ends with an assistant turn" in message
    assert f"{bad}:2: responses_create_params: missing" in message and "skip_invalid: true" in message
    args.skip_invalid = True
    skipped = build_grpo_prompts(args, tokenizer, 4096)
    assert len(skipped.train) == 4 and [s.invalid for s in skipped.stats] == [0, 2] and len(skipped.problems) == 2


# --- the CLI: inspect --strict and render --------------------------------------------------------------------------

def test_inspect_strict_accepts_every_new_shape_and_grpo_rows():
    paths = [str(REPO / p) for p in NEW_SAMPLES + GRPO_SAMPLES]
    result = run(CLI + ["inspect", *paths, "--strict", "--json"])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    reports = {report["path"]: report for report in json.loads(result.stdout)}
    for path in paths:
        report = reports[path]
        assert report["invalid"] == 0 and report["valid"] == report["rows"] > 0, report["problems"]
    assert [reports[str(REPO / p)]["formats"] for p in NEW_SAMPLES] == [{"chat": 10}, {"chat": 8}, {"chat": 6}]
    for path in GRPO_SAMPLES:
        report = reports[str(REPO / path)]
        assert set(report["formats"]) == {"grpo"} and report["prompt_tokens"]["max"] > 0 and "tokens" not in report
    assert reports[str(REPO / NEW_SAMPLES[0])]["trained_tokens"]["total"] > 0


def test_split_key_groups_the_episodes_of_one_trial():
    loaded = load_source(Source(str(REPO / NEW_SAMPLES[0])), "trial_name")
    assert loaded.missing_split_key == 0 and len({r["group"] for r in loaded.records}) == 8  # 10 rows, 8 trials


@pytest.mark.parametrize("path", NEW_SAMPLES)
def test_bundled_new_shapes_mask_exactly_their_assistant_turns(tokenizer, path):
    template = training_chat_template(tokenizer)
    for record in load_source(Source(str(REPO / path)), "x").records:
        input_ids, mask = tokenize_chat(tokenizer, template, record)
        assert trained_text(tokenizer, input_ids, mask) == expected_trained_text(tokenizer, template, record)


def rendered(capsys, path, index=0):
    """`python -m trainers.data render PATH --index I --json`, in this process: (trained text, whole text)."""
    from trainers.data import main

    assert main(["render", str(path), "--index", str(index), "--json"]) == 0
    tokens = json.loads(capsys.readouterr().out)["tokens"]
    return "".join(t["text"] for t in tokens if t["trained"]), "".join(t["text"] for t in tokens)


def test_render_trains_exactly_the_assistant_turns_of_each_shape(tmp_path, tokenizer, capsys):
    template = training_chat_template(tokenizer)
    messages = chat_row(5)["messages"]
    shapes = {"openthoughts": openthoughts_row(), "sharegpt": sharegpt_row(),
              "json_strings": {"messages": json.dumps(messages), "tools": [json.dumps({"type": "function", "function": TOOL})]}}
    trained = {}
    for name, row in shapes.items():
        trained[name], _ = rendered(capsys, write_jsonl(tmp_path / f"{name}.jsonl", [row]))
        assert trained[name] == expected_trained_text(tokenizer, template, record_of(row)), name
    assert "Added -lm to LDLIBS" in trained["sharegpt"] and '"command": "grep LDLIBS Makefile"' in trained["sharegpt"]
    for never in ("Why does make fail?", "undefined reference", "build engineer", "build/rasterkit"):
        assert never not in trained["sharegpt"]
    assert '"analysis": "look"' in trained["openthoughts"] and '"analysis": "done"' in trained["openthoughts"]
    assert "Task Description" not in trained["openthoughts"] and "New Terminal Output" not in trained["openthoughts"]
    assert "The failing unit of app5 is unit0." in trained["json_strings"] and "unit0.service" not in trained["json_strings"]


def test_render_of_a_grpo_prompt_trains_nothing(capsys):
    trained, text = rendered(capsys, REPO / GRPO_SAMPLES[0])
    assert trained == "" and text.endswith("<|im_start|>assistant\n")
    assert "no new packages" in text  # the last user turn of the first row


# --- the run summary of GRPO, through the same writer as SFT --------------------------------------------------------

def test_grpo_summary_is_printed_and_written_like_sfts(tmp_path, tokenizer, capsys, monkeypatch):
    from trainers.summary import build_grpo_summary, print_grpo_summary, write_summary

    prompts = build_grpo_prompts(CorpusArguments(datasets=[str(REPO / GRPO_SAMPLES[1])]), tokenizer, 4096)
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=2, log_history=[{"loss": 0.5}]),
                              args=SimpleNamespace(output_dir=str(tmp_path / "out")))
    wandb_run = SimpleNamespace(summary={}, dir=str(tmp_path / "wandb"))
    monkeypatch.setitem(sys.modules, "wandb", SimpleNamespace(run=wandb_run))
    summary = build_grpo_summary(trainer, prompts, {"ok": 6, "masked/judge_failed": 2}, 12.5, None, ["http://h:1"])
    print_grpo_summary(summary)
    write_summary(summary)
    printed = capsys.readouterr().out.splitlines()
    assert printed[0] == "GRPO run summary"
    assert printed[1].endswith("verifif.jsonl: 3 rows, 0 invalid, 0 prompts over max_prompt_length, 3 train / 0 eval; "
                               "environments {'turing_vif_simple_agent': 3}")
    assert printed[2] == "  steps 2, final loss 0.5, wall 12.5 s"
    assert printed[4] == f"  output dir {tmp_path / 'out'}; W&B run dir {tmp_path / 'wandb'}"
    written = json.loads((tmp_path / "out" / "run_summary.json").read_text())
    assert written["train_prompts"] == 3 and written["verify_requests"] == {"ok": 6, "masked/judge_failed": 2}
    assert wandb_run.summary["data/train_prompts"] == 3 and wandb_run.summary["verify_requests/ok"] == 6
    assert wandb_run.summary["data/verifif.jsonl/rows"] == 3


# --- the tiny model's cache key ------------------------------------------------------------------------------------

def test_tiny_model_fingerprint_covers_only_what_trains_the_tokenizer(tmp_path):
    from modeling.tiny_model import fingerprint, tokenizer_corpus_files

    data = tmp_path / "data"
    shutil.copytree(REPO / "data", data, ignore=shutil.ignore_patterns("__pycache__"))
    before = fingerprint(data)
    assert before == fingerprint(REPO / "data")  # the key does not depend on where the checkout is
    assert not {p.suffix for p in tokenizer_corpus_files(data)} & {".md", ".py"}
    (data / "README.md").write_text((data / "README.md").read_text() + "\nAnother note.\n")
    (data / "sft" / "README.md").write_text("# a new README\n")
    (data / "make_samples.py").write_text((data / "make_samples.py").read_text() + "\n# edited\n")
    assert fingerprint(data) == before
    corpus = data / "sft" / "terminus2_chat.jsonl"
    corpus.write_text(corpus.read_text().replace("terminal", "terminals", 1))
    assert fingerprint(data) != before
