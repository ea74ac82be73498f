"""The model family table: per family its chat templates, tool-call format, parsers and training support; detection.
Runs in: any Python >= 3.11, standard library only (it reads TRL's template files without importing TRL).

One owner (docs/models.md): eval/serve.py's vLLM flags, eval/cpu_server.py's tool-call parser, and the docs read
FAMILIES. `detect_family(chat_template, model_type)` compares the template with TRL's `trl/chat_templates/*.jinja`
(originals and `*_training` twins, byte for byte, as TRL's own identity comparison does), then falls back on
`config.model_type` where one type means one format; anything else raises UnknownFamily, one line naming the
`model_family` key. vLLM names hold for every release the GPU extra allows (vllm>=0.22.0,<=0.31.0).
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from common.errors import ConfigError

FAMILY_KEY = "model_family"  # the config key / --model_family option that names a family outright

# the tool-call formats a family's template renders and our CPU server parses (eval/cpu_server.py TOOL_CALL_PARSERS)
HERMES_JSON = "hermes_json"   # <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
QWEN3_XML = "qwen3_xml"       # <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>...
LLAMA3_JSON = "llama3_json"   # {"name": ..., "parameters": {...}}, a bare JSON object
HARMONY = "harmony"           # gpt-oss: ... to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>
GLM45_XML = "glm45_xml"       # <tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>

# what a family's reasoning looks like in generated text (common/reasoning.py splits it as the vLLM parser does)
THINK_TAGS = "think_tags"     # <think>REASONING</think>ANSWER; the template may put <think> in the prompt
HARMONY_CHANNELS = "harmony_channels"  # gpt-oss: <|channel|>analysis<|message|>REASONING<|end|>...final<|message|>


class UnknownFamily(ConfigError):
    """A model whose family the table cannot tell: refused at start, never served or trained with a guessed parser."""


@dataclass(frozen=True)
class ModelFamily:
    key: str                          # what `model_family` takes
    architectures: tuple[str, ...]    # the `config.architectures` the family's checkpoints have (for the docs)
    model_types: tuple[str, ...]      # `config.model_type` values that mean this family and no other
    templates: tuple[str, ...]        # TRL's original templates (trl/chat_templates/NAME.jinja); NAME_training too
    tool_call_format: str             # one of the formats above
    vllm_tool_call_parser: str | None      # `vllm serve --tool-call-parser`, None: refused on vLLM
    vllm_reasoning_parser: str | None      # `vllm serve --reasoning-parser`, None: none passed
    reasoning_format: str | None = None    # THINK_TAGS, HARMONY_CHANNELS; None: the family writes no reasoning
    templates_without_tools: tuple[str, ...] = ()  # templates of the family that render no tool calls
    # TRL 1.16 has a training twin with {% generation %} markers for each template (SFT's assistant-only loss)
    sft_masking: bool = True
    # TRL's GRPO tool loop runs: add_response_schema parses the calls and the template (or TRL's twin) is
    # prefix-preserving; tests/trainers/test_grpo_tool_loop.py: a recorded episode trains exactly the sampled tokens
    grpo_tool_loop: bool = True
    packing: str = "attention only"  # what packing meets (modeling/kernels.py decides; not tested per family)
    notes: str = ""


# vLLM's registered names: the keys of `_TOOL_PARSERS_TO_REGISTER` in vllm/tool_parsers/__init__.py and of
# `_REASONING_PARSERS_TO_REGISTER` in vllm/reasoning/__init__.py, read in the wheels of every vLLM release from 0.22.0
# to 0.31.0 (0.22.0, 0.22.1, 0.23.0, 0.24.0, 0.25.0, 0.25.1, 0.26.0, 0.27.0, 0.27.1, 0.28.0, 0.29.0, 0.30.0, 0.31.0).
FAMILIES: dict[str, ModelFamily] = {family.key: family for family in (
    ModelFamily(
        key="qwen3", architectures=("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"), model_types=("qwen3",),
        templates=("qwen3", "qwen3_instruct_2507"), tool_call_format=HERMES_JSON,
        vllm_tool_call_parser="hermes",   # vllm/tool_parsers/__init__.py: "hermes" -> hermes_tool_parser
        vllm_reasoning_parser="qwen3",    # vllm/reasoning/__init__.py: "qwen3" -> qwen3(_engine)_reasoning_parser
        reasoning_format=THINK_TAGS,
        notes="qwen3_moe is not a model_type fallback: Qwen3-Coder (XML calls) shares it; its template decides"),
    ModelFamily(
        key="qwen3_5", architectures=("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"),
        model_types=("qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"),
        templates=("qwen3_5_think", "qwen3_5_nothink", "qwen3_6", "qwen3_8"), tool_call_format=QWEN3_XML,
        vllm_tool_call_parser="qwen3_coder",  # vllm/tool_parsers/__init__.py: "qwen3_coder" (qwen3coder / engine)
        vllm_reasoning_parser="qwen3",        # vllm/reasoning/__init__.py: "qwen3"
        reasoning_format=THINK_TAGS,
        packing="hybrid: Gated DeltaNet layers (flash-linear-attention and causal-conv1d take the boundaries)",
        notes="Qwen3.5, Qwen3.6 and Qwen3.8 share the XML tool calls"),
    ModelFamily(
        key="nemotron_3_nano", architectures=("NemotronHForCausalLM",), model_types=(),
        templates=("nemotron_3_nano",), tool_call_format=QWEN3_XML,
        vllm_tool_call_parser="qwen3_coder",  # vllm/tool_parsers/__init__.py: "qwen3_coder" (the same XML as Qwen3.5)
        vllm_reasoning_parser="nemotron_v3",  # vllm/reasoning/__init__.py: "nemotron_v3" (nemotron_v3 parser)
        reasoning_format=THINK_TAGS,
        packing="hybrid: Mamba-2 layers",
        notes="nemotron_h is not a model_type fallback: older Nemotron-H checkpoints share it with other formats"),
    ModelFamily(
        key="llama3_1", architectures=("LlamaForCausalLM",), model_types=(),
        templates=("llama3_1", "llama3_2", "llama3"), templates_without_tools=("llama3",),
        tool_call_format=LLAMA3_JSON,
        vllm_tool_call_parser="llama3_json",  # vllm/tool_parsers/__init__.py: "llama3_json" -> llama_tool_parser
        vllm_reasoning_parser=None,
        notes="one tool call per assistant turn; "
              "llama is not a model_type fallback (Llama 2 and 3.0 render no tool calls); TRL has one twin, "
              "llama3_training, for llama3.jinja (no tools) only: the 3.1/3.2 twins are the repo's "
              "(common/chat_templates/)"),
    ModelFamily(
        key="gptoss", architectures=("GptOssForCausalLM",), model_types=("gpt_oss",),
        templates=("gptoss",), tool_call_format=HARMONY,
        vllm_tool_call_parser="openai",         # vllm/tool_parsers/__init__.py: "openai" (openai / gptoss parser)
        vllm_reasoning_parser="openai_gptoss",  # vllm/reasoning/__init__.py: "openai_gptoss" (gptoss parser)
        reasoning_format=HARMONY_CHANNELS,
        notes="the CPU server does not parse harmony: serve gpt-oss with vLLM"),
    ModelFamily(
        key="glm4moe", architectures=("Glm4MoeForCausalLM",), model_types=(),
        templates=("glm4moe",), tool_call_format=GLM45_XML,
        vllm_tool_call_parser="glm45",   # vllm/tool_parsers/__init__.py: "glm45" -> glm4_moe (<0.24) / glm47_moe parser
        vllm_reasoning_parser="glm45",   # vllm/reasoning/__init__.py: "glm45"
        reasoning_format=THINK_TAGS,
        notes="glm4_moe is not a model_type fallback: GLM-4.7 shares it with another call layout (vLLM's glm47)"),
)}


def known_keys() -> str:
    return ", ".join(FAMILIES)


def family(key: str) -> ModelFamily:
    """The family a `model_family` key names; UnknownFamily (one line, the known keys) for any other."""
    if key not in FAMILIES:
        raise UnknownFamily(f"{FAMILY_KEY}: unknown family {key!r}; known families: {known_keys()}")
    return FAMILIES[key]


def trl_template_dir() -> Path | None:
    """TRL's chat_templates folder, found without importing TRL (None where TRL is not installed)."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "chat_templates"
    return folder if folder.is_dir() else None


# training twins (NAME_training.jinja, `{% generation %}` markers) of TRL templates TRL ships none for, written here:
# TRL 1.16 has llama3_training for llama3.jinja only, and Llama 3.1/3.2 are what users fine-tune with tools
REPO_TWIN_DIR = Path(__file__).resolve().parent / "chat_templates"


@lru_cache(maxsize=1)
def _templates_by_text() -> dict[str, str]:
    """The text of each TRL template (original or training twin, TRL's or the repo's) of a family in the table -> the
    family's key."""
    folder = trl_template_dir()
    out: dict[str, str] = {}
    if folder is None:
        return out
    for fam in FAMILIES.values():
        for name in fam.templates:
            for file in (folder / f"{name}.jinja", folder / f"{name}_training.jinja",
                         REPO_TWIN_DIR / f"{name}_training.jinja"):
                if file.is_file():
                    out.setdefault(file.read_text(encoding="utf-8"), fam.key)
    return out


def repo_training_twin(chat_template) -> str | None:
    """The repo's training twin of a TRL template TRL ships no twin for (the template byte for byte), else None."""
    text, folder = template_text(chat_template), trl_template_dir()
    if text is None or folder is None:
        return None
    for twin in sorted(REPO_TWIN_DIR.glob("*_training.jinja")):
        original = folder / twin.name.replace("_training.jinja", ".jinja")
        if original.is_file() and original.read_text(encoding="utf-8") == text:
            return twin.read_text(encoding="utf-8")
    return None


def template_text(chat_template) -> str | None:
    """A tokenizer's chat_template as one string: a dict of named templates gives its `default` (as TRL reads it)."""
    if isinstance(chat_template, list):  # tokenizer_config.json's [{"name", "template"}, ...]
        chat_template = {t.get("name"): t.get("template") for t in chat_template if isinstance(t, dict)}
    if isinstance(chat_template, dict):
        chat_template = chat_template.get("default")
    return chat_template if isinstance(chat_template, str) and chat_template else None


def detect_family(chat_template=None, model_type: str | None = None) -> ModelFamily:
    """The family of a model: its chat template is one of TRL's (byte for byte), else its model_type means one
    family; else UnknownFamily, one line naming the key to set."""
    text = template_text(chat_template)
    if text is not None and text in _templates_by_text():
        return FAMILIES[_templates_by_text()[text]]
    for fam in FAMILIES.values():
        if model_type and model_type in fam.model_types:
            return fam
    template = "no chat template" if text is None else "a chat template none of TRL's known ones matches"
    raise UnknownFamily(f"cannot tell the model family ({template}, model_type {model_type!r}); set "
                        f"`{FAMILY_KEY}` to one of: {known_keys()} (docs/models.md)")


def family_of(tokenizer=None, config=None, override: str | None = None) -> ModelFamily:
    """The family of a loaded tokenizer and config (`model_type`, or a VLM's `text_config.model_type`); `override`
    (the `model_family` key, set by the user) wins."""
    if override:
        return family(override)
    model_type = getattr(config, "model_type", None) if not isinstance(config, dict) else config.get("model_type")
    template = getattr(tokenizer, "chat_template", None)
    try:
        return detect_family(template, model_type)
    except UnknownFamily:
        text = config.get("text_config") if isinstance(config, dict) else getattr(config, "text_config", None)
        inner = text.get("model_type") if isinstance(text, dict) else getattr(text, "model_type", None)
        if inner and inner != model_type:
            return detect_family(template, inner)
        raise


def _json_file(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ConfigError(f"{path}: not a readable JSON file ({err}); fix it, or set `{FAMILY_KEY}`") from None
    return data if isinstance(data, dict) else {}


def family_of_checkpoint(path: str, override: str | None = None) -> ModelFamily:
    """The family of a checkpoint folder from its files alone (tokenizer_config.json or chat_template.jinja, and
    config.json), nothing loaded; `override` wins. A folder that is not there (a Hugging Face name) needs the key."""
    if override:
        return family(override)
    folder = Path(path)
    template, config = None, {}
    if (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    elif (folder / "chat_template.json").is_file():  # a processor's
        template = _json_file(folder / "chat_template.json").get("chat_template")
    elif (folder / "tokenizer_config.json").is_file():
        template = _json_file(folder / "tokenizer_config.json").get("chat_template")
    if (folder / "config.json").is_file():
        config = _json_file(folder / "config.json")
    if template is None and not config:
        raise UnknownFamily(f"cannot tell the model family of {path} (no local tokenizer or config.json); set "
                            f"`{FAMILY_KEY}` to one of: {known_keys()} (docs/models.md)")

    class _Tokenizer:
        chat_template = template

    return family_of(_Tokenizer, config)
