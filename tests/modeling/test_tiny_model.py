"""The learning run's student (modeling/tiny_model.py --preset student): a tokenizer under which an identifier is
the same tokens wherever it stands, whose frequent harness lines are one token each, and that decodes losslessly;
copy pretraining that takes the random model from copying nothing to copying spans (at the span's distance only)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def student(tmp_path_factory):
    out = tmp_path_factory.mktemp("student") / "model"
    run = subprocess.run([sys.executable, "-m", "modeling.tiny_model", "--out", str(out), "--corpus",
                          "data/sft/terminus2_conversations.jsonl", "data/sft/terminus2_chat.jsonl", "--copy_steps", "0"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "built student" in run.stdout and "copy pretraining" not in run.stdout
    assert not (out / "copy_pretraining.json").exists()
    from transformers import AutoConfig, AutoTokenizer

    return AutoTokenizer.from_pretrained(out), AutoConfig.from_pretrained(out), out


def test_identifiers_split_the_same_everywhere(student):
    tokenizer, _, _ = student

    def pieces(text):
        return tokenizer.convert_ids_to_tokens(tokenizer(text, add_special_tokens=False)["input_ids"])

    name = pieces("inbox/saffron_2024.log")
    for context in ("wc -l < inbox/saffron_2024.log > x", "`/app/inbox/saffron_2024.log`", "\"inbox/saffron_2024.log\\n\""):
        tokens = pieces(context)
        assert any(tokens[i:i + len(name)] == name for i in range(len(tokens))), (context, tokens, name)
    # digits one by one: a number is copied digit by digit, whatever its neighbours
    assert pieces("x 12345") [-5:] == ["1", "2", "3", "4", "5"]


def test_frequent_lines_are_single_tokens_and_text_round_trips(student):
    tokenizer, config, _ = student
    from modeling.tiny_model import frequent_lines, record_texts

    texts, records = record_texts([REPO / "data/sft/terminus2_conversations.jsonl"])
    lines = frequent_lines(texts)
    assert records > 0 and lines
    for line in lines[:20]:
        assert len(tokenizer(line, add_special_tokens=False)["input_ids"]) == 1, line
    row = json.loads((REPO / "data/sft/terminus2_conversations.jsonl").read_text().splitlines()[0])
    text = json.dumps(row)
    assert tokenizer.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
    assert config.num_hidden_layers == 4 and config.hidden_size == 256 and config.vocab_size == len(tokenizer)


def test_the_same_corpus_builds_the_same_tokenizer_whatever_the_hash_seed(tmp_path):
    """The frequent lines' token ids must not depend on Python's string hashing: a set's order differs per process, and
    ties in the line counts then gave each build another id for the same line (the same `make learn` trained a
    different student each time). Two builds' tokenizer.json files are compared byte for byte."""
    built = []
    for seed in ("1", "2"):
        out = tmp_path / f"student-{seed}"
        run = subprocess.run([sys.executable, "-m", "modeling.tiny_model", "--out", str(out), "--corpus",
                              "data/sft/terminus2_conversations.jsonl", "data/sft/terminus2_chat.jsonl",
                              "--copy_steps", "0"], cwd=REPO, capture_output=True, text=True, timeout=300,
                             env={**os.environ, "PYTHONHASHSEED": seed})
        assert run.returncode == 0, run.stderr[-2000:]
        built.append((out / "tokenizer.json").read_bytes())
    assert built[0] == built[1]


def test_a_missing_corpus_is_one_clear_error(tmp_path):
    run = subprocess.run([sys.executable, "-m", "modeling.tiny_model", "--out", str(tmp_path / "m"), "--corpus",
                          str(tmp_path / "nope.jsonl")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and run.stderr.startswith("error: --corpus") and "nope.jsonl" in run.stderr


@pytest.mark.slow
def test_copy_pretraining_teaches_the_random_model_to_copy(student, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from modeling.tiny_model import pretrain_copy

    tokenizer, _, random_model = student
    torch.manual_seed(0)
    before = pretrain_copy(AutoModelForCausalLM.from_pretrained(random_model), tokenizer, steps=0)
    assert before < 0.05  # chance over the word pieces: a random model copies nothing

    # spans of 16 tokens, not the preset's 48: the same circuit at a third of the compute (48 s, not 170 s, here)
    out = tmp_path / "copying"
    run = subprocess.run([sys.executable, "-m", "modeling.tiny_model", "--out", str(out), "--corpus",
                          "data/sft/terminus2_conversations.jsonl", "data/sft/terminus2_chat.jsonl", "--copy_steps", "200",
                          "--copy_span", "16"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads((out / "copy_pretraining.json").read_text())
    assert record["steps"] == 200 and record["span"] == 16 and record["copy_accuracy"] >= 0.9, record
    # ... at that one distance: a span coming back at random distances is not copied (the deep families' student
    # has an induction circuit instead: tests/modeling/test_induction_circuit.py)
    assert record["copy_accuracy_any_distance"] < 0.1, record
    assert f"copy accuracy {record['copy_accuracy']:.3f}" in run.stdout
