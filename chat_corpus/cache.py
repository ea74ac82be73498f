"""The prepared SFT corpus, kept on disk between runs: tokenized, masked, truncated records and their counts.
Runs in: the training venv (datasets); every rank of an SFT run, and `python -m trainers.data prepare`.

`cache_key` is the one definition of what determines the prepared records; an entry is
`<corpus_cache_dir>/<key>/` (`train/`, `eval/`, `meta.json`), renamed into place whole; `prepare_main_first` lets
the main processes prepare before the others read. What the key holds and why: docs/scaling.md.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

from chat_corpus.decontaminate import resolve_suite
from chat_corpus.masking import training_chat_template
from chat_corpus.sft_corpus import CorpusArguments, SFTCorpus, SourceStats, build_sft_corpus, progress_bars
from chat_corpus.sources import parse_sources, source_fingerprint
from common.cache_dir import cache_root
from common.digest import digest, files_digest
from common.errors import CorpusError

KEY_VERSION = 1  # bump when an entry's layout changes
REPO_ROOT = Path(__file__).resolve().parents[1]
PREPARING_CODE = ("chat_corpus/sft_corpus.py", "chat_corpus/sources.py", "chat_corpus/records.py",
                  "chat_corpus/masking.py", "chat_corpus/mixture.py", "chat_corpus/harbor_trajectory.py",
                  "chat_corpus/decontaminate.py", "chat_corpus/cache.py", "harbor_tasks/generate.py",
                  "harbor_tasks/folder.py", "harbor_tasks/suites.py")
CACHE_ENV = "TERMINAL_RECIPES_CORPUS_CACHE"


def tokenizer_fingerprint(tokenizer) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    serialized = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    return digest(f"{type(tokenizer).__name__}\0{serialized}\0"
                  f"{json.dumps(tokenizer.special_tokens_map, sort_keys=True, default=str)}")


def _suite_fingerprint(suite: str) -> str:
    _, tasks = resolve_suite(suite)
    return digest("".join(files_digest(sorted(p for p in task.rglob("*") if p.is_file()), task.parent)
                          for task in tasks))


def cache_key(args: CorpusArguments, tokenizer, max_length: int | None, template: str | None = None) -> tuple[str, dict]:
    """(key, the inputs it is made of): see the module docstring."""
    import jinja2
    import tokenizers
    import transformers

    sources = []
    for source in parse_sources(args.datasets):
        try:
            contents = source_fingerprint(source)
        except FileNotFoundError as err:
            raise CorpusError(f"datasets: {err}") from None
        sources.append({**asdict(source), "contents": contents})
    try:
        suites = {suite: _suite_fingerprint(suite) for suite in args.decontaminate_against}
    except CorpusError as err:
        raise CorpusError(f"decontaminate_against: {err}") from None
    inputs = {
        "version": KEY_VERSION,
        "sources": sources,
        "split_key": args.split_key, "eval_fraction": args.eval_fraction, "skip_invalid": args.skip_invalid,
        "truncation": args.truncation, "mixture_seed": args.mixture_seed,
        "decontaminate_against": suites, "decontaminate_ngram": args.decontaminate_ngram,
        "tokenizer": tokenizer_fingerprint(tokenizer),
        "chat_template": digest(template if template is not None else training_chat_template(tokenizer)),
        "max_length": max_length,
        "code": files_digest([REPO_ROOT / path for path in PREPARING_CODE], REPO_ROOT),
        "libraries": {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                      "jinja2": jinja2.__version__},
    }
    return digest(json.dumps(inputs, sort_keys=True, default=str)), inputs


def cache_dir(args: CorpusArguments) -> Path:
    return Path(args.corpus_cache_dir or os.environ.get(CACHE_ENV) or cache_root() / "corpus").expanduser()


def changed_inputs(old: dict, new: dict) -> list[str]:
    """Names of the key inputs that differ: `max_length`, `tokenizer`, `datasets[1].contents`, ..."""
    names = []
    for name in sorted(set(old) | set(new)):
        if name == "sources" and len(old.get(name, [])) == len(new.get(name, [])):
            names += [f"datasets[{i}].{field}" for i, (a, b) in enumerate(zip(old[name], new[name]))
                      for field in sorted(set(a) | set(b)) if a.get(field) != b.get(field)]
        elif old.get(name) != new.get(name):
            names.append("datasets" if name == "sources" else name)
    return names


def newest_entry(root: Path) -> dict | None:
    metas = sorted(root.glob("*/meta.json"), key=lambda path: path.stat().st_mtime) if root.is_dir() else []
    try:
        return json.loads(metas[-1].read_text()) if metas else None
    except (OSError, json.JSONDecodeError):
        return None


def save_entry(root: Path, key: str, inputs: dict, corpus: SFTCorpus, prepare_seconds: float) -> Path:
    target = root / key
    tmp = root / f".{key}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    corpus.train.save_to_disk(str(tmp / "train"))
    if corpus.eval is not None:
        corpus.eval.save_to_disk(str(tmp / "eval"))
    meta = {"key": key, "inputs": inputs, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "prepare_seconds": round(prepare_seconds, 3), "train_records": len(corpus.train),
            "eval_records": len(corpus.eval) if corpus.eval is not None else 0,
            "stats": [asdict(stat) for stat in corpus.stats], "problems": corpus.problems, "drops": corpus.drops,
            "decontaminated_against": corpus.decontaminated_against, "decontaminated": corpus.decontaminated}
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
    try:
        os.rename(tmp, target)
    except OSError:  # another process renamed the same entry into place first: it holds the same records
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def load_entry(root: Path, key: str) -> SFTCorpus | None:
    from datasets import load_from_disk

    entry = root / key
    try:
        meta = json.loads((entry / "meta.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return SFTCorpus(train=load_from_disk(str(entry / "train")),
                     eval=load_from_disk(str(entry / "eval")) if (entry / "eval").is_dir() else None,
                     stats=[SourceStats(**stat) for stat in meta["stats"]], problems=meta["problems"],
                     drops=meta["drops"], decontaminated_against=meta["decontaminated_against"],
                     decontaminated=meta["decontaminated"])


@dataclass
class PreparedCorpus:
    corpus: SFTCorpus
    cache: str  # "hit", "miss" or "off" (corpus_cache: false)
    key: str | None = None
    path: str | None = None
    seconds: float = 0.0  # this process: the key, then loading the entry or preparing and saving it
    changed: list[str] | None = None  # on a miss: the key inputs that differ from the newest entry's

    def describe(self) -> str:
        if self.cache == "off":
            return f"corpus cache off (corpus_cache: false): prepared in {self.seconds:.1f} s"
        what = f"corpus cache {self.cache} ({self.path}) in {self.seconds:.1f} s"
        if self.cache == "miss" and self.changed:
            what += f"; changed since the newest entry: {', '.join(self.changed)}"
        return what


def prepare_corpus(args: CorpusArguments, tokenizer, max_length: int | None, num_proc: int | None = None,
                   show_progress: bool = True) -> PreparedCorpus:
    """The corpus from its cache entry (a hit), or prepared with `num_proc` processes and saved (a miss); both
    come back loaded from the entry, memory-mapped. With `corpus_cache: false`, prepared in memory."""
    started = time.monotonic()
    if not args.corpus_cache:
        corpus = build_sft_corpus(args, tokenizer, max_length, show_progress, num_proc)
        return PreparedCorpus(corpus, "off", seconds=time.monotonic() - started)
    template = training_chat_template(tokenizer)
    key, inputs = cache_key(args, tokenizer, max_length, template)
    root = cache_dir(args)
    found = load_entry(root, key)
    if found is not None:
        return PreparedCorpus(found, "hit", key, str(root / key), time.monotonic() - started)
    newest = newest_entry(root)
    corpus = build_sft_corpus(args, tokenizer, max_length, show_progress, num_proc, fingerprint=key)
    try:
        with progress_bars(show_progress):
            path = save_entry(root, key, inputs, corpus, time.monotonic() - started)
    except OSError as err:
        raise CorpusError(f"corpus_cache_dir: cannot write the prepared corpus to {root} ({err}); set "
                          "`corpus_cache_dir` to a writable folder, or `corpus_cache: false`") from None
    return PreparedCorpus(load_entry(root, key), "miss", key, str(path), time.monotonic() - started,
                          changed_inputs(newest["inputs"], inputs) if newest else None)


def prepare_main_first(args: CorpusArguments, tokenizer, max_length: int | None, num_proc: int | None = None,
                       state=None) -> PreparedCorpus:
    """`prepare_corpus` on the global main process first, then each node's main process, then the others (see the
    module docstring); one process alone, or every process with `corpus_cache: false`, just prepares."""
    from accelerate import PartialState

    state = state or PartialState()
    if state.num_processes == 1 or not args.corpus_cache:  # no cache to share: every process prepares its own
        return prepare_corpus(args, tokenizer, max_length, num_proc, show_progress=state.is_local_main_process)
    import torch.distributed as dist

    group = dist.new_group(backend="gloo", timeout=timedelta(seconds=args.corpus_prepare_timeout))

    def barrier():
        try:
            dist.barrier(group=group)
        except RuntimeError as err:  # gloo's timeout (or a peer gone): one line that says what to change
            raise CorpusError(
                f"process {state.process_index} waited for the main process to prepare the corpus and gave up "
                f"after corpus_prepare_timeout ({args.corpus_prepare_timeout} s) or on a peer's exit "
                f"({str(err).splitlines()[0][:200]}); raise `corpus_prepare_timeout`, or prepare it before the run: "
                "python -m trainers.data prepare --config CONFIG.yaml") from None

    # everyone passes two barriers: the global main both after preparing, another node's main one before, one after
    if not state.is_main_process:
        barrier()
    if not state.is_local_main_process:
        barrier()
    prepared = prepare_corpus(args, tokenizer, max_length, num_proc, show_progress=state.is_local_main_process)
    if state.is_local_main_process:
        barrier()
    if state.is_main_process:
        barrier()
    dist.destroy_process_group(group)
    return prepared


def corpus_cache_report(prepared: PreparedCorpus, started: float) -> dict:
    """The run summary's corpus_* keys (collective: every process calls it once it holds the corpus, so the main
    process's corpus_prepare_seconds runs from `started` until every process has its corpus)."""
    from accelerate import PartialState
    from accelerate.utils import gather_object

    outcomes = gather_object([(prepared.cache, round(prepared.seconds, 3))])
    if PartialState().is_main_process:
        print(prepared.describe(), flush=True)
    return {"corpus_cache": prepared.cache, "corpus_cache_key": prepared.key, "corpus_cache_path": prepared.path,
            "corpus_cache_changed": prepared.changed, "corpus_prepare_seconds": round(time.monotonic() - started, 3),
            "corpus_cache_ranks": [cache for cache, _ in outcomes],
            "corpus_prepare_seconds_ranks": [seconds for _, seconds in outcomes]}
