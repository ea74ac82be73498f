"""The eval settings, defined once: `EvalSettings`, each field with its default, help and choices in its metadata.
Runs in: any Python >= 3.11, standard library only (trainers/eval_callback.py imports it as a recipe parses its config).

Derived from the fields: eval.run's options (`add_arguments`, `from_args`), the recipe keys `eval_<name>`
(`recipe_arguments`) and the command line for an eval.run subprocess or SLURM job (`to_cli_args`). A field's
metadata: `help`, `choices`, `cli` and `recipe` (both default True). Add a setting here and it appears in all three.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from dataclasses import MISSING, dataclass, field

from common.harnesses import HARNESSES
from common.model_families import FAMILIES
from eval.outcomes import INFRA_MODES

MODEL_AGENTS = tuple(HARNESSES)  # the agents that call a model, one a harness (the others run the solution or nothing)
AGENTS = (*MODEL_AGENTS, "oracle", "nop")
PARSERS = ("json", "xml")
RECIPE_PREFIX = "eval_"


def _setting(default=MISSING, *, help: str, choices: tuple | None = None, cli: bool = True, recipe: bool = True,
             default_factory=MISSING):
    metadata = {"help": help, "cli": cli, "recipe": recipe, **({"choices": choices} if choices else {})}
    return field(default=default, default_factory=default_factory, metadata=metadata)


@dataclass
class EvalSettings:
    """How one suite is run on one checkpoint (`eval.run.evaluate`)."""

    suite: str = _setting(recipe=False, help=(
        "builtin:terminal, builtin:evocode, a Harbor dataset name (terminal-bench@2.0, "
        "terminal-bench/terminal-bench-2-1), a folder of Harbor tasks, or a .jsonl of decision points (pivot rows: "
        "the model's next action scored against the teacher's by the reward server)"))
    agent: str = _setting("terminus-2", choices=AGENTS, help=(
        "terminus-2: Harbor's agent (JSON keystrokes in the text), driving the served checkpoint; bash-tool: the "
        "bash-tool harness agentic GRPO trains (harbor_plugins/bash_tool_agent.py); oracle, nop: no model"))
    attempts: int = _setting(1, help="attempts per task (pass@k, MT@k)")
    # 2: a trial spends most of its time in sandbox commands and the verifier, not in the model, so a second trial
    # overlaps one's model calls with the other's commands, even on the one-request-at-a-time CPU server; two
    # sandboxes stay light enough for a laptop or a 2-core CI runner. (It was the recipes' default; the CLI had 1.)
    # Real suites on vLLM and a cloud sandbox want far more: pass --concurrency / eval_concurrency.
    concurrency: int = _setting(2, help="trials run at once (Harbor's -n)")
    env: str = _setting("local", help=(
        "local (this repo's sandbox, harbor_plugins/local_sandbox.py) or one of Harbor's environments "
        "(docker, daytona, modal, ...)"))
    temperature: float = _setting(0.7, help="sampling temperature of the agent's model calls")
    max_tokens: int = _setting(512, help="max tokens per model call")
    context_size: int | None = _setting(None, help=(
        "max input tokens Terminus-2 may use (default: the served model's context length; bash-tool: the server's "
        "limit, a request past it ends the trial)"))
    parser: str = _setting("json", choices=PARSERS, help="Terminus-2's response format")
    max_turns: int | None = _setting(None, help=(
        "model calls per trial (default: Harbor's for Terminus-2; no limit but the task's agent timeout for "
        "bash-tool)"))
    timeout_multiplier: float = _setting(1.0, help="Harbor's multiplier of the tasks' agent and verifier timeouts")
    agent_timeout_multiplier: float | None = _setting(None, help=(
        "Harbor's multiplier of the agents' timeouts alone, over timeout_multiplier (a small model that never stops "
        "is cut short; its verifier keeps its time)"))
    env_kwargs: str | None = _setting(None, help=(
        "the environment's options, Harbor's --ek key=value, space-separated; the local sandbox's: network=pasta|"
        "slirp4netns (for tasks that allow internet), images=FILE (task images), pull=true, expose=/opt, ..."))
    infra_errors: str = _setting("exclude", choices=INFRA_MODES, help=(
        "trials that ended in an infrastructure failure (environment build, verifier tools, network, sandbox): "
        "left out of mean_reward and pass@k and counted next to them (exclude), or counted as 0 (zero)"))
    model_family: str | None = _setting(None, choices=tuple(FAMILIES), help=(
        "the served checkpoint's family (common/model_families.py, docs/models.md), which picks its tool-call and "
        "reasoning parsers (default: told from its chat template and config.model_type; a model it cannot tell is "
        "refused)"))
    jobs_dir: str | None = _setting(None, recipe=False, help=(
        "where the Harbor job dirs go (default: <checkpoint>/eval_jobs; with eval.run --model_url: "
        "outputs/evals/<model>)"))
    extra_agent_kwargs: dict = _setting(cli=False, recipe=False, default_factory=dict, help=(
        "more `--ak key=value` arguments of the agent (Python callers only)"))


def _fields(flag: str) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(EvalSettings) if f.metadata.get(flag, True)]


def cli_fields() -> list[dataclasses.Field]:
    """The fields that are options of `python -m eval.run`."""
    return _fields("cli")


def recipe_fields() -> list[dataclasses.Field]:
    """The fields that are `eval_<name>` keys of the recipe configs."""
    return _fields("recipe")


def _hints() -> dict[str, typing.Any]:
    return typing.get_type_hints(EvalSettings)


def _scalar_type(name: str) -> type:
    """str, int or float, the type of a `T` or `T | None` field; anything else cannot be a command-line option."""
    hint = _hints()[name]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        hint = args[0] if len(args) == 1 else hint
    if hint not in (str, int, float):
        raise TypeError(f"EvalSettings.{name}: {hint} cannot be an option; give it metadata cli=False, recipe=False")
    return hint


def default_of(f: dataclasses.Field):
    """A field's default (MISSING when it has none)."""
    return f.default_factory() if f.default_factory is not MISSING else f.default


# ------------------------------------------------------------------------------- python -m eval.run

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """An option per cli field: `--<name>`, its type, default, choices and help."""
    for f in cli_fields():
        default = default_of(f)
        kwargs = {"type": _scalar_type(f.name), "help": f.metadata["help"]}
        if "choices" in f.metadata:
            kwargs["choices"] = f.metadata["choices"]
        if default is MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = default
            if default is not None:
                kwargs["help"] += " (default: %(default)s)"
        parser.add_argument(f"--{f.name}", **kwargs)


def from_args(args: argparse.Namespace, **extra) -> EvalSettings:
    """The settings of a namespace `add_arguments` parsed."""
    return EvalSettings(**{f.name: getattr(args, f.name) for f in cli_fields()}, **extra)


def to_cli_args(settings: EvalSettings) -> list[str]:
    """`python -m eval.run` options that give these settings (every cli field that is set; None ones left out)."""
    args = []
    for f in cli_fields():
        value = getattr(settings, f.name)
        if value is not None:
            args += [f"--{f.name}", str(value)]
    return args


def choice_error(settings: EvalSettings) -> str | None:
    """'--agent X: use one of ...' for the first field outside its choices, else None (a field whose default is
    None, unset: `--model_family`)."""
    for f in dataclasses.fields(settings):
        choices, value = f.metadata.get("choices"), getattr(settings, f.name)
        if choices and value not in choices and not (value is None and f.default is None):
            return f"--{f.name} {getattr(settings, f.name)}: use one of {', '.join(choices)}"
    return None


# --------------------------------------------------------------------------------- recipe configs

def recipe_arguments(name: str, base: type, module: str, doc: str) -> type:
    """A dataclass `name` with `base`'s fields, then an `eval_<name>` field per recipe field (its type, default
    and help), for TrlParser/HfArgumentParser. HfArgumentParser hands a field's metadata to argparse, so only
    `help` goes there; choices are checked when an eval starts (`choice_error`)."""
    hints = _hints()
    generated = []
    for f in recipe_fields():
        default = default_of(f)
        if default is MISSING:
            raise TypeError(f"EvalSettings.{f.name}: a recipe key needs a default")
        help_text = f.metadata["help"] + (f"; one of {', '.join(f.metadata['choices'])}"
                                          if "choices" in f.metadata else "")
        metadata = {"help": f"{help_text} (eval.run --{f.name})"}
        spec = (field(default_factory=f.default_factory, metadata=metadata) if f.default_factory is not MISSING
                else field(default=default, metadata=metadata))
        generated.append((RECIPE_PREFIX + f.name, hints[f.name], spec))
    return dataclasses.make_dataclass(name, generated, bases=(base,),
                                      namespace={"__module__": module, "__doc__": doc})


def from_recipe(arguments, suite: str) -> EvalSettings:
    """The settings of one suite from a `recipe_arguments` instance's `eval_<name>` values."""
    return EvalSettings(suite=suite, **{f.name: getattr(arguments, RECIPE_PREFIX + f.name) for f in recipe_fields()})
