"""common/reasoning.py: each family's reasoning split from its answer as the vLLM reasoning parser the table names
splits it (the edges of each parser included), the reasoning blocks NeMo Gym's Responses converter makes, and
docs/models.md's reasoning table held to the family table."""

from pathlib import Path

import pytest
from conftest import with_reasoning

from common.model_families import FAMILIES, HARMONY_CHANNELS, THINK_TAGS
from common.reasoning import reasoning_blocks, split_reasoning

ACTION = '{"analysis": "a {b}", "plan": "p", "commands": [{"keystrokes": "ls -la\\n", "duration": 0.1}]}'
THOUGHT = "The file is small; list it first."


@pytest.mark.parametrize("key", FAMILIES)
def test_reasoning_then_the_answer_splits_as_the_familys_vllm_parser_splits_it(key):
    family = FAMILIES[key]
    reasoning, content = split_reasoning(family, with_reasoning(family, ACTION, THOUGHT))
    if family.vllm_reasoning_parser is None:
        assert family.reasoning_format is None and (reasoning, content) == (None, ACTION)
        return
    assert reasoning.strip() == THOUGHT and content.strip() == ACTION
    assert split_reasoning(family, ACTION, enable_thinking=False) == (None, ACTION)  # thinking off: all content


@pytest.mark.parametrize("key", [k for k, f in FAMILIES.items() if f.reasoning_format == THINK_TAGS])
def test_a_block_the_template_opened_in_the_prompt(key):
    family = FAMILIES[key]
    reasoning, content = split_reasoning(family, with_reasoning(family, ACTION, THOUGHT, opened_in_prompt=True))
    if family.vllm_reasoning_parser == "glm45":  # vLLM's glm45 splits only text holding both tags
        assert (reasoning, content) == (None, with_reasoning(family, ACTION, THOUGHT, opened_in_prompt=True))
    else:
        assert reasoning.strip() == THOUGHT and content.strip() == ACTION


def test_each_parsers_edges():
    qwen3, nemotron, glm, gptoss = (FAMILIES[k] for k in ("qwen3", "nemotron_3_nano", "glm4moe", "gptoss"))
    # never closed: cut short while reasoning (thinking on, the default), all content with thinking off
    assert split_reasoning(qwen3, "still thinking") == ("still thinking", None)
    assert split_reasoning(qwen3, "still thinking", enable_thinking=False) == (None, "still thinking")
    assert split_reasoning(nemotron, "still thinking") == ("still thinking", None)
    assert split_reasoning(nemotron, "an answer", enable_thinking=False) == (None, "an answer")
    assert split_reasoning(glm, "still thinking") == (None, "still thinking")
    # qwen3: a <tool_call> opening a <function= ends the reasoning (Qwen3.5 may skip </think>); a mention does not
    assert split_reasoning(qwen3, "hm\n<tool_call>\n<function=bash>") == ("hm\n", "<tool_call>\n<function=bash>")
    assert split_reasoning(qwen3, "say <tool_call> then") == ("say <tool_call> then", None)
    # closed with nothing after it: no content
    assert split_reasoning(qwen3, "<think>hm</think>") == ("hm", None)
    # harmony: analysis messages are the reasoning, final the content; text without its markers is all content
    text = ("<|channel|>analysis<|message|>one<|end|><|start|>assistant<|channel|>analysis<|message|>two<|end|>"
            "<|start|>assistant<|channel|>final<|message|>answer<|return|>")
    assert split_reasoning(gptoss, text) == ("one\ntwo", "answer")
    assert split_reasoning(gptoss, "answer") == (None, "answer")


@pytest.mark.parametrize("key", FAMILIES)
def test_reasoning_blocks_as_nemo_gyms_converter_makes_them(key):
    family = FAMILIES[key]
    blocks, answer = reasoning_blocks(family, with_reasoning(family, ACTION, THOUGHT))
    if family.reasoning_format is None:
        assert (blocks, answer) == ([], ACTION)
        return
    assert [b.strip() for b in blocks] == [THOUGHT] and answer.strip() == ACTION
    assert reasoning_blocks(family, ACTION) == ([], ACTION)  # no reasoning written: the answer as it is
    if family.reasoning_format == THINK_TAGS:
        blocks, answer = reasoning_blocks(family, with_reasoning(family, ACTION, THOUGHT, opened_in_prompt=True))
        assert [b.strip() for b in blocks] == [THOUGHT] and answer.strip() == ACTION
        # every pair is a block (NeMo Gym's THINK_TAG_PATTERN), an unclosed one stays in the answer
        assert reasoning_blocks(family, "<think>a</think>b<think>c</think>d") == (["a", "c"], "bd")
        assert reasoning_blocks(family, "<think>cut short") == ([], "<think>cut short")


def test_docs_reasoning_table_is_the_family_table():
    page = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    section = page.split("## Reasoning", 1)[1].split("\n## ", 1)[0]
    rows = {cells[0]: cells[1:3] for cells in ([c.strip() for c in line.strip().strip("|").split("|")]
                                               for line in section.splitlines() if line.startswith("| "))
            if cells[0] not in ("family", "---")}
    formats = {THINK_TAGS: "`<think>`", HARMONY_CHANNELS: "harmony `analysis` channel", None: "none"}
    assert rows == {f.key: [formats[f.reasoning_format],
                                   f"`{f.vllm_reasoning_parser}`" if f.vllm_reasoning_parser else "none"]
                    for f in FAMILIES.values()}
