"""A task's reference solution (solve.sh) as the commands an agent would send: one per complete line, else a heredoc.
Runs in: any Python >= 3.11 with bash on PATH; the scripted teacher and the oracle episodes send these.
"""

from __future__ import annotations

import re
import subprocess

HEREDOC_END = "SOLVE_EOF"
_SKIP_LINE = re.compile(r"^\s*(#.*|set\s+-[euxo]+.*|)$")  # shebang, comments, `set -euo pipefail`, blank
_CD_ONLY = re.compile(r"^cd(\s+[^;&|<>()`]+)?$")  # a line that only changes the directory
WORKDIR_CD = 'cd "${APP_DIR:-/app}"'  # how the tasks' solve.sh start: the workdir, where every call starts anyway


def solution_lines(script: str) -> list[str]:
    """The lines of a solution script that do something (not the shebang, comments, `set -e...` or blank lines)."""
    return [line for line in script.splitlines() if not _SKIP_LINE.match(line)]


def heredoc(script: str) -> str:
    """A whole script as one command line: `bash <<'SOLVE_EOF'` ... `SOLVE_EOF` (heredocs, loops and continued lines
    run as written)."""
    body = script if script.endswith("\n") else script + "\n"
    return f"bash <<'{HEREDOC_END}'\n{body}{HEREDOC_END}"


def bash_tool_commands(script: str) -> list[str]:
    """A solution script as calls of the bash-tool harness (common/bash_harness.py), where every call is a new shell
    in the task's workdir: one call per command line when every line is a complete command, each run where the
    script would run it (a line that is only `cd DIR` is not a call: the commands after it go `cd DIR && ...`; the
    script's `cd "${APP_DIR:-/app}"`, the workdir, is dropped), else the whole script as one heredoc call. Oracle
    episodes (episodes/oracle.py) and the teacher's tool calls are these."""
    lines = [line.strip() for line in solution_lines(script)]
    if not (lines and all(complete_command(line) for line in lines)):
        return [heredoc(script)]
    commands: list[str] = []
    where: str | None = None  # the `cd`s since the workdir, as one prefix
    for line in lines:
        if line == WORKDIR_CD:
            where = None
        elif _CD_ONLY.match(line):
            where = f"{where} && {line}" if where else line
        else:
            commands.append(f"{where} && {line}" if where else line)
    return commands


def complete_command(line: str) -> bool:
    """A line that is a whole command on its own (bash parses it), not part of a heredoc, loop or continuation."""
    if line.rstrip().endswith("\\") or "<<" in line:
        return False
    return subprocess.run(["bash", "-n", "-c", line], capture_output=True).returncode == 0
