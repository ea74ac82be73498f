"""The SFT corpus: sources from the config, validated, split by group, mixed, tokenized with loss masks.
Runs in: the training venv (datasets, Transformers' tokenizers), in the SFT recipe's processes and trainers.data.

Nothing is dropped or cut silently: every invalid row, truncated, dropped, repeated or contaminated record is
counted per source in `SourceStats`, which the run summary prints and logs. The keys: docs/development.md#configs.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field

from chat_corpus.decontaminate import Decontaminator
from chat_corpus.masking import TRUNCATION_POLICIES, fit_to_length, tokenize_chat, training_chat_template
from chat_corpus.mixture import mix_by_weight, split_by_group, subsample
from chat_corpus.records import RecordError
from chat_corpus.sources import FORMATS, load_sources, parse_sources
from common.errors import CorpusError


@dataclass
class CorpusArguments:
    """Data keys of a recipe config (YAML or --key value)."""

    datasets: list[str] = field(default_factory=list, metadata={"help": (
        f"Sources: a list of {{path, format ({'|'.join(FORMATS)}), name, split, data_files, fraction, weight, "
        "split_key, min_reward}} in YAML, or paths on the command line. A path is a JSONL file (plain or .gz), a Harbor job/trial "
        "dir, or a Hugging Face dataset name.")})
    split_key: str = field(default="metadata.source_trajectory_uid", metadata={
        "help": "Dotted key that groups records of one trajectory or task; splits never separate a group."})
    eval_fraction: float = field(default=0.0, metadata={"help": "Fraction of groups held out for evaluation."})
    skip_invalid: bool = field(default=False, metadata={
        "help": "Skip invalid records (counted and reported) instead of refusing to start."})
    truncation: str = field(default="turns", metadata={
        "help": "Records longer than max_length: 'turns' keeps the whole assistant turns that fit, 'keep_start' "
                "cuts at max_length, 'drop' drops them. Each is counted in the summary."})
    mixture_seed: int = field(default=0, metadata={"help": "Seed of splits, fractions and weighted mixing."})
    decontaminate_against: list[str] = field(default_factory=list, metadata={"help": (
        "Eval suites to decontaminate against (builtin:terminal, builtin:evocode, a folder of Harbor tasks or one "
        "task folder): records sharing an n-gram specific to one of their tasks are dropped before the split and "
        "counted; records sharing only template n-grams (in 2+ tasks of a suite, or for a generated task in 2+ "
        "reference instances of its family) are kept and counted. See "
        "chat_corpus/decontaminate.py. SFT only.")})
    decontaminate_ngram: int = field(default=13, metadata={
        "help": "n-gram size, in lowercase words, of the decontamination check (13: the Terminal-Universe check)."})
    corpus_cache: bool = field(default=True, metadata={
        "help": "Keep the prepared corpus (tokenized, masked, truncated records and their counts) on disk, keyed by "
                "what determines it (chat_corpus/cache.py), so later runs and every other rank load it instead "
                "of preparing it again. false: prepare in memory on every process."})
    corpus_cache_dir: str | None = field(default=None, metadata={
        "help": "Folder of the prepared corpora (default $TERMINAL_RECIPES_CORPUS_CACHE, else "
                "$TERMINAL_RECIPES_CACHE/corpus, ~/.cache/terminal-recipes/corpus). On several nodes, a folder they all see, or node-local disk "
                "(each node's main process then prepares once)."})
    corpus_prepare_timeout: int = field(default=10800, metadata={
        "help": "Seconds the other processes wait for the main process to prepare the corpus (a cold cache). "
                "`python -m trainers.data prepare --config X.yaml` prepares it before the run instead."})

    def __post_init__(self):
        if self.truncation not in TRUNCATION_POLICIES:
            raise ValueError(f"truncation: {self.truncation!r} is not one of {', '.join(TRUNCATION_POLICIES)}")
        if not 0 <= self.eval_fraction < 1:
            raise ValueError(f"eval_fraction: {self.eval_fraction} must be in [0, 1)")
        if isinstance(self.datasets, str):
            self.datasets = [self.datasets]
        # on the command line: --datasets a.jsonl b.jsonl, or --datasets a.jsonl,b.jsonl
        self.datasets = [path for entry in self.datasets
                         for path in (entry.split(",") if isinstance(entry, str) else [entry]) if path]
        if isinstance(self.decontaminate_against, str):
            self.decontaminate_against = [self.decontaminate_against]
        self.decontaminate_against = [suite.strip() for entry in self.decontaminate_against or []
                                      for suite in str(entry).split(",") if suite.strip()]
        if isinstance(self.corpus_prepare_timeout, bool) or not isinstance(self.corpus_prepare_timeout, int) \
                or self.corpus_prepare_timeout < 1:
            raise ValueError(f"corpus_prepare_timeout: {self.corpus_prepare_timeout!r} must be a whole number of "
                             "seconds, at least 1 (default 10800)")
        if isinstance(self.decontaminate_ngram, bool) or not isinstance(self.decontaminate_ngram, int) \
                or self.decontaminate_ngram < 1:
            raise ValueError(f"decontaminate_ngram: {self.decontaminate_ngram!r} must be a whole number of words, "
                             "at least 1 (default 13)")


@dataclass
class SourceStats:
    path: str
    rows: int = 0
    invalid: int = 0
    formats: dict = field(default_factory=dict)
    missing_split_key: int = 0
    train_records: int = 0
    eval_records: int = 0
    truncated: int = 0
    dropped: int = 0
    trained_tokens_cut: int = 0
    repeated: int = 0
    not_sampled: int = 0  # left out by `fraction` or by a weight share smaller than the source
    below_min_reward: int = 0  # rejected by the source's min_reward (reward under it, or no reward)
    decontaminated: int = 0  # dropped: shares an n-gram specific to one task of a `decontaminate_against` suite
    template_overlap: int = 0  # kept: shares only template n-grams (in 2+ tasks of a suite) with those suites
    tokens: int = 0  # tokens of the train records, after truncation
    trained_tokens: int = 0


@dataclass
class SFTCorpus:
    train: object  # datasets.Dataset with input_ids, assistant_masks
    eval: object | None
    stats: list[SourceStats]
    problems: list[str]
    drops: list[str]
    decontaminated_against: list[str] = field(default_factory=list)  # the suites checked, when any
    decontaminated: list[str] = field(default_factory=list)  # "origin -> suite: task" of each record dropped


TOKENIZED_FEATURES = {"input_ids": "int32", "assistant_masks": "int8"}  # 5 bytes a token on disk and in memory


def _tokenize_batch(batch, tokenizer, template, max_length, policy):
    """datasets.map function: each record (a JSON string) tokenized, masked and fitted to max_length, or the reason
    it was dropped."""
    out = {key: [] for key in ("input_ids", "assistant_masks", "error", "truncated", "trained_tokens_cut",
                               "n_tokens", "n_trained")}
    for text in batch["record"]:
        record = json.loads(text)
        try:
            input_ids, mask = tokenize_chat(tokenizer, template, record)
            fitted = fit_to_length(input_ids, mask, max_length, policy)
        except RecordError as err:
            fitted, error = None, f"{record['origin']}: {err}"
        else:
            error = ""
        out["input_ids"].append(fitted.input_ids if fitted else [])
        out["assistant_masks"].append(fitted.assistant_masks if fitted else [])
        out["error"].append(error)
        out["truncated"].append(bool(fitted and fitted.truncated))
        out["trained_tokens_cut"].append(fitted.trained_tokens_cut if fitted else 0)
        out["n_tokens"].append(len(fitted.input_ids) if fitted else 0)
        out["n_trained"].append(sum(fitted.assistant_masks) if fitted else 0)
    return out


@contextlib.contextmanager
def progress_bars(show: bool):
    """datasets' progress bars off inside the block unless `show` (they are on by default)."""
    from datasets.utils.logging import disable_progress_bar, enable_progress_bar, is_progress_bar_enabled

    hide = not show and is_progress_bar_enabled()
    if hide:
        disable_progress_bar()
    try:
        yield
    finally:
        if hide:
            enable_progress_bar()


def tokenize_records(records: list[dict], tokenizer, template: str, max_length: int | None, policy: str,
                     num_proc: int | None = None, show_progress: bool = True, fingerprint: str | None = None):
    """Every record tokenized in order, by `num_proc` processes (datasets' `map`, with its progress bar); a
    Dataset with input_ids, assistant_masks and per record: error ("" when kept), truncated, trained_tokens_cut,
    n_tokens, n_trained. Records travel as JSON strings: their nested, mixed-type messages have no Arrow schema."""
    import datasets

    features = datasets.Features({
        "input_ids": datasets.Sequence(datasets.Value(TOKENIZED_FEATURES["input_ids"])),
        "assistant_masks": datasets.Sequence(datasets.Value(TOKENIZED_FEATURES["assistant_masks"])),
        "error": datasets.Value("string"), "truncated": datasets.Value("bool"),
        "trained_tokens_cut": datasets.Value("int64"), "n_tokens": datasets.Value("int64"),
        "n_trained": datasets.Value("int64")})
    if not records:
        return datasets.Dataset.from_dict({name: [] for name in features}, features=features)
    table = datasets.Dataset.from_dict({"record": [json.dumps(record) for record in records]})
    with progress_bars(show_progress):
        return table.map(_tokenize_batch, batched=True, batch_size=16, remove_columns=["record"], features=features,
                         fn_kwargs={"tokenizer": tokenizer, "template": template, "max_length": max_length,
                                    "policy": policy},
                         num_proc=num_proc if num_proc and num_proc > 1 and len(records) > 1 else None,
                         desc=f"tokenizing {len(records)} records", new_fingerprint=fingerprint)


def build_sft_corpus(args: CorpusArguments, tokenizer, max_length: int | None, show_progress: bool = True,
                     num_proc: int | None = None, fingerprint: str | None = None) -> SFTCorpus:
    """The corpus as configured: sources loaded and validated, decontaminated, subsampled, split by group, tokenized
    (by `num_proc` processes: the SFT config's `dataset_num_proc`), mixed by weight, every drop counted.
    chat_corpus/cache.py keeps the result on disk between runs."""
    template = training_chat_template(tokenizer)
    checker = None
    if args.decontaminate_against:  # the suites first: a bad one fails before the corpus is read
        try:
            checker = Decontaminator(args.decontaminate_against, args.decontaminate_ngram)
        except CorpusError as err:
            raise CorpusError(f"decontaminate_against: {err}") from None
    loaded = load_sources(parse_sources(args.datasets), args.split_key, args.skip_invalid)
    stats, decontaminated, jobs, parts = [], [], [], []  # parts: per source, (start, n train, n eval) in jobs
    for index, item in enumerate(loaded):
        source = item.source
        stat = SourceStats(source.path, rows=item.n_rows, invalid=len(item.problems), formats=item.formats,
                           missing_split_key=item.missing_split_key,
                           below_min_reward=item.below_min_reward + item.no_reward)
        clean = item.records
        if checker is not None:  # before fractions and the train/eval split: nothing contaminated is trained on
            clean, dropped, stat.template_overlap = checker.split(item.records)
            stat.decontaminated = len(dropped)
            decontaminated += dropped
        records = subsample(clean, source.fraction, args.mixture_seed + index)
        stat.not_sampled = len(clean) - len(records)
        train, held_out = split_by_group(records, args.eval_fraction, args.mixture_seed)
        parts.append((len(jobs), len(train), len(held_out)))
        jobs += train + held_out
        stats.append(stat)

    tokenized = tokenize_records(jobs, tokenizer, template, max_length, args.truncation, num_proc, show_progress,
                                 fingerprint)
    columns = {key: tokenized[key] for key in ("error", "truncated", "trained_tokens_cut", "n_tokens", "n_trained")}
    drops, train_parts, eval_indices = [], [], []
    for stat, (start, n_train, n_eval) in zip(stats, parts):
        kept = {"train": [], "eval": []}
        for offset in range(n_train + n_eval):
            row = start + offset
            if columns["error"][row]:
                stat.dropped += 1
                drops.append(columns["error"][row])
                continue
            stat.truncated += columns["truncated"][row]
            stat.trained_tokens_cut += columns["trained_tokens_cut"][row]
            kept["train" if offset < n_train else "eval"].append(row)
        train_parts.append(kept["train"])
        stat.eval_records = len(kept["eval"])
        eval_indices += kept["eval"]

    sources = [item.source for item in loaded]
    if all(source.weight is not None for source in sources):
        mixed = mix_by_weight(train_parts, [source.weight for source in sources], args.mixture_seed)
    else:
        mixed = train_parts
    train_indices = []
    for stat, part, chosen in zip(stats, train_parts, mixed):
        stat.train_records = len(chosen)
        distinct = len(set(chosen))
        stat.repeated = len(chosen) - distinct
        stat.not_sampled += len(part) - distinct
        stat.tokens = sum(columns["n_tokens"][row] for row in chosen)
        stat.trained_tokens = sum(columns["n_trained"][row] for row in chosen)
        train_indices += chosen
    if not train_indices:
        raise CorpusError("no training records left after validation, decontamination, splitting and truncation; "
                          f"see the {len(drops)} dropped record(s): {drops[:3]}"
                          + (f" and the {len(decontaminated)} contaminated one(s): {decontaminated[:3]}"
                             if decontaminated else ""))
    records = tokenized.select_columns(["input_ids", "assistant_masks"])
    return SFTCorpus(train=records.select(train_indices),
                     eval=records.select(eval_indices) if eval_indices else None,
                     stats=stats, problems=[p for item in loaded for p in item.problems], drops=drops,
                     decontaminated_against=list(args.decontaminate_against), decontaminated=decontaminated)
