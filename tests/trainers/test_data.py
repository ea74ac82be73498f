"""`python -m trainers.data inspect|render` as a user runs them."""

import json
import sys

from conftest import chat_row, run, write_jsonl

from chat_corpus.masking import tokenize_chat, training_chat_template
from chat_corpus.sources import Source, load_source

CLI = [sys.executable, "-m", "trainers.data"]


def test_inspect_strict_lists_every_bad_line_and_fails(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [chat_row(0), "{not json", chat_row(1), {"messages": []},
                                              {"messages": [{"role": "robot", "content": "x"}]}])
    result = run(CLI + ["inspect", str(path), "--strict", "--no_tokens"])
    assert result.returncode == 1, result.stderr
    for line, reason in [(2, "invalid JSON"), (4, "empty conversation"), (5, "role 'robot'")]:
        assert f"{path}:{line}: " in result.stdout and reason in result.stdout
    assert "3 invalid record(s)" in result.stderr
    lenient = run(CLI + ["inspect", str(path), "--no_tokens"])
    assert lenient.returncode == 0 and f"{path}:2: invalid JSON" in lenient.stdout


def test_inspect_json_counts_truncation_at_max_length(tmp_path):
    rows = [chat_row(i, n_turns=1) for i in range(3)] + [chat_row(9, n_turns=30)]
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    result = run(CLI + ["inspect", str(path), "--json", "--max_length", "600", "--strict"])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["valid"] == 4 and report["invalid"] == 0 and report["problems"] == []
    assert report["tokens"]["max"] > 600 and report["truncated"] == 1 and report["dropped"] == 0
    dropping = json.loads(run(CLI + ["inspect", str(path), "--json", "--max_length", "600",
                                     "--truncation", "drop"]).stdout)
    assert dropping["dropped"] == 1 and dropping["drops"][0].startswith(f"{path}:4: ")
    assert 0 < report["packing_efficiency"] <= 1


def test_render_json_marks_exactly_the_masked_tokens(tmp_path, tokenizer):
    row = chat_row(3)
    row["messages"][2]["train"] = False
    path = write_jsonl(tmp_path / "c.jsonl", [chat_row(1), row])
    result = run(CLI + ["render", str(path), "--index", "1", "--json"])
    assert result.returncode == 0, result.stderr
    tokens = json.loads(result.stdout)["tokens"]
    record = load_source(Source(str(path)), "x").records[1]
    input_ids, mask = tokenize_chat(tokenizer, training_chat_template(tokenizer), record)
    assert [t["trained"] for t in tokens] == [bool(m) for m in mask]
    assert "".join(t["text"] for t in tokens) == tokenizer.decode(input_ids)
    trained = "".join(t["text"] for t in tokens if t["trained"])
    assert "Step 0" not in trained and "Step 1" in trained and "The failing unit of app3" in trained


def test_render_plain_and_bad_index(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", [chat_row(1)])
    plain = run(CLI + ["render", str(path), "--index", "0"])
    assert plain.returncode == 0 and "⟦<think>" in plain.stdout and "<|im_end|>\n⟧" in plain.stdout
    bad = run(CLI + ["render", str(path), "--index", "5"])
    assert bad.returncode == 2 and "--index 5 is out of range" in bad.stderr
    missing = run(CLI + ["inspect", str(tmp_path / "none.jsonl")])
    assert missing.returncode == 2 and "none.jsonl: no such file" in missing.stderr
