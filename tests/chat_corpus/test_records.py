"""Loaders and validation: every bad input gets its reason with file:line; good samples all load."""

import gzip
import json

import pytest
from conftest import REPO, chat_row, write_jsonl

from chat_corpus.sft_corpus import CorpusArguments
from chat_corpus.sources import Source, load_source, load_sources, parse_sources
from common.errors import CorpusError


def problems_of(path):
    return load_source(Source(str(path)), "metadata.source_trajectory_uid").problems


def load_corpus_sources(args: CorpusArguments):
    """The sources of a recipe config, loaded and refused as both recipes do."""
    return load_sources(parse_sources(args.datasets), args.split_key, args.skip_invalid)


@pytest.mark.parametrize("line, reason", [
    ('{"messages": [{"role": "user", "content": "hi"}, {"role": "assist', "invalid JSON"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "bot", "content": "x"}]}, "role 'bot' is not one of"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant"}]}, "assistant message has no 'content'"),
    ({"messages": []}, "empty conversation"),
    ({"messages": [{"role": "user", "content": "hi"}]}, "no assistant turn to train on"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a", "train": False}]},
     "no assistant turn to train on"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "tool", "content": "out"}, {"role": "assistant", "content": "a"}]},
     "tool message that answers no assistant tool call"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": "}}]}]},
     "arguments of tool call 'bash' are not valid JSON"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "a", "train": "no"}]},
     "'train' must be true or false"),
    ({"messages": [{"role": "assistant", "content": "a"}]}, "assistant turn before any user turn"),
    ({"messages": "hello"}, "messages: must be a list"),
    ({"text": "plain"}, "unknown record shape"),
    ({"responses_create_params": {"input": [{"role": "user", "content": "t"}]}, "expected_answer": {"commands": []}},
     "expected_answer: must be a string"),
    ({"responses_create_params": {"input": []}, "expected_answer": "{}"}, "input: must be a non-empty list"),
    ({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}], "tools": "[{bad"},
     "tools: not valid JSON"),
])
def test_bad_record_reason_names_file_and_line(tmp_path, line, reason):
    path = write_jsonl(tmp_path / "bad.jsonl", [chat_row(0), line])
    problems = problems_of(path)
    assert len(problems) == 1
    assert problems[0].startswith(f"{path}:2: ")
    assert reason in problems[0]


def test_non_utf8_bytes(tmp_path):
    path = tmp_path / "latin1.jsonl"
    good = json.dumps(chat_row(0)).encode()
    path.write_bytes(good + b"\n" + b'{"messages": [{"role": "user", "content": "caf\xe9"}]}\n' + good + b"\n")
    problems = problems_of(path)
    assert problems == [f"{path}:2: not valid UTF-8 (byte 0xe9 at column 47)"]


def test_gzip_and_plain_load_the_same(tmp_path):
    rows = [chat_row(i) for i in range(5)]
    plain = write_jsonl(tmp_path / "c.jsonl", rows)
    packed = tmp_path / "c.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    a = load_source(Source(str(plain)), "metadata.source_trajectory_uid")
    b = load_source(Source(str(packed)), "metadata.source_trajectory_uid")
    assert [r["messages"] for r in a.records] == [r["messages"] for r in b.records]
    assert len(a.records) == 5 and not b.problems


def test_refuses_to_start_on_bad_records_and_lists_every_one(tmp_path):
    path = write_jsonl(tmp_path / "mixed.jsonl", [chat_row(0), "{oops", chat_row(1), {"messages": []}])
    with pytest.raises(CorpusError) as err:
        load_corpus_sources(CorpusArguments(datasets=[str(path)]))
    message = str(err.value)
    assert f"{path}:2: invalid JSON" in message and f"{path}:4: messages: empty conversation" in message
    assert "skip_invalid: true" in message
    loaded = load_corpus_sources(CorpusArguments(datasets=[str(path)], skip_invalid=True))
    assert len(loaded[0].records) == 2 and len(loaded[0].problems) == 2


def test_missing_file_and_bad_source_keys(tmp_path):
    with pytest.raises(CorpusError, match="nope.jsonl: no such file"):
        load_corpus_sources(CorpusArguments(datasets=[str(tmp_path / "nope.jsonl")]))
    with pytest.raises(ValueError, match=r"datasets\[0\]: unknown key\(s\) \['weigth'\]"):
        load_corpus_sources(CorpusArguments(datasets=[{"path": "data/sft/terminus2_chat.jsonl", "weigth": 2}]))
    with pytest.raises(ValueError, match="truncation: 'middle' is not one of"):
        CorpusArguments(truncation="middle")


def test_pivot_row_is_prompt_completion():
    row = {"responses_create_params": {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Task: fix it"}]},
        {"role": "assistant", "content": "{\"analysis\": \"a\"}"},
        {"role": "user", "content": "New Terminal Output:\n$ "}]},
        "expected_answer": "{\"analysis\": \"b\", \"plan\": \"\", \"commands\": [], \"task_complete\": true}",
        "metadata": {"harness": "terminus_2", "source_trajectory_uid": "t1"}}
    from chat_corpus.sources import pivot_to_chat

    record = pivot_to_chat(row)
    roles = [(m["role"], m.get("train", True)) for m in record["messages"]]
    assert roles == [("user", True), ("assistant", False), ("user", True), ("assistant", True)]
    assert record["messages"][0]["content"] == "Task: fix it"
    assert record["messages"][-1]["content"] == row["expected_answer"]


def test_bundled_samples_are_valid_in_every_format():
    formats = {}
    for path in ["data/sft/agent_tool_calls.jsonl", "data/sft/terminus2_chat.jsonl",
                 "data/pivot/terminal_pivot.jsonl", "data/harbor/sample-job"]:
        loaded = load_source(Source(str(REPO / path)), "metadata.source_trajectory_uid")
        assert loaded.problems == [] and loaded.records, path
        assert loaded.missing_split_key == 0
        formats.update(loaded.formats)
    assert set(formats) == {"chat", "pivot", "harbor"}


def test_harbor_terminus_trajectory_becomes_terminus_chat():
    loaded = load_source(Source(str(REPO / "data/harbor/sample-job")), "metadata.task_id")
    for record in loaded.records:
        messages = record["messages"]
        assert messages[0]["role"] == "user" and "Task" in messages[0]["content"]
        actions = [m for m in messages if m["role"] == "assistant"]
        for action in actions:
            parsed = json.loads(action["content"])
            assert {"analysis", "plan", "commands"} <= set(parsed)
        assert record["group"] == record["origin"].split("/")[-3].split("__")[0]


def test_a_terminus_action_after_reasoning_left_in_the_content_is_the_action():
    """A raw Terminus-2 message whose server split no reasoning off (`<think>...</think>` before the JSON, or only
    the close when the template opened it): the assistant turn is the JSON action alone."""
    from chat_corpus.harbor_trajectory import trajectory_to_chat

    action = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n", "duration": 0.1}],
              "task_complete": False}
    for raw in (f"<think>\nlook {{first}}\n</think>\n\n{json.dumps(action)}", f"look</think>\n{json.dumps(action)}"):
        chat = trajectory_to_chat({"agent": {"name": "terminus-2"}, "steps": [
            {"source": "user", "message": "Task"},
            {"source": "agent", "message": raw, "tool_calls": [
                {"tool_call_id": "c", "function_name": "bash_command", "arguments": {"keystrokes": "ls\n"}}]}]})
        assert [json.loads(m["content"]) for m in chat["messages"] if m["role"] == "assistant"] == [action]
