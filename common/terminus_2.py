"""Terminus-2's text protocol (JSON parser), defined once: the prompt, the parser, the next user message, tmux calls.
Runs in: any Python >= 3.11, standard library only (the training venv's episodes; tests compare it with Harbor's own).

Harbor 0.25's terminus_2 agent rewritten to the byte: `first_message`, `parse_response` (auto-corrections and warnings
included), `Turns` (what the agent sends back after each response: parse-error feedback, warnings, the "are you sure"
confirmation, output limited to 10,000 bytes head and tail), `TmuxScreen` (new-session 160x40 `bash --login`, send-keys,
paste buffers past tmux's command limit, the scrollback diff) over an `exec` the caller gives. Left out: the XML parser,
summarization, the max_tokens "ERROR!!" path, asciinema recording. Harbor's classes are async and bound to its
environments, so none can run in the trainer's process: this is our own code. What differs: docs/agentic-grpo.md.
"""

from __future__ import annotations

import base64
import json
import re
import shlex
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

SESSION_NAME = "terminus-2"
PANE_WIDTH, PANE_HEIGHT = 160, 40
HISTORY_LIMIT = 10_000_000
PANE_LOG = "/logs/agent/terminus_2.pane"
MAX_OUTPUT_BYTES = 10_000        # of one observation's terminal output (head and tail kept)
MAX_DURATION_SEC = 60.0          # a command's wait is capped here
DEFAULT_DURATION_SEC = 1.0
SEND_KEYS_MAX_COMMAND_LENGTH = 16_000   # bytes of one `tmux send-keys` command; longer keys go through a paste buffer
COMMAND_TOO_LONG = "command too long"   # what an older tmux says of a shorter limit
PASTE_CHUNK = 65_536                    # base64 characters staged per exec for a paste buffer

# Harbor's templates/terminus-json-plain.txt, byte for byte (tests/common/test_terminus_2.py compares them)
PROMPT_TEMPLATE = (
    'You are an AI assistant tasked with solving command-line tasks in a Linux environment. You will be '
    'given a task description and the output from previously executed commands. Your goal is to solve '
    'the task by providing batches of shell commands.\n'
    '\n'
    'Format your response as JSON with the following structure:\n'
    '\n'
    '{{\n'
    '  "analysis": "Analyze the current state based on the terminal output provided. What do you see? '
    'What has been accomplished? What still needs to be done?",\n'
    '  "plan": "Describe your plan for the next steps. What commands will you run and why? Be specific '
    'about what you expect each command to accomplish.",\n'
    '  "commands": [\n'
    '    {{\n'
    '      "keystrokes": "ls -la\\n",\n'
    '      "duration": 0.1\n'
    '    }},\n'
    '    {{\n'
    '      "keystrokes": "cd project\\n",\n'
    '      "duration": 0.1\n'
    '    }}\n'
    '  ],\n'
    '  "task_complete": true\n'
    '}}\n'
    '\n'
    'Required fields:\n'
    '- "analysis": Your analysis of the current situation\n'
    '- "plan": Your plan for the next steps\n'
    '- "commands": Array of command objects to execute\n'
    '\n'
    'Optional fields:\n'
    '- "task_complete": Boolean indicating if the task is complete (defaults to false if not present)\n'
    '\n'
    'Command object structure:\n'
    '- "keystrokes": String containing the exact keystrokes to send to the terminal (required)\n'
    '- "duration": Number of seconds to wait for the command to complete before the next command will be '
    'executed (defaults to 1.0 if not present)\n'
    '\n'
    'IMPORTANT: The text inside "keystrokes" will be used completely verbatim as keystrokes. Write '
    'commands exactly as you want them sent to the terminal:\n'
    '- You must end every command with a newline (\\n) or it will not execute.\n'
    '- For special key sequences, use tmux-style escape sequences:\n'
    '  - C-c for Ctrl+C\n'
    '  - C-d for Ctrl+D\n'
    '\n'
    'The "duration" attribute specifies the number of seconds to wait for the command to complete '
    '(default: 1.0) before the next command will be executed. On immediate tasks (e.g., cd, ls, echo, '
    'cat) set a duration of 0.1 seconds. On commands (e.g., gcc, find, rustc) set a duration of 1.0 '
    'seconds. On slow commands (e.g., make, python3 [long running script], wget [file]) set an '
    'appropriate duration as you determine necessary.\n'
    '\n'
    'It is better to set a smaller duration than a longer duration. It is always possible to wait again '
    'if the prior output has not finished, by running {{"keystrokes": "", "duration": 10.0}} on '
    'subsequent requests to wait longer. Never wait longer than 60 seconds; prefer to poll to see '
    'intermediate result status.\n'
    '\n'
    'Important notes:\n'
    "- Each command's keystrokes are sent exactly as written to the terminal\n"
    "- Do not include extra whitespace before or after the keystrokes unless it's part of the intended "
    'command\n'
    '- Extra text before or after the JSON will generate warnings but be tolerated\n'
    '- The JSON must be valid - use proper escaping for quotes and special characters within strings\n'
    '- Commands array can be empty if you want to wait without taking action\n'
    '\n'
    'Task Description:\n'
    '{instruction}\n'
    '\n'
    'Current terminal state:\n'
    '{terminal_state}\n'
)


@dataclass
class Command:
    keystrokes: str
    duration: float


@dataclass
class ParseResult:
    """What Harbor's TerminusJSONPlainParser.parse_response returns, field for field (`is_task_complete`, `analysis`
    and `plan` are the response's values as given: a non-bool task_complete other than a string stays what it was)."""

    commands: list[Command]
    is_task_complete: Any
    error: str
    warning: str
    analysis: Any = ""
    plan: Any = ""


_CANARY_LINE = re.compile(r"^(<!--.*canary.*-->|#.*canary.*)$", re.IGNORECASE)


def shown_instruction(text: str) -> str:
    """instruction.md as Harbor shows it to an agent: leading canary-marker lines (and blank lines after them) off."""
    lines = text.split("\n")
    n = 0
    while n < len(lines) and _CANARY_LINE.match(lines[n].strip()):
        n += 1
    while n < len(lines) and not lines[n].strip():
        n += 1
    return "\n".join(lines[n:])


def first_message(instruction: str, terminal_state: str) -> str:
    """The first user message: the template with the task's instruction and the first screen (as `TmuxScreen.
    incremental_output` gives it; limited here to MAX_OUTPUT_BYTES as Terminus-2 does). There is no system message."""
    return PROMPT_TEMPLATE.format(instruction=instruction, terminal_state=limit_output(terminal_state))


# ------------------------------------------------------------------------------------------------------- the parser

_REQUIRED = ("analysis", "plan", "commands")
_AUTO_FIXES = ("Fixed incomplete JSON by adding missing closing brace", "Extracted JSON from mixed content")
_OBJECT_PATTERN = re.compile(r"\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}", re.DOTALL)


def parse_response(text: str) -> ParseResult:
    """Parse a Terminus-2 JSON response as Harbor does: the first balanced object, then two auto-fixes when that fails
    (closing braces appended; the first loadable brace group), a fixed one noted as AUTO-CORRECTED in the warning."""
    result = _parse(text)
    if not result.error:
        return result
    for name, fix in zip(_AUTO_FIXES, (_close_braces, _first_object)):
        fixed = fix(text, result.error)
        if fixed is None:
            continue
        again = _parse(fixed)
        if not again.error:
            note = f"AUTO-CORRECTED: {name} - please fix this in future responses"
            again.warning = f"- {note}\n{again.warning}" if again.warning else f"- {note}"
            return again
    return result


def _bullets(warnings: list[str]) -> str:
    return "- " + "\n- ".join(warnings) if warnings else ""


def _parse(text: str) -> ParseResult:
    content, warnings = _balanced_object(text)
    if not content:
        return ParseResult([], False, "No valid JSON found in response", _bullets(warnings))
    try:
        data = json.loads(content)
    except json.JSONDecodeError as err:
        shown = f" | Content: {content!r}" if len(content) < 200 else f" | Content preview: {content[:100]!r}..."
        return ParseResult([], False, f"Invalid JSON: {err}{shown}", _bullets(warnings))
    error = _check_structure(data, content, warnings)
    if error:
        return ParseResult([], False, error, _bullets(warnings))
    complete = data.get("task_complete", False)
    if isinstance(complete, str):
        complete = complete.lower() in ("true", "1", "yes")
    analysis, plan = data.get("analysis", ""), data.get("plan", "")
    commands, error = _commands(data.get("commands", []), warnings)
    if error:
        if complete:  # a response that completes the task: its command errors are only warnings
            return ParseResult([], True, "", _bullets(warnings + [error]), analysis, plan)
        return ParseResult([], False, error, _bullets(warnings), analysis, plan)
    return ParseResult(commands, complete, "", _bullets(warnings), analysis, plan)


def _balanced_object(text: str) -> tuple[str, list[str]]:
    """The first top-level {...} (a backslash skips the next character anywhere; quotes toggle strings)."""
    start, depth, quoted, skip = -1, 0, False, False
    for i, char in enumerate(text):
        if skip:
            skip = False
        elif char == "\\":
            skip = True
        elif char == '"':
            quoted = not quoted
        elif not quoted and char == "{":
            start = i if depth == 0 else start
            depth += 1
        elif not quoted and char == "}":
            depth -= 1
            if depth == 0 and start != -1:
                before, after = text[:start].strip(), text[i + 1:].strip()
                return text[start:i + 1], (["Extra text detected before JSON object"] if before else []) + (
                    ["Extra text detected after JSON object"] if after else [])
    return "", ["No valid JSON object found"]


def _check_structure(data: Any, content: str, warnings: list[str]) -> str:
    if not isinstance(data, dict):
        return "Response must be a JSON object"
    missing = [name for name in _REQUIRED if name not in data]
    if missing:
        return f"Missing required fields: {', '.join(missing)}"
    for name in ("analysis", "plan"):
        if not isinstance(data.get(name, ""), str):
            warnings.append(f"Field '{name}' should be a string")
    if not isinstance(data.get("commands", []), list):
        return "Field 'commands' must be an array"
    found = {}
    for name in _REQUIRED:  # where each field's key first appears in the object's text
        match = re.search(f'"({name})"\\s*:', content)
        if match:
            found[name] = match.start()
    if len(found) >= 2:
        expected = [name for name in _REQUIRED if name in found]
        actual = sorted(expected, key=found.__getitem__)
        if actual != expected:
            warnings.append(f"Fields appear in wrong order. Found: {' → '.join(actual)}, "
                            f"expected: {' → '.join(expected)}")
    complete = data.get("task_complete")
    if complete is not None and not isinstance(complete, (bool, str)):
        warnings.append("Field 'task_complete' should be a boolean or string")
    return ""


def _commands(items: list, warnings: list[str]) -> tuple[list[Command], str]:
    commands = []
    for n, item in enumerate(items, 1):
        if not isinstance(item, dict):
            return [], f"Command {n} must be an object"
        if "keystrokes" not in item:
            return [], f"Command {n} missing required 'keystrokes' field"
        keys = item["keystrokes"]
        if not isinstance(keys, str):
            return [], f"Command {n} 'keystrokes' must be a string"
        duration = item.get("duration", None)
        if "duration" not in item:
            warnings.append(f"Command {n}: Missing duration field, using default 1.0")
            duration = DEFAULT_DURATION_SEC
        elif not isinstance(duration, (int, float)):  # bool is an int here, as in Harbor
            warnings.append(f"Command {n}: Invalid duration value, using default 1.0")
            duration = DEFAULT_DURATION_SEC
        unknown = [key for key in item if key not in ("keystrokes", "duration")]
        if unknown:  # Harbor joins a set (its order varies with the hash seed); here the response's order
            warnings.append(f"Command {n}: Unknown fields: {', '.join(unknown)}")
        if n < len(items) and keys and not keys.endswith("\n"):
            warnings.append(f"Command {n} should end with newline when followed by another command. Otherwise the "
                            "two commands will be concatenated together on the same line.")
        try:
            seconds = float(duration)
        except OverflowError:  # an integer past float's range: Harbor raises here; capped below like any long wait
            seconds = float("inf")
        commands.append(Command(keys, seconds))
    return commands, ""


def _close_braces(text: str, error: str) -> str | None:
    if any(mark in error for mark in ("Invalid JSON", "Expecting", "Unterminated", "No valid JSON found")):
        missing = text.count("{") - text.count("}")
        if missing > 0:
            return text + "}" * missing
    return None


def _first_object(text: str, error: str) -> str | None:
    for candidate in _OBJECT_PATTERN.findall(text):
        try:
            json.loads(candidate)
        except json.JSONDecodeError:
            continue
        return candidate
    return None


# ------------------------------------------------------------------------------------- from a response to the next turn

def limit_output(output: str, max_bytes: int = MAX_OUTPUT_BYTES) -> str:
    """Output past `max_bytes` (UTF-8) cut to its first and last halves, the cut said in between."""
    data = output.encode("utf-8")
    if len(data) <= max_bytes:
        return output
    half = max_bytes // 2
    head = data[:half].decode("utf-8", errors="ignore")
    tail = data[-half:].decode("utf-8", errors="ignore")
    omitted = len(data) - len(head.encode("utf-8")) - len(tail.encode("utf-8"))
    return f"{head}\n[... output limited to {max_bytes} bytes; {omitted} interior bytes omitted ...]\n{tail}"


def feedback(result: ParseResult) -> str:
    """"ERROR: ..." (and its warnings) or "WARNINGS: ...", or ""."""
    if result.error:
        return f"ERROR: {result.error}" + (f"\nWARNINGS: {result.warning}" if result.warning else "")
    return f"WARNINGS: {result.warning}" if result.warning else ""


def parse_error_message(said: str) -> str:
    return (f"Previous response had parsing errors:\n{said}\n\n"
            "Please fix these issues and provide a proper JSON response.")


def output_limit_message(limit_tokens: int | None, truncated_response: str) -> str:
    """Terminus-2's next message after a response cut at the model's output limit (finish_reason "length"; the JSON
    parser salvages nothing): none of its actions ran, and the parser's warnings on the cut text follow."""
    limit = f"{limit_tokens} tokens" if limit_tokens is not None else "the maximum output length"
    message = (f"ERROR!! NONE of the actions you just requested were performed because you exceeded {limit}. "
               f"Your outputs must be less than {limit}. Re-issue this request, breaking it into chunks each of which "
               f"is less than {limit}.")
    warning = parse_response(truncated_response).warning
    return message + (f"\n\nParser warnings from your truncated response:\n{warning}" if warning else "")


def confirmation_message(terminal_output: str) -> str:
    return (f"Current terminal state:\n{terminal_output}\n\nAre you sure you want to mark the task as complete? This "
            "will trigger your solution to be graded and you won't be able to make any further corrections. If so, "
            'include "task_complete": true in your JSON response again.')


@dataclass
class Turns:
    """Terminus-2's loop between two model calls, without the terminal: `read` a response, run `commands` (each
    waited for `duration`, capped at MAX_DURATION_SEC) unless it `failed`, then `observe` the terminal's output."""

    pending_completion: bool = False
    result: ParseResult | None = field(default=None, repr=False)
    said: str = ""

    def read(self, text: str) -> ParseResult:
        self.result = parse_response(text)
        self.said = feedback(self.result)
        return self.result

    @property
    def failed(self) -> bool:
        """No command runs: Harbor looks for "ERROR:" anywhere in the feedback (a warning can carry it too)."""
        return bool(self.said) and "ERROR:" in self.said

    @property
    def commands(self) -> list[Command]:
        if self.failed:
            return []
        return [Command(c.keystrokes, min(c.duration, MAX_DURATION_SEC)) for c in self.result.commands]

    def observe(self, terminal_output: str | None) -> tuple[str, bool]:
        """The next user message and whether the episode is done (a completion confirmed). `terminal_output`: the
        screen after the commands, limited (limit_output(incremental output)); ignored after a parse error."""
        if self.failed:
            return parse_error_message(self.said), False
        was_pending = self.pending_completion
        if self.result.is_task_complete:
            if was_pending:
                return terminal_output, True
            self.pending_completion = True
            return confirmation_message(terminal_output), False
        self.pending_completion = False
        if self.said and "WARNINGS:" in self.said:  # limited once more, as Harbor does
            return f"Previous response had warnings:\n{self.said}\n\n{limit_output(terminal_output)}", False
        return limit_output(terminal_output), False


# ------------------------------------------------------------------------------------------------------------ tmux

Exec = Callable[[str], "tuple[int, str, str]"]  # a shell command in the sandbox as its default user -> (rc, out, err)


class TmuxScreen:
    """Harbor's TmuxSession driving one tmux session through `exec`: started, typed into, captured.
    `exec` raises what it raises (a timeout, a sandbox gone); a tmux that fails answers with its return code."""

    def __init__(self, exec: Exec, width: int = PANE_WIDTH, height: int = PANE_HEIGHT,
                 pane_log: str | None = PANE_LOG):
        self._exec, self._width, self._height, self._pane_log = exec, width, height, pane_log
        self._previous: str | None = None

    def start(self) -> tuple[int, str]:
        """`tmux new-session` running `bash --login` (and its pane piped to `pane_log`), then the history limit;
        (return code, stderr) of the first."""
        pipe = f" \\; pipe-pane -t {SESSION_NAME} 'cat > {self._pane_log}'" if self._pane_log else ""
        rc, _, err = self._exec(f"export TERM=xterm-256color && export SHELL=/bin/bash && tmux new-session "
                                f"-x {self._width} -y {self._height} -d -s {SESSION_NAME} 'bash --login'{pipe}")
        if rc == 0:
            self._exec(f"tmux set-option -g history-limit {HISTORY_LIMIT}")
        return rc, err

    def alive(self) -> bool:
        return self._exec(f"tmux has-session -t {SESSION_NAME}")[0] == 0

    def send_keys(self, keys: str) -> tuple[int, str]:
        """Type `keys` (one tmux key argument: a key name such as C-c or Enter, else literal text), through a paste
        buffer when the send-keys command would pass tmux's limit; (return code, stderr)."""
        prefix = f"tmux send-keys -t {shlex.quote(SESSION_NAME)} --"
        quoted = shlex.quote(keys)
        if len(quoted.encode("utf-8")) <= SEND_KEYS_MAX_COMMAND_LENGTH - len(prefix.encode("utf-8")) - 1:
            rc, _, err = self._exec(f"{prefix} {quoted}")
            if rc == 0 or COMMAND_TOO_LONG not in err:
                return rc, err
        return self._paste(keys)

    def _paste(self, keys: str) -> tuple[int, str]:
        if not keys:
            return 0, ""
        token = uuid.uuid4().hex
        path, buffer = shlex.quote(f"/tmp/.runtime-tmux-paste-{token}"), f"runtime-paste-{token}"
        payload = base64.b64encode(keys.encode("utf-8")).decode("ascii")
        try:
            for offset in range(0, len(payload), PASTE_CHUNK):
                chunk = payload[offset:offset + PASTE_CHUNK]
                rc, _, err = self._exec(f"printf %s {chunk} | base64 -d {'>>' if offset else '>'} {path}")
                if rc != 0:
                    return rc, err
            rc, _, err = self._exec(f"tmux load-buffer -b {buffer} {path} && "
                                    f"tmux paste-buffer -d -b {buffer} -t {shlex.quote(SESSION_NAME)}")
            return rc, err
        finally:
            self._exec(f"rm -f {path}")

    def capture(self, entire: bool = False) -> str:
        """The pane (its whole scrollback with `entire`); "" when tmux fails."""
        return self._exec(f"tmux capture-pane -p {'-S - ' if entire else ''}-t {SESSION_NAME}")[1] or ""

    def incremental_output(self) -> str:
        """"New Terminal Output:" and what the scrollback gained since the last call, else "Current Terminal
        Screen:" and the visible pane (the first call, nothing new, or a scrollback that no longer holds the last)."""
        current = self.capture(entire=True)
        if self._previous is None:
            self._previous = current
            return f"Current Terminal Screen:\n{self.capture()}"
        new = _new_content(self._previous, current)
        self._previous = current
        if new is not None and new.strip():
            return f"New Terminal Output:\n{new}"
        return f"Current Terminal Screen:\n{self.capture()}"


def _new_content(previous: str, current: str) -> str | None:
    """Harbor's diff, quirk included: when the last capture has several lines the cut is at its last newline's
    offset *within the last capture*, not where that capture sits in the new one."""
    last = previous.strip()
    if last not in current:
        return None
    return current[last.rfind("\n") if "\n" in last else current.index(last):]
