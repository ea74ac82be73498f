"""The NeMo Gym `/verify` wire format: request models, the echo of `responses_create_params`, and `make_response`.
Runs in: the training venv (pydantic): the reward server validates with it, the GRPO client builds its requests.

A verify request is a dataset row plus `response` (an OpenAI Responses object). The models check what NeMo Gym's
pydantic models check (and the types of every field a reward reads), so a bad request is a 422 naming the field.
"""

from __future__ import annotations

import re
import time
import uuid as uuid_lib
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CreateParams(BaseModel):
    """`NeMoGymResponseCreateParamsNonStreaming`: the Responses API request keys, nothing else (extra="forbid")."""

    model_config = ConfigDict(extra="forbid")

    background: Optional[bool] = None
    include: Optional[list[str]] = None
    input: Union[str, list[dict[str, Any]]]
    instructions: Optional[str] = None
    max_output_tokens: Optional[int] = None
    max_tool_calls: Optional[int] = None
    metadata: Optional[dict[str, str]] = None
    model: Optional[str] = None
    parallel_tool_calls: bool = True
    previous_response_id: Optional[str] = None
    prompt: Optional[dict[str, Any]] = None
    reasoning: Optional[dict[str, Any]] = None
    service_tier: Optional[Literal["auto", "default", "flex", "scale", "priority"]] = None
    store: Optional[bool] = None
    temperature: Optional[float] = None
    text: Optional[dict[str, Any]] = None
    tool_choice: Union[str, dict[str, Any]] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_logprobs: Optional[int] = None
    top_p: Optional[float] = None
    truncation: Optional[Literal["auto", "disabled"]] = None
    user: Optional[str] = None
    stream: Optional[Literal[False]] = None


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="allow")

    type: Optional[str] = None
    text: Optional[str] = None


class OutputItem(BaseModel):
    """One `response.output` item. NeMo Gym requires the `type` discriminator; a message needs a role and content."""

    model_config = ConfigDict(extra="allow")

    type: str
    role: Optional[str] = None
    content: Optional[Union[str, list[ContentPart]]] = None

    @model_validator(mode="after")
    def _message_shape(self):
        if self.type == "message":
            if self.role is None:
                raise ValueError("a message item needs a 'role'")
            if self.content is None:
                raise ValueError("a message item's 'content' must be a list of parts or a string")
        return self


class ResponseObject(BaseModel):
    """The `response` of a verify request (an OpenAI Responses object; only what a reward reads is checked)."""

    model_config = ConfigDict(extra="allow")

    id: Optional[str] = None
    object: Optional[Literal["response"]] = None
    created_at: Optional[float] = None
    model: Optional[str] = None
    output: list[OutputItem]


class VerifyRequest(BaseModel):
    """`BaseVerifyRequest`: what every environment's request has."""

    model_config = ConfigDict(populate_by_name=True)

    responses_create_params: CreateParams
    response: ResponseObject


def dump_create_params(params: CreateParams) -> dict:
    """`responses_create_params` as NeMo Gym echoes it: every key with its default, and input messages written as
    `{"content", "role", "type": "message"}` (EasyInputMessage's default type)."""
    data = params.model_dump()
    if isinstance(data["input"], list):
        data["input"] = [dict(item, type="message") if "type" not in item and "role" in item and "content" in item
                         else item for item in data["input"]]
    return data


# ---- text of a response -------------------------------------------------------------------------------------


def _message_text(item: OutputItem) -> Optional[str]:
    if isinstance(item.content, list):
        return "\n".join(part.text for part in item.content if isinstance(part.text, str))
    if isinstance(item.content, str):
        return item.content
    return None


def all_assistant_text(response: ResponseObject) -> str:
    """terminus_judge's `_extract_last_assistant_text`: despite its name, every assistant message's text parts,
    joined by newlines, then stripped. Reasoning items are ignored."""
    texts: list[str] = []
    for item in response.output:
        if item.type == "message" and item.role == "assistant":
            if isinstance(item.content, list):
                texts.extend(part.text for part in item.content if isinstance(part.text, str))
            elif isinstance(item.content, str):
                texts.append(item.content)
    return "\n".join(texts).strip()


def last_assistant_text(response: ResponseObject) -> Optional[str]:
    """The last assistant message's text parts joined by newlines and stripped (multichallenge, verifif);
    None when the response has no assistant message."""
    for item in reversed(response.output):
        if item.type == "message" and item.role == "assistant":
            text = _message_text(item)
            if text is not None:
                return text.strip()
    return None


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_THINKING = re.compile(r"<thinking>.*?</thinking>", re.DOTALL)
_UNPAIRED_THINK = re.compile(r"^.*?</think>", re.DOTALL)
_UNPAIRED_THINKING = re.compile(r"^.*?</thinking>", re.DOTALL)


def strip_thinking(text: str) -> str:
    """multichallenge/verifif think stripping: drop `<think>…</think>` and `<thinking>…</thinking>` blocks, then
    everything up to an unpaired closing tag (the opening tag was in the prompt), then strip."""
    text = _THINK.sub("", text)
    text = _THINKING.sub("", text)
    text = _UNPAIRED_THINK.sub("", text)
    text = _UNPAIRED_THINKING.sub("", text)
    return text.strip()


# ---- the client side ------------------------------------------------------------------------------------------


def make_response(text: str, model: str = "policy", reasoning: str | list[str] | None = None,
                  response_id: str | None = None) -> dict:
    """A completed OpenAI Responses object holding one assistant message with `text` (and, when given, a reasoning
    item before it: one summary text per block, as NeMo Gym's converter writes it), in the shape NeMo Gym's
    `NeMoGymResponse` validates: what a policy server returns for one turn."""
    rid = response_id or f"resp_{uuid_lib.uuid4().hex}"
    output: list[dict] = []
    blocks = [reasoning] if isinstance(reasoning, str) else list(reasoning or [])
    if blocks:
        output.append({"type": "reasoning", "id": f"rs_{uuid_lib.uuid4().hex}", "status": "completed",
                       "summary": [{"type": "summary_text", "text": block} for block in blocks]})
    output.append({"type": "message", "id": f"msg_{uuid_lib.uuid4().hex}", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": text, "annotations": []}]})
    return {
        "id": rid,
        "object": "response",
        "created_at": float(int(time.time())),
        "model": model,
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": None,
        "output": output,
        "parallel_tool_calls": True,
        "temperature": None,
        "tool_choice": "auto",
        "tools": [],
        "top_p": None,
        "usage": {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 0,
                  "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 0},
    }
