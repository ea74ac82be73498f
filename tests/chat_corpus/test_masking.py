"""Loss masks: the trained tokens are exactly the trainable assistant turns, end-of-turn token included."""


import pytest
from conftest import REPO

from chat_corpus.masking import fit_to_length, tokenize_chat, training_chat_template
from chat_corpus.records import RecordError, normalize_chat
from chat_corpus.sources import Source, load_source

TOOLS = [{"type": "function", "function": {"name": "bash", "description": "Run a shell command.",
                                           "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]


def expected_trained_text(tokenizer, template, record) -> str:
    """Each trainable assistant turn as the template renders it, found independently of the generation mask:
    the text a turn adds to the rendered prefix, minus the role header (the template is prefix-preserving)."""
    messages, pieces = record["messages"], []
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or message.get("train") is False:
            continue
        before = tokenizer.apply_chat_template(messages[:index], tools=record["tools"], chat_template=template,
                                               tokenize=False) if index else ""
        after = tokenizer.apply_chat_template(messages[:index + 1], tools=record["tools"], chat_template=template,
                                              tokenize=False)
        assert after.startswith(before)
        turn = after[len(before):]
        header = "<|im_start|>assistant\n"
        assert turn.startswith(header)
        pieces.append(turn[len(header):])
    return "".join(pieces)


def trained_text(tokenizer, input_ids, mask) -> str:
    return tokenizer.decode([t for t, m in zip(input_ids, mask) if m], skip_special_tokens=False)


def multi_turn_record():
    return normalize_chat([
        {"role": "system", "content": "You are a terminal agent."},
        {"role": "user", "content": "The nightly ETL failed. Fix it."},
        {"role": "assistant", "content": "Checking the log.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"tail -n 50 /var/log/etl.log\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "KeyError: 'amount'\n" * 20},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": {"cmd": "rm -rf /srv/etl"}}},
            {"id": "c3", "type": "function", "function": {"name": "bash", "arguments": {"cmd": "ls"}}}], "train": False},
        {"role": "tool", "tool_call_id": "c2", "content": "removed"},
        {"role": "tool", "tool_call_id": "c3", "content": "(empty)"},
        {"role": "assistant", "content": "That was wrong; restoring from backup.", "tool_calls": [
            {"id": "c4", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"cp -a /backup/etl /srv/\"}"}}]},
        {"role": "tool", "tool_call_id": "c4", "content": ""},
        {"role": "user", "content": "Also rename the column."},
        {"role": "assistant", "content": "Renamed `amount` to `amount_usd` and reran the job: 3 files, 0 errors."},
    ], TOOLS)


def test_trained_tokens_are_exactly_the_trainable_assistant_turns(tokenizer):
    template = training_chat_template(tokenizer)
    record = multi_turn_record()
    input_ids, mask = tokenize_chat(tokenizer, template, record)
    got = trained_text(tokenizer, input_ids, mask)
    assert got == expected_trained_text(tokenizer, template, record)
    # spelled out once, so the expectation does not rest on the template alone
    assert got == (
        '<think>\n\n</think>\n\nChecking the log.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "tail -n 50 '
        '/var/log/etl.log"}}\n</tool_call><|im_end|>\n'
        '<think>\n\n</think>\n\nThat was wrong; restoring from backup.\n<tool_call>\n{"name": "bash", "arguments": '
        '{"cmd": "cp -a /backup/etl /srv/"}}\n</tool_call><|im_end|>\n'
        '<think>\n\n</think>\n\nRenamed `amount` to `amount_usd` and reran the job: 3 files, 0 errors.<|im_end|>\n')
    untrained = tokenizer.decode([t for t, m in zip(input_ids, mask) if not m])
    for never in ("You are a terminal agent", "KeyError", "rm -rf", "Also rename", "<tools>", "<|im_start|>assistant"):
        assert never in untrained and never not in got


@pytest.mark.parametrize("path", ["data/sft/agent_tool_calls.jsonl", "data/sft/terminus2_chat.jsonl",
                                  "data/pivot/terminal_pivot.jsonl", "data/harbor/sample-job"])
def test_bundled_corpora_mask_exactly(tokenizer, path):
    template = training_chat_template(tokenizer)
    records = load_source(Source(str(REPO / path)), "metadata.source_trajectory_uid").records[:6]
    for record in records:
        input_ids, mask = tokenize_chat(tokenizer, template, record)
        assert trained_text(tokenizer, input_ids, mask) == expected_trained_text(tokenizer, template, record)


def test_pivot_rows_train_only_the_expected_answer(tokenizer):
    template = training_chat_template(tokenizer)
    record = load_source(Source(str(REPO / "data/pivot/terminal_pivot.jsonl")), "uuid").records[-1]
    input_ids, mask = tokenize_chat(tokenizer, template, record)
    answer = record["messages"][-1]["content"]
    assert trained_text(tokenizer, input_ids, mask) == f"<think>\n\n</think>\n\n{answer}<|im_end|>\n"


def test_truncation_policies(tokenizer):
    template = training_chat_template(tokenizer)
    input_ids, mask = tokenize_chat(tokenizer, template, multi_turn_record())
    spans_end = [i + 1 for i in range(len(mask) - 1) if mask[i] and not mask[i + 1]]
    limit = spans_end[1] + 3  # the second trained turn fits whole, the third does not
    kept = fit_to_length(input_ids, mask, limit, "turns")
    assert kept.truncated and len(kept.input_ids) == spans_end[1]
    assert kept.trained_tokens_cut == sum(mask) - sum(mask[:spans_end[1]])
    cut = fit_to_length(input_ids, mask, limit, "keep_start")
    assert len(cut.input_ids) == limit and cut.truncated
    with pytest.raises(RecordError, match="truncation: drop"):
        fit_to_length(input_ids, mask, limit, "drop")
    with pytest.raises(RecordError, match="no trained assistant turn fits whole"):
        fit_to_length(input_ids, mask, 10, "turns")
    whole = fit_to_length(input_ids, mask, len(input_ids), "drop")
    assert not whole.truncated and whole.input_ids == input_ids


def test_chat_template_path_gives_a_model_without_a_training_twin_its_masks(tmp_path):
    """A template with no twin, TRL's or the repo's (here Llama 3.1's edited by a byte), is refused in one line, until
    the config's chat_template_path (a .jinja file) names a template with {% generation %} markers, which the corpus
    is then rendered with (as TRL sets it at the trainer's start); anything but a .jinja file is one clear line."""
    from chat_corpus.masking import load_tokenizer
    from common.errors import ConfigError
    from common.model_families import trl_template_dir
    from modeling.tiny_model import resolve_model

    llama = resolve_model("builtin:tiny-llama3_1")
    tokenizer = load_tokenizer(llama)
    tokenizer.chat_template += " "
    with pytest.raises(ConfigError, match="set `chat_template_path`") as refused:
        training_chat_template(tokenizer)
    assert "\n" not in str(refused.value)
    marked = (trl_template_dir() / "qwen3_training.jinja").read_text()
    path = tmp_path / "marked.jinja"
    path.write_text(marked)
    tokenizer = load_tokenizer(llama, chat_template_path=str(path))
    assert training_chat_template(tokenizer) == marked
    with pytest.raises(ConfigError, match=r"chat_template_path: '.*marked.txt' is not a \.jinja file"):
        load_tokenizer(llama, chat_template_path=str(tmp_path / "marked.txt"))
    with pytest.raises(ConfigError, match="chat_template_path: cannot read"):
        load_tokenizer(llama, chat_template_path=str(tmp_path / "none.jinja"))


def test_a_record_the_template_cannot_hold_is_a_record_error():
    """Llama 3.1's template raises on a turn with two tool calls (its format holds one): a RecordError naming the
    template's reason, which the corpus counts or drops (skip_invalid), not a crash of the run."""
    from chat_corpus.masking import load_tokenizer
    from modeling.tiny_model import resolve_model

    tokenizer = load_tokenizer(resolve_model("builtin:tiny-llama3_1"))
    call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}
    record = {"messages": [{"role": "user", "content": "look"},
                           {"role": "assistant", "content": "", "tool_calls": [call, call]},
                           {"role": "tool", "name": "bash", "content": "a"}, {"role": "tool", "name": "bash", "content": "a"},
                           {"role": "assistant", "content": "done"}]}
    with pytest.raises(RecordError, match="^the chat template refuses this record: This model only supports single "
                                          "tool-calls at once!$"):
        tokenize_chat(tokenizer, training_chat_template(tokenizer), record)
