"""Chat records: the one shape every corpus is converted to, and its validation.
Runs in: the training venv (standard library only).

A record is `{"messages": [...], "tools": [...] | None}` in OpenAI chat form; an assistant message may carry
`"train": false` to keep it out of the loss. `normalize_chat` returns the cleaned record or raises `RecordError`
with a reason a user can act on. The shape: docs/formats.md.
"""

from __future__ import annotations

import json
from typing import Any

ROLES = ("system", "user", "assistant", "tool")


class RecordError(ValueError):
    """A record that cannot be trained on; the message is the reason, without the file:line prefix."""


def text_content(content: Any, where: str) -> str:
    """OpenAI content: a string, None, or a list of text parts (`text`, `input_text`, `output_text`)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise RecordError(f"{where}: content part {part!r:.60} is not a text part ({{'type': 'text', 'text': ...}})")
        return "".join(texts)
    raise RecordError(f"{where}: content must be a string or a list of text parts, got {type(content).__name__}")


def _normalize_tool_call(call: Any, where: str) -> dict:
    if not isinstance(call, dict):
        raise RecordError(f"{where}: a tool call must be an object, got {type(call).__name__}")
    function = call.get("function", call)
    if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
        raise RecordError(f"{where}: tool call has no function name (expected {{'function': {{'name': ..., 'arguments': ...}}}})")
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as err:
            raise RecordError(f"{where}: arguments of tool call {function['name']!r} are not valid JSON ({err.msg})") from None
    if not isinstance(arguments, dict):
        raise RecordError(f"{where}: arguments of tool call {function['name']!r} must be a JSON object")
    normalized = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
    if isinstance(call.get("id"), str):
        normalized["id"] = call["id"]
    return normalized


def normalize_tools(tools: Any) -> list[dict] | None:
    """The `tools` column: absent, a list of function schemas, the same list as a JSON string, or a list of
    schemas each a JSON string (as some SWE trajectory sets store them)."""
    if tools is None or tools == "" or tools == []:
        return None
    if isinstance(tools, str):
        try:
            tools = json.loads(tools)
        except json.JSONDecodeError as err:
            raise RecordError(f"tools: not valid JSON ({err.msg})") from None
    if isinstance(tools, list):
        parsed = []
        for index, tool in enumerate(tools):
            if isinstance(tool, str):
                try:
                    tool = json.loads(tool)
                except json.JSONDecodeError as err:
                    raise RecordError(f"tools[{index}]: not valid JSON ({err.msg})") from None
            parsed.append(tool)
        tools = parsed
    if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
        raise RecordError("tools: must be a list of function schemas (or that list as a JSON string, or a list of "
                          "JSON strings)")
    return tools or None


def normalize_chat(messages: Any, tools: Any = None) -> dict:
    """Validate a conversation and return `{"messages", "tools"}` in canonical form."""
    if not isinstance(messages, list):
        raise RecordError(f"messages: must be a list of messages, got {type(messages).__name__}")
    if not messages:
        raise RecordError("messages: empty conversation")
    out: list[dict] = []
    pending_calls: list[str | None] = []  # ids of tool calls not yet answered
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise RecordError(f"{where}: must be an object with 'role' and 'content'")
        role = message.get("role")
        if role == "developer":
            role = "system"
        if role not in ROLES:
            raise RecordError(f"{where}: role {role!r} is not one of {', '.join(ROLES)}")
        if "content" not in message and not (role == "assistant" and message.get("tool_calls")):
            raise RecordError(f"{where}: {role} message has no 'content'")
        content = text_content(message.get("content"), where)
        train = True if message.get("train") is None else message["train"]  # null: a column other rows fill
        if not isinstance(train, bool):
            raise RecordError(f"{where}: 'train' must be true or false, got {train!r}")
        if not train and role != "assistant":
            raise RecordError(f"{where}: 'train: false' only applies to assistant messages (only they are trained)")
        if role == "assistant" and not any(m["role"] == "user" for m in out):
            raise RecordError(f"{where}: assistant turn before any user turn")
        clean: dict[str, Any] = {"role": role, "content": content}
        if role == "assistant":
            calls = message.get("tool_calls") or []
            if not isinstance(calls, list):
                raise RecordError(f"{where}: tool_calls must be a list")
            clean["tool_calls"] = [_normalize_tool_call(call, f"{where}.tool_calls[{i}]") for i, call in enumerate(calls)]
            if not clean["tool_calls"]:
                del clean["tool_calls"]
                if not content.strip():
                    raise RecordError(f"{where}: assistant message with neither content nor tool calls")
            if isinstance(message.get("reasoning_content"), str):
                clean["reasoning_content"] = message["reasoning_content"]
            pending_calls = [call.get("id") for call in clean.get("tool_calls", [])]
            if not train:
                clean["train"] = False
        elif role == "tool":
            if not pending_calls:
                raise RecordError(f"{where}: tool message that answers no assistant tool call")
            call_id = message.get("tool_call_id")
            if call_id is not None and any(pending_calls) and call_id not in pending_calls:
                raise RecordError(f"{where}: tool_call_id {call_id!r} matches no pending tool call")
            pending_calls.remove(call_id if call_id in pending_calls else pending_calls[0])
            for key in ("tool_call_id", "name"):
                if isinstance(message.get(key), str):
                    clean[key] = message[key]
        else:
            pending_calls = []
        out.append(clean)
    if not any(m["role"] == "assistant" and m.get("train", True) for m in out):
        raise RecordError("messages: no assistant turn to train on (none, or all marked train: false)")
    return {"messages": out, "tools": normalize_tools(tools)}
