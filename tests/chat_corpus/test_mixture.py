"""Splits by group, fractions and weighted mixtures, through the corpus builder the recipe uses."""

from collections import Counter

import pytest
from conftest import chat_row, write_jsonl

from chat_corpus.mixture import mix_by_weight, split_by_group, subsample
from chat_corpus.sft_corpus import CorpusArguments, build_sft_corpus
from chat_corpus.sources import Source, load_source
from common.errors import CorpusError


def records(n, groups):
    return [{"group": f"g{i % groups}", "i": i} for i in range(n)]


def test_split_never_puts_one_group_on_both_sides():
    train, held_out = split_by_group(records(100, 17), eval_fraction=0.2, seed=3)
    assert {r["group"] for r in train}.isdisjoint({r["group"] for r in held_out})
    assert len({r["group"] for r in held_out}) == 4  # ceil(0.2 * 17) groups
    assert len(train) + len(held_out) == 100
    again = split_by_group(records(100, 17), eval_fraction=0.2, seed=3)
    assert again == (train, held_out)
    assert split_by_group(records(10, 1), 0.5, 0) == (records(10, 1), [])  # one group stays in train


def test_fraction_and_weights():
    assert len(subsample(records(40, 5), 0.25, 0)) == 10
    small, large = records(10, 10), records(90, 10)
    mixed = mix_by_weight([small, large], [1, 1], seed=0)
    assert [len(part) for part in mixed] == [50, 50]  # the total is kept, shares follow the weights
    assert max(Counter(r["i"] for r in mixed[0]).values()) == 5  # the small source repeats 5 times
    assert len(set(r["i"] for r in mixed[1])) == 50  # the large one is subsampled without repeats


def test_corpus_counts_repeats_and_keeps_eval_groups_out_of_train(tmp_path, tokenizer):
    a = write_jsonl(tmp_path / "a.jsonl", [chat_row(i, group=f"a{i % 4}") for i in range(8)])
    b = write_jsonl(tmp_path / "b.jsonl", [chat_row(100 + i, group=f"b{i % 8}") for i in range(24)])
    args = CorpusArguments(datasets=[{"path": str(a), "weight": 3}, {"path": str(b), "weight": 1}],
                           eval_fraction=0.25)
    corpus = build_sft_corpus(args, tokenizer, max_length=4096, show_progress=False)
    sa, sb = corpus.stats
    assert sa.eval_records == 2 and sb.eval_records == 6  # 1 of 4 groups, 2 of 8 groups
    assert sa.train_records + sb.train_records == 6 + 18
    assert sa.train_records == 18 and sa.repeated == 12 and sb.train_records == 6 and sb.repeated == 0
    assert sa.not_sampled == 0 and sb.not_sampled == 12  # b's share (6) is smaller than its 18 train records
    assert len(corpus.train) == 24 and len(corpus.eval) == 8
    halved = build_sft_corpus(CorpusArguments(datasets=[{"path": str(b), "fraction": 0.5}]), tokenizer, 4096,
                              show_progress=False)
    assert halved.stats[0].train_records == 12 and halved.stats[0].not_sampled == 12
    with pytest.raises(CorpusError, match="give a weight to every source or to none"):
        build_sft_corpus(CorpusArguments(datasets=[{"path": str(a), "weight": 1}, str(b)]), tokenizer, 4096)


def test_hugging_face_loader_reads_local_json_through_datasets(tmp_path):
    path = write_jsonl(tmp_path / "hf.jsonl", [chat_row(i) for i in range(3)])
    loaded = load_source(Source("json", data_files=str(path)), "metadata.source_trajectory_uid")
    assert len(loaded.records) == 3 and loaded.records[0]["origin"] == "json[train]:0"
    assert loaded.records[2]["group"] == "traj-2"


def test_unknown_hub_dataset_is_a_clear_error():
    with pytest.raises(FileNotFoundError, match="not a local file and not loadable as a Hugging Face dataset"):
        load_source(Source("no-such-org/no-such-dataset"), "x")
