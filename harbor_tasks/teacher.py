"""The teacher as a policy: from what a task asked and what each command printed, its next command, mistakes included.
Runs in: any Python >= 3.11, standard library only; the scripted teacher (Terminus-2) and oracle episodes (bash tool).

A family's policy (`Family.teach`) is a generator that yields a command and is sent what it printed. `decide` replays
it over a conversation's (command, output) pairs, so a stateless server answers any turn: a command that is not the
policy's next (a mistake, or anyone's deviation) is read and passed over. With `mistakes` P, before a looking command
the teacher first types it with a mistyped path (P per turn, never twice running), reads the failure, and recovers.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

from harbor_tasks.families import FAMILIES, Family
from harbor_tasks.folder import TaskFolder

Policy = Generator[str, str, None]
# commands that only look (a mistyped path in one changes nothing): the ones a mistake is made in
LOOKING = re.compile(r"^(cat|head|tail|grep|ls|awk|find|wc|python3|bash)\b")
# a token that names a path (a word with a / or a dotted file name), not an option or a pattern
PATH_TOKEN = re.compile(r"(?<![\w'=/-])((?:[\w.-]+/)*[\w-]+\.?[\w*]*/?)(?![\w'/])")
PROMPT_ONLY = re.compile(r"^\S*[#$]\s*$")  # a shell prompt with nothing typed after it


@dataclass(frozen=True)
class Decision:
    """The teacher's next move: `command` (None: the task is done), whether it is a `mistake`, and when the last
    command was one, the first line of what it printed (`after_mistake`)."""

    command: str | None
    mistake: bool = False
    after_mistake: str | None = None


def task_policy(task: str | Path, step: str | None = None) -> Callable[[], Policy] | None:
    """A fresh policy generator for a generated task of a family that has one (deep; multi-round: of its `step`),
    from the task folder's family, seed and index (what was asked, never its world); None for any other task (its
    solution is the teacher's commands)."""
    folder = TaskFolder.of(task)
    family: Family | None = FAMILIES.get(folder.family or "")
    if family is None or family.teach is None or folder.seed is None or folder.index is None:
        return None
    rounds = folder.steps
    if bool(rounds) != (step is not None) or (step is not None and step not in rounds):
        return None
    return family.policy(folder.seed, folder.index, rounds.index(step) if step is not None else None)


def decide(policy: Callable[[], Policy], history: list[tuple[str, str]], mistakes: float = 0.0,
           key: str = "") -> Decision:
    """The next move after `history` ((command, what it printed) pairs, in order). A mistake is drawn from
    `random.Random(f"{key}:{turn}")`, so the same conversation gets the same answer."""
    steps = policy()
    expected = _advance(steps, None)
    last_wrong = None
    for command, output in history:
        if expected is not None and command.strip() == expected:
            expected, last_wrong = _advance(steps, output), None
        else:
            last_wrong = output
    after = _first_line(last_wrong) if last_wrong is not None else None
    if expected is None:
        return Decision(None, after_mistake=after)
    if mistakes > 0 and last_wrong is None and random.Random(f"{key}:{len(history)}").random() < mistakes:
        wrong = mistyped(expected, random.Random(f"{key}:{len(history)}:typo"))
        if wrong is not None:
            return Decision(wrong, mistake=True)
    return Decision(expected, after_mistake=after)


def _advance(steps: Policy, output: str | None) -> str | None:
    try:
        return (next(steps) if output is None else steps.send(output)).strip()
    except StopIteration:
        return None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "(no output)")


def mistyped(command: str, rng: random.Random) -> str | None:
    """`command` with one path mistyped (two letters of its last path swapped, or one dropped), when it only looks;
    None for a command that changes something (a typo there could change the wrong thing)."""
    if not LOOKING.match(command) or any(op in command for op in (">", "|", ";", "&&", " -i")):
        return None
    tokens = [m for m in PATH_TOKEN.finditer(command) if ("/" in m.group(1) or "." in m.group(1))
              and sum(c.isalpha() for c in m.group(1)) >= 4]
    if not tokens:
        return None
    token = tokens[-1]
    path = token.group(1)
    letters = [i for i in range(len(path) - 1) if path[i].isalpha() and path[i + 1].isalpha()
               and path[i] != path[i + 1]]
    if not letters:
        return None
    i = rng.choice(letters)
    wrong = (path[:i] + path[i + 1] + path[i] + path[i + 2:] if rng.random() < 0.5 else path[:i] + path[i + 1:])
    return command[:token.start(1)] + wrong + command[token.end(1):]


def shown_output(screen: str, command: str) -> str:
    """What `command` printed, out of a terminal screen (Terminus-2's observation): the lines after the last one that
    echoes the command, less a bare prompt at the end."""
    lines = screen.splitlines()
    echo = command.strip().splitlines()[0][:60] if command.strip() else ""
    start = max((i for i, line in enumerate(lines) if echo and echo in line), default=-1)
    shown = lines[start + 1:]
    while shown and (not shown[-1].strip() or PROMPT_ONLY.match(shown[-1].strip())):
        shown.pop()
    return "\n".join(shown)
