"""GRPO prompts from NeMo Gym rows (terminal pivot, multichallenge, verifif), through the SFT loaders.

Each row becomes `{"prompt": [messages], "row": "<the row as JSON>"}`: the prompt is the row's
`responses_create_params.input`, and the whole row travels to the reward server with each completion.
TRL 1.16 never truncates prompts, so prompts longer than `max_prompt_length` tokens are filtered out before
training and counted, like invalid rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from trainers.corpora import dotted_get, iter_rows
from trainers.corpus import CorpusArguments, parse_sources
from common.errors import CorpusError
from trainers.mixture import split_by_group, subsample
from trainers.records import RecordError, text_content

MAX_PROBLEMS_SHOWN = 50


@dataclass
class PromptStats:
    path: str
    rows: int = 0
    invalid: int = 0
    too_long: int = 0
    train_prompts: int = 0
    eval_prompts: int = 0
    environments: dict = field(default_factory=dict)


def prompt_messages(row) -> list[dict]:
    """The row's input as chat messages (roles system/developer/user/assistant, text content)."""
    if not isinstance(row, dict):
        raise RecordError(f"expected a JSON object, got {type(row).__name__}")
    params = row.get("responses_create_params")
    if not isinstance(params, dict):
        raise RecordError("responses_create_params: missing (NeMo Gym rows carry the prompt there)")
    items = params.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list) or not items:
        raise RecordError("responses_create_params.input: must be a non-empty list of messages")
    messages = []
    for index, item in enumerate(items):
        where = f"responses_create_params.input[{index}]"
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            raise RecordError(f"{where}: only message items are supported in GRPO prompts")
        role = {"developer": "system"}.get(item.get("role"), item.get("role"))
        if role not in ("system", "user", "assistant"):
            raise RecordError(f"{where}: role {item.get('role')!r} is not one of system, developer, user, assistant")
        messages.append({"role": role, "content": text_content(item.get("content"), where)})
    if messages[-1]["role"] == "assistant":
        raise RecordError("responses_create_params.input: ends with an assistant turn; the policy answers the last "
                          "user turn")
    return messages


def environment_of(row: dict, default: str | None) -> str:
    name = dotted_get(row, "agent_ref.name") or default
    if not name:
        raise RecordError("agent_ref.name: missing, and no reward_environment is configured to route it")
    return name


def build_grpo_prompts(args: CorpusArguments, tokenizer, max_prompt_length: int | None,
                       default_environment: str | None = None, chat_template_kwargs: dict | None = None):
    """Train and eval datasets of prompts, and per-source stats; refuses bad rows unless skip_invalid."""
    from datasets import Dataset

    stats, problems, train_rows, eval_rows = [], [], [], []
    for index, source in enumerate(parse_sources(args)):
        stat = PromptStats(source.path)
        kept = []
        try:
            rows = list(iter_rows(source))
        except FileNotFoundError as err:
            raise CorpusError(f"datasets: {err}") from None
        for origin, row in rows:
            stat.rows += 1
            try:
                if isinstance(row, RecordError):
                    raise row
                messages = prompt_messages(row)
                environment = environment_of(row, default_environment)
            except RecordError as err:
                stat.invalid += 1
                problems.append(f"{origin}: {err}")
                continue
            if default_environment and not dotted_get(row, "agent_ref.name"):
                row = dict(row, agent_ref={"type": "responses_api_agents", "name": default_environment})
            if max_prompt_length is not None:
                ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                    return_dict=True, **(chat_template_kwargs or {}))["input_ids"]
                if len(ids) > max_prompt_length:
                    stat.too_long += 1
                    continue
            stat.environments[environment] = stat.environments.get(environment, 0) + 1
            group = dotted_get(row, args.split_key if not source.split_key else source.split_key)
            kept.append({"prompt": messages, "row": json.dumps(row), "group": str(group or origin)})
        kept = subsample(kept, source.fraction, args.mixture_seed + index)
        train, held_out = split_by_group(kept, args.eval_fraction, args.mixture_seed)
        stat.train_prompts, stat.eval_prompts = len(train), len(held_out)
        train_rows += train
        eval_rows += held_out
        stats.append(stat)
    if problems and not args.skip_invalid:
        shown = "\n  ".join(problems[:MAX_PROBLEMS_SHOWN])
        raise CorpusError(f"{len(problems)} invalid row(s); the run does not start on bad rows:\n  {shown}\n"
                          "Fix them, or set `skip_invalid: true` to skip them (they are counted in the run summary).")
    if not train_rows:
        raise CorpusError("no prompts left for training after validation and the max_prompt_length filter "
                          f"({sum(s.too_long for s in stats)} too long); raise max_prompt_length or check the data")
    columns = lambda rows: {"prompt": [r["prompt"] for r in rows], "row": [r["row"] for r in rows]}
    return (Dataset.from_dict(columns(train_rows)), Dataset.from_dict(columns(eval_rows)) if eval_rows else None,
            stats, problems)
