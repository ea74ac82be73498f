"""The harnesses a policy acts in, defined once: name -> how it acts, how its output is parsed, its eval agent, its calls.
Runs in: any Python >= 3.11, standard library only (the training venv, and the Harbor venv's bash-tool agent).

A model is trained, rolled out and scored in one harness (docs/agentic-grpo.md). Everything that lists harnesses
derives from `HARNESSES`: the learning runs' and agentic GRPO's `harness` / `eval_agent`, the eval agents that call a
model (eval/settings.py), the Harbor agent loaded by import path (eval/run.py), the episode server's calls
(episodes/__init__.py); `harness_named(name)` refuses an unknown name with the list.
"""

from __future__ import annotations

from dataclasses import dataclass

BASH_TOOL_HARNESS = "bash-tool"
TERMINUS_2_HARNESS = "terminus-2"


@dataclass(frozen=True)
class Harness:
    name: str
    acts: str        # how the policy acts, in words (stage names, summaries)
    parsed_by: str   # how its output is read, and the module that owns that protocol
    eval_agent: str  # what Harbor is given as `-a`: its own agent's name, or the import path of ours
    episode_calls: tuple[str, ...]  # the episode server's endpoints that act in a session of this harness


HARNESSES: dict[str, Harness] = {h.name: h for h in (
    Harness(BASH_TOOL_HARNESS, acts="a `bash` tool call per turn, each a new `bash -c` in the sandbox",
            parsed_by="OpenAI tool calls, by the model family's tool-call parser (common/model_families.py); the "
                      "tool's schema and output format in common/bash_harness.py",
            eval_agent="harbor_plugins.bash_tool_agent:BashToolAgent", episode_calls=("/bash",)),
    Harness(TERMINUS_2_HARNESS, acts="Terminus-2's JSON action per turn, its keystrokes typed into tmux",
            parsed_by="Terminus-2's JSON parser, Harbor's rewritten to the byte (common/terminus_2.py)",
            eval_agent="terminus-2", episode_calls=("/terminus_first", "/terminus_step")),
)}


class UnknownHarness(ValueError):
    """A harness name that is not in `HARNESSES`; the message lists the known ones."""


def harness_named(name: str, key: str = "harness") -> Harness:
    """The harness called `name`; `UnknownHarness` naming `key` and the known harnesses otherwise."""
    try:
        return HARNESSES[name]
    except (KeyError, TypeError):
        raise UnknownHarness(f"{key}: {name!r} is not one of {', '.join(HARNESSES)}") from None
