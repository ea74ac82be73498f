"""The prepared-corpus cache (chat_corpus/cache.py): a second preparation is a hit with the same records,
changing anything that determines the records is a miss, and with 2 ranks only the main process prepares."""

import copy
import json
import multiprocessing
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from conftest import REPO, chat_row, run, sft_command, write_jsonl

from chat_corpus.cache import cache_key, prepare_corpus, prepare_main_first
from chat_corpus.masking import training_chat_template
from chat_corpus.sft_corpus import CorpusArguments, build_sft_corpus
from common.errors import CorpusError

CLI = [sys.executable, "-m", "trainers.data"]


@pytest.fixture
def corpus(tmp_path):
    """A chat file, a pivot file and a Harbor job with rewards: every kind of source and every filter has work."""
    rows = [chat_row(i, n_turns=1 + i % 3, group=f"g{i % 4}") for i in range(10)]
    rows[3]["metadata"]["reward"] = 0.0
    chats = write_jsonl(tmp_path / "chat.jsonl", rows)
    pivot = tmp_path / "pivot.jsonl"
    pivot.write_text("\n".join((REPO / "data/pivot/terminal_pivot.jsonl").read_text().splitlines()[:4]) + "\n")
    job = tmp_path / "job"
    shutil.copytree(REPO / "data/harbor/sample-job", job)
    suite = tmp_path / "suite" / "task-a"
    (suite / "tests").mkdir(parents=True)
    (suite / "task.toml").write_text('[task]\nname = "terminal-recipes/task-a"\n')
    (suite / "instruction.md").write_text("Count the lines of every log file under /var/log and write the total.\n")
    (suite / "tests" / "test.sh").write_text("test -s /out/total\n")
    return {"chats": chats, "pivot": pivot, "job": job, "suite": suite.parent, "cache": tmp_path / "cache"}


def arguments(corpus, **overrides) -> CorpusArguments:
    values = dict(datasets=[str(corpus["chats"]), str(corpus["pivot"]), str(corpus["job"])], eval_fraction=0.25,
                  corpus_cache_dir=str(corpus["cache"]))
    return CorpusArguments(**{**values, **overrides})


def records(dataset) -> list:
    return [] if dataset is None else [(list(r["input_ids"]), list(r["assistant_masks"])) for r in dataset]


def test_second_preparation_is_a_hit_with_the_records_of_a_fresh_build(corpus, tokenizer):
    args = arguments(corpus)
    first = prepare_corpus(args, tokenizer, 1024, show_progress=False)
    second = prepare_corpus(args, tokenizer, 1024, num_proc=2, show_progress=False)  # processes are not in the key
    fresh = build_sft_corpus(args, tokenizer, 1024, show_progress=False)
    assert (first.cache, second.cache) == ("miss", "hit") and first.key == second.key
    assert first.path == second.path and Path(first.path).parent == corpus["cache"]
    assert len(list(corpus["cache"].iterdir())) == 1  # one entry, no temporary folder left behind
    for prepared in (first, second):
        assert records(prepared.corpus.train) == records(fresh.train) and len(fresh.train) > 0
        assert records(prepared.corpus.eval) == records(fresh.eval) and len(fresh.eval) > 0
        assert [asdict(s) for s in prepared.corpus.stats] == [asdict(s) for s in fresh.stats]
        assert (prepared.corpus.drops, prepared.corpus.problems) == (fresh.drops, fresh.problems)
    assert sum(stat.truncated for stat in fresh.stats) > 0  # the pivot prompts do not fit 1024: truncation counted
    off = prepare_corpus(arguments(corpus, corpus_cache=False), tokenizer, 1024, show_progress=False)
    assert off.cache == "off" and off.key is None and records(off.corpus.train) == records(fresh.train)
    meta = json.loads((Path(first.path) / "meta.json").read_text())
    assert meta["key"] == first.key and meta["train_records"] == len(fresh.train)


def _append_row(corpus):
    with open(corpus["chats"], "a") as handle:
        handle.write(json.dumps(chat_row(99)) + "\n")


def _change_a_trial_reward(corpus):
    result = next(corpus["job"].glob("*/result.json"))
    data = json.loads(result.read_text())
    data["verifier_result"] = {"rewards": {"reward": 0.5}}
    result.write_text(json.dumps(data))


def _change_the_suite(corpus):
    (corpus["suite"] / "task-a" / "tests" / "test.sh").write_text("test -s /out/total && grep -q 42 /out/total\n")


# (change, the key input named as changed): each determines the prepared records
CHANGES = {
    "corpus contents": (lambda c, a: _append_row(c), "datasets[0].contents"),
    "Harbor trial result": (lambda c, a: _change_a_trial_reward(c), "datasets[2].contents"),
    "max_length": (lambda c, a: a.update(max_length=2048), "max_length"),
    "truncation": (lambda c, a: a.update(truncation="drop"), "truncation"),
    "min_reward": (lambda c, a: a["datasets"].__setitem__(2, {"path": str(c["job"]), "min_reward": 1.0}),
                   "datasets[2].min_reward"),
    "fraction": (lambda c, a: a["datasets"].__setitem__(0, {"path": str(c["chats"]), "fraction": 0.5}),
                 "datasets[0].fraction"),
    "weight": (lambda c, a: a.update(datasets=[{"path": p, "weight": w} for p, w in zip(a["datasets"], (2, 1, 1))]),
               "datasets[0].weight"),
    "source split_key": (lambda c, a: a["datasets"].__setitem__(0, {"path": str(c["chats"]),
                                                                     "split_key": "metadata.reward"}),
                         "datasets[0].split_key"),
    "format": (lambda c, a: a["datasets"].__setitem__(1, {"path": str(c["pivot"]), "format": "pivot"}),
               "datasets[1].format"),
    "split_key": (lambda c, a: a.update(split_key="metadata.task_id"), "split_key"),
    "eval_fraction": (lambda c, a: a.update(eval_fraction=0.5), "eval_fraction"),
    "mixture_seed": (lambda c, a: a.update(mixture_seed=1), "mixture_seed"),
    "skip_invalid": (lambda c, a: a.update(skip_invalid=True), "skip_invalid"),
    "decontaminate_against": (lambda c, a: a.update(decontaminate_against=[str(c["suite"])]),
                              "decontaminate_against"),
    "decontaminate_ngram": (lambda c, a: a.update(decontaminate_ngram=8), "decontaminate_ngram"),
}


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_changing_what_determines_the_records_is_a_miss(change, corpus, tokenizer):
    base = {"max_length": 1024, "datasets": [str(corpus["chats"]), str(corpus["pivot"]), str(corpus["job"])]}
    if change == "decontaminate_ngram" or "suite" in change:
        base["decontaminate_against"] = [str(corpus["suite"])]
    before = prepare_corpus(arguments(corpus, **{k: v for k, v in base.items() if k != "max_length"}), tokenizer,
                            base["max_length"], show_progress=False)
    apply, named = CHANGES[change]
    values = copy.deepcopy(base)
    apply(corpus, values)
    max_length = values.pop("max_length")
    after = prepare_corpus(arguments(corpus, **values), tokenizer, max_length, show_progress=False)
    assert after.cache == "miss" and after.key != before.key
    assert named in after.changed, after.changed
    again = prepare_corpus(arguments(corpus, **values), tokenizer, max_length, show_progress=False)
    assert again.cache == "hit" and again.key == after.key


def test_the_suite_contents_and_the_tokenizer_and_template_are_in_the_key(corpus, tokenizer):
    args = arguments(corpus, decontaminate_against=[str(corpus["suite"])])
    key, _ = cache_key(args, tokenizer, 1024)
    _change_the_suite(corpus)
    assert cache_key(args, tokenizer, 1024)[0] != key
    key, _ = cache_key(args, tokenizer, 1024)
    grown = copy.deepcopy(tokenizer)
    grown.add_tokens(["<new-token>"])
    assert cache_key(args, grown, 1024)[0] != key
    template = training_chat_template(tokenizer)
    own = copy.deepcopy(tokenizer)
    own.chat_template = template  # the same template, given as the tokenizer's own: the same key
    assert cache_key(args, own, 1024)[0] == key
    own.chat_template = template + "{#- a changed template -#}"
    assert cache_key(args, own, 1024)[0] != key
    # what does not determine the records leaves the key alone: processes, the cache folder, the cache switch
    assert cache_key(arguments(corpus, decontaminate_against=[str(corpus["suite"])], corpus_cache_dir="/elsewhere",
                               corpus_prepare_timeout=5), tokenizer, 1024)[0] == key


def test_a_missing_source_is_one_clear_error(corpus, tokenizer):
    with pytest.raises(CorpusError, match=r"^datasets: .*nope\.jsonl: no such file"):
        prepare_corpus(arguments(corpus, datasets=[str(corpus["chats"].parent / "nope.jsonl")]), tokenizer, 1024)


def _slow_main(rank: int, store_dir: str, cache: str, corpus_path: str, queue) -> None:
    """A process of a 2-process gloo group: rank 0 prepares slowly, rank 1 waits with a 2 s timeout."""
    import os

    import torch.distributed as dist

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    dist.init_process_group("gloo", init_method=f"file://{store_dir}/store", rank=rank, world_size=2)
    from transformers import AutoTokenizer

    import chat_corpus.cache as corpus_cache
    from modeling.tiny_model import resolve_model

    class State:
        num_processes, process_index = 2, rank
        is_main_process = is_local_main_process = rank == 0

    real = corpus_cache.prepare_corpus

    def slow(*args, **kwargs):
        if rank == 0:
            time.sleep(6)
        return real(*args, **kwargs)

    corpus_cache.prepare_corpus = slow
    tokenizer = AutoTokenizer.from_pretrained(resolve_model("builtin:tiny-qwen3"))
    args = CorpusArguments(datasets=[corpus_path], corpus_cache_dir=cache, corpus_prepare_timeout=2)
    try:
        prepared = prepare_main_first(args, tokenizer, 1024, state=State())
        queue.put((rank, prepared.cache))
    except CorpusError as err:
        queue.put((rank, f"error: {err}"))


def test_a_rank_that_waits_past_corpus_prepare_timeout_gets_one_line_naming_the_key(corpus, tmp_path, tiny_model_path):
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    processes = [context.Process(target=_slow_main, args=(rank, str(tmp_path), str(corpus["cache"]),
                                                          str(corpus["chats"]), queue)) for rank in (0, 1)]
    for process in processes:
        process.start()
    results = dict(queue.get(timeout=120) for _ in processes)
    for process in processes:
        process.join(timeout=60)
        if process.is_alive():
            process.kill()
    assert results[1].startswith("error: process 1 waited for the main process to prepare the corpus and gave up "
                                 "after corpus_prepare_timeout (2 s)")
    assert "raise `corpus_prepare_timeout`, or prepare it before the run: python -m trainers.data prepare" in results[1]


def test_prepare_cli_fills_the_cache_the_recipe_reads(corpus, tmp_path):
    config = tmp_path / "sft.yaml"
    config.write_text((REPO / "configs/sft/tiny.yaml").read_text())
    args = ["--config", str(config), "--datasets", str(corpus["chats"]), "--corpus_cache_dir", str(corpus["cache"]),
            "--json"]
    first = run(CLI + ["prepare", *args, "--num_proc", "2"])
    assert first.returncode == 0, first.stderr[-3000:]
    second = run(CLI + ["prepare", *args])
    cold, warm = (json.loads(result.stdout[result.stdout.index("{"):]) for result in (first, second))
    assert (cold["corpus_cache"], warm["corpus_cache"]) == ("miss", "hit") and cold["key"] == warm["key"]
    assert cold["train_records"] == warm["train_records"] > 0
    bad = run(CLI + ["prepare", "--config", str(config), "--datasets", str(tmp_path / "none.jsonl")])
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].startswith("error: datasets: ")


@pytest.mark.slow
def test_two_ranks_only_the_main_process_prepares_and_a_later_run_hits(corpus, tmp_path):
    common = ["--datasets", str(corpus["chats"]), "--corpus_cache_dir", str(corpus["cache"]), "--max_steps", "1",
              "--save_strategy", "no", "--eval_strategy", "no", "--report_to", "none", "--max_length", "1024",
              "--eval_suites", ""]
    summaries = []
    # cold: two ranks under ZeRO-2 (rank 1 waits for rank 0's corpus, then reads it); warm: one process hits it
    for name, accelerate_config in (("cold", "configs/accelerate/cpu_zero2.yaml"), ("warm", "configs/accelerate/cpu.yaml")):
        out = tmp_path / name
        result = run(sft_command(*common, "--output_dir", str(out), accelerate_config=accelerate_config))
        assert result.returncode == 0, result.stderr[-4000:]
        summaries.append(json.loads((out / "run_summary.json").read_text()))
    cold, warm = summaries
    assert cold["corpus_cache_ranks"] == ["miss", "hit"] and cold["corpus_cache"] == "miss"
    assert warm["corpus_cache_ranks"] == ["hit"] and warm["corpus_cache"] == "hit"
    assert cold["corpus_cache_key"] == warm["corpus_cache_key"] and len(list(corpus["cache"].iterdir())) == 1
    assert cold["train_records"] == warm["train_records"] and cold["sources"] == warm["sources"]
    for summary in summaries:
        assert summary["corpus_prepare_seconds"] >= 0 and summary["seconds_to_first_step"] > 0
