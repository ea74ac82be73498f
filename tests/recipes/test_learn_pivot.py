"""PivotRL from a start checkpoint end to end (recipes/learn_pivot.py), small: generated tasks -> scripted-teacher
trajectories on both sides -> decision points for the functional reward (trainers.data pivots --environment
terminus_functional) -> the train rows profiled with the start (trainers.data profile) -> recipes/grpo.py with the
functional reward server, the start and the last save scored on held-out tasks and held-out decision points ->
eval.compare's curve and the summary. The scores are reported, not asserted: one step of a random model teaches
nothing (and its answers never parse, so profiling keeps the rows below the bar: --keep hard)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import learn_recipe

REPO = Path(__file__).resolve().parents[2]


def small_config(tmp_path: Path) -> Path:
    config = yaml.safe_load((REPO / "configs" / "grpo" / "pivot-learn.yaml").read_text())
    config.update(output_dir=str(tmp_path / "learn-pivot"), report_to=[], max_steps=1, save_steps=1,
                  per_device_train_batch_size=4, num_generations=4, max_completion_length=24, eval_max_tokens=24,
                  eval_max_turns=2, eval_concurrency=2,
                  # an untrained model never stops: Terminus-2 retries until the agent timeout (5.4 s: a scored 0)
                  eval_agent_timeout_multiplier=0.03)
    path = tmp_path / "pivot-learn.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_arms_name_a_part_of_the_ablation_grid():
    recipe = learn_recipe("learn_pivot")
    assert recipe.planned_arms(recipe.parse_args(["--ablation", "--profile", "4"])) == [
        ("string", 0), ("string", 4), ("functional", 0), ("functional", 4)]
    # the three-seed comparison: two arms, in the grid's order whatever order they are named in; K 8 by default
    assert recipe.planned_arms(recipe.parse_args(["--arms", "functional-profiled,string-unfiltered"])) == [
        ("string", 0), ("functional", 8)]
    assert recipe.planned_arms(recipe.parse_args(["--reward", "functional"])) == [("functional", 0)]


@pytest.mark.parametrize("argv, says", [
    (["--arms", "string-profiled,functional-filtered"], "unknown arm functional-filtered; the arms: string-unfiltered"),
    (["--arms", "string-profiled", "--ablation"], "--ablation trains all four arms"),
])
def test_bad_arms_are_refused_with_the_names(argv, says):
    done = subprocess.run([sys.executable, "recipes/learn_pivot.py", *argv], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 2 and says in done.stderr, done.stderr


@pytest.mark.slow
def test_pivot_learning_run_end_to_end(tmp_path):
    from modeling.tiny_model import resolve_model

    start = resolve_model("builtin:tiny-qwen3")
    command = [sys.executable, "recipes/learn_pivot.py", "--config", str(small_config(tmp_path)), "--start", start,
               "--train_tasks", "3", "--heldout_tasks", "2", "--teacher_concurrency", "3", "--families",
               "count-lines,write-value", "--reward", "functional", "--profile", "2", "--keep", "hard"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = tmp_path / "learn-pivot"
    summary = json.loads((out / "learn_pivot_summary.json").read_text())
    assert summary["start"] == start and summary["seeds"] == {"train": 3, "heldout": 1003, "trainer": 42}
    assert summary["task_seeds"] == {"train": {"3": 3}, "heldout": {"1003": 2}}  # seed -> tasks
    assert summary["teacher"]["train"]["solved"] == 1.0 and summary["teacher"]["heldout"]["trials"] == 2
    pivots = summary["pivots"]
    assert pivots["train-functional"]["rows"]["written"] == 6 and pivots["heldout-functional"]["rows"]["written"] == 4
    rows = [json.loads(line) for line in (out / "pivots" / "train-functional.jsonl").read_text().splitlines()]
    assert {row["metadata"]["task"].split("/")[-1].rsplit("-", 2)[0] for row in rows} <= {"count-lines", "write-value"}
    assert all((Path(row["metadata"]["task_dir"]) / "tests" / "test.sh").is_file() for row in rows)
    assert {row["agent_ref"]["name"] for row in rows} == {"terminus_functional_simple_agent"}
    # profiled with the start: 2 samples a row, every one scored (unparsable answers score 0, they are not failures)
    profile = summary["profile"]
    assert profile["rows"] == 6 and profile["samples"] == 12 and profile["scored"] == 12 and profile["kept"] == 6
    assert summary["train_rows"].endswith("train-functional.profiled.jsonl")
    assert "--reward_server_config configs/rewards/terminus_functional.yaml" in summary["grpo_command"]
    # the start (checkpoint-0) and the one save, each on both held-out suites
    assert [step for step, _ in summary["heldout_pass_rate"]] == [0, 1]
    assert [step for step, _ in summary["heldout_decision_point_reward"]] == [0, 1]
    for checkpoint in ("checkpoint-0", "checkpoint-1"):
        rows = json.loads((out / checkpoint / "eval_results_heldout-functional.jsonl.json").read_text())
        assert rows["metrics"]["n_trials"] == 4 and rows["metrics"]["n_infra_errors"] == 0
    assert (out / "curve.png").stat().st_size > 0
    # one step of one decision point: a first action's block, or none where it drew a task_complete turn
    assert len(summary["first_action_reward_by_10_steps"]) <= 1
    assert all(0.0 <= r <= 1.0 for r in summary["first_action_reward_by_10_steps"])
    assert "held-out pass rate by step: 0:" in done.stdout
    assert summary["stages_read_back"] == []
    # --resume on a run that finished: every stage read back (nothing regenerated, collected, profiled or trained),
    # the same results
    again = subprocess.run([*command, "--resume"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    resumed = json.loads((out / "learn_pivot_summary.json").read_text())
    assert len(resumed["stages_read_back"]) == 5 and "5 stages read back, --resume" in again.stdout
    assert "eval: " not in again.stdout and "accelerate" not in again.stdout
    for key in ("teacher", "pivots", "profile", "heldout_pass_rate", "heldout_decision_point_reward", "grpo"):
        assert json.loads(json.dumps(summary[key])) == resumed[key], key
