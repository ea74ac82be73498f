"""The scenario model (rounds of steps, a step = tool calls with their outputs) and the builders scenarios use.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Call:
    kind: str                 # bash | read_file | write_file | edit_file
    args: dict
    output: str = ""
    rc: int = 0
    duration: float = 1.0     # Terminus wait time


@dataclass
class Step:
    analysis: str
    plan: str
    calls: list
    say: str | None = None    # Claude-style assistant text (None -> analysis)


@dataclass
class Round:
    request: str
    steps: list
    summary: str


@dataclass
class Scenario:
    key: str
    title: str
    host: str
    cwd: str
    rounds: list              # first round = the task, later rounds = follow-ups
    kind: str = "single"      # single | cross
    mistake_file: str = ""    # a tracked file used for an injected (undone) mistake


def bash(cmd, out="", rc=0, dur=1.0):
    return Call("bash", {"command": cmd}, out, rc, dur)


def read(path, content):
    return Call("read_file", {"path": path}, content, 0, 0.1)


def write(path, content):
    return Call("write_file", {"path": path, "content": content}, f"Wrote {len(content.encode())} bytes to {path}", 0, 0.1)


def edit(path, old, new):
    return Call("edit_file", {"path": path, "old_string": old, "new_string": new},
                f"Edited {path}: replaced 1 occurrence", 0, 0.1)


def S(analysis, plan, *calls, say=None):
    return Step(analysis, plan, list(calls), say)
