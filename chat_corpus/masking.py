"""Token-level loss masks for chat records: every assistant turn is trained, nothing else is.
Runs in: the training venv (Transformers' tokenizers, jinja2), where the SFT corpus is prepared.

The chat is rendered by the model's training chat template, the one with `{% generation %}` markers (TRL's
`get_training_chat_template`); each generation block is one assistant turn, and blocks of turns marked
`"train": false` are cleared. Written here because TRL has no per-message train flag and drops over-long
examples silently; this module truncates by the configured policy and reports every cut.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jinja2 import TemplateError

from chat_corpus.records import RecordError
from common.errors import ConfigError
from common.model_families import repo_training_twin

TRUNCATION_POLICIES = ("turns", "keep_start", "drop")


def training_chat_template(tokenizer) -> str:
    """The tokenizer's template if it marks assistant turns, else TRL's training twin of it, else the repo's (Llama
    3.1/3.2: common/chat_templates/)."""
    from trl.chat_template_utils import get_training_chat_template

    template = tokenizer.chat_template or ""
    if "{% generation %}" in template.replace("{%- generation %}", "{% generation %}"):
        return template
    try:
        return get_training_chat_template(tokenizer)
    except ValueError:
        if (twin := repo_training_twin(template)) is not None:
            return twin
        raise ConfigError(
            f"the chat template of {getattr(tokenizer, 'name_or_path', 'this tokenizer')} has no "
            "{% generation %} markers and neither TRL nor the repo has a training twin of it; set "
            "`chat_template_path` to a .jinja file that wraps each assistant turn in {% generation %} ... "
            "{% endgeneration %}") from None


def load_tokenizer(model_path: str, revision: str | None = None, chat_template_path: str | None = None):
    """The tokenizer the corpus is rendered with: the model's, with SFTConfig's `chat_template_path` (a .jinja file)
    set on it first, as TRL sets it when the trainer starts (recipes/sft.py and `python -m trainers.data`)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path, revision=revision)
    if chat_template_path:
        tokenizer.chat_template = read_chat_template_path(chat_template_path)
    return tokenizer


def read_chat_template_path(path: str) -> str:
    """The template of SFTConfig's `chat_template_path` when it is a .jinja file (TRL sets it at the trainer's start;
    the corpus is rendered before that, so the recipe sets it first). A tokenizer's folder, which TRL clones with its
    tokens, is refused: the corpus would be rendered with another vocabulary than the one trained."""
    if not path.endswith((".jinja", ".j2")):
        raise ConfigError(f"chat_template_path: {path!r} is not a .jinja file; give a Jinja template file (cloning a "
                          "tokenizer's template and tokens is not supported with the prepared corpus)")
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"chat_template_path: cannot read {path} ({err.__class__.__name__}); give a readable "
                          ".jinja file") from None


@dataclass
class TokenizedChat:
    input_ids: list[int]
    assistant_masks: list[int]
    full_length: int  # tokens before truncation
    truncated: bool = False
    trained_tokens_cut: int = 0


def _spans(mask: list[int]) -> list[tuple[int, int]]:
    spans, start = [], None
    for index, bit in enumerate(mask + [0]):
        if bit and start is None:
            start = index
        elif not bit and start is not None:
            spans.append((start, index))
            start = None
    return spans


def tokenize_chat(tokenizer, template: str, record: dict) -> tuple[list[int], list[int]]:
    """input_ids and the mask of trained tokens, over the whole conversation."""
    messages = record["messages"]
    try:
        rendered = tokenizer.apply_chat_template(
            messages, tools=record.get("tools"), chat_template=template, tokenize=True, return_dict=True,
            return_assistant_tokens_mask=True)
    except TemplateError as err:  # the template's raise_exception: a record its format cannot hold
        raise RecordError(f"the chat template refuses this record: {err}") from None
    input_ids, mask = list(rendered["input_ids"]), list(rendered["assistant_masks"])
    spans = _spans(mask)
    assistants = [message for message in messages if message["role"] == "assistant"]
    if len(spans) != len(assistants):
        raise RecordError(f"the chat template marked {len(spans)} assistant spans for {len(assistants)} assistant "
                          "turns; the template's {% generation %} blocks must wrap each assistant turn once")
    for (start, end), message in zip(spans, assistants):
        if message.get("train") is False:
            mask[start:end] = [0] * (end - start)
    return input_ids, mask


def fit_to_length(input_ids: list[int], mask: list[int], max_length: int | None, policy: str) -> TokenizedChat:
    """Apply the truncation policy; raises RecordError when nothing trainable is left (the caller counts it)."""
    result = TokenizedChat(input_ids, mask, full_length=len(input_ids))
    if max_length is None or len(input_ids) <= max_length:
        return result
    if policy == "drop":
        raise RecordError(f"{len(input_ids)} tokens > max_length {max_length} (truncation: drop)")
    if policy == "turns":  # cut after the last trained assistant turn that fits whole
        ends = [end for _, end in _spans(mask) if end <= max_length]
        if not ends:
            raise RecordError(f"{len(input_ids)} tokens > max_length {max_length} and no trained assistant turn "
                              "fits whole (truncation: turns)")
        cut = ends[-1]
    elif policy == "keep_start":
        cut = max_length
    else:
        raise ValueError(f"truncation: {policy!r} is not one of {', '.join(TRUNCATION_POLICIES)}")
    kept = mask[:cut]
    if not any(kept):
        raise RecordError(f"{len(input_ids)} tokens > max_length {max_length}; nothing trained is left after "
                          f"truncation ({policy})")
    result.input_ids, result.assistant_masks = input_ids[:cut], kept
    result.truncated, result.trained_tokens_cut = True, sum(mask) - sum(kept)
    return result
