"""What a generated task is made of: `Instance` (instruction, workspace files, solution, checks) and the check builders.
Runs in: any Python >= 3.11, standard library only.
"""

from __future__ import annotations

import random
import re
import shlex
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

WORDS = ["alpha", "amber", "apple", "birch", "bison", "cedar", "cobalt", "coral", "delta", "ember", "falcon",
         "fern", "garnet", "harbor", "hazel", "indigo", "jasper", "juniper", "kelp", "lemon", "lotus", "maple",
         "marble", "nectar", "nova", "olive", "onyx", "pebble", "pine", "quartz", "raven", "river", "saffron",
         "sage", "slate", "spruce", "tango", "thistle", "topaz", "umber", "velvet", "willow", "xenon", "yarrow",
         "zephyr", "zinc"]
DIRS = ["data", "work", "inbox", "files", "project", "input", "assets", "docs"]


@dataclass
class Instance:
    instruction: str
    files: dict[str, str]                                  # path relative to /app -> content
    solve: list[str]                                       # oracle commands, run in /app
    checks: list[str]                                      # bash conditions, run in /app; all must hold
    setup: list[str] = field(default_factory=list)         # environment/setup.sh commands, run in /app
    category: str = "file-ops"
    rounds: list[Round] = field(default_factory=list)      # a multi-round task's rounds (then no top-level one)


@dataclass
class Case:
    """One check of a round's verifier: its id, its bash condition, and what the user says when it fails."""

    name: str
    check: str
    says: str


@dataclass
class Round:
    """A round of a multi-round task on one workspace: its request, the teacher's commands for this world, and its
    verifier's cases (cumulative: the earlier ones still in force, those a later round changed replaced)."""

    instruction: str
    solve: list[str]
    cases: list[Case]


def words(rng: random.Random, k: int) -> list[str]:
    return rng.sample(WORDS, k)


def q(s: str) -> str:
    return shlex.quote(s)


def file_is(path: str, content: str) -> str:
    """A check: `path` holds exactly `content` (compared byte for byte)."""
    return f"[ -f {q(path)} ] && [ \"$(cat {q(path)}; echo x)\" = {q(content + 'x')} ]"


def number_is(path: str, value: int) -> str:
    """A check: `path` holds the number (surrounding whitespace ignored)."""
    return f"[ -f {q(path)} ] && [ \"$(tr -d '[:space:]' < {q(path)})\" = {q(str(value))} ]"


def found(pattern: str, text: str, what: str) -> re.Match:
    """A policy's read of what a command printed: the last match of `pattern` (multi-line); LookupError naming
    `what` when there is none (the teacher cannot go on, and says what it missed)."""
    matches = list(re.finditer(pattern, text, flags=re.M))
    if not matches:
        raise LookupError(f"the output shows no {what}")
    return matches[-1]


# a family's fixes: problem -> (the pattern of its error line, the template of its fix over what the pattern caught)
Fixes = dict[str, tuple[str, str]]


def fixes_in_order(run: str, fixes: Fixes, problems: list[str], caught: dict[str, tuple]) -> list[str]:
    """The solution side of `fix_until_it_runs`: for each of the world's `problems` in the order the command meets
    them, run it, then type the fix's template over the values the error will name (`caught[problem]`)."""
    return [step for problem in problems for step in (run, fixes[problem][1].format(*caught[problem]))]


def fix_until_it_runs(run: str, fixes: Fixes, success: str):
    """A policy's loop over a command that stops at its first problem: run it, read its `error: ...` line, type the
    fix the first matching (pattern, command template) of `fixes` gives, run again; done when it prints `success`.
    Use as `yield from`."""
    while True:
        shown = yield run
        error = re.search(r"^error: (.*)$", shown, flags=re.M)
        if error is None:
            found(success, shown, "success line")
            return
        fix = next((how.format(*m.groups()) for pattern, how in fixes.values()
                    if (m := re.search(pattern, error.group(1)))), None)
        if fix is None:
            raise LookupError(f"no fix known for {error.group(1)!r}")
        yield fix


def lines(*rows: str) -> str:
    """Text of the given lines, each ended by a newline."""
    return "".join(row + "\n" for row in rows)


@dataclass(frozen=True)
class Family:
    """A task family: its name, its set (`shallow`, `deep`, `multi-round`), one line on what the agent must do, how an
    instance is made, and (deep and multi-round) the teacher's policy.

    A shallow family is one function `build(rng) -> Instance`. The others draw their instruction and their hidden world
    from two streams: `ask(rng)` (whatever the instruction says, the same for every world) and `build(asked,
    world_rng)`; `teach(asked)` is the teacher's policy: a generator that yields commands and is sent each one's
    output (harbor_tasks/teacher.py), knowing only what was asked and what it saw."""

    name: str
    set: str
    summary: str
    build: Callable
    ask: Callable[[random.Random], object] | None = None
    teach: Callable[[object], Generator[str, str, None]] | None = None

    def asked(self, seed: int, index: int):
        """What instance (seed, index) asks: its instruction stream's draw (the teacher's one input besides the
        screen). None for a shallow family."""
        return self.ask(random.Random(f"{self.name}:{seed}:{index}")) if self.ask else None

    def policy(self, seed: int, index: int, round_index: int | None = None):
        """A fresh-policy maker for instance (seed, index), of one round of a multi-round family; None without one."""
        if self.teach is None:
            return None
        asked = self.asked(seed, index)
        return (lambda: self.teach(asked)) if round_index is None else (lambda: self.teach(asked, round_index))

    def instance(self, seed: int, index: int, world_seed: int | None = None) -> Instance:
        """Instance `index` of `seed`; its hidden world from `world_seed` (default: the seed). A shallow family has one
        stream: the world seed does not change it."""
        rng = random.Random(f"{self.name}:{seed}:{index}")
        if self.ask is None:
            return self.build(rng)
        world = seed if world_seed is None else world_seed
        return self.build(self.ask(rng), random.Random(f"{self.name}:{seed}:{index}:world:{world}"))
