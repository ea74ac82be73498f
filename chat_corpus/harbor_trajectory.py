"""Harbor trial trajectories (`<trial>/agent/trajectory.json`, ATIF) as chat records.
Runs in: the training venv (standard library only).

Terminus-2 trials become the chat the model saw (the prompt, each JSON action as the assistant turn, each
observation as the next user turn); other agents become OpenAI tool-calling chats with the trajectory's
`agent.tool_definitions` as `tools`. The conversion: docs/formats.md.
"""

from __future__ import annotations

import json
import re

from chat_corpus.records import RecordError, normalize_chat

TERMINUS_AGENTS = ("terminus-2", "terminus_2", "terminus")
_ANALYSIS_PLAN = re.compile(r"^Analysis:\s*(?P<analysis>.*?)\s*(?:\nPlan:\s*(?P<plan>.*))?$", re.S)


def content_text(value) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts
        return "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in value)
    return json.dumps(value)


def observation_text(step: dict) -> str:
    """An agent step's observation: what Terminus-2 sent as the next user turn."""
    results = (step.get("observation") or {}).get("results") or []
    return "\n".join(content_text(result.get("content")) for result in results if isinstance(result, dict))


def terminus_action(step: dict) -> str:
    """A Terminus-2 agent step's action as JSON text: the raw response where the step kept it, else rebuilt (the
    layout the scripted teacher writes) from Harbor's `Analysis:/Plan:` message and its tool calls."""
    message = content_text(step.get("message")).strip()
    if "</think>" in message:  # reasoning a server left in the content: the action is what follows (as NeMo Gym's)
        message = message.rsplit("</think>", 1)[1].strip()
    if message.startswith(("{", "<response>")):  # raw model output kept (trajectory_config raw_content)
        return message
    match = _ANALYSIS_PLAN.match(message)
    analysis, plan = (match.group("analysis"), match.group("plan") or "") if match else (message, "")
    commands, complete = [], False
    for call in step.get("tool_calls") or []:
        arguments = call.get("arguments") or {}
        if call.get("function_name") == "mark_task_complete":
            complete = True
        elif "keystrokes" in arguments:
            commands.append({"keystrokes": arguments["keystrokes"], "duration": arguments.get("duration", 1.0)})
    return json.dumps({"analysis": analysis, "plan": plan, "commands": commands, "task_complete": complete},
                      indent=2, ensure_ascii=False)


def agent_commands(trajectory: dict) -> list[str]:
    """The commands an agent ran, in order: Terminus-2's keystrokes (stripped), the bash tool's `command`; a task marked
    complete as `(task complete)`, any other call as `name(arguments)`."""
    commands = []
    for step in trajectory.get("steps") or []:
        if not isinstance(step, dict) or step.get("source") != "agent":
            continue
        for call in step.get("tool_calls") or []:
            arguments = (call.get("arguments") or {}) if isinstance(call, dict) else {}
            if not isinstance(arguments, dict):
                arguments = {}
            for key in ("keystrokes", "command"):
                if isinstance(arguments.get(key), str):
                    commands.append(arguments[key].strip())
                    break
            else:
                name = call.get("function_name") if isinstance(call, dict) else None
                commands.append("(task complete)" if name == "mark_task_complete" else
                                f"{name}({json.dumps(arguments, ensure_ascii=False)})")
    return commands


def trajectory_to_chat(trajectory: dict) -> dict:
    steps = trajectory.get("steps")
    if not isinstance(steps, list) or not steps:
        raise RecordError("steps: an ATIF trajectory needs a non-empty list of steps")
    agent = str((trajectory.get("agent") or {}).get("name", "")).lower()
    terminus = agent in TERMINUS_AGENTS
    messages: list[dict] = []
    for index, step in enumerate(steps):
        if not isinstance(step, dict):
            raise RecordError(f"steps[{index}]: must be an object")
        source = step.get("source")
        if source in ("system", "user"):
            messages.append({"role": source, "content": content_text(step.get("message"))})
        elif source == "agent":
            if terminus:
                messages.append({"role": "assistant", "content": terminus_action(step)})
                observation = observation_text(step)
                if observation:
                    messages.append({"role": "user", "content": observation})
                continue
            calls = [{"id": call.get("tool_call_id"), "type": "function",
                      "function": {"name": call.get("function_name"), "arguments": call.get("arguments") or {}}}
                     for call in step.get("tool_calls") or [] if isinstance(call, dict)]
            message = {"role": "assistant", "content": content_text(step.get("message")), "tool_calls": calls}
            if step.get("reasoning_content"):
                message["reasoning_content"] = content_text(step["reasoning_content"])
            messages.append(message)
            names = {call["id"]: call["function"]["name"] for call in calls}
            for result in (step.get("observation") or {}).get("results") or []:
                if calls:
                    tool = {"role": "tool", "tool_call_id": result.get("source_call_id"),
                            "content": content_text(result.get("content"))}
                    if isinstance(names.get(tool["tool_call_id"]), str):
                        tool["name"] = names[tool["tool_call_id"]]
                    messages.append(tool)
                else:
                    messages.append({"role": "user", "content": content_text(result.get("content"))})
        else:
            raise RecordError(f"steps[{index}]: source {source!r} is not one of system, user, agent")
    while messages and messages[-1]["role"] != "assistant":  # a trailing observation teaches nothing
        messages.pop()
    tools = None if terminus else (trajectory.get("agent") or {}).get("tool_definitions")
    try:
        return normalize_chat(messages, tools)
    except RecordError as err:
        raise RecordError(f"converted trajectory: {err}") from None
