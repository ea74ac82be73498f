"""The SFT corpus: sources from the config, validated, split by group, mixed, tokenized with loss masks.

Nothing is dropped or cut silently: every invalid row, truncated record, dropped record, repeated record and
record dropped as contaminated by an eval suite (`decontaminate_against`, trainers/decontaminate.py) is counted
per source in `SourceStats`, which the run summary prints and logs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from common.errors import CorpusError
from trainers.decontaminate import Decontaminator
from trainers.masking import TRUNCATION_POLICIES, fit_to_length, tokenize_chat, training_chat_template
from trainers.mixture import mix_by_weight, split_by_group, subsample
from trainers.records import RecordError
from trainers.sources import FORMATS, load_sources, parse_sources


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
        "trainers/decontaminate.py. SFT only.")})
    decontaminate_ngram: int = field(default=13, metadata={
        "help": "n-gram size, in lowercase words, of the decontamination check (13: the Terminal-Universe check)."})

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


def _tokenize(records, tokenizer, template, max_length, policy, stats: SourceStats, drops: list, progress):
    rows = []
    for record in progress(records):
        try:
            input_ids, mask = tokenize_chat(tokenizer, template, record)
            fitted = fit_to_length(input_ids, mask, max_length, policy)
        except RecordError as err:
            stats.dropped += 1
            drops.append(f"{record['origin']}: {err}")
            continue
        stats.truncated += fitted.truncated
        stats.trained_tokens_cut += fitted.trained_tokens_cut
        rows.append({"input_ids": fitted.input_ids, "assistant_masks": fitted.assistant_masks})
    return rows


def build_sft_corpus(args: CorpusArguments, tokenizer, max_length: int | None, show_progress: bool = True) -> SFTCorpus:
    from datasets import Dataset
    from tqdm.auto import tqdm

    template = training_chat_template(tokenizer)
    checker = None
    if args.decontaminate_against:  # the suites first: a bad one fails before the corpus is read
        try:
            checker = Decontaminator(args.decontaminate_against, args.decontaminate_ngram)
        except CorpusError as err:
            raise CorpusError(f"decontaminate_against: {err}") from None
    loaded = load_sources(parse_sources(args.datasets), args.split_key, args.skip_invalid)
    stats, drops, train_parts, eval_rows, decontaminated = [], [], [], [], []
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

        def progress(rows, desc=f"tokenizing {source.path}"):
            return tqdm(rows, desc=desc, disable=not show_progress, leave=False)

        train_parts.append(_tokenize(train, tokenizer, template, max_length, args.truncation, stat, drops, progress))
        tokenized_eval = _tokenize(held_out, tokenizer, template, max_length, args.truncation, stat, drops, progress)
        stat.eval_records = len(tokenized_eval)
        eval_rows += tokenized_eval
        stats.append(stat)

    sources = [item.source for item in loaded]
    if all(source.weight is not None for source in sources):
        mixed = mix_by_weight(train_parts, [source.weight for source in sources], args.mixture_seed)
    else:
        mixed = train_parts
    train_rows = []
    for stat, part, chosen in zip(stats, train_parts, mixed):
        stat.train_records = len(chosen)
        distinct = len({id(row) for row in chosen})
        stat.repeated = len(chosen) - distinct
        stat.not_sampled += len(part) - distinct
        stat.tokens = sum(len(row["input_ids"]) for row in chosen)
        stat.trained_tokens = sum(sum(row["assistant_masks"]) for row in chosen)
        train_rows += chosen
    if not train_rows:
        raise CorpusError("no training records left after validation, decontamination, splitting and truncation; "
                          f"see the {len(drops)} dropped record(s): {drops[:3]}"
                          + (f" and the {len(decontaminated)} contaminated one(s): {decontaminated[:3]}"
                             if decontaminated else ""))
    columns = lambda rows: {key: [row[key] for row in rows] for key in ("input_ids", "assistant_masks")}
    return SFTCorpus(train=Dataset.from_dict(columns(train_rows)),
                     eval=Dataset.from_dict(columns(eval_rows)) if eval_rows else None,
                     stats=stats, problems=[p for item in loaded for p in item.problems], drops=drops,
                     decontaminated_against=list(args.decontaminate_against), decontaminated=decontaminated)
