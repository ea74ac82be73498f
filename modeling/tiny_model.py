"""Small causal LMs with byte-level BPE tokenizers, built offline: `builtin:tiny-<family>`, the student preset.
Runs in: the training venv (.venv: torch, Transformers, tokenizers); cached under `$TERMINAL_RECIPES_CACHE`.

    python -m modeling.tiny_model --out DIR --corpus PATH... [--preset student] [--copy_steps N]

Random weights (the student: copy-pretrained on synthetic sequences, no task text), TRL's bundled chat template byte
for byte: Qwen3 for the embedded default, its training twin for the students, each family's own for the others
(tiny_families.py, docs/models.md). The student's tokenizer, template and copy pretraining: docs/learn.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from chat_corpus.sources import Source, load_source
from common.cache_dir import cache_root
from common.errors import ConfigError
from common.model_families import FAMILIES, trl_template_dir
from modeling.induction_circuit import set_induction_circuit
from modeling.tiny_families import EMBEDDED_FAMILY, TINY_DIMS, TINY_FAMILIES, TinyFamily

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
# Letters, one digit, one punctuation character, or whitespace: the pieces BPE may merge within, never across.
IDENTIFIER_PIECES = r"[A-Za-z]+|[0-9]|\s+|[^A-Za-z0-9\s]"


# The students are served with the template they are trained with: TRL trains Qwen3 on its prefix-preserving twin
# (every assistant turn keeps its empty think block), while Qwen3's own drops the blocks of earlier turns when it
# renders a prompt, a context the student never saw in training (measured on held-out deep trajectories: token accuracy
# 0.910 rendered by the original, 0.985 by the twin; docs/learn.md, "The deep families").
STUDENT_TEMPLATE = "qwen3_training"


@dataclass(frozen=True)
class Preset:
    """A model size and how its tokenizer splits text before BPE ("gpt2": GPT-2's byte-level regex;
    "identifiers": IDENTIFIER_PIECES)."""

    model_config: dict
    vocab_size: int = TOKENIZER_VOCAB_SIZE
    pre_tokenizer: str = "gpt2"
    line_tokens: bool = False  # frequent whole lines of the corpus become single tokens (frequent_lines)
    copy_steps: int = 0  # steps of copy pretraining (pretrain_copy) after the random init
    copy_span: int = 48  # tokens a copy-pretraining sequence repeats (the distance the copy circuit learns)
    induction_circuit: bool = False  # previous-token and induction heads set by hand (modeling/induction_circuit.py)
    pointer_heads: int = 0  # last-layer KV heads that copy where SFT points them (induction_circuit.py pointer_groups)
    chat_template: str = "qwen3"  # TRL's bundled template (trl/chat_templates/NAME.jinja) the tokenizer carries
    help: str = field(default="", compare=False)


PRESETS = {
    TINY_NAME: Preset(MODEL_CONFIG, help="the embedded default: 2 layers, hidden 64 (~0.3M parameters)"),
    "student": Preset(dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
                           num_key_value_heads=4, head_dim=32, max_position_embeddings=8192, tie_word_embeddings=True),
                      pre_tokenizer="identifiers", line_tokens=True, copy_steps=250, chat_template=STUDENT_TEMPLATE,
                      help="the learning run's student: 4 layers, hidden 256 (~3.5M parameters), identifier-stable "
                           "tokens, copy-pretrained"),
    "student-induction": Preset(dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=8,
                                     num_key_value_heads=4, head_dim=32, max_position_embeddings=8192,
                                     tie_word_embeddings=True,
                                     rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}),
                                pre_tokenizer="identifiers", line_tokens=True, induction_circuit=True, pointer_heads=2,
                                chat_template=STUDENT_TEMPLATE,
                                help="the deep learning run's student: the student's size and tokens, Qwen3's "
                                     "rope_theta, an induction circuit set by hand in place of copy pretraining "
                                     "(copies from any distance), pointer heads that copy where SFT points them"),
}


def tokenizer_corpus_files(corpus_dir: Path = CORPUS_DIR) -> list[Path]:
    """The files whose strings train the tokenizer: the sample corpora under data/ (JSONL, JSON and the trials'
    text files), not the READMEs beside them or the scripts that make and check them."""
    return sorted(p for p in corpus_dir.rglob("*") if p.is_file() and p.suffix in CORPUS_SUFFIXES)


def record_texts(paths: Iterable[str | Path]) -> tuple[list[str], int]:
    """(every string of every record, the number of records) of the corpus sources at `paths` (JSONL files, Harbor
    job dirs, ...), read as the SFT recipe reads them (chat_corpus/sources.py): the text the model will see, e.g. a
    Harbor trajectory's assistant turns rebuilt as Terminus-2 JSON, not the trajectory file's own fields."""

    texts: list[str] = []
    records = 0
    for path in paths:
        try:
            loaded = load_source(Source(path=str(path)), split_key="metadata.source_trajectory_uid")
        except (FileNotFoundError, OSError) as err:
            raise ConfigError(f"--corpus {path}: {err}") from None
        for record in loaded.records:
            texts += list(_strings({"messages": record.get("messages"), "tools": record.get("tools")}))
        records += len(loaded.records)
    if not records:
        raise ConfigError(f"--corpus {' '.join(map(str, paths))}: no records in it")
    return texts, records


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for key, value in obj.items():
            yield key
            yield from _strings(value)
    elif isinstance(obj, list):
        for value in obj:
            yield from _strings(value)


def _corpus_texts(corpus_dir: Path = CORPUS_DIR):
    """Every string in the bundled corpora (JSON values, not JSON syntax), so the BPE learns shell and prose."""
    strings = _strings
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


def frequent_lines(texts: list[str], min_share: float = 0.02, min_chars: int = 8, limit: int = 2048) -> list[str]:
    """The lines (at least `min_chars` long, no line break) found in at least `min_share` of the multi-line texts
    and in 3 or more: an agent corpus repeats its harness's prompt and its answer format line for line, and one token per such
    line keeps a 2,900-character Terminus-2 prompt to ~100 tokens, where words alone would need ~1,200. A line
    with a name or a number in it is rare, so what varies keeps the identifier-stable pieces."""
    from collections import Counter

    multi_line = [text for text in texts if "\n" in text]
    counts = Counter(line for text in multi_line for line in set(text.split("\n")) if len(line.strip()) >= min_chars)
    floor = max(3, min_share * len(multi_line))
    # ties by the line itself: a set's order, and so most_common's among equal counts, changes with the hash seed
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:limit]
    return [line for line, n in ranked if n >= floor]


def copy_batch(word_ids, rows: int, span: int, generator) -> tuple:
    """(input_ids, labels) of `rows` sequences: `span` random word tokens, then the same tokens again; labels (-100
    elsewhere) on the repeat after its first token."""
    import torch

    first = word_ids[torch.randint(len(word_ids), (rows, span), generator=generator)]
    ids = torch.cat([first, first], 1)
    labels = ids.clone()
    labels[:, :span + 1] = -100
    return ids, labels


def far_copy_batch(word_ids, rows: int, length: int, generator, span: tuple[int, int] = (4, 16)) -> tuple:
    """(input_ids, labels) of `rows` sequences of `length` random word tokens in which a span of 4-16 tokens comes
    back at a random distance; labels on the repeat after its first token. A copy at one distance scores ~0 here."""
    import torch

    ids = word_ids[torch.randint(len(word_ids), (rows, length), generator=generator)]
    labels = torch.full_like(ids, -100)
    for row in range(rows):
        k = int(torch.randint(span[0], span[1] + 1, (1,), generator=generator))
        start = int(torch.randint(0, length // 2 - k, (1,), generator=generator))
        again = int(torch.randint(start + k, length - k, (1,), generator=generator))
        ids[row, again:again + k] = ids[row, start:start + k]
        labels[row, again + 1:again + k] = ids[row, again + 1:again + k]
    return ids, labels


def copy_accuracy(model, ids, labels) -> float:
    """Greedy next-token accuracy on the labelled positions."""
    import torch

    model.eval()
    with torch.no_grad():
        predicted = model(input_ids=ids).logits[:, :-1].argmax(-1)
    mask = labels[:, 1:] != -100
    return (predicted[mask] == labels[:, 1:][mask]).float().mean().item()


def _word_ids(tokenizer):
    import re

    import torch

    return torch.tensor(sorted(i for t, i in tokenizer.get_vocab().items() if re.fullmatch(r"[A-Za-z]{2,}|[0-9]", t)))


def pretrain_copy(model, tokenizer, steps: int, seed: int = 0, rows: int = 16, span: int = 48,
                  lr: float = 1e-3) -> float:
    """Teach a randomly initialised model to copy before it sees any task: the one skill every pretrained LM brings
    to SFT and a from-scratch one lacks. An agent's command repeats names and numbers from the instruction; without
    induction heads a small student trained on a few hundred trajectories writes each family's most frequent name
    instead. Synthetic sequences of the tokenizer's word pieces repeated once (copy_batch), no task text: this trains
    the copy circuit (a head whose output raises the logit of the token it attends to) at one distance; where to
    look in an instruction is left to SFT. A plain loop: a few hundred steps on one process, nothing for a Trainer
    to add. Returns the copy accuracy on fresh sequences after training."""
    import torch
    from tqdm.auto import tqdm

    word_ids = _word_ids(tokenizer)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    warmup = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / 50))
    model.train()
    progress = tqdm(range(steps), desc="copy pretraining", unit="step", mininterval=10)
    for _ in progress:
        ids, labels = copy_batch(word_ids, rows, span, generator)
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        warmup.step()
        optimizer.zero_grad()
        progress.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
    return copy_accuracy(model, *copy_batch(word_ids, 64, span, generator))


COPY_PRETRAINING_FILE = "copy_pretraining.json"


def build_model(out: Path, texts: Iterable[str], preset: Preset, seed: int = 0) -> dict | None:
    """A tokenizer trained on `texts` and a Qwen3 of the preset's size, randomly initialised (then given its copy
    circuit or copy-pretrained if the preset says so), saved into `out`. Returns what it wrote to
    COPY_PRETRAINING_FILE (None for a preset that does neither)."""
    import torch
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    texts = list(texts)
    bpe = Tokenizer(models.BPE())
    if preset.pre_tokenizer == "identifiers":
        bpe.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(IDENTIFIER_PIECES), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(vocab_size=preset.vocab_size, special_tokens=SPECIAL_TOKENS,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False),
    )
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=SPECIAL_TOKENS[1:])
    if preset.line_tokens:  # matched before pre-tokenization, as literal text; decoded back verbatim
        tokenizer.add_tokens([AddedToken(line, normalized=False, special=False) for line in frequent_lines(texts)])
    # TRL's own template, byte-exact: Qwen3's, which TRL maps to its training twin with {% generation %} markers, or
    # (the students) that twin itself
    tokenizer.chat_template = (trl_template_dir() / f"{preset.chat_template}.jinja").read_text(encoding="utf-8")
    tokenizer.model_max_length = preset.model_config["max_position_embeddings"]
    tokenizer.save_pretrained(out)

    config = Qwen3Config(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **preset.model_config)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    record = None
    if preset.induction_circuit:
        set_induction_circuit(model, pointer_groups=preset.pointer_heads, seed=seed)
    at_span = (pretrain_copy(model, tokenizer, preset.copy_steps, seed=seed, span=preset.copy_span)
               if preset.copy_steps else None)
    if preset.copy_steps or preset.induction_circuit:  # what the student brings to SFT, on fresh sequences
        generator = torch.Generator().manual_seed(seed + 1)
        anywhere = copy_accuracy(model, *far_copy_batch(_word_ids(tokenizer), 32, 512, generator))
        record = {"steps": preset.copy_steps, "span": preset.copy_span, "induction_circuit": preset.induction_circuit,
                  "pointer_heads": preset.pointer_heads,
                  "copy_accuracy": round(anywhere if at_span is None else at_span, 4),
                  "copy_accuracy_any_distance": round(anywhere, 4)}
        (out / COPY_PRETRAINING_FILE).write_text(json.dumps(record) + "\n")
    model.save_pretrained(out)
    return record


def _build(out: Path) -> None:
    build_model(out, _corpus_texts(), PRESETS[TINY_NAME])


def family_template(key: str) -> str:
    """TRL's first template of the family (common/model_families.py), the text as TRL ships it."""
    return (trl_template_dir() / f"{FAMILIES[key].templates[0]}.jinja").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def base_bpe() -> str:
    """One byte-level BPE (tokenizers' JSON) trained on the bundled corpora with no special tokens, shared by every
    family's tiny tokenizer: each adds its own tokens on top (once per process, ~1 s)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(_corpus_texts(), trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return bpe.to_str()


def family_tokenizer(key: str):
    """The family's tiny tokenizer: the shared BPE, the family's control tokens (special) and tags (single tokens,
    decoded even with skip_special_tokens), its eos/pad/bos, and its TRL template byte for byte."""
    from tokenizers import AddedToken, Tokenizer
    from transformers import PreTrainedTokenizerFast

    spec = TINY_FAMILIES[key]
    named = {"eos_token": spec.eos, "pad_token": spec.pad, **({"bos_token": spec.bos} if spec.bos else {})}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(base_bpe()), **named,
                                        additional_special_tokens=[t for t in spec.special_tokens
                                                                   if t not in named.values()])
    tokenizer.add_tokens([AddedToken(tag, normalized=False, special=False) for tag in spec.tags])
    tokenizer.chat_template = family_template(key)
    tokenizer.model_max_length = spec.model_config()["max_position_embeddings"]
    return tokenizer


def family_fingerprint(key: str) -> str:
    """Names a family's cached build: the corpus, the family's tiny spec and sizes, its TRL template."""
    spec = TINY_FAMILIES[key]
    described = [getattr(spec, f.name) for f in dataclasses.fields(spec) if f.compare]  # not its notes
    digest = hashlib.sha256(json.dumps([fingerprint(), TOKENIZER_VOCAB_SIZE, TINY_DIMS, described,
                                        family_template(key)], default=str).encode())
    return digest.hexdigest()[:12]


def build_family_model(out: Path, key: str, seed: int = 0) -> None:
    """`builtin:tiny-<key>`: the family's tokenizer and its architecture from transformers with the tiny config,
    random weights (seeded), saved into `out`."""
    import torch
    import transformers

    spec: TinyFamily = TINY_FAMILIES[key]
    tokenizer = family_tokenizer(key)
    tokenizer.save_pretrained(out)
    ids = tokenizer.convert_tokens_to_ids
    config = getattr(transformers, spec.config_class)(
        vocab_size=len(tokenizer), eos_token_id=ids(spec.eos), pad_token_id=ids(spec.pad),
        bos_token_id=ids(spec.bos) if spec.bos else None, **spec.model_config())
    torch.manual_seed(seed)
    model = getattr(transformers, spec.architecture)(config)
    stops = [ids(spec.eos)] + [ids(token) for token in spec.stop]
    model.generation_config = transformers.GenerationConfig(
        eos_token_id=stops if len(stops) > 1 else stops[0], pad_token_id=ids(spec.pad),
        bos_token_id=ids(spec.bos) if spec.bos else None)
    model.save_pretrained(out)


def _cached(name: str, build: Callable[[Path], None]) -> Path:
    """cache_root()/name, built by `build` into a fresh folder then renamed into place (safe with several
    processes)."""
    from filelock import FileLock

    target = cache_root() / name
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not (target / "config.json").exists():
            tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".build-"))
            try:
                build(tmp)
                tmp.rename(target)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
    return target


def tiny_model_path() -> Path:
    """Path of the cached tiny model, building it first if needed (safe with several processes)."""
    return _cached(f"{TINY_NAME}-{fingerprint()}", _build)


def tiny_family_path(key: str) -> Path:
    """Path of the cached tiny model of a family (FAMILIES' key), building it first if needed."""
    if key == EMBEDDED_FAMILY:
        return tiny_model_path()
    return _cached(f"tiny-{key}-{family_fingerprint(key)}", lambda out: build_family_model(out, key))


def builtin_names() -> list[str]:
    """Every `builtin:` model: `tiny-<family>` for each family of the table."""
    return [f"{BUILTIN_PREFIX}tiny-{key}" for key in FAMILIES]


def resolve_model(name_or_path: str) -> str:
    """`builtin:tiny-<family>` becomes that cached tiny model's path; any other name or path passes through."""
    if name_or_path.startswith(BUILTIN_PREFIX):
        key = name_or_path[len(BUILTIN_PREFIX):].removeprefix("tiny-")
        if f"{BUILTIN_PREFIX}tiny-{key}" != name_or_path or key not in FAMILIES:
            raise ConfigError(f"model_name_or_path: unknown built-in model {name_or_path!r}; the built-in models are "
                              f"{', '.join(builtin_names())} (or give a Hugging Face name or a local path)")
        return str(tiny_family_path(key))
    return name_or_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m modeling.tiny_model", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, type=Path, help="the model folder to write (replaced if it exists)")
    parser.add_argument("--corpus", required=True, nargs="+", help="JSONL files or Harbor job dirs to train the "
                        "tokenizer on")
    parser.add_argument("--preset", default="student", choices=sorted(PRESETS),
                        help="; ".join(f"{name}: {p.help}" for name, p in PRESETS.items()) + " (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the initial weights (default: %(default)s)")
    parser.add_argument("--copy_steps", type=int, help="copy-pretraining steps (default: the preset's; 0: none)")
    parser.add_argument("--copy_span", type=int, help="tokens each copy-pretraining sequence repeats (default: the "
                        "preset's, 48)")
    args = parser.parse_args(argv)
    preset = PRESETS[args.preset]
    if args.copy_steps is not None:
        if args.copy_steps < 0:
            parser.error(f"--copy_steps {args.copy_steps}: must be >= 0")
        preset = dataclasses.replace(preset, copy_steps=args.copy_steps)
    if args.copy_span is not None:
        if args.copy_span < 1:
            parser.error(f"--copy_span {args.copy_span}: must be >= 1")
        preset = dataclasses.replace(preset, copy_span=args.copy_span)
    try:
        texts, records = record_texts(args.corpus)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    tmp = Path(tempfile.mkdtemp(dir=args.out.parent if args.out.parent.is_dir() else None, prefix=".build-"))
    try:
        copying = build_model(tmp, texts, preset, seed=args.seed)
        shutil.rmtree(args.out, ignore_errors=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(tmp), args.out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    from transformers import AutoConfig, AutoTokenizer

    config, tokenizer = AutoConfig.from_pretrained(args.out), AutoTokenizer.from_pretrained(args.out)
    how = (("an induction circuit set by hand" if preset.induction_circuit else "")
           + (" and " if preset.induction_circuit and preset.copy_steps else "")
           + (f"copy pretraining {preset.copy_steps} steps of span {preset.copy_span}" if preset.copy_steps else ""))
    print(f"built {args.preset} in {args.out}: {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"vocab {len(tokenizer)} (tokenizer trained on {records} records), seed {args.seed}"
          + (f", {how}: copy accuracy {copying['copy_accuracy']:.3f} on fresh sequences, "
             f"{copying['copy_accuracy_any_distance']:.3f} at random distances" if copying else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
