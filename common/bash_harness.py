"""The bash-tool harness, defined once: what the agentic trainer and the eval agent must share byte for byte.
Runs in: any Python >= 3.11, standard library only (the training venv, and the Harbor venv: no transformers or torch).

`harness_prompt` (the instruction plus how to act), `BASH_TOOL` (the schema TRL derives from
`TaskEnvironment.bash`; a test holds them equal), `format_output` (stdout + stderr, the exit code when not 0,
cut to `max_output_chars` keeping head and tail, "(no output)"), `timeout_message`, `call_error`.
Users: episodes/local.py, trainers/agentic.py, harbor_plugins/bash_tool_agent.py; every call is a new `bash -c`.
"""

from __future__ import annotations

TOOL_NAME = "bash"
FINAL_ANSWER = "Done."  # the last turn of a solved episode: an answer without a tool call ends it (teacher, oracle)
HARNESS_NOTE = ("You are in a Linux shell sandbox; the task's files are under /app. Run commands with the bash tool, "
                "one call per command line. When the task is done, answer in one sentence without a tool call.")
DEFAULT_COMMAND_TIMEOUT_SEC = 30.0   # one call; past it the command is killed and the model told so
DEFAULT_MAX_OUTPUT_CHARS = 2000      # of one call's output returned to the model (head and tail kept)

# transformers.utils.get_json_schema(TaskEnvironment.bash), which TRL's environment_factory renders into the prompt
BASH_TOOL = {
    "type": "function",
    "function": {
        "name": TOOL_NAME,
        "description": ("Run a command line with bash in the task's Linux sandbox and return what it printed.\n\n"
                        "Every call starts a new shell in the task's working directory (/app for most tasks): `cd` "
                        "does not carry\nover to the next call, so chain commands with `&&` or use absolute paths."),
        "parameters": {
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": ("The command line to run, for example `wc -l < /app/data/input.log > "
                                    "/app/count.txt`."),
                },
            },
            "required": ["command"],
        },
        "return": {"type": "string"},
    },
}


def harness_prompt(instruction: str) -> str:
    """The first (and only) user message of an episode: the task's instruction and how to act."""
    return instruction.strip() + "\n\n" + HARNESS_NOTE


def clip(text: str, limit: int) -> str:
    """`text` cut to about `limit` characters: the first two thirds and the last third kept, the cut named."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def format_output(stdout: str | None, stderr: str | None, return_code: int, max_chars: int) -> str:
    """What one call returns to the model."""
    output = (stdout or "") + (stderr or "") + (f"\n[exit code {return_code}]" if return_code else "")
    return clip(output, max_chars) or "(no output)"


def timeout_message(seconds: float) -> str:
    """What a call past its timeout returns (its process group was killed)."""
    return f"error: the command ran past {seconds:.0f} s and was killed"


def call_error(name: str, arguments: dict) -> str | None:
    """None for a well-formed call of the bash tool; else the tool message TRL's tool loop writes for it
    (`str({"error": str(exception)})`, the exception Python raises calling `TaskEnvironment.bash(**arguments)`)."""
    if name != TOOL_NAME:
        message = f"Tool {name} not found."
    elif not isinstance(arguments, dict):
        message = f"TaskEnvironment.bash() argument after ** must be a mapping, not {type(arguments).__name__}"
    elif unexpected := [key for key in arguments if key != "command"]:
        message = f"TaskEnvironment.bash() got an unexpected keyword argument '{unexpected[0]}'"
    elif "command" not in arguments:
        message = "TaskEnvironment.bash() missing 1 required positional argument: 'command'"
    else:
        return None
    return str({"error": message})
