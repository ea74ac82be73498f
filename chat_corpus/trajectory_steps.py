"""A trajectory's steps: each shell command or file tool call of a chat record, with what it showed and where it ran.
Runs in: the training venv (common.terminus_actions); chat_corpus/from_trajectories.py reads trajectories with it.

Two shapes of chat record (chat_corpus.sources.to_record's output, for every format the corpus loaders read):
Terminus chats, whose assistant turns are JSON actions and whose next user turn is the terminal (each command's
output is the screen's lines after the prompt line that echoes it; a command whose echo scrolled off, or an output
Terminus cut, is marked truncated), and tool-calling chats (`bash`-like tools, and file tools: read_file/view,
write_file/create, edit_file/str_replace; line numbers of a numbered read are taken off). The working folder is the
prompt's (`user@host:/app#`), else the request's `Working directory: ...`, else /app; `cd` moves it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from common.terminus_actions import answer_text, json_object

DEFAULT_CWD = "/app"  # Harbor tasks' usual workdir, where nothing says otherwise
SHELL_TOOLS = ("bash", "shell", "execute_bash", "run_command", "terminal", "exec", "run_shell_command")
COMMAND_KEYS = ("command", "cmd", "script", "keystrokes")
READ_TOOLS = ("read_file", "view_file", "open_file", "cat")
WRITE_TOOLS = ("write_file", "create_file", "write")
EDIT_TOOLS = ("edit_file", "replace_in_file", "str_replace")
EDITOR_TOOLS = ("str_replace_based_edit_tool", "str_replace_editor", "text_editor", "editor")
PROMPT = re.compile(r"^(?:\(\S+\) )?[\w.-]+@[\w.-]+:(?P<cwd>[^#$\n]*?)[#$] ?(?P<typed>.*)$")
WORKDIR_SAID = re.compile(r"(?:working directory|cwd|workdir)\s*(?:is)?\s*:?\s*`?(/[\w./-]+)", re.IGNORECASE)
NUMBERED = re.compile(r"^\s*(\d+)\t(.*)$")
CUT_MARK = re.compile(r"\[\.\.\. output limited to \d+ bytes|\boutput (?:was )?truncated\b|\[truncated\]",
                      re.IGNORECASE)
TASK_DESCRIPTION = re.compile(r"Task Description:\n(?P<task>.*?)\n+Current terminal state:", re.DOTALL)


@dataclass
class Step:
    """One action: a shell `command`, or a file `tool` call with its `args`; `output` None when nothing of it was
    seen; `first_line` of the output as shown (a numbered read's first number)."""

    cwd: str
    command: str | None = None
    tool: str | None = None
    args: dict = field(default_factory=dict)
    output: str | None = None
    truncated: bool = False
    first_line: int = 1


@dataclass
class Trajectory:
    """What a trajectory says: the user's requests (in order), its steps, and the working folder it started in."""

    requests: list[str]
    steps: list[Step]
    workdir: str
    harness: str  # "terminus" or "tools"


def _text(content) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _arguments(call: dict) -> tuple[str, dict]:
    function = call.get("function") or {}
    args = function.get("arguments")
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = {}
    return str(function.get("name") or ""), args if isinstance(args, dict) else {}


def terminus_action(message: dict) -> dict | None:
    """An assistant message's Terminus action (JSON with a `commands` list), else None."""
    if message.get("role") != "assistant" or message.get("tool_calls"):
        return None
    action = json_object(answer_text(_text(message.get("content"))))
    return action if action is not None and isinstance(action.get("commands"), list) else None


def split_screen(screen: str, commands: list[str]) -> list[tuple[str | None, bool, str | None]]:
    """(output, truncated, cwd) of each command out of the terminal text that followed them: the lines after the
    prompt line echoing it (a heredoc's `> ` lines skipped) up to the next prompt line."""
    lines = screen.splitlines()
    at, out = 0, []
    for command in commands:
        first = command.strip().splitlines()[0].strip() if command.strip() else ""
        found = None
        for i in range(at, len(lines)):
            m = PROMPT.match(lines[i])
            if first and m and m["typed"].strip() == first:
                found, cwd = i, m["cwd"].strip()
                break
        if found is None:
            out.append((None, True, None))
            continue
        i = found + 1
        i += command.strip().count("\n")  # a multi-line command's continuation lines
        end = next((j for j in range(i, len(lines)) if PROMPT.match(lines[j])), len(lines))
        text = "\n".join(lines[i:end]).rstrip()
        out.append((text, bool(CUT_MARK.search(text)), cwd or None))
        at = end
    return out


def _home(cwd: str | None) -> str | None:
    if cwd is None or not cwd:
        return None
    return "/root" + cwd[1:] if cwd.startswith("~") else cwd


def read_trajectory(record: dict) -> Trajectory:
    """The steps of a chat record (chat_corpus.sources.to_record's): Terminus or tool-calling."""
    messages = [m for m in record.get("messages", []) if isinstance(m, dict)]
    actions = [(i, terminus_action(m)) for i, m in enumerate(messages)]
    if any(a is not None for _, a in actions):
        return _terminus(messages, actions)
    return _tools(messages)


def _terminus(messages: list[dict], actions: list[tuple[int, dict | None]]) -> Trajectory:
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    first = _text(messages[users[0]].get("content")) if users else ""
    said = TASK_DESCRIPTION.search(first)
    request = said["task"].strip() if said else first.strip()
    cwd = next((_home(m["cwd"]) for line in first.splitlines() if (m := PROMPT.match(line))), None) or DEFAULT_CWD
    workdir, steps = cwd, []
    for i, action in actions:
        if action is None:
            continue
        keys = [c.get("keystrokes", "") for c in action["commands"] if isinstance(c, dict)]
        keys = [k for k in keys if isinstance(k, str) and k.strip() and not re.fullmatch(r"\s*C-[a-z]\s*", k)]
        reply = next((_text(m.get("content")) for m in messages[i + 1:i + 2] if m.get("role") == "user"), None)
        shown = split_screen(reply, keys) if reply is not None else [(None, True, None)] * len(keys)
        for keystrokes, (output, cut, prompt_cwd) in zip(keys, shown):
            cwd = _home(prompt_cwd) or cwd
            steps.append(Step(cwd=cwd, command=keystrokes.rstrip("\n"), output=output, truncated=cut))
    return Trajectory([request] if request else [], steps, workdir, "terminus")


def _tools(messages: list[dict]) -> Trajectory:
    results = {m.get("tool_call_id"): _text(m.get("content")) for m in messages if m.get("role") == "tool"}
    requests = [_text(m.get("content")).strip() for m in messages if m.get("role") == "user"]
    requests = [r for r in requests if r]
    said = WORKDIR_SAID.search(requests[0]) if requests else None
    workdir = said.group(1).rstrip("/.") if said else DEFAULT_CWD
    steps = []
    for m in messages:
        for call in m.get("tool_calls") or [] if m.get("role") == "assistant" else []:
            name, args = _arguments(call)
            output = results.get(call.get("id"))
            step = Step(cwd=workdir, output=output, truncated=bool(output and CUT_MARK.search(output)))
            command = next((args[k] for k in COMMAND_KEYS if isinstance(args.get(k), str)), None)
            if name in SHELL_TOOLS and command is not None:
                step.command = command
            else:
                step.tool, step.args = _file_tool(name, args)
                if step.tool is None:
                    continue
                if step.tool == "read" and output is not None:
                    step.output, step.first_line = unnumbered(output)
            steps.append(step)
    return Trajectory(requests, steps, workdir, "tools")


def _file_tool(name: str, args: dict) -> tuple[str | None, dict]:
    """("read" | "write" | "edit", {path, content | old, new}) of a file tool call, else (None, {})."""
    path = args.get("path") or args.get("file_path") or args.get("filename")
    if not isinstance(path, str):
        return None, {}
    sub = args.get("command") if name in EDITOR_TOOLS else None
    if name in READ_TOOLS or sub == "view":
        return "read", {"path": path, "range": args.get("view_range")}
    if name in WRITE_TOOLS or sub == "create":
        content = args.get("content", args.get("file_text"))
        return "write", {"path": path, "content": content if isinstance(content, str) else None}
    if name in EDIT_TOOLS or sub in ("str_replace", "insert"):
        return "edit", {"path": path, "old": args.get("old_string", args.get("old_str")),
                        "new": args.get("new_string", args.get("new_str"))}
    return None, {}


def unnumbered(text: str) -> tuple[str, int]:
    """A read's text with `cat -n`-style numbers taken off (when every line has one), and its first line's number."""
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    matched = [NUMBERED.match(line) for line in lines]
    if lines and all(matched):
        return "\n".join(m.group(2) for m in matched), int(matched[0].group(1))
    return text, 1
