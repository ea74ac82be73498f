"""Agentic GRPO's episodes in the Terminus-2 harness: TRL's `rollout_func` that drives them turn by turn.
Runs in: the training venv, in the trainer's processes (GRPOTrainer(rollout_func=terminus_rollout, ...)).

Terminus-2 acts in plain text (a JSON action in the message), not in tool calls, so TRL's tool loop
(`environment_factory` alone) cannot drive it: the environments still come from `environment_factory` (TRL pools
and resets them, and hands them to the reward as `environments`), and this function owns the loop. Each turn
generates with TRL's own per-turn generation (`_generate_single_turn`: the same vLLM or transformers path, sampling
settings and DeepSpeed unwrapping as TRL's tool loop), hands the text to episodes.terminus, and appends Terminus-2's
next user message as token ids. The tokens trained are the tokens sampled (ids concatenated, never re-tokenised);
the first message and every observation are `env_mask` 0: never trained, not counted in the completion lengths.
An episode ends when Terminus-2 would end it (completion confirmed), at `max_tool_calling_iterations` observations,
at `max_completion_length` tokens (sampled and observed together, as TRL's tool loop counts them) or the model's
length, or when its sandbox is gone; it is then verified as it stands. docs/agentic-grpo.md#the-terminus-2-harness.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from common.terminus_2 import output_limit_message
from episodes.terminus import TerminusTurn, terminus_first_message, terminus_step

STEP_WORKERS = 8  # episodes of one batch whose keystrokes run at once (each sleeps its commands' durations)


def terminus_rollout(prompts: list, trainer, max_turn_tokens: int | None = None) -> dict:
    """TRL's rollout_func: one Terminus-2 episode per entry of `prompts` (the per-process slice, each task repeated
    num_generations times), in `trainer.environments` (reset by TRL with the row). `max_turn_tokens`: the most tokens
    of one response (the eval's per-call `max_tokens`); a response cut there runs nothing and is answered with
    Terminus-2's output-limit message, as Harbor's agent answers a reply cut at the model's max_tokens, within the same
    turn (it spends the token budget, not max_tool_calling_iterations). Returns prompt_ids, completion_ids, env_mask,
    logprobs (vLLM's, 0.0 on observation tokens; None on the transformers path) and, for the reward and the logs,
    `turns` (as Harbor counts them) and `ended` (why each episode stopped)."""
    environments = trainer.environments
    if environments is None or len(environments) != len(prompts):
        raise RuntimeError("terminus_rollout needs one environment per prompt: pass environment_factory too")
    tokenizer = trainer.processing_class
    template = {"chat_template": chat_template(trainer), **trainer.chat_template_kwargs}
    budget = trainer.max_completion_length
    max_length = _max_model_length(trainer)
    max_observations = trainer.args.max_tool_calling_iterations
    workers = max(1, min(len(environments), STEP_WORKERS))

    with ThreadPoolExecutor(workers, thread_name_prefix="terminus-start") as pool:  # the sandboxes start side by side
        first_messages = list(pool.map(terminus_first_message, environments))
    prompt_ids = [_ids(tokenizer.apply_chat_template([{"role": "user", "content": message}], tokenize=True,
                                                     add_generation_prompt=True, return_dict=False, **template))
                  for message in first_messages]
    n = len(prompts)
    completion_ids: list[list[int]] = [[] for _ in range(n)]
    env_mask: list[list[int]] = [[] for _ in range(n)]
    logprobs: list[list[float]] | None = [[] for _ in range(n)]
    turns, ended = [0] * n, [""] * n
    active = list(range(n))
    eos = set(trainer.eos_token_ids)
    while active:
        sampled, sampled_logprobs = _generate(trainer, [prompt_ids[i] + completion_ids[i] for i in active],
                                              max_turn_tokens)
        if sampled_logprobs is None:
            logprobs = None
        texts, cut, still = {}, {}, []
        for k, i in enumerate(active):
            room = budget - len(completion_ids[i])
            ids = list(sampled[k])[:room]
            completion_ids[i] += ids
            env_mask[i] += [1] * len(ids)
            if logprobs is not None:
                logprobs[i] += list(sampled_logprobs[k])[:room]
            if len(ids) < len(sampled[k]) or len(completion_ids[i]) >= budget:
                turns[i] += 1
                ended[i] = "max_completion_length"  # cut mid-response: verified as it stands, the cut turn not run
                continue
            texts[i] = tokenizer.decode(ids, skip_special_tokens=True)
            cut[i] = not ids or ids[-1] not in eos  # stopped at max_turn_tokens: its end-of-turn is not sampled
            # Harbor's Terminus-2 asks again within the same turn after a cut response: no turn of max_turns spent
            turns[i] += not cut[i]
            still.append(i)

        def step(i: int) -> TerminusTurn:
            if cut[i]:  # nothing runs: Terminus-2 says so, and the episode goes on
                return TerminusTurn(output_limit_message(max_turn_tokens, texts[i]), done=False)
            return terminus_step(environments[i], texts[i])

        with ThreadPoolExecutor(workers, thread_name_prefix="terminus-step") as pool:
            steps = dict(zip(still, pool.map(step, still)))
        active = []
        for i in still:
            step = steps[i]
            if step.done:
                ended[i] = "done"
                continue
            if max_observations is not None and turns[i] > max_observations:
                ended[i] = "max_tool_calling_iterations"
                continue
            # a cut turn gets the end-of-turn token the chat template closes it with (never trained), then the message
            suffix = ([tokenizer.eos_token_id] if cut[i] else []) + observation_ids(tokenizer, step.observation, template)
            if (len(completion_ids[i]) + len(suffix) >= budget
                    or len(prompt_ids[i]) + len(completion_ids[i]) + len(suffix) >= max_length):
                ended[i] = "max_completion_length"  # no room for the observation and a reply to it
                continue
            completion_ids[i] += suffix
            env_mask[i] += [0] * len(suffix)
            if logprobs is not None:
                logprobs[i] += [0.0] * len(suffix)
            active.append(i)
    return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "env_mask": env_mask, "logprobs": logprobs,
            "turns": turns, "ended": ended}


def _generate(trainer, inputs: list[list[int]], max_turn_tokens: int | None):
    """One turn of every active episode through TRL's per-turn generation, each response capped at max_turn_tokens:
    the cap TRL reads at each call (vLLM's max_completion_length; the transformers path's generation config and the
    kwargs it unwraps the model with) is set for the call and restored after."""
    if max_turn_tokens is None:
        return trainer._generate_single_turn(inputs, None, {}, num_generations=1)
    caps = [(trainer.vllm_generation, "max_completion_length")] if trainer.use_vllm else [
        (trainer.generation_config, "max_new_tokens")]
    kwargs = getattr(trainer, "generation_kwargs", None)
    saved = [getattr(owner, name) for owner, name in caps]
    saved_kwarg = kwargs.get("max_new_tokens") if isinstance(kwargs, dict) else None
    for owner, name in caps:
        setattr(owner, name, max_turn_tokens)
    if isinstance(kwargs, dict) and saved_kwarg is not None:
        kwargs["max_new_tokens"] = max_turn_tokens
    try:
        return trainer._generate_single_turn(inputs, None, {}, num_generations=1)
    finally:
        for (owner, name), value in zip(caps, saved):
            setattr(owner, name, value)
        if isinstance(kwargs, dict) and saved_kwarg is not None:
            kwargs["max_new_tokens"] = saved_kwarg


def observation_ids(tokenizer, observation: str, template: dict) -> list[int]:
    """The token ids that follow a sampled assistant turn (its end-of-turn token included) when Terminus-2 answers
    with `observation`: the end of the turn, the user message, and the next generation prompt. Taken from the chat
    template as the difference of two renderings, as TRL's tool loop takes a tool result's (`_get_tool_suffix_ids`);
    ValueError for a template whose renderings are not prefixes of each other (no concatenation is faithful then)."""
    turn = [{"role": "user", "content": "dummy"}, {"role": "assistant", "content": "dummy"}]
    before = _ids(tokenizer.apply_chat_template(turn, tokenize=True, add_generation_prompt=False, return_dict=False,
                                                **template))
    after = _ids(tokenizer.apply_chat_template(turn + [{"role": "user", "content": observation}], tokenize=True,
                                               add_generation_prompt=True, return_dict=False, **template))
    ends = [k for k, token in enumerate(before) if token == tokenizer.eos_token_id]
    if ends:  # a template that renders "<eos>\n" after a turn: the sampled turn ends at the eos itself
        before = before[: ends[-1] + 1]
    if after[: len(before)] != before:
        raise ValueError("the chat template renders an assistant turn differently once a user message follows it: "
                         "a Terminus-2 episode's tokens cannot be concatenated; use a prefix-preserving template")
    return after[len(before):]


def chat_template(trainer) -> str | None:
    """The template an episode is rendered with: TRL's choice for multi-turn training (the tokenizer's own when it is
    prefix-preserving, else TRL's training template for the family: Qwen3's own drops the empty think block from
    past turns). TRL swaps it in only when it has tools, and this harness has none, so the choice is made here."""
    from trl.chat_template_utils import get_training_chat_template, is_chat_template_prefix_preserving

    if trainer.chat_template is not None or is_chat_template_prefix_preserving(trainer.processing_class):
        return trainer.chat_template
    return get_training_chat_template(trainer.processing_class)


def _ids(rendered) -> list[int]:
    """apply_chat_template's ids (a list, or a BatchEncoding with input_ids for some tokenizers)."""
    return list(rendered["input_ids"] if hasattr(rendered, "keys") else rendered)


def _max_model_length(trainer) -> int:
    if trainer.use_vllm and trainer.vllm_mode == "colocate":
        return trainer.vllm_generation.llm.llm_engine.model_config.max_model_len
    config = trainer.model.config
    return getattr(config, "max_position_embeddings", None) or 1 << 30
