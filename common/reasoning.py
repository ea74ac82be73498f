"""A model's generated text split into (reasoning, content) as the vLLM reasoning parser of its family splits it.
Runs in: any Python >= 3.11, standard library only (the CPU server, the GRPO reward client, tests).

One owner: `split_reasoning(family, text, enable_thinking)` follows the `extract_reasoning` of the parser the family
table names (common/model_families.py, `vllm_reasoning_parser`): `qwen3` (a `<think>` the model wrote is dropped; no
`</think>` is all reasoning, or all content when thinking was turned off, or reasoning up to a `<tool_call>` that
opens a `<function=`), `nemotron_v3` (no `</think>` is all reasoning; with thinking off an answer with no content is
all content), `glm45` (only text with both tags has reasoning), `openai_gptoss` (harmony: the `analysis` channel is
the reasoning, the `final` channel the content; the markers are special tokens, so only text decoded with them
kept can be split). A family with no reasoning parser: no reasoning, the text is the content.
`reasoning_blocks(family, text)`: the reasoning items and answer of a Responses object as NeMo Gym's converter makes
them (the GRPO reward client's `/verify` body). docs/models.md#reasoning.
"""

from __future__ import annotations

import re

from common.model_families import HARMONY_CHANNELS, THINK_TAGS, ModelFamily

THINK_START, THINK_END = "<think>", "</think>"
THINK_BLOCK = re.compile(r"<think>(.*?)</think>", re.DOTALL)  # NeMo Gym's ResponsesConverter.THINK_TAG_PATTERN
TOOL_CALL = "<tool_call>"
FUNCTION_OPEN = re.compile(r"<function[\s=]")  # vLLM qwen3: a <tool_call> that really opens a call
HARMONY_MESSAGE = re.compile(
    r"<\|channel\|>(\w+)[^<]*(?:<\|constrain\|>[^<]*)?<\|message\|>(.*?)(?=<\|end\|>|<\|return\|>|<\|call\|>|"
    r"<\|start\|>|$)", re.DOTALL)

Split = tuple[str | None, str | None]


def _after_start(text: str) -> str:
    """The text after a `<think>` the model wrote itself (the whole text when it wrote none)."""
    before, start, after = text.partition(THINK_START)
    return after if start else before


def _qwen3(text: str, enable_thinking: bool | None) -> Split:
    text = _after_start(text)
    if THINK_END in text:
        reasoning, _, content = text.partition(THINK_END)
        return reasoning, content or None
    if enable_thinking is False:
        return None, text
    at = text.find(TOOL_CALL)
    if at != -1 and FUNCTION_OPEN.match(text[at + len(TOOL_CALL):].lstrip()):
        return text[:at] or None, text[at:] or None
    return text, None  # thinking on and never closed: cut short while reasoning


def _nemotron_v3(text: str, enable_thinking: bool | None) -> Split:
    text = _after_start(text)
    if THINK_END not in text:
        reasoning, content = text, None
    else:
        reasoning, _, content = text.partition(THINK_END)
        content = content or None
    if enable_thinking is False and content is None:
        return content, reasoning
    return reasoning, content


def _glm45(text: str, enable_thinking: bool | None) -> Split:
    if THINK_START not in text or THINK_END not in text:
        return None, text
    reasoning, _, content = _after_start(text).partition(THINK_END)
    return reasoning, content or None


def _harmony(text: str, enable_thinking: bool | None) -> Split:
    messages = HARMONY_MESSAGE.findall(text)
    if not messages:
        return None, text
    reasoning = [body for channel, body in messages if channel == "analysis"]
    content = [body for channel, body in messages if channel == "final"]
    return "\n".join(reasoning) if reasoning else None, "\n".join(content) if content else None


SPLITTERS = {"qwen3": _qwen3, "nemotron_v3": _nemotron_v3, "glm45": _glm45, "openai_gptoss": _harmony}


def split_reasoning(family: ModelFamily, text: str, enable_thinking: bool | None = None) -> Split:
    """(reasoning, content) of one generated answer, as vLLM serving `family` with its reasoning parser returns
    them (None where there is none); `enable_thinking`: the request's `chat_template_kwargs` value, if sent."""
    splitter = SPLITTERS.get(family.vllm_reasoning_parser or "")
    if splitter is None:
        return None, text
    return splitter(text, enable_thinking)


def reasoning_blocks(family: ModelFamily, text: str) -> tuple[list[str], str]:
    """The reasoning blocks of one generated answer and the answer without them, as NeMo Gym's Responses converter
    (vllm_model with `uses_reasoning_parser`, vLLM itself serving without one) splits `<think>` families: each
    `<think>...</think>` pair is one block, cut out of the answer; the text before a leading unpaired `</think>`
    (the template opened the block in the prompt) is one too, where the converter leaves it for the servers to strip
    (they strip up to it, so the reward is the same). gpt-oss: its harmony `analysis` messages, the answer its `final`
    one(s). A family without reasoning, or text without its markers: no blocks, the text as it is."""
    if family.reasoning_format == THINK_TAGS:
        blocks = THINK_BLOCK.findall(text)
        answer = THINK_BLOCK.sub("", text)
        if THINK_END in answer and THINK_START not in answer.partition(THINK_END)[0]:
            before, _, answer = answer.partition(THINK_END)
            blocks.insert(0, before)
        return [block for block in blocks if block], answer
    if family.reasoning_format == HARMONY_CHANNELS and HARMONY_MESSAGE.search(text):
        reasoning, content = _harmony(text, None)
        return ([reasoning] if reasoning else []), content or ""
    return [], text
