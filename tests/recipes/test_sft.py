"""The SFT recipe as users launch it: `accelerate launch recipes/sft.py`, one or two CPU ranks."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from common.checkpoints import state_is_complete
from conftest import REPO, chat_row, run, sft_command, write_jsonl
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

pytestmark = pytest.mark.slow

FAST = ["--eval_strategy", "no", "--report_to", "none", "--max_length", "1024", "--logging_steps", "1",
        "--eval_suites", ""]  # checkpoint evals have their own tests (test_eval_callback.py)


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    rows = [chat_row(i, n_turns=1 + i % 4, group=f"task-{i % 6}") for i in range(48)]
    return str(write_jsonl(tmp_path_factory.mktemp("corpus") / "chat.jsonl", rows))


def weights(directory) -> dict:
    return load_file(str(Path(directory) / "model.safetensors"))


def assert_ok(result):
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"


def test_embedded_default_trains_checkpoints_and_summarizes(tmp_path, tiny_model_path):
    out = tmp_path / "out"
    # the default evaluates each checkpoint on builtin:terminal with Terminus-2; the oracle keeps this test quick
    result = run(sft_command("--max_steps", "4", "--save_steps", "2", "--eval_steps", "2", "--output_dir", str(out),
                             "--eval_agent", "oracle"),
                 env={"WANDB_DIR": str(tmp_path)})
    assert_ok(result)
    for step in (2, 4):
        evaluated = json.loads((out / f"checkpoint-{step}" / "eval_results.json").read_text())
        assert evaluated["suite"] == "builtin:terminal" and evaluated["metrics"]["mean_reward"] == 1.0
    assert "SFT run summary" in result.stdout
    summary = json.loads((out / "run_summary.json").read_text())
    assert [s["path"] for s in summary["sources"]] == ["data/sft/agent_tool_calls.jsonl", "data/sft/terminus2_chat.jsonl",
                                                        "data/pivot/terminal_pivot.jsonl", "data/harbor/sample-job"]
    for source in summary["sources"]:
        assert source["invalid"] == 0 and source["train_records"] > 0 and source["eval_records"] > 0
        assert source["train_records"] + source["eval_records"] + source["dropped"] == source["rows"]
    assert summary["truncated"] > 0 and summary["trained_tokens_cut"] > 0  # two long records do not fit 4096
    assert summary["global_step"] == 4 and summary["checkpoints"] == ["checkpoint-2", "checkpoint-4"]
    assert summary["trained_tokens"] > 0 and summary["padding_efficiency"] == 1.0  # BFD packing, padding-free
    assert summary["final_loss"] is not None
    run_dir = Path(summary["wandb_run_dir"])
    assert run_dir.is_relative_to(tmp_path) and run_dir.parent.name.startswith("offline-run-")
    assert f"{out}" in result.stdout and str(run_dir) in result.stdout
    model = AutoModelForCausalLM.from_pretrained(out)
    trained, initial = weights(out), weights(tiny_model_path)
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)
    assert model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=3).shape == (1, 6)


@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_two_cpu_ranks_under_deepspeed_train_and_save_a_loadable_model(stage, tmp_path, small_corpus, tiny_model_path):
    out = tmp_path / "out"
    result = run(sft_command("--datasets", small_corpus, "--output_dir", str(out), "--max_steps", "3",
                             "--save_strategy", "no", "--gradient_checkpointing", "true", *FAST,
                             accelerate_config=f"configs/accelerate/cpu_{stage}.yaml"))
    assert_ok(result)
    assert result.stdout.count("SFT run summary") == 1  # printed by the main process only
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["global_step"] == 3 and summary["batches"] == 6  # 3 steps x 2 ranks, summed over ranks
    trained, initial = weights(out), weights(tiny_model_path)
    assert set(initial) <= set(trained)
    if "lm_head.weight" not in initial and "lm_head.weight" in trained:  # DeepSpeed writes the tied head out too
        assert torch.equal(trained["lm_head.weight"], trained["model.embed_tokens.weight"])
    assert any(not torch.equal(trained[k], initial[k]) for k in initial)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=2).shape == (1, 5)


def test_killed_run_resumes_to_the_same_weights(tmp_path, small_corpus):
    args = ["--datasets", small_corpus, "--max_steps", "12", "--save_steps", "4", "--per_device_train_batch_size", "2",
            "--gradient_accumulation_steps", "2", "--learning_rate", "3e-3", *FAST]
    whole = tmp_path / "whole"
    assert_ok(run(sft_command(*args, "--output_dir", str(whole))))

    broken = tmp_path / "broken"
    env = dict(os.environ, DS_ACCELERATOR="cpu")
    process = subprocess.Popen(sft_command(*args, "--output_dir", str(broken)), cwd=REPO, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    # complete, not only there: a kill while the Trainer writes it leaves it cut short, and the resume rightly skips it
    while not state_is_complete(broken / "checkpoint-4"):
        assert process.poll() is None and time.monotonic() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.02)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (broken / "checkpoint-12").exists(), "killed too late to test a resume"
    (broken / "checkpoint-999").mkdir()  # a checkpoint cut off mid-save (no trainer_state.json) is skipped

    resumed = run(sft_command(*args, "--output_dir", str(broken)))
    assert_ok(resumed)
    summary = json.loads((broken / "run_summary.json").read_text())
    assert summary["resumed_from"].endswith(("checkpoint-4", "checkpoint-8"))
    a, b = weights(whole), weights(broken)
    for key in a:
        torch.testing.assert_close(b[key], a[key], rtol=0, atol=1e-6, msg=key)


def test_refuses_bad_records_then_skips_and_counts_them(tmp_path, small_corpus):
    bad = write_jsonl(tmp_path / "bad.jsonl", [chat_row(1), '{"messages": [', {"messages": []}, chat_row(2)])
    datasets = f"{small_corpus},{bad}"
    refused = run(sft_command("--datasets", datasets, "--output_dir", str(tmp_path / "o"), "--max_steps", "1", *FAST))
    assert refused.returncode != 0  # accelerate launch reports its child's exit 2 as 1
    message = refused.stderr[refused.stderr.index("error: "):]
    assert message.startswith("error: 2 invalid record(s) of 52; the run does not start on bad records:")
    assert f"{bad}:2: invalid JSON" in message and f"{bad}:3: messages: empty conversation" in message
    assert "skip_invalid: true" in message
    skipped = run(sft_command("--datasets", datasets, "--skip_invalid", "true", "--output_dir", str(tmp_path / "o"),
                              "--max_steps", "1", "--save_strategy", "no", *FAST))
    assert_ok(skipped)
    summary = json.loads((tmp_path / "o" / "run_summary.json").read_text())
    assert summary["invalid_skipped"] == 2 and summary["sources"][1]["invalid"] == 2


def test_config_errors_are_one_clear_line(tmp_path):
    """Run as `python recipes/sft.py` (one process): exit 2 and one line. Under `accelerate launch` the same line
    comes first, then accelerate's own report that its child failed."""
    recipe = [sys.executable, "recipes/sft.py"]
    config = tmp_path / "x.yaml"
    config.write_text("model_name_or_path: builtin:tiny-qwen3\nuse_cpu: true\nbf16: false\nlerning_rate: 1e-4\n")
    result = run(recipe + ["--config", str(config)])
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1].startswith(f"error: {config}: Unknown")
    assert "lerning_rate" in result.stderr and "Traceback" not in result.stderr
    missing = run(recipe + ["--config", str(tmp_path / "none.yaml")])
    assert missing.returncode == 2 and "none.yaml: no such file" in missing.stderr
    model = run(recipe + ["--model_name_or_path", "builtin:huge", "--max_steps", "1", *FAST])
    assert model.returncode == 2 and "unknown built-in model 'builtin:huge'" in model.stderr
    launched = run(sft_command("--config", str(config)))
    assert launched.returncode != 0 and f"error: {config}: Unknown arguments" in launched.stderr


def test_lora_by_config_saves_an_adapter(tmp_path, small_corpus):
    out = tmp_path / "lora"
    result = run(sft_command("--datasets", small_corpus, "--output_dir", str(out), "--max_steps", "2",
                             "--save_strategy", "no", "--use_peft", "true", "--lora_r", "4",
                             "--lora_target_modules", "all-linear", *FAST))
    assert_ok(result)
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
    assert (out / "adapter_model.safetensors").exists() and not (out / "model.safetensors").exists()
