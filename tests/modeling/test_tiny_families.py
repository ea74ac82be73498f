"""modeling/tiny_families.py and tiny_model.py's `builtin:tiny-<family>`: each family of the table builds (its real
architecture class, its special tokens as single tokens, its TRL template told back to it), and SFT's masking
trains exactly the trainable assistant turns of a multi-turn tool-calling record, tool calls included."""

import json

import pytest

from common.errors import ConfigError
from common.model_families import FAMILIES, HARMONY, LLAMA3_JSON, family_of
from modeling.tiny_families import EMBEDDED_FAMILY, TINY_FAMILIES
from modeling.tiny_model import builtin_names, resolve_model

KEYS = list(FAMILIES)
BASH = {"type": "function", "function": {"name": "bash", "description": "run a shell command",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}


def call(command: str) -> dict:
    return {"type": "function", "function": {"name": "bash", "arguments": {"command": command}}}


# each string marks one turn: the trained text must hold exactly the trainable assistant turns' markers
RECORD = {"messages": [
    {"role": "system", "content": "SYSTEM-alpha you are an agent"},
    {"role": "user", "content": "USER-bravo fix the build"},
    {"role": "assistant", "content": "SKIPPED-charlie looking first", "tool_calls": [call("cat SKIPPED-delta.log")],
     "train": False},
    {"role": "tool", "name": "bash", "content": "TOOL-echo error: missing header"},
    {"role": "assistant", "content": "TRAINED-foxtrot the header is missing",
     "tool_calls": [call("touch TRAINED-golf.h && make")]},
    {"role": "tool", "name": "bash", "content": "TOOL-hotel build ok"},
    {"role": "assistant", "content": "TRAINED-india fixed: the header was missing."},
], "tools": [BASH]}
NOT_TRAINED = ["SYSTEM-alpha", "USER-bravo", "SKIPPED-charlie", "SKIPPED-delta", "TOOL-echo", "TOOL-hotel"]
TRAINED = ["TRAINED-foxtrot", "TRAINED-golf", "TRAINED-india"]


@pytest.fixture(scope="module")
def built():
    """{family: (path, tokenizer, config)}, every family built once for the module (cached as the recipes cache)."""
    from transformers import AutoConfig, AutoTokenizer

    out = {}
    for key in KEYS:
        path = resolve_model(f"builtin:tiny-{key}")
        out[key] = (path, AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path))
    return out


def test_every_family_of_the_table_has_a_tiny_model():
    assert set(TINY_FAMILIES) | {EMBEDDED_FAMILY} == set(FAMILIES) and EMBEDDED_FAMILY not in TINY_FAMILIES
    assert builtin_names() == [f"builtin:tiny-{key}" for key in FAMILIES]
    with pytest.raises(ConfigError, match=r"^model_name_or_path: unknown built-in model 'builtin:tiny-llama'; the "
                       r"built-in models are builtin:tiny-qwen3, .*builtin:tiny-glm4moe"):
        resolve_model("builtin:tiny-llama")


@pytest.mark.parametrize("key", KEYS)
def test_each_tiny_model_is_its_family(key, built):
    """The real architecture class, the family's TRL template (told back by detect_family), its tokens whole."""
    import transformers

    path, tokenizer, config = built[key]
    assert family_of(tokenizer, config).key == key
    if key in TINY_FAMILIES:
        spec = TINY_FAMILIES[key]
        assert config.architectures == [spec.architecture]
        assert type(config).__name__ == spec.config_class
        model_class = getattr(transformers, spec.architecture)
        assert transformers.AutoModelForCausalLM.from_config(config).__class__ is model_class
        for token in spec.special_tokens + spec.tags:
            assert len(tokenizer.encode(token, add_special_tokens=False)) == 1, token
        assert set(spec.special_tokens) <= set(tokenizer.all_special_tokens)
        assert not set(spec.tags) & set(tokenizer.all_special_tokens)  # parsers read them after skip_special_tokens
    assert resolve_model(f"builtin:tiny-{key}") == path  # cached: the same folder, not rebuilt


@pytest.mark.parametrize("key", KEYS)
def test_sft_masking_trains_exactly_the_trainable_assistant_turns(key, built):
    """The repo's SFT masking (chat_corpus/masking.py, as recipes/sft.py and `trainers.data render` use it) on a
    multi-turn tool-calling record with a `train: false` turn: one trained span per trainable assistant turn, each
    the turn's text with its tool call in the family's format (read back by the family's CPU parser where there is
    one), nothing of the system, user, tool or untrained turns. A family the table marks sft_masking=False is
    refused in one line."""
    from chat_corpus.masking import _spans, tokenize_chat, training_chat_template
    from eval.tool_calls import TOOL_CALL_PARSERS

    _, tokenizer, _ = built[key]
    fam = FAMILIES[key]
    if not fam.sft_masking:
        with pytest.raises(ConfigError) as refused:
            training_chat_template(tokenizer)
        assert "\n" not in str(refused.value) and "chat_template_path" in str(refused.value)
        return
    ids, mask = tokenize_chat(tokenizer, training_chat_template(tokenizer), RECORD)
    spans = [tokenizer.decode(ids[start:end]) for start, end in _spans(mask)]
    assert len(spans) == 2, spans
    trained = "".join(spans)
    untrained = tokenizer.decode([i for i, bit in zip(ids, mask) if not bit])
    # gpt-oss's template renders no `content` beside tool calls (harmony has the turn's `thinking` there instead),
    # nor does Llama 3.1's (a tool-call turn is the call alone)
    unrendered = {"TRAINED-foxtrot", "SKIPPED-charlie"} if fam.tool_call_format in (HARMONY, LLAMA3_JSON) else set()
    assert {m for m in TRAINED + NOT_TRAINED if m not in tokenizer.decode(ids)} == unrendered
    assert all(marker in trained for marker in TRAINED if marker not in unrendered), spans
    assert not any(marker in trained for marker in NOT_TRAINED), spans
    assert all(marker in untrained for marker in NOT_TRAINED if marker not in unrendered)
    assert "TRAINED-golf" in spans[0] and "TRAINED-india" in spans[1]
    parse = TOOL_CALL_PARSERS.get(fam.tool_call_format)
    if parse is not None:  # the call comes back whole from the trained tokens alone
        _, calls = parse(spans[0], [BASH])
        assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
            [("bash", {"command": "touch TRAINED-golf.h && make"})], spans[0]
        assert parse(spans[1], [BASH])[1] == []


def test_docs_tiny_table_has_every_family_and_what_the_masking_test_shows():
    """docs/models.md's tiny-model table: a row per family of the table, in its order, SFT masking ✅ exactly where
    the test above trains the turns (a family without a training twin would be `refused`)."""
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in page.splitlines()
            if line.startswith("| tiny-")]
    assert [row[0] for row in rows] == [f"tiny-{key}" for key in FAMILIES]
    for row in rows:
        fam = FAMILIES[row[0].removeprefix("tiny-")]
        assert (row[3] == "✅") == fam.sft_masking and (fam.sft_masking or row[3].startswith("refused")), row
        assert row[1] == (TINY_FAMILIES[fam.key].architecture if fam.key in TINY_FAMILIES else "Qwen3ForCausalLM")


@pytest.mark.parametrize("key", KEYS)
def test_what_the_sft_recipe_refuses_at_start_for_each_family(key, built):
    """recipes/sft.py's kernel check on the embedded config (packing, attn_implementation varlen): hybrids refused
    for packing where the boundary kernels are missing, gpt-oss refused for varlen (its attention sinks), each in
    one line; with `packing: false` and eager attention every family passes."""
    from types import SimpleNamespace

    from modeling.kernels import boundary_kernels, check_kernels, recurrent_layers

    path, _, config = built[key]
    training = SimpleNamespace(packing=True, padding_free=False, eval_packing=None, use_liger_kernel=False,
                               use_cpu=True)
    model = SimpleNamespace(attn_implementation="varlen")
    refusal = None
    if key in TINY_FAMILIES and TINY_FAMILIES[key].architecture == "GptOssForCausalLM":
        refusal = "attn_implementation: varlen runs GptOssForCausalLM's attention on SDPA"
    elif recurrent_layers(config) and not all(boundary_kernels(config).values()):
        refusal = f"packing: {config.model_type} has 1 of {config.num_hidden_layers} layers of linear attention"
    if refusal is None:
        check_kernels(path, None, training, model)
    else:
        with pytest.raises(ConfigError) as refused:
            check_kernels(path, None, training, model)
        assert str(refused.value).startswith(refusal) and "\n" not in str(refused.value)
    training.packing, model.attn_implementation = False, "eager"
    check_kernels(path, None, training, model)
