"""The embedded tiny model: a Qwen3-architecture causal LM and a byte-level BPE tokenizer, built offline.

`builtin:tiny-qwen3` stands for this model anywhere a model name is accepted. It is built on first use from a
config and a tokenizer trained on the text of the bundled sample corpora, and cached under
`$TERMINAL_RECIPES_CACHE` (default `~/.cache/terminal-recipes`). The chat template is TRL's bundled Qwen3
template, byte for byte, so TRL recognises it (assistant-only loss, tool-call parsing) exactly as it would
for a real Qwen3 checkpoint.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import json
import os
import shutil
import tempfile
from pathlib import Path

from common.errors import ConfigError

BUILTIN_PREFIX = "builtin:"
TINY_NAME = "tiny-qwen3"
REPO_ROOT = Path(__file__).resolve().parents[1]
CORPUS_DIR = REPO_ROOT / "data"
CORPUS_SUFFIXES = {".jsonl", ".json", ".txt"}  # what trains the tokenizer (and names the cached build)

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                  "<tool_response>", "</tool_response>", "<think>", "</think>"]
TOKENIZER_VOCAB_SIZE = 4096
MODEL_CONFIG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, max_position_embeddings=32768, tie_word_embeddings=True)


def cache_root() -> Path:
    return Path(os.environ.get("TERMINAL_RECIPES_CACHE", Path.home() / ".cache" / "terminal-recipes"))


def tokenizer_corpus_files(corpus_dir: Path = CORPUS_DIR) -> list[Path]:
    """The files whose strings train the tokenizer: the sample corpora under data/ (JSONL, JSON and the trials'
    text files), not the READMEs beside them or the scripts that make and check them."""
    return sorted(p for p in corpus_dir.rglob("*") if p.is_file() and p.suffix in CORPUS_SUFFIXES)


def _corpus_texts(corpus_dir: Path = CORPUS_DIR):
    """Every string in the bundled corpora (JSON values, not JSON syntax), so the BPE learns shell and prose."""

    def strings(obj):
        if isinstance(obj, str):
            yield obj
        elif isinstance(obj, dict):
            for key, value in obj.items():
                yield key
                yield from strings(value)
        elif isinstance(obj, list):
            for value in obj:
                yield from strings(value)

    for path in tokenizer_corpus_files(corpus_dir):
        text = path.read_text(encoding="utf-8", errors="replace")
        if path.suffix == ".jsonl":
            for line in text.splitlines():
                try:
                    yield from strings(json.loads(line))
                except json.JSONDecodeError:
                    continue
        elif path.suffix == ".json":
            try:
                yield from strings(json.loads(text))
            except json.JSONDecodeError:
                continue
        else:  # the trials' text files (verifier output, exceptions)
            yield text


def fingerprint(corpus_dir: Path = CORPUS_DIR) -> str:
    """Names the cached build: the model config and exactly the files that train the tokenizer, so editing a
    README (or anything else) under data/ does not rebuild the model."""
    digest = hashlib.sha256(json.dumps([TOKENIZER_VOCAB_SIZE, MODEL_CONFIG, SPECIAL_TOKENS]).encode())
    for path in tokenizer_corpus_files(corpus_dir):
        digest.update(path.relative_to(corpus_dir).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def _build(out: Path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        _corpus_texts(),
        trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB_SIZE, special_tokens=SPECIAL_TOKENS,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=SPECIAL_TOKENS[1:])
    # TRL's own Qwen3 template, byte-exact: TRL then maps it to its training twin with {% generation %} markers.
    tokenizer.chat_template = (importlib.resources.files("trl") / "chat_templates" / "qwen3.jinja").read_text()
    tokenizer.model_max_length = MODEL_CONFIG["max_position_embeddings"]
    tokenizer.save_pretrained(out)

    config = Qwen3Config(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **MODEL_CONFIG)
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)


def tiny_model_path() -> Path:
    """Path of the cached tiny model, building it first if needed (safe with several processes)."""
    from filelock import FileLock

    target = cache_root() / f"{TINY_NAME}-{fingerprint()}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not (target / "config.json").exists():
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".build-"))
            try:
                _build(tmp)
                tmp.rename(target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def resolve_model(name_or_path: str) -> str:
    """`builtin:tiny-qwen3` becomes the cached tiny model's path; any other name or path passes through."""
    if name_or_path.startswith(BUILTIN_PREFIX):
        name = name_or_path[len(BUILTIN_PREFIX):]
        if name != TINY_NAME:
            raise ConfigError(f"model_name_or_path: unknown built-in model {name_or_path!r}; the built-in model is "
                             f"'{BUILTIN_PREFIX}{TINY_NAME}' (or give a Hugging Face name or a local path)")
        return str(tiny_model_path())
    return name_or_path
