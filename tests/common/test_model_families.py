"""common/model_families.py: each of TRL's templates (and its training twin) is told to its family, model_type where
it means one family, the one-line refusal otherwise; and what the table says of training holds for TRL 1.16."""

import json

import pytest

from common.model_families import (FAMILIES, FAMILY_KEY, REPO_TWIN_DIR, UnknownFamily, detect_family, family, family_of,
                                   family_of_checkpoint, repo_training_twin, trl_template_dir)

TEMPLATES = [(fam.key, name) for fam in FAMILIES.values() for name in fam.templates]
TOOL_TEMPLATES = [(key, name) for key, name in TEMPLATES if name not in FAMILIES[key].templates_without_tools]


def template(name: str) -> str:
    return (trl_template_dir() / f"{name}.jinja").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def own_tokenizer(tiny_model_path):
    """The tiny model's tokenizer, our own copy: its chat template is swapped for each family's."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def the_one_line(error) -> str:
    message = str(error.value)
    assert "\n" not in message
    assert f"`{FAMILY_KEY}`" in message or f"{FAMILY_KEY}:" in message
    assert all(key in message for key in FAMILIES), message
    return message


@pytest.mark.parametrize("key,name", TEMPLATES, ids=[name for _, name in TEMPLATES])
def test_each_trl_template_and_its_training_twin_is_told_to_its_family(key, name):
    assert detect_family(template(name)).key == key
    assert detect_family(template(name), model_type="llama").key == key  # the template goes first
    twin = trl_template_dir() / f"{name}_training.jinja"
    if twin.is_file():
        assert detect_family(twin.read_text(encoding="utf-8")).key == key
    # a template shipped as named variants is read by its default, as TRL reads it
    assert detect_family({"default": template(name), "tool_use": "x"}).key == key
    assert detect_family([{"name": "default", "template": template(name)}]).key == key


def test_model_type_tells_a_family_only_where_it_means_one():
    assert detect_family(None, "qwen3").key == "qwen3"
    for model_type in ("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"):
        assert detect_family("{{ messages }}", model_type).key == "qwen3_5"
    assert detect_family(None, "gpt_oss").key == "gptoss"
    # one model_type, several tool-call formats: the template must tell, or the user
    for model_type in ("qwen3_moe", "llama", "nemotron_h", "glm4_moe", "mistral", None):
        with pytest.raises(UnknownFamily) as error:
            detect_family("{{ messages }}", model_type)
        assert f"model_type {model_type!r}" in the_one_line(error)
    with pytest.raises(UnknownFamily, match="no chat template"):
        detect_family(None, None)
    # a changed byte is another template
    with pytest.raises(UnknownFamily, match="none of TRL's known ones"):
        detect_family(template("qwen3_5_think") + " ", "qwen3_moe")


def test_family_of_a_tokenizer_and_config_and_the_key_that_overrides(own_tokenizer):
    class Config:
        model_type = "qwen3"

    assert family_of(own_tokenizer, Config()).key == "qwen3"  # the tiny model: TRL's qwen3 template
    assert family_of(None, {"model_type": "gpt_oss"}).key == "gptoss"
    # a VLM's config: the text model's type
    assert family_of(None, {"model_type": "some_vlm", "text_config": {"model_type": "qwen3_5_text"}}).key == "qwen3_5"
    assert family_of(own_tokenizer, Config(), override="qwen3_5").key == "qwen3_5"  # the user's key wins
    with pytest.raises(UnknownFamily) as error:
        family_of(own_tokenizer, Config(), override="qwen4")
    assert "unknown family 'qwen4'" in the_one_line(error)
    assert family("glm4moe") is FAMILIES["glm4moe"]


def test_family_of_a_checkpoint_folder_from_its_files(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "chat_template.jinja").write_text(template("nemotron_3_nano"))
    (tmp_path / "a" / "config.json").write_text(json.dumps({"model_type": "nemotron_h"}))
    assert family_of_checkpoint(str(tmp_path / "a")).key == "nemotron_3_nano"
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "tokenizer_config.json").write_text(json.dumps({"chat_template": template("llama3_1")}))
    assert family_of_checkpoint(str(tmp_path / "b")).key == "llama3_1"
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "config.json").write_text(json.dumps({"model_type": "nemotron_h"}))
    with pytest.raises(UnknownFamily) as error:
        family_of_checkpoint(str(tmp_path / "c"))
    the_one_line(error)
    assert family_of_checkpoint(str(tmp_path / "c"), override="nemotron_3_nano").key == "nemotron_3_nano"
    with pytest.raises(UnknownFamily, match="no local tokenizer or config.json"):
        family_of_checkpoint(str(tmp_path / "missing"))


def test_the_table_names_real_trl_templates_and_distinct_keys():
    names = [name for _, name in TEMPLATES]
    assert len(names) == len(set(names))
    assert all((trl_template_dir() / f"{name}.jinja").is_file() for name in names)
    for fam in FAMILIES.values():
        assert set(fam.templates_without_tools) <= set(fam.templates)
        others = {t for other in FAMILIES.values() if other is not fam for t in other.model_types}
        assert not set(fam.model_types) & others


@pytest.mark.parametrize("key,name", TEMPLATES, ids=[name for _, name in TEMPLATES])
def test_what_the_table_says_of_training_holds_in_trl(key, name, own_tokenizer):
    """sft_masking: TRL gives a training twin that marks the assistant turn, tool call included, and our masking
    trains exactly it; grpo_tool_loop: what GRPOTrainer checks at start with tools holds: add_response_schema knows
    the template, and the template, or else TRL's training twin (which TRL then swaps in), is prefix-preserving."""
    from trl.chat_template_utils import (add_response_schema, get_training_chat_template,
                                         is_chat_template_prefix_preserving)

    from chat_corpus.masking import tokenize_chat, training_chat_template
    from common.errors import ConfigError

    fam = FAMILIES[key]
    own_tokenizer.chat_template = template(name)
    tools_rendered = name not in fam.templates_without_tools
    try:
        twin = training_chat_template(own_tokenizer)
    except ConfigError:
        twin = None
    assert (twin is not None) == (fam.sft_masking or not tools_rendered), name
    if twin is not None and tools_rendered:
        call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls -la /srv"}}}
        record = {"messages": [{"role": "user", "content": "look"},
                               {"role": "assistant", "content": "", "tool_calls": [call]},
                               {"role": "tool", "name": "bash", "content": "total 0"},
                               {"role": "assistant", "content": "Nothing there."}],
                  "tools": [{"type": "function", "function": {"name": "bash", "description": "run",
                             "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]}
        ids, mask = tokenize_chat(own_tokenizer, twin, record)
        trained = own_tokenizer.decode([i for i, bit in zip(ids, mask) if bit])
        untrained = own_tokenizer.decode([i for i, bit in zip(ids, mask) if not bit])
        assert "ls -la /srv" in trained and "Nothing there." in trained and "total 0" not in trained, name
        assert "look" in untrained and "total 0" in untrained, name
    if tools_rendered:  # what GRPOTrainer.__init__ does with tools: a response schema, a prefix-preserving template
        try:
            add_response_schema(own_tokenizer)
            grpo_ready = True
        except ValueError:
            grpo_ready = False
        if grpo_ready and not is_chat_template_prefix_preserving(own_tokenizer):
            try:  # TRL swaps in its training twin
                own_tokenizer.chat_template = get_training_chat_template(own_tokenizer)
                grpo_ready = is_chat_template_prefix_preserving(own_tokenizer)
            except ValueError:
                grpo_ready = False
            own_tokenizer.chat_template = template(name)
        assert grpo_ready == fam.grpo_tool_loop, name


def test_docs_models_table_is_the_family_table():
    """docs/models.md's table says what FAMILIES says, row for row (one owner; the page follows it)."""
    from pathlib import Path

    from eval.tool_calls import TOOL_CALL_PARSERS

    page = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in page.splitlines()
            if line.startswith("| `")]
    yes = {True: "yes", False: "no"}
    expected = [[f"`{f.key}`",
                 ", ".join(n + (" (no tools)" if n in f.templates_without_tools else "") for n in f.templates),
                 ", ".join(f.model_types) or "none", f"`{f.tool_call_format}`",
                 "yes" if f.tool_call_format in TOOL_CALL_PARSERS else "no: refused, serve with vLLM",
                 f"`{f.vllm_tool_call_parser}`", f"`{f.vllm_reasoning_parser}`" if f.vllm_reasoning_parser else "none",
                 yes[f.sft_masking], yes[f.grpo_tool_loop], f.packing] for f in FAMILIES.values()]
    assert rows == expected


REPO_TWINS = sorted(path.name.removesuffix("_training.jinja") for path in REPO_TWIN_DIR.glob("*_training.jinja"))


@pytest.mark.parametrize("name", REPO_TWINS)
def test_the_repos_training_twin_renders_the_original_byte_for_byte(name, own_tokenizer):
    """common/chat_templates/NAME_training.jinja (a twin TRL 1.16 does not ship) renders every conversation exactly as
    TRL's NAME.jinja does (plain turns, a system message, tools in the first user message or in the system message,
    a tool call, Llama 3.1's builtin-tool call), its generation blocks cover each assistant turn's output and the
    end-of-turn token and nothing else, and it is told to the original's family."""
    from chat_corpus.masking import _spans

    original, twin = template(name), (REPO_TWIN_DIR / f"{name}_training.jinja").read_text(encoding="utf-8")
    key = detect_family(original).key
    assert detect_family(twin).key == key and repo_training_twin(original) == twin
    tools = [{"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
    call = {"type": "function", "function": {"name": "bash", "arguments": {"command": "grep -c 'x\"y' a.log"}}}
    chat = [{"role": "system", "content": "You run commands."}, {"role": "user", "content": "count it"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "bash", "content": "3"}, {"role": "assistant", "content": " Three. "}]
    cases = [(chat, {"tools": tools}), (chat[1:], {"tools": tools}), (chat[1:], {"tools": tools, "tools_in_user_message": False}),
             ([chat[1], {"role": "assistant", "content": "hi"}], {})]
    if name == "llama3_1":
        cases.append((chat, {"tools": tools, "builtin_tools": ["bash"]}))
    for messages, kwargs in cases:
        plain = own_tokenizer.apply_chat_template(messages, chat_template=original, tokenize=False, **kwargs)
        assert own_tokenizer.apply_chat_template(messages, chat_template=twin, tokenize=False, **kwargs) == plain
        rendered = own_tokenizer.apply_chat_template(messages, chat_template=twin, tokenize=True, return_dict=True,
                                                     return_assistant_tokens_mask=True, **kwargs)
        spans = [own_tokenizer.decode(rendered["input_ids"][a:b]) for a, b in _spans(list(rendered["assistant_masks"]))]
        assistants = [m for m in messages if m["role"] == "assistant"]
        assert len(spans) == len(assistants), (kwargs, spans)
        for span, message in zip(spans, assistants):
            assert span.endswith(("<|eot_id|>", "<|eom_id|>")) and "<|start_header_id|>" not in span, span
            assert ("grep -c" in span) == bool(message.get("tool_calls")), span
