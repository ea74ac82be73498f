"""Decontamination (chat_corpus/decontaminate.py): 13-gram overlap of training records with eval tasks, on tasks made by
harbor_tasks/generate.py. A record that copies a held-out task is contaminated; one built from another seed's instance
of the same family shares only the family's template (not contamination), even when the suite holds one instance of
the family (the template is then learned from reference instances); an unrelated one is clean."""

import json
import subprocess
import sys

import pytest
from conftest import REPO, chat_row, write_jsonl

from chat_corpus.decontaminate import (
    Decontaminator,
    SuiteIndex,
    family_template,
    generated_origin,
    ngrams,
    record_text,
    words,
)
from chat_corpus.sft_corpus import CorpusArguments, build_sft_corpus
from common.errors import CorpusError
from harbor_tasks.generate import generate

FAMILIES = ["count-lines", "sum-numbers"]  # 3 held-out instances of each: their shared wording is template


def _chat(instruction: str, answer: str, uid: str) -> dict:
    return {"messages": [{"role": "system", "content": "You are a terminal agent."},
                         {"role": "user", "content": instruction},
                         {"role": "assistant", "content": "", "tool_calls": [
                             {"id": "c0", "type": "function", "function": {"name": "bash",
                                                                           "arguments": json.dumps({"cmd": answer})}}]},
                         {"role": "tool", "tool_call_id": "c0", "content": ""},
                         {"role": "assistant", "content": "Done."}],
            "metadata": {"source_trajectory_uid": uid}}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """Held-out tasks (seed 7) and a corpus: line 1 copies one of them, line 2 is another seed's instance of the
    same family, line 3 is unrelated."""
    root = tmp_path_factory.mktemp("decontaminate")
    held_out = generate(root / "eval", seed=7, n=6, families=FAMILIES)
    (train_task,) = generate(root / "train", seed=1, n=1, families=["count-lines"])
    copied = held_out[2]  # count-lines-7-2
    instructions = {task.name: (task / "instruction.md").read_text() for task in held_out}
    corpus = write_jsonl(root / "corpus.jsonl", [
        _chat(instructions[copied.name], "wc -l < data/x.log > line_count.txt", "copied"),
        _chat((train_task / "instruction.md").read_text(), "wc -l < y.log > line_count.txt", "other-seed"),
        chat_row(3)])
    return {"root": root, "eval": root / "eval", "held_out": held_out, "copied": copied.name,
            "train_task": train_task, "instructions": instructions, "corpus": corpus}


def test_words_and_record_text():
    assert words("Count `/app/data/x.log` -> line_count.txt!") == ["count", "app", "data", "x", "log", "line_count",
                                                                   "txt"]
    assert len(ngrams(list("abcdef"), 3)) == 4 and ngrams(["a", "b"], 3) == set()
    text = record_text({"messages": [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "bash", "arguments": {"cmd": "echo one\ntwo"}}}]}]})
    assert words(text) == ["run", "it", "bash", "cmd", "echo", "one", "two"]  # arguments walked, not JSON-escaped


def test_template_ngrams_are_shared_by_two_or_more_tasks(suite):
    index = SuiteIndex.build(str(suite["eval"]))
    assert sorted(index.tasks) == sorted(task.name for task in suite["held_out"])
    # the family's fixed wording is in every instance: template; an instance's own values make specific n-grams
    fixed = tuple(words("and write the count, as a plain decimal number followed by a newline"))  # 13 words
    assert fixed in index.template and fixed not in index.specific
    assert any(task == suite["copied"] for task in index.specific.values())


def test_copy_is_contaminated_other_seed_is_template_overlap_unrelated_is_clean(suite):
    # the other seed's instance really differs in its values: no held-out instruction is the same text
    other = (suite["train_task"] / "instruction.md").read_text()
    assert other not in suite["instructions"].values()
    checker = Decontaminator([str(suite["eval"])])
    rows = [json.loads(line) for line in suite["corpus"].read_text().splitlines()]
    verdicts = [checker.check(dict(_record(row), origin=f"corpus:{i + 1}")) for i, row in enumerate(rows)]
    (copied_verdict, _), (other_contaminated, other_template), (clean, clean_template) = verdicts
    assert list(copied_verdict[str(suite["eval"])]) == [suite["copied"]]
    assert other_contaminated == {} and other_template is True
    assert clean == {} and clean_template is False
    (report,) = checker.reports
    assert (report.records_scanned, len(report.contaminated), report.template_overlap) == (3, 1, 1)
    assert report.contaminated[0]["origin"] == "corpus:1" and report.per_task == {suite["copied"]: 1}


def _record(row: dict) -> dict:
    from chat_corpus.sources import to_record

    return to_record(row)[1]


def _cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainers.data", "decontaminate", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


def test_cli_reports_json_and_exits_0(suite):
    result = _cli(str(suite["corpus"]), "--against", str(suite["eval"]), "builtin:terminal", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["n"] == 13 and report["corpora"][0]["records"] == 3
    mine, terminal = report["suites"]
    assert mine["records_scanned"] == 3 and mine["contaminated_records"] == 1
    assert mine["contaminated"][0]["origin"] == f"{suite['corpus']}:1"
    assert mine["contaminated"][0]["tasks"] == [suite["copied"]]
    assert mine["template_overlap_records"] == 1 and mine["template_overlap"] == [f"{suite['corpus']}:2"]
    assert "not contamination" in mine["template_overlap_note"]
    # builtin:terminal resolves to eval/tasks/terminal, its 10 tasks; none of them overlaps this corpus
    assert terminal["path"] == "eval/tasks/terminal" and terminal["tasks"] == 10
    assert terminal["contaminated_records"] == 0

    text = _cli(str(suite["corpus"]), "--against", str(suite["eval"]))
    assert text.returncode == 0, text.stderr
    assert f"corpus.jsonl:1 -> {suite['copied']}" in text.stdout
    assert ("template overlap: 1 records; shared template n-grams only: not contamination (held-out instances "
            "differ in their values)") in text.stdout


def test_a_single_task_folder_is_a_suite(suite):
    # a generated task: its family's template comes from reference instances, even alone in its suite
    (index,) = Decontaminator([str(suite["eval"] / suite["copied"])]).indexes
    assert index.tasks == [suite["copied"]] and index.reference_families == {"count-lines": 256}
    assert index.template and index.template <= family_template("count-lines")
    # without reference instances (and for any task not generated here) a suite of one task has no template
    (plain,) = Decontaminator([str(suite["eval"] / suite["copied"])], references=0).indexes
    assert not plain.template and not plain.reference_families


def test_a_one_task_per_family_suite_flags_no_fresh_seed_instance(tmp_path):
    """Values come from small pools (8 folder names, 46 words), so a fresh instance's 13-gram of template words and
    one value often matches the held-out instance's: unique to the one task of its family in the suite, it used to
    count as specific. Learned from 256 reference instances, it is template."""
    families = ["count-lines", "sum-numbers", "csv-column"]
    held_out = generate(tmp_path / "eval", seed=7, n=3, families=families)
    assert [generated_origin(task) for task in held_out] == [(family, 7, i) for i, family in enumerate(families)]
    checker = Decontaminator([str(tmp_path / "eval")])
    assert checker.reports[0].reference_families == dict.fromkeys(families, 256)
    old_rule = Decontaminator([str(tmp_path / "eval")], references=0)  # the 2+-tasks rule alone
    train = generate(tmp_path / "train", seed=1, n=21, families=families)
    records = [_chat((task / "instruction.md").read_text(), (task / "solution" / "solve.sh").read_text(), task.name)
               for task in train]
    assert [task.name for task, record in zip(train, records) if checker.check(record)[0]] == []
    assert sum(bool(old_rule.check(record)[0]) for record in records) == 21  # every one, before
    assert checker.reports[0].template_overlap == 21
    # positive control: a record that copies a held-out task (instruction and test) is still contaminated
    for task in held_out:
        text = (task / "instruction.md").read_text() + "\n" + (task / "tests" / "test.sh").read_text()
        contaminated, _ = checker.check(_chat(text, "ls", "copy"))
        assert list(contaminated[str(tmp_path / "eval")]) == [task.name]


@pytest.mark.parametrize("against, message", [
    ("{root}/missing", "--against {root}/missing: no such file or directory; pass a folder of Harbor tasks"),
    ("terminal-bench@2.0", "--against terminal-bench@2.0: a Harbor dataset name cannot be read offline; download "
                           "its tasks and pass the local folder"),
    ("builtin:nope", "--against builtin:nope: unknown built-in suite; use one of builtin:terminal, builtin:evocode"),
])
def test_cli_errors_name_the_suite_and_the_fix(suite, against, message):
    result = _cli(str(suite["corpus"]), "--against", against.format(root=suite["root"]))
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: " + message.format(root=suite["root"])), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cli_error_for_a_missing_corpus(suite):
    result = _cli(str(suite["root"] / "nope.jsonl"), "--against", "builtin:terminal")
    assert result.returncode == 2 and result.stderr == f"error: {suite['root'] / 'nope.jsonl'}: no such file\n"


def test_sft_corpus_drops_the_contaminated_record_and_counts_it(suite, tokenizer):
    args = CorpusArguments(datasets=[str(suite["corpus"])], decontaminate_against=[str(suite["eval"])])
    corpus = build_sft_corpus(args, tokenizer, max_length=4096, show_progress=False)
    (stat,) = corpus.stats
    assert (stat.rows, stat.decontaminated, stat.template_overlap, stat.train_records) == (3, 1, 1, 2)
    assert corpus.decontaminated == [f"{suite['corpus']}:1 -> {suite['eval']}: {suite['copied']}"]
    assert corpus.decontaminated_against == [str(suite["eval"])]

    plain = build_sft_corpus(CorpusArguments(datasets=[str(suite["corpus"])]), tokenizer, 4096, show_progress=False)
    assert (plain.stats[0].decontaminated, plain.stats[0].train_records, plain.decontaminated_against) == (0, 3, [])


def test_the_config_key_takes_words_or_a_list_and_refuses_a_bad_suite(suite, tokenizer):
    assert CorpusArguments(decontaminate_against="builtin:terminal,builtin:evocode").decontaminate_against == [
        "builtin:terminal", "builtin:evocode"]
    with pytest.raises(ValueError, match="decontaminate_ngram: 0 must be a whole number"):
        CorpusArguments(decontaminate_ngram=0)
    args = CorpusArguments(datasets=[str(suite["corpus"])], decontaminate_against=["terminal-bench@2.0"])
    with pytest.raises(CorpusError, match=r"^decontaminate_against: terminal-bench@2.0: a Harbor dataset name"):
        build_sft_corpus(args, tokenizer, 4096, show_progress=False)


def test_the_sft_summary_shows_the_column_only_when_decontamination_ran(capsys):
    from trainers.summary import print_sft_summary

    source = {"path": "a.jsonl", "rows": 3, "invalid": 0, "below_min_reward": 0, "decontaminated": 1,
              "train_records": 2, "eval_records": 0, "truncated": 0, "dropped": 0, "not_sampled": 0, "repeated": 0,
              "tokens": 10, "trained_tokens": 5}
    summary = {"sources": [source], "final_loss": 1.0, "global_step": 1, "epochs": 1.0, "trained_tokens": 5,
               "real_tokens": 10, "batches": 1, "padding_efficiency": 1.0, "padded_tokens": 10, "invalid_skipped": 0,
               "truncated": 0, "trained_tokens_cut": 0, "dropped": 0, "wall_seconds": 1.0,
               "trained_tokens_per_second": 5.0, "resumed_from": None, "output_dir": "out", "checkpoints": [],
               "wandb_run_dir": None, "decontaminated_against": ["builtin:terminal"], "decontaminated": 1,
               "template_overlap": 1}
    print_sft_summary(summary)
    shown = capsys.readouterr().out
    header = next(line for line in shown.splitlines() if "┃ path" in line)
    assert "┃ contaminated ┃" in header and "< min_reward" not in header
    assert ("decontaminated against builtin:terminal: 1 contaminated record(s) dropped; 1 with template overlap "
            "kept") in shown
    print_sft_summary(dict(summary, decontaminated_against=[]))
    assert "contaminated" not in capsys.readouterr().out


def test_the_grpo_recipe_refuses_the_key_rather_than_ignoring_it(suite):
    from chat_corpus.grpo_prompts import build_grpo_prompts

    args = CorpusArguments(datasets=["data/grpo/verifif.jsonl"], decontaminate_against=["builtin:terminal"])
    with pytest.raises(CorpusError, match="decontaminate_against: applies to SFT corpora only"):
        build_grpo_prompts(args, tokenizer=None, max_prompt_length=None)
