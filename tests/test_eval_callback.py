"""Evals on every checkpoint of a real SFT run, read back from its (offline) W&B run."""

import json
import re
import subprocess

import pytest
from conftest import REPO, chat_row, run, sft_command, write_jsonl

pytestmark = pytest.mark.slow
HELLO = "tests/fixtures/harbor_tasks/hello-world"


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
    tables = sorted(tmp_path.glob("wandb/offline-run-*/files/media/table/eval/hello-world/tasks_*.table.json"))
    assert len(tables) == 2  # the per-task table, one per checkpoint, among the run's files
    for path in tables:
        table = json.loads(path.read_text())
        assert table["columns"] == ["task", "trial", "reward", "rounds", "exception"]
        assert len(table["data"]) == 1 and table["data"][0][2] == 1.0


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
