"""Evals on every checkpoint of a real SFT run, read back from its (offline) W&B run; and the eval settings, one
definition behind eval.run's options and the recipes' eval_* keys."""

import dataclasses
import json
import re
import subprocess
from pathlib import Path

import pytest
from conftest import REPO, chat_row, run, sft_command, write_jsonl

HELLO = "tests/fixtures/harbor_tasks/hello-world"
# every eval key a recipe config may hold: renaming one breaks configs
RECIPE_KEYS = {"eval_suites", "eval_mode", "eval_slurm_script", "eval_agent", "eval_attempts", "eval_concurrency",
               "eval_env", "eval_temperature", "eval_max_tokens", "eval_context_size", "eval_max_turns", "eval_parser",
               "eval_timeout_multiplier", "eval_agent_timeout_multiplier", "eval_env_kwargs", "eval_infra_errors",
               "eval_model_family"}


def test_cli_options_and_recipe_keys_come_from_eval_settings(tmp_path):
    from trl import TrlParser

    from eval.run import build_parser
    from eval.settings import EvalSettings, cli_fields, from_args, recipe_fields
    from trainers.eval_callback import CallbackKeys, EvalArguments

    options = {action.dest: action for action in build_parser()._actions}
    recipe = {f.name: f for f in dataclasses.fields(EvalArguments)}
    assert set(recipe) == RECIPE_KEYS
    assert set(recipe) - {f.name for f in dataclasses.fields(CallbackKeys)} == {f"eval_{f.name}" for f in
                                                                                    recipe_fields()}
    assert {f.name for f in cli_fields()} <= set(options)
    for f in dataclasses.fields(EvalSettings):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if f.metadata.get("cli", True):  # same default, choices and help as the field
            option = options[f.name]
            assert option.default == (None if default is dataclasses.MISSING else default), f.name
            assert option.required == (default is dataclasses.MISSING), f.name
            assert option.choices == f.metadata.get("choices"), f.name
            assert option.help.startswith(f.metadata["help"]), f.name
        if f.metadata.get("recipe", True):
            key = recipe[f"eval_{f.name}"]
            assert key.default == default and key.metadata["help"].startswith(f.metadata["help"]), f.name
    # the defaults agree: a config without eval_* settings runs what `python -m eval.run --suite S` runs
    cli_defaults = from_args(build_parser().parse_args(["--checkpoint", "c", "--suite", "S"]))
    assert EvalArguments(eval_suites=["S"]).settings("S") == cli_defaults
    assert cli_defaults.concurrency == 2

    # TrlParser reads the keys from YAML and the command line; the subprocess/SLURM command line gives the same
    config = tmp_path / "eval.yaml"
    config.write_text("eval_suites: [builtin:terminal, tests/fixtures]\neval_mode: subprocess\n"
                      "eval_concurrency: 3\neval_max_turns: 4\neval_timeout_multiplier: 0.05\neval_parser: xml\n"
                      "eval_model_family: qwen3_5\n")
    [args] = TrlParser([EvalArguments]).parse_args_and_config(["--config", str(config), "--eval_attempts", "5",
                                                                "--eval_context_size", "4096"])
    assert args.eval_suites == ["builtin:terminal", "tests/fixtures"] and args.eval_mode == "subprocess"
    settings = args.settings("builtin:terminal")
    assert (settings.concurrency, settings.max_turns, settings.timeout_multiplier, settings.parser,
            settings.attempts, settings.context_size) == (3, 4, 0.05, "xml", 5, 4096)
    assert settings.model_family == "qwen3_5"  # a checkpoint whose template the family table cannot tell
    parsed = build_parser().parse_args(["--checkpoint", "c", *args.cli_args("builtin:terminal")])
    assert from_args(parsed) == settings


def test_results_files_and_slugs():
    from eval.results import results_file, suite_slug
    from trainers.eval_callback import EvalArguments, EvalOnSaveCallback

    assert suite_slug("builtin:terminal") == "terminal" and suite_slug("terminal-bench@2.0") == "terminal-bench_2.0"
    assert suite_slug(HELLO) == "hello-world" and suite_slug("terminal-bench/terminal-bench-2-1") == \
        "terminal-bench_terminal-bench-2-1"
    assert results_file("builtin:terminal") == "eval_results.json"
    assert results_file("builtin:evocode", several_suites=True) == "eval_results_evocode.json"
    one = EvalOnSaveCallback(EvalArguments(eval_suites=["builtin:terminal"]))
    two = EvalOnSaveCallback(EvalArguments(eval_suites=["builtin:terminal,builtin:evocode"]))
    assert one._results_file("builtin:terminal") == "eval_results.json"
    assert two._results_file("builtin:evocode") == "eval_results_evocode.json"
    with pytest.raises(ValueError, match="eval_mode: 'sometimes' is not one of inline, subprocess, slurm"):
        EvalArguments(eval_mode="sometimes")


def wandb_history(wandb_dir) -> list[dict]:
    """History rows of the offline run, read back with W&B's own record reader (`wandb beta leet inspect`)."""
    from google.protobuf import text_format
    from wandb.proto import wandb_internal_pb2

    [path] = list(wandb_dir.glob("wandb/offline-run-*/run-*.wandb"))
    text = subprocess.run([str(REPO / ".venv" / "bin" / "wandb"), "beta", "leet", "inspect", str(path)],
                          capture_output=True, text=True, check=True).stdout
    rows = []
    for chunk in re.split(r"^# record \d+: ", text, flags=re.M)[1:]:
        kind, _, body = chunk.partition("\n")
        if kind.strip() == "history":
            record = wandb_internal_pb2.Record()
            text_format.Parse(body, record)
            rows.append({"/".join(item.nested_key) or item.key: json.loads(item.value_json)
                         for item in record.history.item})
    return rows


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["inline", "subprocess"])
def test_checkpoint_evals_land_in_the_training_run_at_their_steps(tmp_path, mode):
    corpus = write_jsonl(tmp_path / "chat.jsonl", [chat_row(i) for i in range(16)])
    out = tmp_path / "out"
    result = run(sft_command("--datasets", str(corpus), "--output_dir", str(out), "--max_steps", "4",
                             "--save_steps", "2", "--eval_strategy", "no", "--max_length", "1024",
                             "--eval_suites", HELLO, "--eval_agent", "oracle", "--eval_mode", mode,
                             "--logging_steps", "1"),
                 env={"WANDB_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-4000:]
    for step in (2, 4):
        results = json.loads((out / f"checkpoint-{step}" / "eval_results.json").read_text())
        assert results["global_step"] == step and results["metrics"]["mean_reward"] == 1.0
    rows = [row for row in wandb_history(tmp_path) if "eval/hello-world/mean_reward" in row]
    assert sorted(row["train/global_step"] for row in rows) == [2, 4]
    assert all(row["eval/hello-world/mean_reward"] == 1.0 and row["eval/hello-world/n_trials"] == 1 for row in rows)
    assert all(row["eval/hello-world/pass_at_k/1"] == 1.0 for row in rows)
    assert all(row["eval/hello-world/n_infra_errors"] == 0 and row["eval/hello-world/infra_errors/network"] == 0
               for row in rows)
    tables = sorted(tmp_path.glob("wandb/offline-run-*/files/media/table/eval/hello-world/tasks_*.table.json"))
    assert len(tables) == 2  # the per-task table, one per checkpoint, among the run's files
    for path in tables:
        table = json.loads(path.read_text())
        assert table["columns"] == ["task", "trial", "reward", "rounds", "exception", "outcome", "infra_kind", "tamper"]
        assert len(table["data"]) == 1 and table["data"][0][2] == 1.0 and table["data"][0][5] == "scored"


@pytest.mark.slow
def test_a_failing_eval_never_stops_training(tmp_path):
    corpus = write_jsonl(tmp_path / "chat.jsonl", [chat_row(i) for i in range(8)])
    out = tmp_path / "out"
    result = run(sft_command("--datasets", str(corpus), "--output_dir", str(out), "--max_steps", "2",
                             "--save_steps", "2", "--eval_strategy", "no", "--max_length", "1024",
                             "--eval_suites", "builtin:nope", "--eval_agent", "oracle"),
                 env={"WANDB_DIR": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-4000:]
    assert "eval: builtin:nope at step 2 failed: EvalError: --suite builtin:nope: unknown built-in suite" in result.stderr
    assert (out / "model.safetensors").exists()
    assert any(row.get("eval/nope/failed") == 1 and row["train/global_step"] == 2 for row in wandb_history(tmp_path))


# ------------------------------------------------------------------------------------- step 0 (eval_on_start)

@pytest.fixture(scope="module")
def tiny_model(tiny_model_path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_path)


def train_begin(callback, out, model, tokenizer, eval_on_start=True, global_step=0, world_zero=True):
    """Call the callback's on_train_begin as the Trainer does (its args, state, control and model/tokenizer)."""
    from transformers import TrainerControl, TrainerState, TrainingArguments

    args = TrainingArguments(output_dir=str(out), eval_on_start=eval_on_start, report_to="none")
    state = TrainerState(global_step=global_step, is_world_process_zero=world_zero)
    callback.on_train_begin(args, state, TrainerControl(), model=model, processing_class=tokenizer)
    return args, state


@pytest.fixture
def fake_evaluate(monkeypatch):
    """eval.run.evaluate without Harbor: records its calls, writes an eval_results file of the real schema."""
    from common.checkpoints import global_step
    from eval.results import build_results

    calls = []

    def evaluate(checkpoint, settings, results_file="eval_results.json", progress=print):
        calls.append((checkpoint, settings.suite, results_file))
        results = build_results(checkpoint=checkpoint, global_step=global_step(checkpoint), settings=settings,
                                model=None, metrics={"mean_reward": 0.25, "n_trials": 4}, trials=[],
                                harbor_job_dir="jobs", wall_seconds=0.0)
        (Path(checkpoint) / results_file).write_text(json.dumps(results))
        return results

    monkeypatch.setattr("trainers.eval_callback.evaluate", evaluate)  # where the callback calls it
    return calls


def test_eval_on_start_evaluates_the_model_before_training_as_checkpoint_0(tmp_path, tiny_model, tokenizer,
                                                                           fake_evaluate):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerControl

    from common.checkpoints import global_step, last_complete_checkpoint
    from eval.compare import collect
    from trainers.eval_callback import EvalArguments, EvalOnSaveCallback

    out = tmp_path / "run"
    callback = EvalOnSaveCallback(EvalArguments(eval_suites=[HELLO]))
    args, state = train_begin(callback, out, tiny_model, tokenizer)
    checkpoint = out / "checkpoint-0"
    # the initial weights and the tokenizer, loadable as any checkpoint
    loaded = AutoModelForCausalLM.from_pretrained(checkpoint)
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), tiny_model.state_dict().values()))
    assert AutoTokenizer.from_pretrained(checkpoint)("ls -la").input_ids == tokenizer("ls -la").input_ids
    assert fake_evaluate == [(str(checkpoint), HELLO, "eval_results.json")]
    assert [r["global_step"] for r in callback.completed] == [0] and not callback.failed
    # not a checkpoint to resume from (no trainer_state.json); its step is 0, and eval.compare shows it at step 0
    assert not (checkpoint / "trainer_state.json").exists() and global_step(checkpoint) == 0
    assert last_complete_checkpoint(out) is None
    [row] = collect([out])
    assert (row["checkpoint"], row["step"], row["metrics"]["mean_reward"]) == ("checkpoint-0", 0, 0.25)

    # a later save goes the same way, at its step; resume picks it, not checkpoint-0
    (out / "checkpoint-2").mkdir()
    (out / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    state.global_step = 2
    callback.on_save(args, state, TrainerControl())
    assert fake_evaluate[-1] == (str(out / "checkpoint-2"), HELLO, "eval_results.json")
    assert last_complete_checkpoint(out) == str(out / "checkpoint-2")
    assert [(r["checkpoint"], r["step"]) for r in collect([out])] == [("checkpoint-0", 0), ("checkpoint-2", 2)]


class Unsaveable:
    def save_pretrained(self, path):
        raise AssertionError(f"saved into {path}")


@pytest.mark.parametrize("case", ["eval_on_start false", "resume", "not world process zero", "no suites", "zero3"])
def test_no_step_0_eval_unless_eval_on_start_on_a_fresh_run(tmp_path, monkeypatch, capsys, fake_evaluate, case):
    import transformers.integrations

    from trainers.eval_callback import EvalArguments, EvalOnSaveCallback

    if case == "zero3":
        monkeypatch.setattr(transformers.integrations, "is_deepspeed_zero3_enabled", lambda: True)
    callback = EvalOnSaveCallback(EvalArguments(eval_suites=[] if case == "no suites" else [HELLO]))
    train_begin(callback, tmp_path / "run", Unsaveable(), Unsaveable(), eval_on_start=case != "eval_on_start false",
                global_step=3 if case == "resume" else 0, world_zero=case != "not world process zero")
    assert not (tmp_path / "run" / "checkpoint-0").exists()
    assert fake_evaluate == [] and callback.completed == [] and callback.failed == [] and callback.pending == []
    printed = capsys.readouterr().out
    if case == "zero3":
        assert printed.startswith("eval: step 0 (eval_on_start) skipped: under DeepSpeed ZeRO-3")
        assert f"python -m eval.run --checkpoint '<base model dir>' --suite {HELLO} --agent terminus-2" in printed
        assert printed.count("\n") == 1
    else:
        assert printed == ""


def test_eval_on_start_with_peft_saves_an_adapter_that_eval_serve_serves(tmp_path, tiny_model_path, tokenizer,
                                                                         fake_evaluate):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from eval.cpu_server import Generator
    from eval.serve import vllm_command
    from trainers.eval_callback import EvalArguments, EvalOnSaveCallback

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_model_path),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    callback = EvalOnSaveCallback(EvalArguments(eval_suites=[HELLO]))
    train_begin(callback, tmp_path / "run", model, tokenizer)
    checkpoint = tmp_path / "run" / "checkpoint-0"
    assert (checkpoint / "adapter_config.json").is_file() and not (checkpoint / "config.json").exists()
    assert [call[0] for call in fake_evaluate] == [str(checkpoint)]
    assert "--enable-lora" in vllm_command(str(checkpoint), "checkpoint-0", 8000)  # LoRA on its base model
    generator = Generator(str(checkpoint), "checkpoint-0", device="cpu")  # the cpu backend merges it
    assert generator.tokenizer("ls").input_ids == tokenizer("ls").input_ids


@pytest.mark.slow
def test_step_0_eval_runs_in_a_subprocess_like_any_checkpoint(tmp_path, tiny_model, tokenizer):
    """A real eval (Harbor, oracle agent) of checkpoint-0 in subprocess mode, collected at the end of training."""
    from transformers import TrainerControl

    from eval.compare import collect
    from trainers.eval_callback import EvalArguments, EvalOnSaveCallback

    out = tmp_path / "run"
    callback = EvalOnSaveCallback(EvalArguments(eval_suites=[HELLO], eval_mode="subprocess", eval_agent="oracle"),
                                  wait_at_end_seconds=300)
    args, state = train_begin(callback, out, tiny_model, tokenizer)
    assert [(p.step, p.results_path) for p in callback.pending] == [(0, out / "checkpoint-0" / "eval_results.json")]
    callback.on_train_end(args, state, TrainerControl())
    assert not callback.pending and not callback.failed, callback.failed
    [results] = callback.completed
    assert results["global_step"] == 0 and results["metrics"]["mean_reward"] == 1.0
    [row] = collect([out])
    assert (row["checkpoint"], row["step"], row["metrics"]["mean_reward"]) == ("checkpoint-0", 0, 1.0)
