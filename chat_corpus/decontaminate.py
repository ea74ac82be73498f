"""Decontamination: word n-gram overlap (13-grams by default) between training records and the tasks of eval suites.
Runs in: the training venv (with harbor_tasks); `python -m trainers.data decontaminate` and the SFT corpus.

A record that shares an n-gram specific to one task is contaminated; one that shares only template n-grams (of
several tasks, or of a generated family's reference instances) is template overlap, not contamination.
The rules and the measurements: docs/formats.md#decontamination-against-the-eval-suites.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chat_corpus.sources import Source, load_source, to_record
from common.errors import CorpusError
from harbor_tasks.folder import TaskFolder
from harbor_tasks.families import FAMILIES
from harbor_tasks.generate import write_task
from harbor_tasks.suites import SuiteError, local_suite

DEFAULT_N = 13
REFERENCE_INSTANCES = 256  # reference instances per generated family (0: none, the 2+-tasks rule only)
REFERENCE_SEED = 10**9  # reference instance k has seed REFERENCE_SEED + k: keep training and eval seeds below it
TEMPLATE_NOTE = "shared template n-grams only: not contamination (held-out instances differ in their values)"
WORD = re.compile(r"\w+")


def words(text: str) -> list[str]:
    """Lowercase `\\w+` tokens of `text`."""
    return WORD.findall(text.lower())


def ngrams(tokens: list[str], n: int, vocabulary: frozenset[str] | None = None) -> set[tuple[str, ...]]:
    """The distinct n-grams of a word list (none when it has fewer than n words); with a `vocabulary`, only those
    made of its words (the only ones that can match a suite: the others are never built)."""
    if vocabulary is None:
        return set(zip(*(tokens[i:] for i in range(n))))
    grams: set[tuple[str, ...]] = set()
    start = 0
    for stop in [i for i, word in enumerate(tokens) if word not in vocabulary] + [len(tokens)]:
        if stop - start >= n:
            grams.update(zip(*(tokens[i:stop] for i in range(start, start + n))))
        start = stop + 1
    return grams


def _json_strings(value: Any) -> Iterable[str]:
    """The keys and scalar leaves of a JSON value as text (tool arguments, tool schemas); walked, not dumped,
    so that an escaped newline does not glue two words together."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield str(key)
            yield from _json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _json_strings(item)
    elif value is not None:
        yield str(value)


def record_text(record: dict) -> str:
    """All the text a chat record (or a GRPO prompt record) trains or conditions on."""
    parts: list[str] = []
    for message in record.get("messages") or record.get("prompt") or []:
        for key in ("content", "reasoning_content"):
            if isinstance(message.get(key), str):
                parts.append(message[key])
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            parts.append(str(function.get("name", "")))
            parts.extend(_json_strings(function.get("arguments")))
    parts.extend(_json_strings(record.get("tools")))
    return "\n".join(parts)


# --- suites -------------------------------------------------------------------------------------------------------

def resolve_suite(suite: str) -> tuple[Path, list[Path]]:
    """(folder, task folders) of a suite: `builtin:<name>`, a folder of Harbor tasks or one task folder
    (harbor_tasks.suites.local_suite; CorpusError with its fix otherwise)."""
    try:
        return local_suite(suite)
    except SuiteError as err:
        raise CorpusError(str(err)) from None


def task_texts(task: Path) -> list[str]:
    """instruction.md and every file under tests/, each a text; a multi-step task's too, for each of its
    steps/<step>/ (binary files, with NUL bytes, are skipped)."""
    files = []
    for folder in [task, *sorted(p for p in (task / "steps").glob("*") if p.is_dir())]:
        if (folder / "instruction.md").is_file():
            files.append(folder / "instruction.md")
        if (folder / "tests").is_dir():
            files += sorted(p for p in (folder / "tests").rglob("*") if p.is_file())
    texts = []
    for file in files:
        data = file.read_bytes()
        if b"\0" not in data:
            texts.append(data.decode("utf-8", errors="replace"))
    return texts


# --- generated tasks: their family's template, learned from reference instances -----------------------------------

def generated_origin(task: Path) -> tuple[str, int, int] | None:
    """(family, seed, index) of a task folder written by harbor_tasks/generate.py (its task.toml `[metadata]`), for
    a family the generator still has; None for any other task."""
    folder = TaskFolder.of(task)
    if folder.family in FAMILIES and folder.seed is not None and folder.index is not None:
        return folder.family, folder.seed, folder.index
    return None


def _scratch_dir() -> str | None:
    """A memory-backed temp folder where there is one (writing and removing a few thousand small files on a disk
    can take ~10x longer); else the default temp folder."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK) else None


@functools.lru_cache(maxsize=None)
def family_template(family: str, n: int = DEFAULT_N, references: int = REFERENCE_INSTANCES,
                    skip: frozenset[int] = frozenset()) -> frozenset[tuple[str, ...]]:
    """The n-grams found in 2 or more of `references` reference instances of a generated family: its wording, and
    the values its small pools draw again and again. Instance k is `write_task(tmp, family, REFERENCE_SEED + k, 0)`
    (seeds in `skip`, those of the suite's own tasks, passed over), read as a suite's task is (`task_texts`).
    Cached per process."""
    seeds = [seed for seed in range(REFERENCE_SEED, REFERENCE_SEED + references + len(skip)) if seed not in skip]
    counts: Counter[tuple[str, ...]] = Counter()
    with tempfile.TemporaryDirectory(prefix="decontaminate-", dir=_scratch_dir()) as tmp:
        for seed in seeds[:references]:
            task = write_task(Path(tmp), family, seed, 0)
            counts.update(set().union(*(ngrams(words(text), n) for text in task_texts(task))))
    return frozenset(gram for gram, count in counts.items() if count >= 2)


@dataclass
class SuiteIndex:
    """A suite's n-grams: those specific to one task (mapped to it) and the template ones (in 2+ tasks of the
    suite, or, for a generated task, in 2+ reference instances of its family)."""

    suite: str
    path: Path
    n: int
    tasks: list[str]
    specific: dict[tuple[str, ...], str]
    template: frozenset[tuple[str, ...]]
    reference_families: dict[str, int] = field(default_factory=dict)  # family -> reference instances used

    def __post_init__(self):
        self.specific_set = frozenset(self.specific)
        self.vocabulary = frozenset(word for gram in (*self.specific, *self.template) for word in gram)

    @classmethod
    def build(cls, suite: str, n: int = DEFAULT_N, references: int = REFERENCE_INSTANCES) -> "SuiteIndex":
        path, task_dirs = resolve_suite(suite)
        owners: dict[tuple[str, ...], str | None] = {}  # n-gram -> its one task, None when in 2+ tasks
        names, task_grams, generated = [], {}, {}
        for task in task_dirs:
            name = task.name
            names.append(name)
            grams = set().union(*(ngrams(words(text), n) for text in task_texts(task)))
            task_grams[name] = grams
            for gram in grams:
                owners[gram] = None if gram in owners else name  # seen in an earlier task: template
            if references and (origin := generated_origin(task)):
                generated[name] = origin
        # a generated task's n-grams that its family's reference instances share are template too
        skip = frozenset(seed for _, seed, _ in generated.values() if seed >= REFERENCE_SEED)  # none, normally
        for name, (family, _, _) in generated.items():
            for gram in task_grams[name] & family_template(family, n, references, skip):
                owners[gram] = None
        specific = {gram: task for gram, task in owners.items() if task is not None}
        template = frozenset(gram for gram, task in owners.items() if task is None)
        return cls(suite, path, n, names, specific, template,
                   {family: references for family, _, _ in sorted(generated.values())})

    def classify(self, grams: set[tuple[str, ...]]) -> tuple[str, dict[str, tuple[int, str]]]:
        """("contaminated", {task: (how many of its specific n-grams are shared, the first of them)}),
        ("template", {}) or ("clean", {})."""
        hits = grams & self.specific_set  # set & set: walks the smaller one
        if hits:
            tasks: dict[str, list] = {}
            for gram in sorted(hits):
                shared = tasks.setdefault(self.specific[gram], [0, " ".join(gram)])
                shared[0] += 1
            return "contaminated", {task: (count, example) for task, (count, example) in sorted(tasks.items())}
        if not grams.isdisjoint(self.template):
            return "template", {}
        return "clean", {}


@dataclass
class SuiteReport:
    """What one suite's check found in the records scanned."""

    suite: str
    path: str
    n: int
    tasks: int
    specific_ngrams: int
    template_ngrams: int
    reference_families: dict[str, int] = field(default_factory=dict)  # generated family -> reference instances
    records_scanned: int = 0
    # {"origin", "tasks": [...], "shared_ngrams": {task: specific n-grams shared}, "ngram": the first one shared}
    contaminated: list[dict] = field(default_factory=list)
    template_overlap: int = 0
    template_overlap_records: list[str] = field(default_factory=list)  # origins
    per_task: dict[str, int] = field(default_factory=dict)  # task -> contaminated records

    def to_dict(self) -> dict:
        return {"suite": self.suite, "path": self.path, "n": self.n, "tasks": self.tasks,
                "specific_ngrams": self.specific_ngrams, "template_ngrams": self.template_ngrams,
                "reference_families": self.reference_families,
                "records_scanned": self.records_scanned, "contaminated_records": len(self.contaminated),
                "contaminated": self.contaminated, "template_overlap_records": self.template_overlap,
                "template_overlap": self.template_overlap_records, "template_overlap_note": TEMPLATE_NOTE,
                "per_task": self.per_task}


def _shown(path: Path) -> str:
    """A path as short as it reads: relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class Decontaminator:
    """Checks records against several suites at one n."""

    def __init__(self, suites: Iterable[str], n: int = DEFAULT_N, references: int = REFERENCE_INSTANCES):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise CorpusError(f"n-gram size {n!r}: must be a whole number of words, at least 1 (default {DEFAULT_N})")
        self.n = n
        self.indexes = [SuiteIndex.build(suite, n, references) for suite in dict.fromkeys(suites)]
        self.vocabulary = frozenset().union(*(index.vocabulary for index in self.indexes))
        self.reports = [SuiteReport(index.suite, _shown(index.path), n, len(index.tasks), len(index.specific),
                                    len(index.template), dict(index.reference_families)) for index in self.indexes]

    def check(self, record: dict) -> tuple[dict[str, dict[str, tuple[int, str]]], bool]:
        """({suite: {task: (specific n-grams shared, the first)}} for each suite the record contaminates, whether
        it has template overlap in a suite it does not contaminate); counted in `reports`."""
        grams = ngrams(words(record_text(record)), self.n, self.vocabulary)
        contaminated, template = {}, False
        origin = record.get("origin", "?")
        for index, report in zip(self.indexes, self.reports):
            verdict, tasks = index.classify(grams)
            report.records_scanned += 1
            if verdict == "contaminated":
                contaminated[index.suite] = tasks
                report.contaminated.append({"origin": origin, "tasks": list(tasks),
                                            "shared_ngrams": {task: count for task, (count, _) in tasks.items()},
                                            "ngram": next(iter(tasks.values()))[1]})
                for task in tasks:
                    report.per_task[task] = report.per_task.get(task, 0) + 1
            elif verdict == "template":
                template = True
                report.template_overlap += 1
                report.template_overlap_records.append(origin)
        return contaminated, template

    def split(self, records: list[dict]) -> tuple[list[dict], list[str], int]:
        """(clean records, "origin -> suite: task, ..." of each contaminated one, records with template overlap only
        kept): what the SFT corpus trains on."""
        kept, dropped, template = [], [], 0
        for record in records:
            contaminated, overlap = self.check(record)
            if contaminated:
                dropped.append(f"{record.get('origin', '?')} -> " + "; ".join(
                    f"{suite}: {', '.join(tasks)}" for suite, tasks in contaminated.items()))
            else:
                kept.append(record)
                template += overlap
        return kept, dropped, template


def scan_paths(paths: list[str], checker: Decontaminator, fmt: str = "auto",
               split_key: str = "metadata.source_trajectory_uid") -> dict:
    """Every valid record of `paths` (any format the loaders read, GRPO prompts included) checked by `checker`:
    `{"n", "corpora": [{"path", "rows", "records", "invalid"}], "suites": [SuiteReport.to_dict()]}`."""
    corpora = []
    for path in paths:
        loaded = load_source(Source(path, format=fmt), split_key, functools.partial(to_record, prompts=True))
        for record in loaded.records:
            checker.check(record)
        corpora.append({"path": path, "rows": loaded.n_rows, "records": len(loaded.records),
                        "invalid": len(loaded.problems)})
    return {"n": checker.n, "corpora": corpora, "suites": [report.to_dict() for report in checker.reports]}


def print_scan(result: dict, shown: int = 5) -> None:
    for corpus in result["corpora"]:
        print(f"{corpus['path']}: {corpus['records']} records"
              + (f" ({corpus['invalid']} invalid rows not scanned; `python -m trainers.data inspect` lists them)"
                 if corpus["invalid"] else ""))
    for report in result["suites"]:
        where = f" ({report['path']})" if report["path"] != report["suite"] else ""
        print(f"{report['suite']}{where}: {report['tasks']} tasks, {report['n']}-grams: "
              f"{report['specific_ngrams']} task-specific, {report['template_ngrams']} template (in 2+ tasks"
              + (", or in 2+ reference instances of a generated task's family)" if report["reference_families"]
                 else ")"))
        if report["reference_families"]:
            families = report["reference_families"]
            print(f"  generated families ({', '.join(families)}): template learned from {max(families.values())} "
                  f"reference instances each (seeds {REFERENCE_SEED}+)")
        print(f"  records scanned: {report['records_scanned']}")
        print(f"  contaminated: {report['contaminated_records']} records"
              + (" (each shares an n-gram specific to one task)" if report["contaminated_records"] else ""))
        for item in report["contaminated"][:shown]:
            shared = sum(item["shared_ngrams"].values())
            print(f"    {item['origin']} -> {', '.join(item['tasks'])}  ({shared} specific {report['n']}-gram"
                  f"{'s' if shared > 1 else ''}, e.g. \"{item['ngram']}\")")
        if report["contaminated_records"] > shown:
            print(f"    ... and {report['contaminated_records'] - shown} more (--json lists them all)")
        if report["per_task"]:
            print("  per task: " + ", ".join(f"{task} {count}" for task, count in report["per_task"].items()))
        print(f"  template overlap: {report['template_overlap_records']} records; {TEMPLATE_NOTE}")
