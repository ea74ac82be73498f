"""The learning run end to end (recipes/learn.py), small: generated tasks -> scripted-teacher trajectories -> the
student built from them -> SFT with every checkpoint (step 0 included) scored on held-out instances -> the overfit
check -> eval.compare's curve, in either harness (Terminus-2: configs/sft/learn.yaml; the bash tool:
configs/sft/learn-bash.yaml). The scores are reported, not asserted: a few steps on a dozen tasks teach nothing."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import learn_recipe

REPO = Path(__file__).resolve().parents[2]


def small_config(tmp_path: Path, name: str = "learn.yaml", **overrides) -> Path:
    """configs/sft/<name> with its paths under tmp_path and a few steps."""
    config = yaml.safe_load((REPO / "configs" / "sft" / name).read_text())
    out = tmp_path / "learn"
    config.update(dict(output_dir=str(out), model_name_or_path=str(out / "student-init"),
                  datasets=[{"path": str(out / "teacher"), "min_reward": 1.0}],
                  eval_suites=[str(out / "tasks" / "heldout")], decontaminate_against=[str(out / "tasks" / "heldout")], report_to=[], num_train_epochs=1, eval_fraction=0.25,
                  save_steps=6, eval_steps=6, logging_steps=1, max_steps=6, eval_max_turns=2, eval_max_tokens=48,
                  # an untrained model never stops: Terminus-2 retries each truncated answer until the agent timeout
                  # (180 s x 0.03 = 5.4 s: a scored 0, the pipeline's outcome either way)
                  eval_agent_timeout_multiplier=0.03), **overrides)
    path = tmp_path / "learn.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.slow
def test_learning_run_end_to_end(tmp_path):
    """With a deep family among the families: beside the curve, the final model on held-out shallow tasks and the
    replay baseline (the train tasks' commands on held-out worlds, scored by the oracle agent: they fail there). Run
    with --output_dir: everything lands there, the SFT step reading the config relocated there."""
    out = run_small(tmp_path, "learn.yaml", "terminus-2", families="write-value,find-owner",
                    output_dir=tmp_path / "moved")
    assert not (tmp_path / "learn").exists()
    assert yaml.safe_load((out / "learn-config.yaml").read_text())["model_name_or_path"] == str(out / "student-init")
    assert not (out / "student-corpus.jsonl").exists()  # the trajectories themselves train the tokenizer
    summary = json.loads((out / "learn_summary.json").read_text())
    assert summary["replay_tasks"] == 2 and summary["replay_mean_reward"] == 0.0
    assert isinstance(summary["shallow_mean_reward"], float)
    replayed = sorted(p.name for p in (out / "tasks" / "replay").iterdir())
    assert replayed == ["find-owner-3-1-w7", "find-owner-3-3-w7"]


@pytest.mark.slow
def test_learning_run_in_the_bash_tool_harness_end_to_end(tmp_path):
    """configs/sft/learn-bash.yaml: the teacher collected with the bash-tool agent (its trajectories are tool-calling
    chats with the tool's schema), the student scored with it. No overfit check: the Terminus-2 run has it."""
    out = run_small(tmp_path, "learn-bash.yaml", "bash-tool", overfit_tasks=0)
    trajectory = json.loads(next((out / "teacher").glob("*/*/agent/trajectory.json")).read_text())
    assert trajectory["agent"]["name"] == "bash-tool" and trajectory["agent"]["tool_definitions"]
    # the tokenizer is trained on them with the tool preamble the chat template adds, its lines single tokens
    corpus = [json.loads(line) for line in (out / "student-corpus.jsonl").read_text().splitlines()]
    assert len(corpus) == 12 and all(r["messages"][0]["role"] == "system" for r in corpus)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out / "student-init")
    preamble = corpus[0]["messages"][0]["content"]
    assert "<tools>" in preamble and len(tokenizer(preamble)["input_ids"]) < 40 < len(preamble) // 10
    for checkpoint in ("checkpoint-0", "checkpoint-6"):
        results = json.loads((out / checkpoint / "eval_results.json").read_text())
        assert results["agent"] == "bash-tool" and results["metrics"]["n_trials"] == 2


def run_small(tmp_path: Path, name: str, agent: str, overfit_tasks: int = 1,
              families: str = "write-value,count-lines", output_dir: Path | None = None) -> Path:
    """The learning run of configs/sft/<name>, small (into `output_dir`: --output_dir); returns its output dir."""
    config = small_config(tmp_path, name)
    out = output_dir or tmp_path / "learn"
    moved = ["--output_dir", str(output_dir)] if output_dir else []
    run = subprocess.run([sys.executable, "recipes/learn.py", "--config", str(config), "--train_tasks", "12",
                          "--eval_tasks", "2", "--overfit_tasks", str(overfit_tasks), "--families", families,
                          "--teacher_concurrency", "6", "--train_seed", "3", "--eval_seed", "7",
                          "--copy_steps", "5", *moved],
                         cwd=REPO, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((out / "learn_summary.json").read_text())
    print(json.dumps({k: summary[k] for k in ("heldout_curve", "overfit_mean_reward", "timings_s")}))
    assert summary["harness"] == agent and f"harness {agent}; " in run.stdout
    assert summary["train_seeds"] == {"3": 12} and summary["eval_seeds"] == {"7": 2}
    assert summary["teacher"]["trials"] == 12 and summary["teacher"]["solved"] == 1.0
    steps = [step for step, _ in summary["heldout_curve"]]
    assert steps == [0, 6]  # step 0 and the save (every save: tests/trainers/test_eval_callback.py)
    assert all(isinstance(score, float) and 0 <= score <= 1 for _, score in summary["heldout_curve"])
    assert isinstance(summary["overfit_mean_reward"], float) if overfit_tasks else summary["overfit_mean_reward"] is None
    assert (out / "checkpoint-0" / "model.safetensors").is_file() and (out / "curve.png").stat().st_size > 0
    # the corpus's overlap with the held-out instances: the family template only, not contamination
    assert summary["overlap"]["decontaminated_against"] == [str(out / "tasks" / "heldout")]
    assert summary["overlap"]["decontaminated"] == 0 and 0 < summary["overlap"]["template_overlap"] <= 12
    assert "held-out pass rate by step: 0: " in run.stdout
    return out


def test_learning_run_refuses_a_config_whose_paths_differ(tmp_path):
    config = small_config(tmp_path, model_name_or_path="somewhere/else")
    run = subprocess.run([sys.executable, "recipes/learn.py", "--config", str(config)], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    assert "model_name_or_path is 'somewhere/else'" in run.stderr and "student-init" in run.stderr


def test_learning_run_refuses_overlapping_seeds(tmp_path):
    run = subprocess.run([sys.executable, "recipes/learn.py", "--config", str(small_config(tmp_path)),
                          "--train_seed", "5", "--eval_seed", "5"], cwd=REPO, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "never used in training" in run.stderr


def test_deep_families_pick_the_deep_config_unless_one_is_given():
    learn = learn_recipe()
    assert learn.parse_args([]).config == learn.DEFAULT_CONFIG
    assert learn.parse_args(["--families", "deep"]).config == learn.DEEP_CONFIG
    assert learn.parse_args(["--families", "write-value,log-trace"]).config == learn.DEEP_CONFIG
    assert learn.parse_args(["--families", "deep", "--config", "x.yaml"]).config == Path("x.yaml")


def test_learning_run_refuses_a_harness_it_cannot_collect(tmp_path):
    run = subprocess.run([sys.executable, "recipes/learn.py", "--config", str(small_config(tmp_path, eval_agent="nop"))],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "eval_agent: 'nop' is not one of bash-tool, terminus-2" in run.stderr


def test_output_dir_moves_every_path_of_the_config_under_it_and_nothing_else(tmp_path):
    """--output_dir: two arms of one config side by side. The paths the recipe checks, the decontamination list's own
    held-out folder and run_name follow the folder; the builtins and every other setting stay as they were."""
    learn = learn_recipe()
    original = yaml.safe_load(learn.DEEP_CONFIG.read_text())
    config, out = learn.layout(learn.DEEP_CONFIG, tmp_path / "arm-a")
    assert out == tmp_path / "arm-a" and config["output_dir"] == str(out) and config["run_name"] == "arm-a"
    assert config["model_name_or_path"] == str(out / "student-init")
    assert config["datasets"] == [{"path": str(out / "teacher"), "min_reward": 1.0}]
    assert config["eval_suites"] == [str(out / "tasks" / "heldout")]
    assert config["decontaminate_against"] == [str(out / "tasks" / "heldout"), "builtin:terminal", "builtin:evocode"]
    moved = {"output_dir", "run_name", "model_name_or_path", "datasets", "eval_suites", "decontaminate_against"}
    assert {k: v for k, v in config.items() if k not in moved} == {k: v for k, v in original.items() if k not in moved}
    assert learn.parse_args(["--output_dir", "x"]).output_dir == Path("x")
