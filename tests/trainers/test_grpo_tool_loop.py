"""TRL 1.16's GRPO tool loop on a recorded episode, for every family of the table (issue 21 (b)): a policy that
makes two bash calls and then answers trains exactly the tokens it sampled, and the tool output between its turns
(with the template's text around it) carries no loss. No training, no sandbox: seconds per family."""

import pytest
from datasets import Dataset
from transformers import AutoTokenizer
from trl import GRPOConfig, GRPOTrainer

from common.model_families import FAMILIES
from modeling.tiny_model import resolve_model

OUTPUTS = {"ls": "alpha.txt\nbeta.txt\n", "cat notes.txt": "gamma delta\n"}  # the recorded tool outputs
PROMPT = [{"role": "user", "content": "List the files, then read the notes."}]


def bash(command: str) -> str:
    """Run a bash command.

    Args:
        command: the command line to run
    """
    return OUTPUTS[command]


def turn(reasoning: str, command: str | None = None, content: str = "") -> dict:
    """An assistant turn with its reasoning (`reasoning_content`, gpt-oss's `thinking`) and at most one bash call."""
    message = {"role": "assistant", "content": content, "reasoning_content": reasoning, "thinking": reasoning}
    if command is not None:
        message["tool_calls"] = [{"type": "function", "function": {"name": "bash", "arguments": {"command": command}}}]
    return message


# what follows each turn: its tool's output, and after the answer a user turn (where GLM-4.5 stops on `<|user|>`)
FOLLOWING = [{"role": "tool", "name": "bash", "content": OUTPUTS["ls"]},
             {"role": "tool", "name": "bash", "content": OUTPUTS["cat notes.txt"]},
             {"role": "user", "content": "thanks"}]
EPISODE = [turn("I list them.", "ls"), turn("Now the notes.", "cat notes.txt"),
           turn("I have read them.", content="Two files, and the notes are read.")]


class ScriptedPolicy(GRPOTrainer):
    """GRPOTrainer whose generation plays back recorded turns. `_generate_single_turn` is the trainer's one call into
    the generation backend (vLLM or transformers), for the first turn and for each turn after a tool result; TRL has
    no public hook for the turns inside its tool loop (`rollout_func` replaces the whole loop), so the test overrides
    this trainer method and nothing of the model. Everything else is TRL's own: `_generate` parses each turn with
    `parse_response`, `_tool_call_loop` runs the tool, appends the result's ids (`_get_tool_suffix_ids`) to the
    completion and builds `tool_mask`."""

    recorded: list[list[int]] = []

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        assert len(prompt_ids) == 1
        return [self.recorded.pop(0)], None


def sampled_ids(tokenizer, stops: dict[str, int], message: dict, following: dict) -> list[int]:
    """The ids a policy samples for `message` after the generation prompt: the text the family's template renders for
    it, tokenized on its own (as a model samples it, not as a re-render splits it), ending on the stop token that
    ends generation (TRL's eos_token_ids): the one the template renders, or else the one it puts next (GLM-4.5's
    `<|observation|>` before a tool result, `<|user|>` after an answer)."""
    def render(messages, **kwargs):
        return tokenizer.apply_chat_template(messages, tokenize=False, tools=[bash], **kwargs)

    generation_prompt = render(PROMPT, add_generation_prompt=True)
    text = render(PROMPT + [message])
    assert text.startswith(generation_prompt)
    text = text[len(generation_prompt):]
    found = sorted((text.find(stop), stop) for stop in stops if stop in text)
    if not found:
        text = text.rstrip()
        rendered = render(PROMPT + [message, following])
        after = rendered[rendered.rfind(text[-20:]) + 20:]  # an earlier turn may render otherwise: find its end
        found = sorted((after.find(stop), stop) for stop in stops if stop in after)
        stop = found[0][1]
    else:
        at, stop = found[0]
        text = text[:at]
    return tokenizer.encode(text, add_special_tokens=False) + [stops[stop]]


@pytest.fixture(scope="module")
def tiny_paths():
    return {key: resolve_model(f"builtin:tiny-{key}") for key in FAMILIES}


def run_episode(key, episode, path, tmp_path):
    """The recorded episode through TRL's loop: the trainer, the recorded turns' ids, and what `_generate` built."""
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    args = GRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to=[], num_generations=2,
                      per_device_train_batch_size=2, max_completion_length=1024, max_tool_calling_iterations=3)
    trainer = ScriptedPolicy(model=path, reward_funcs=[lambda completions, **kwargs: [0.0] * len(completions)],
                             args=args, train_dataset=Dataset.from_list([{"prompt": PROMPT}] * 2),
                             processing_class=tokenizer, tools=[bash])
    stops = {tokenizer.decode([i]): i for i in trainer.eos_token_ids}
    recorded = [sampled_ids(tokenizer, stops, m, f) for m, f in zip(episode, FOLLOWING, strict=True)]
    trainer.recorded = list(recorded)
    # what `_generate_and_score_completions` builds for the batch before it calls `_generate`
    trainer._sync_tool_dicts, trainer._async_tool_dicts = [{"bash": bash}], [{}]
    prompt_ids, completion_ids, tool_mask, completions = trainer._generate([PROMPT])[:4]
    assert not trainer.recorded, "the loop stopped before the recorded episode's last turn"
    return tokenizer, trainer, recorded, prompt_ids[0], completion_ids[0], tool_mask[0], completions[0]


@pytest.mark.parametrize("key", list(FAMILIES))
def test_a_recorded_episode_trains_exactly_the_sampled_tokens(key, tiny_paths, tmp_path):
    tokenizer, _, recorded, _, ids, mask, completions = run_episode(key, EPISODE, tiny_paths[key], tmp_path)
    assert len(ids) == len(mask)
    trained = [i for i, bit in zip(ids, mask) if bit]
    untrained = tokenizer.decode([i for i, bit in zip(ids, mask) if not bit])
    assert trained == [i for ids in recorded for i in ids]  # token for token: nothing re-tokenized, nothing added
    # the masked part holds the tool results as the template frames them (gpt-oss and Llama 3.1 JSON-quote them)
    for output in OUTPUTS.values():
        assert output.strip() in untrained.replace("\\n", "\n")
        assert output.strip() not in tokenizer.decode(trained)
    # and TRL read the recorded calls back (add_response_schema's parser) and ran them
    calls = [m["tool_calls"][0]["function"]["arguments"]["command"] for m in completions if m.get("tool_calls")]
    assert calls == ["ls", "cat notes.txt"]
    assert [m["content"] for m in completions if m["role"] == "tool"] == list(OUTPUTS.values())


def test_qwen3_re_render_drops_empty_think_blocks_and_trls_loop_does_not(tiny_paths, tmp_path):
    """A Qwen3 policy that thinks nothing samples `<think>\n\n</think>\n\n` before each call. Qwen3's template,
    re-rendering the episode, drops that block from every turn but the last: training on a re-render would train
    tokens the policy never sampled. TRL's loop concatenates instead (trained == sampled), and swaps in its
    qwen3_training twin (prefix-preserving), whose re-render is exactly what the loop built."""
    episode = [{key: value for key, value in m.items() if key not in ("reasoning_content", "thinking")}
               for m in EPISODE]
    tokenizer, trainer, recorded, prompt_ids, ids, mask, _ = run_episode("qwen3", episode, tiny_paths["qwen3"],
                                                                         tmp_path)
    assert [i for i, bit in zip(ids, mask) if bit] == [i for ids in recorded for i in ids]
    built = tokenizer.decode(prompt_ids + ids)
    assert built.count("<think>\n\n</think>\n\n") == 3
    conversation = PROMPT + [m for pair in zip(episode, FOLLOWING[:2] + [None]) for m in pair if m]
    original = tokenizer.apply_chat_template(conversation, tokenize=False, tools=[bash])
    assert original.count("<think>\n\n</think>\n\n") == 1 and original.rstrip() != built.rstrip()
    assert trainer.chat_template is not None  # TRL found Qwen3's own template not prefix-preserving
    twin = tokenizer.apply_chat_template(conversation, tokenize=False, tools=[bash],
                                         chat_template=trainer.chat_template)
    assert twin.rstrip() == built.rstrip()


def test_glm_policy_reads_observation_twice_in_trls_loop(tiny_paths, tmp_path):
    """Found here, TRL 1.16: GLM-4.5 ends a call turn on `<|observation|>` (a stop token of its generation config),
    and `_get_tool_suffix_ids` cuts its dummy prefix at `eos_token_id` (`<|endoftext|>`) only, so the tool suffix
    opens with `<|observation|>` again: the next turn is generated after a context the template never renders. The
    second one is masked, so the trained tokens are still the sampled ones; what the policy reads is not."""
    tokenizer, _, _, prompt_ids, ids, _, _ = run_episode("glm4moe", EPISODE, tiny_paths["glm4moe"], tmp_path)
    built = tokenizer.decode(prompt_ids + ids)
    assert built.count("<|observation|><|observation|>") == 2
    conversation = PROMPT + [m for pair in zip(EPISODE, FOLLOWING[:2] + [None]) for m in pair if m]
    assert "<|observation|><|observation|>" not in tokenizer.apply_chat_template(conversation, tokenize=False,
                                                                                 tools=[bash])
