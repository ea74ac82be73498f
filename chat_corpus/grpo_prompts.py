"""GRPO prompts from NeMo Gym rows (terminal pivot, multichallenge, verifif), through the same loaders as SFT.
Runs in: the training venv, in the GRPO recipe's process.

Each row becomes `{"prompt": [messages], "row": "<the row as JSON>"}`: the prompt is the row's
`responses_create_params.input`, and the whole row travels to the reward server with each completion. Prompts
longer than `max_prompt_length` tokens are filtered out and counted (TRL 1.16 never truncates prompts).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from chat_corpus.mixture import split_by_group, subsample
from chat_corpus.records import RecordError
from chat_corpus.sft_corpus import CorpusArguments
from chat_corpus.sources import dotted_get, load_sources, parse_sources, prompt_messages
from common.errors import CorpusError


@dataclass
class PromptStats:
    path: str
    rows: int = 0
    invalid: int = 0
    too_long: int = 0
    train_prompts: int = 0
    eval_prompts: int = 0
    environments: dict = field(default_factory=dict)


@dataclass
class GRPOPrompts:
    train: object  # datasets.Dataset with prompt, row
    eval: object | None
    stats: list[PromptStats]
    problems: list[str]


def environment_of(row: dict, default: str | None) -> str:
    name = dotted_get(row, "agent_ref.name") or default
    if not name:
        raise RecordError("agent_ref.name: missing, and no reward_environment is configured to route it")
    return name


def prompt_record(row, default_environment: str | None = None) -> tuple[str, dict]:
    """A row as a GRPO prompt record (a `sources.load_source` converter; the source's format is not used):
    the prompt, the reward environment, and the row as sent to /verify (routed to the default if it has none)."""
    messages = prompt_messages(row)
    environment = environment_of(row, default_environment)
    if default_environment and not dotted_get(row, "agent_ref.name"):
        row = dict(row, agent_ref={"type": "responses_api_agents", "name": default_environment})
    return "grpo", {"prompt": messages, "environment": environment, "row": json.dumps(row)}


def build_grpo_prompts(args: CorpusArguments, tokenizer, max_prompt_length: int | None,
                       default_environment: str | None = None, chat_template_kwargs: dict | None = None) -> GRPOPrompts:
    """Train and eval datasets of prompts, and per-source stats; refuses bad rows unless skip_invalid."""
    from datasets import Dataset

    if args.decontaminate_against:  # a CorpusArguments key the GRPO recipe does not apply: refuse, not ignore
        raise CorpusError("decontaminate_against: applies to SFT corpora only; the GRPO recipe does not drop "
                          "prompts. Check the prompts with `python -m trainers.data decontaminate PATH --against "
                          "SUITE` and remove the key from the GRPO config")
    loaded = load_sources(parse_sources(args.datasets), args.split_key, args.skip_invalid,
                          lambda row, _format: prompt_record(row, default_environment))
    stats, train_rows, eval_rows = [], [], []
    for index, item in enumerate(loaded):
        stat = PromptStats(item.source.path, rows=item.n_rows, invalid=len(item.problems))
        kept = []
        for record in item.records:
            if max_prompt_length is not None:
                ids = tokenizer.apply_chat_template(record["prompt"], add_generation_prompt=True, tokenize=True,
                                                    return_dict=True, **(chat_template_kwargs or {}))["input_ids"]
                if len(ids) > max_prompt_length:
                    stat.too_long += 1
                    continue
            stat.environments[record["environment"]] = stat.environments.get(record["environment"], 0) + 1
            kept.append(record)
        kept = subsample(kept, item.source.fraction, args.mixture_seed + index)
        train, held_out = split_by_group(kept, args.eval_fraction, args.mixture_seed)
        stat.train_prompts, stat.eval_prompts = len(train), len(held_out)
        train_rows += train
        eval_rows += held_out
        stats.append(stat)
    if not train_rows:
        raise CorpusError("no prompts left for training after validation and the max_prompt_length filter "
                          f"({sum(s.too_long for s in stats)} too long); raise max_prompt_length or check the data")
    columns = lambda rows: {"prompt": [r["prompt"] for r in rows], "row": [r["row"] for r in rows]}
    return GRPOPrompts(train=Dataset.from_dict(columns(train_rows)),
                       eval=Dataset.from_dict(columns(eval_rows)) if eval_rows else None,
                       stats=stats, problems=[problem for item in loaded for problem in item.problems])
