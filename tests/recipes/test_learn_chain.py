"""`make learn-chain` (recipes/learn_chain.py): its arms' commands parse through the recipes' own parsers, the chain's
second stage is placed after its first on the step axis, and a missing start is one clear line. The whole chain is
minutes of GRPO per arm: its measured runs are in docs/agentic-grpo.md, with the command."""

import json
import subprocess
import sys
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "recipes"))
import learn_chain  # noqa: E402

from harbor_tasks.generate import generate  # noqa: E402


def results(folder, step, score, suite="held"):
    checkpoint = folder / f"checkpoint-{step}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "eval_results.json").write_text(json.dumps({"global_step": step, "suite": suite,
                                                               "metrics": {"mean_reward": score}}))


def test_the_chains_agentic_stage_follows_its_pivot_stage_on_the_step_axis(tmp_path):
    results(tmp_path / "pivot", 10, 0.4)
    results(tmp_path / "pivot", 20, 0.5)
    results(tmp_path / "agentic", 10, 0.6)
    results(tmp_path / "agentic", 20, 0.7)
    curve = learn_chain.arm_curve([(tmp_path / "pivot", 0), (tmp_path / "agentic", 20)], "held")
    assert curve == [(10, 0.4), (20, 0.5), (30, 0.6), (40, 0.7)]


def test_the_chains_first_stage_is_the_pivot_arms_first_half(tmp_path):
    results(tmp_path / "sft", 0, 0.3)
    for step, score in ((10, 0.4), (20, 0.5)):
        results(tmp_path / "pivot", step, score)
    for step, score in ((10, 0.6), (20, 0.8)):
        results(tmp_path / "agentic", step, score)
    results(tmp_path / "pivot-agentic" / "agentic", 5, 0.7)
    results(tmp_path / "pivot-agentic" / "agentic", 10, 0.9)
    table = learn_chain.chain_table(tmp_path, "held", 10)
    assert table["sft"] == [(0, 0.3)] and table["pivot"] == [(0, 0.3), (10, 0.4), (20, 0.5)]
    assert table["agentic"] == [(0, 0.3), (10, 0.6), (20, 0.8)]
    assert table["pivot-agentic"] == [(0, 0.3), (10, 0.4), (15, 0.7), (20, 0.9)]


def saves(command: list) -> list[int]:
    """The steps a stage saves (and is scored) at: every `save_steps` and at its last step, as Transformers saves."""
    steps, every = (int(command[command.index(key) + 1]) for key in ("--max_steps", "--save_steps"))
    return sorted(set(range(every, steps + 1, every)) | {steps})


@pytest.mark.parametrize("steps", [2, 3, 15, 30, 31, 40])
def test_every_stage_saves_once_halfway_and_at_its_end_and_the_chain_starts_from_a_save(tmp_path, steps):
    """An odd stage saved at 7, 14 and 15 before (15 // 2): one eval too many, off the other arms' steps."""
    args = SimpleNamespace(accelerate_config="configs/accelerate/cpu.yaml", grpo_args=[])
    half = learn_chain.half_of(steps)
    stage = partial(learn_chain.grpo_command, "recipes/grpo.py", learn_chain.PIVOT_CONFIG, "start", tmp_path, seed=42,
                    args=args)
    pivot, chain_agentic = saves(stage(steps=steps)), saves(stage(steps=steps - half))
    assert half in pivot  # the chain's agentic stage starts from the pivot arm's checkpoint-<half>
    assert len(pivot) == 2 and pivot[-1] == steps
    assert len(chain_agentic) == min(2, steps - half) and chain_agentic[-1] == steps - half


@pytest.mark.parametrize("recipe, config, pivot_reward", [("recipes/grpo.py", learn_chain.PIVOT_CONFIG, "string"),
                                                          ("recipes/grpo.py", learn_chain.PIVOT_CONFIG, "functional"),
                                                          ("recipes/grpo_agentic.py", learn_chain.AGENTIC_CONFIG, None)])
def test_each_arms_command_parses_through_its_recipes_parser(tmp_path, recipe, config, pivot_reward):
    """What learn_chain passes each GRPO stage (start, output, steps, saves, seed, data, evals, the pivot stage's
    reward server) are the recipe's keys."""
    from trl import GRPOConfig, ModelConfig

    from trainers.eval_callback import EvalArguments
    from trainers.recipe_config import parse_config

    args = SimpleNamespace(accelerate_config="configs/accelerate/cpu.yaml", grpo_args=["--num_generations", "4"])
    held = str(tmp_path / "held")
    if recipe == "recipes/grpo.py":
        data = ["--datasets", "p.jsonl", "--eval_suites", held, *learn_chain.pivot_reward_args(pivot_reward)]
    else:  # the chain's own tasks, generated as it generates them
        families, seeds = ["rename-ext", "write-value"], {"train": 7, "heldout": 1007}
        generate(tmp_path / "train", seeds["train"], 6, families)
        generate(tmp_path / "held", seeds["heldout"], 4, families)
        data = learn_chain.agentic_task_args(tmp_path / "train", tmp_path / "held", seeds, 6, 4, families)
    command = learn_chain.grpo_command(recipe, config, "outputs/learn", tmp_path / "arm", 40, 43, args, *data)
    argv = command[command.index(recipe) + 1:]
    assert argv[argv.index("--max_steps") + 1] == "40" and argv[argv.index("--save_steps") + 1] == "20"
    if recipe == "recipes/grpo.py":
        from chat_corpus.sft_corpus import CorpusArguments
        from rewards.client import RewardArguments

        specific, reward, grpo, model, evals = parse_config(
            (CorpusArguments, RewardArguments, GRPOConfig, ModelConfig, EvalArguments), config, argv)
        expected = {"string": ("terminus_judge_string_only.yaml", 30), "functional": ("terminus_functional.yaml", 180)}
        assert (Path(reward.reward_server_config).name, reward.reward_timeout) == expected[pivot_reward]
    else:
        from trainers.agentic import AgenticTaskArguments

        specific, grpo, model, evals = parse_config((AgenticTaskArguments, GRPOConfig, ModelConfig, EvalArguments),
                                                    config, argv)
    assert grpo.max_steps == 40 and grpo.save_steps == 20 and grpo.seed == 43 and grpo.num_generations == 4
    assert grpo.output_dir == str(tmp_path / "arm") and model.model_name_or_path == "outputs/learn"
    assert evals.eval_suites == [held] and not grpo.eval_on_start
    if recipe == "recipes/grpo_agentic.py":
        from trainers.agentic import prepare_tasks

        assert specific.harness == "terminus-2" and specific.task_dirs == [str(tmp_path / "train")]
        # the recipe takes the chain's folders as they are (its config's generate_seed 2 refused them: 2026-12-06)
        assert len(prepare_tasks(specific)) == 6 and len(list((tmp_path / "held").iterdir())) == 4
    assert evals.eval_temperature == 0.0  # greedy, as the start is scored


def test_a_start_that_is_not_a_model_is_one_clear_line(tmp_path):
    run = subprocess.run([sys.executable, "recipes/learn_chain.py", "--start", str(tmp_path), "--out",
                          str(tmp_path / "out")], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2 and "not a model folder" in run.stderr and "make learn" in run.stderr
    assert not (tmp_path / "out").exists()


def test_resume_goes_on_from_the_stage_that_stopped(tmp_path, monkeypatch, capsys):
    """The chain of 2026-12-06 stopped at its first agentic stage after 26 min of stages before it. With --resume the
    rerun runs that stage and the ones after it, nothing before (the teacher, the profiling, the start's score and the
    pivot arm are read back). Those parts are faked here, each is tested on its own; what is real is the chain."""
    import eval.scripted_teacher

    start, out, calls = tmp_path / "start", tmp_path / "chain", []
    start.mkdir()
    (start / "config.json").write_text("{}")
    monkeypatch.setattr(eval.scripted_teacher, "collect", lambda tasks, jobs, concurrency: calls.append("teacher")
                        or {"metrics": {"n_trials": 4, "mean_reward": 1.0}, "harbor_job_dir": str(jobs)})
    monkeypatch.setattr(learn_chain, "build_pivots", lambda *args: calls.append("pivots") or {"rows": {"written": 8}})
    held = str(out / "tasks" / "heldout")
    scored = partial(results, suite=held)
    monkeypatch.setattr(learn_chain, "evaluate", lambda checkpoint, settings: calls.append("start scored")
                        or (Path(checkpoint) / "eval_results.json").write_text(json.dumps(
                            {"global_step": 0, "suite": held, "metrics": {"mean_reward": 0.2}})))
    fail = ["pivot-agentic/agentic"]

    def run_stage_command(command, log):
        folder = Path(command[command.index("--output_dir") + 1])
        calls.append(str(folder.relative_to(out)))
        if calls[-1] in fail:
            raise learn_chain.ConfigError(f"{calls[-1]} failed")
        steps = int(command[command.index("--max_steps") + 1])
        for step in sorted({learn_chain.half_of(steps), steps}):
            scored(folder, step, 0.3)

    monkeypatch.setattr(learn_chain, "run_stage_command", run_stage_command)
    argv = ["--start", str(start), "--out", str(out), "--train_tasks", "4", "--heldout_tasks", "2", "--steps", "4"]
    with pytest.raises(SystemExit):
        learn_chain.main(argv)
    assert calls == ["teacher", "pivots", "start scored", "pivot", "pivot-agentic/agentic"]
    assert "pivot-agentic/agentic failed" in capsys.readouterr().err
    calls.clear()
    fail.clear()
    with pytest.raises(SystemExit):  # other arguments: refused, nothing run
        learn_chain.main([*argv[:-1], "6", "--resume"])
    assert calls == [] and "steps: 4 there, 6 now" in capsys.readouterr().err
    assert learn_chain.main([*argv, "--resume"]) == 0
    assert calls == ["pivot-agentic/agentic", "agentic"]
    summary = json.loads((out / "learn_chain_summary.json").read_text())
    assert summary["stages_read_back"][:3] == ["tasks", "teacher trajectories on the train tasks and their decision "
                                               "points (the pivot arms' data)", "the start on the held-out tasks "
                                               "(step 0 of every arm)"]
    assert len(summary["stages_read_back"]) == 4 and summary["stages_read_back"][3].startswith("arm pivot:")
    assert summary["teacher"] == {"trials": 4, "solved": 1.0} and summary["pivots"] == {"written": 8}
    assert summary["heldout_pass_rate"]["pivot-agentic"] == [[0, 0.2], [2, 0.3], [3, 0.3], [4, 0.3]]
    assert "(4 stages read back, --resume)" in capsys.readouterr().out
