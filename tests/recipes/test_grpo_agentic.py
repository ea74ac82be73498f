"""Agentic GRPO (recipes/grpo_agentic.py) with the real parts: generated Harbor tasks, episodes in the local sandbox,
the tasks' tests as reward, TRL's environment_factory. The oracle episodes of the bash-tool harness are real
episodes; a tiny model trained on them calls the tool, and what the tool printed is never trained."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import AGENTIC_FAMILIES as FAMILIES
from conftest import REPO, agentic_config, launch, learn_recipe

from harbor_tasks.generate import generate


def test_oracle_episodes_are_solved_chats_with_real_tool_output(tmp_path):
    from episodes.oracle import main as collect

    generate(tmp_path / "tasks", 21, 6, FAMILIES + ["rename-ext", "set-perms"])
    out = tmp_path / "oracle.jsonl"
    assert collect(["--tasks", str(tmp_path / "tasks"), "--collect", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 6 and all(r["metadata"]["reward"] == 1.0 for r in records)
    rename = next(r for r in records if r["metadata"]["task"].startswith("rename-ext"))
    calls = [json.loads(m["tool_calls"][0]["function"]["arguments"])["command"] for m in rename["messages"]
             if m.get("tool_calls")]
    assert calls[0].startswith("cd ") and " && for f in " in calls[0]  # each call is a new shell
    assert records[0]["tools"][0]["function"]["name"] == "bash"
    assert all(m["content"] for m in records[0]["messages"] if m["role"] == "tool")


def test_the_reward_logs_the_start_and_verify_seconds_of_its_own_episodes(tmp_path):
    """Per call (a generation batch): p50, p90 and max of the batch's sandbox start and verify seconds, beside the
    run's mean start seconds (the key that was there before)."""
    from common.stats import percentile
    from episodes.local import EpisodeLimits, EpisodeStats, TaskEnvironment
    from trainers.agentic import task_tests_reward

    tasks = generate(tmp_path / "tasks", 21, 6, FAMILIES)
    stats = EpisodeStats()
    reward = task_tests_reward(stats)
    envs = [TaskEnvironment(EpisodeLimits(), stats) for _ in range(3)]
    for batch in (tasks[:3], tasks[3:]):
        for env, task in zip(envs, batch):
            env.reset(task_dir=str(task))
        logged = {}
        assert reward(envs, log_metric=logged.__setitem__) == [0.0, 0.0, 0.0]
        for key, values in (("sandbox_start_seconds", stats.start_seconds[-3:]),
                            ("verify_seconds", stats.verify_seconds[-3:])):
            assert len(values) == 3 and logged[f"episodes/{key}_max"] == max(values)
            assert logged[f"episodes/{key}_p50"] == percentile(sorted(values), 50) == sorted(values)[1]
            assert logged[f"episodes/{key}_p90"] == max(values)
        assert logged["episodes/sandbox_start_seconds"] == stats.as_dict()["sandbox_start_seconds_mean"]
    assert len(stats.start_seconds) == 6


def test_the_agentic_summary_goes_into_an_active_wandb_run(tmp_path):
    import wandb

    from trainers.summary import write_summary

    wandb.init(mode="offline", dir=str(tmp_path), project="terminal-recipes-test")
    try:
        write_summary({"output_dir": str(tmp_path / "out"), "tasks": 2, "episodes": 8, "masked_by_kind": {}})
        assert wandb.run.summary["data/episodes"] == 8
    finally:
        wandb.finish()
        wandb.teardown()  # else its service stays up and $WANDB_SERVICE sends every later run of the suite to it
    assert json.loads((tmp_path / "out" / "run_summary.json").read_text())["episodes"] == 8


@pytest.mark.slow
def test_the_embedded_default_runs_episodes_end_to_end(tmp_path):
    """The embedded default, plus evals on save: the callback scores checkpoint-2 on held-out generated tasks with
    the config's eval_agent, bash-tool, the harness the policy is trained in."""
    held_out = tmp_path / "held-out"
    generate(held_out, 12, 2, FAMILIES)  # seed 12: not the config's generate_seed (11)
    config = agentic_config(tmp_path, save_strategy="steps", save_steps=2, eval_suites=[str(held_out)],
                            eval_max_tokens=32, eval_max_turns=2)
    run = launch("recipes/grpo_agentic.py", config, tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((tmp_path / "grpo-agentic" / "run_summary.json").read_text())
    assert summary["tasks"] == 8 and summary["global_step"] == 2
    assert summary["episodes"] == 8 and summary["scored"] + summary["masked"] == 8 and summary["masked_by_kind"] == {}
    assert summary["sandbox_start_seconds_mean"] is not None and "agentic GRPO (bash-tool): 2 steps on 8 tasks" in run.stdout
    assert len(list((tmp_path / "tasks").iterdir())) == 8  # generated with the config's seed
    results = json.loads((tmp_path / "grpo-agentic" / "checkpoint-2" / "eval_results.json").read_text())
    assert results["agent"] == "bash-tool" and results["global_step"] == 2 and results["suite"] == str(held_out)
    assert results["metrics"]["n_trials"] == 2 and all(task["reward"] is not None for task in results["tasks"])
    trajectories = list(Path(results["harbor_job_dir"]).glob("*/agent/trajectory.json"))
    assert len(trajectories) == 2 and all(json.loads(t.read_text())["agent"]["name"] == "bash-tool"
                                          for t in trajectories)


def test_a_task_folder_that_is_not_there_is_one_clear_error(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(agentic_config(tmp_path, generate_seed=None)))
    run = subprocess.run([sys.executable, "recipes/grpo_agentic.py", "--config", str(path)], cwd=REPO,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2 and f"task_dirs: {tmp_path / 'tasks'} is not a folder" in run.stderr


def test_held_out_tasks_are_generated_from_a_seed_the_train_tasks_never_use(tmp_path):
    from common.errors import ConfigError
    from trainers.agentic import AgenticTaskArguments, check_held_out, prepare_tasks

    args = AgenticTaskArguments(task_dirs=[str(tmp_path / "train")], generate_seed=2, generate_n=6,
                                generate_families=["count-lines", "sum-numbers"], heldout_dir=str(tmp_path / "held"),
                                heldout_seed=1002, heldout_n=4)
    assert len(prepare_tasks(args)) == 6
    held = sorted(p.name for p in (tmp_path / "held").iterdir())
    assert held == ["count-lines-1002-0", "count-lines-1002-2", "sum-numbers-1002-1", "sum-numbers-1002-3"]
    seeds = check_held_out(args.task_dirs, [str(tmp_path / "held"), "builtin:terminal"])
    assert seeds == {"train_seeds": {2: 6}, "eval_seeds": {str(tmp_path / "held"): {1002: 4}}}
    with pytest.raises(ConfigError, match="seed 2, which the train tasks use too"):
        check_held_out(args.task_dirs, [str(tmp_path / "train")])
    with pytest.raises(ConfigError, match="never used in training"):
        prepare_tasks(AgenticTaskArguments(task_dirs=[str(tmp_path / "train")], generate_seed=5, heldout_seed=5,
                                           heldout_dir=str(tmp_path / "other")))
    with pytest.raises(ConfigError, match="heldout_dir is not"):
        prepare_tasks(AgenticTaskArguments(task_dirs=[str(tmp_path / "train")], heldout_seed=9))


def test_a_task_folder_generated_with_other_settings_is_refused_not_trained_on(tmp_path):
    from common.errors import ConfigError
    from trainers.agentic import AgenticTaskArguments, prepare_tasks

    def args(seed, n=4, held=1002):
        return AgenticTaskArguments(task_dirs=[str(tmp_path / "train")], generate_seed=seed, generate_n=n,
                                    generate_families=["count-lines", "sum-numbers"],
                                    heldout_dir=str(tmp_path / "held"), heldout_seed=held, heldout_n=2)

    first = prepare_tasks(args(2))
    assert prepare_tasks(args(2)) == first  # the same settings: the folder is used as it is
    with pytest.raises(ConfigError, match=r"task_dirs\[0\]: .*train holds tasks of another generation than seed 11"):
        prepare_tasks(args(11))  # a config whose seed changed since: once, the old tasks were silently trained on
    with pytest.raises(ConfigError, match="seed 2, n 6"):
        prepare_tasks(args(2, n=6))
    with pytest.raises(ConfigError, match="heldout_dir: .*held holds tasks of another generation than seed 1003"):
        prepare_tasks(args(2, held=1003))
    assert sorted(p.name for p in (tmp_path / "train").iterdir()) == [p.name for p in first]


def test_the_reward_logs_the_pass_rate_per_task_family(tmp_path):
    from episodes.local import EpisodeLimits, EpisodeStats, TaskEnvironment
    from trainers.agentic import task_tests_reward

    tasks = generate(tmp_path / "tasks", 21, 4, ["write-value", "count-lines"])
    stats = EpisodeStats()
    reward = task_tests_reward(stats)
    envs = [TaskEnvironment(EpisodeLimits(), stats) for _ in tasks]
    for env, task in zip(envs, tasks):
        env.reset(task_dir=str(task))
    from harbor_tasks.solution import bash_tool_commands

    for command in bash_tool_commands((tasks[1] / "solution" / "solve.sh").read_text()):  # count-lines-21-1, solved
        envs[1].bash(command)
    logged = {}
    assert reward(envs, log_metric=logged.__setitem__, task_dir=[str(t) for t in tasks]) == [0.0, 1.0, 0.0, 0.0]
    assert logged["episodes/pass_rate/count-lines"] == 0.5 and logged["episodes/pass_rate/write-value"] == 0.0
    assert reward.by_family == {"count-lines": {"scored": 2, "passed": 1}, "write-value": {"scored": 2, "passed": 0}}


def test_the_completions_table_holds_episode_transcripts_wandb_accepts():
    """TRL's completions table as W&B gets it: rows whose episodes call the tool and rows whose do not. W&B refuses
    the raw message lists (the run stopped at its first log); the transcripts go in."""
    import pandas as pd
    import wandb

    from trainers.agentic import episode_transcript

    called = [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "bash", "arguments": {"command": "wc -l < data/a.log > n.txt"}}}]},
        {"role": "tool", "name": "bash", "content": "(no output)"}, {"role": "assistant", "content": "Done."}]
    answered = [{"role": "assistant", "content": "Done."}]
    raw = pd.DataFrame({"step": [1, 1], "completion": [answered, called], "task_tests": [0.0, 1.0]})
    with pytest.raises(TypeError, match="incompatible types"):
        wandb.Table(dataframe=raw)
    table = raw.assign(completion=raw["completion"].map(episode_transcript))
    assert wandb.Table(dataframe=table).data[1][1] == ("[assistant -> bash] wc -l < data/a.log > n.txt\n"
                                                       "[tool] (no output)\n[assistant] Done.")


def test_the_learning_start_config_parses_through_the_recipes_parser():
    """configs/grpo/agentic-learn.yaml: the bash-tool learning run's final model, train and held-out tasks of
    disjoint seeds, step 0 and every save scored on the held-out ones in the harness it trains."""
    from trl import GRPOConfig, ModelConfig

    from trainers.agentic import AgenticTaskArguments
    from trainers.eval_callback import EvalArguments
    from trainers.recipe_config import parse_config

    config = REPO / "configs" / "grpo" / "agentic-learn.yaml"
    learn = yaml.safe_load((REPO / "configs" / "sft" / "learn-bash.yaml").read_text())
    saved = dict(os.environ)
    try:
        tasks, grpo, model, evals = parse_config((AgenticTaskArguments, GRPOConfig, ModelConfig, EvalArguments),
                                                 config, ["--config", str(config)])
    finally:
        os.environ.clear()
        os.environ.update(saved)
    assert model.model_name_or_path == learn["output_dir"]  # the learning run's final model
    assert tasks.generate_seed is not None and tasks.heldout_seed is not None
    assert tasks.generate_seed != tasks.heldout_seed and tasks.heldout_dir in evals.eval_suites
    defaults = learn_recipe().parse_args([])  # the learning run's seeds: neither side here may reuse them
    assert {tasks.generate_seed, tasks.heldout_seed}.isdisjoint({defaults.train_seed, defaults.eval_seed})
    assert tasks.generate_families and set(tasks.heldout_families or tasks.generate_families) <= set(
        tasks.generate_families)
    from trainers.agentic import check_eval_agent

    assert tasks.harness == "bash-tool" and check_eval_agent(tasks, evals.eval_agent, str(config), []) == "bash-tool"
    assert grpo.eval_on_start and grpo.save_strategy == "steps"
    assert evals.eval_max_turns == grpo.max_tool_calling_iterations + 1  # one harness: turns as the trainer's
    assert evals.eval_temperature == 0.0 and grpo.temperature > 0
    assert (grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps) % grpo.num_generations == 0
    tasks_per_step = grpo.per_device_train_batch_size * grpo.gradient_accumulation_steps // grpo.num_generations
    assert tasks.generate_n >= grpo.max_steps * tasks_per_step  # no train task drawn twice: every step on new tasks
    assert grpo.output_dir == "outputs/grpo-agentic-learn" and grpo.use_cpu
    # the episode limit counts the sandbox's seconds unless the run asks for the wall, and a bad clock is one line
    assert tasks.limits().episode_clock == "environment"
    tasks.episode_clock = "wall"
    assert tasks.limits().episode_clock == "wall"
    tasks.episode_clock = "cpu"
    from common.errors import ConfigError

    with pytest.raises(ConfigError, match="episode limits: episode_clock 'cpu': one of environment, wall"):
        tasks.limits()


@pytest.mark.slow
def test_tool_output_carries_no_loss(tmp_path):
    """SFT the tiny model on oracle episodes until it calls the tool, then take one GRPO step and decode what the
    trainer trains: the policy's turns, never the tool responses between them."""
    from episodes.oracle import main as collect

    generate(tmp_path / "tasks", 21, 8, FAMILIES)
    assert collect(["--tasks", str(tmp_path / "tasks"), "--collect", str(tmp_path / "oracle.jsonl")]) == 0
    sft = yaml.safe_load((REPO / "configs" / "sft" / "tiny.yaml").read_text())
    sft.update(datasets=[{"path": str(tmp_path / "oracle.jsonl"), "min_reward": 1.0}], eval_fraction=0.0,
               eval_suites=[], output_dir=str(tmp_path / "sft"), max_length=1024, per_device_train_batch_size=1,
               max_steps=150, learning_rate=5e-3, save_strategy="no", eval_strategy="no", report_to=[], logging_steps=50)
    run = launch("recipes/sft.py", sft, tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from episodes.local import EpisodeStats
    from trainers.agentic import AgenticTaskArguments, environment_factory, task_dataset, task_tests_reward

    captured = []

    class Capturing(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            output = super()._generate_and_score_completions(inputs)
            captured.append(output)
            return output

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "sft", padding_side="left")
    stats = EpisodeStats()
    args = GRPOConfig(output_dir=str(tmp_path / "grpo"), use_cpu=True, report_to=[], max_steps=1, num_generations=4,
                      per_device_train_batch_size=4, max_completion_length=256, max_tool_calling_iterations=3,
                      temperature=0.3, chat_template_kwargs={"enable_thinking": False}, save_strategy="no",
                      logging_steps=1, beta=0.0)
    trainer = Capturing(model=str(tmp_path / "sft"), reward_funcs=[task_tests_reward(stats)], args=args,
                        train_dataset=task_dataset(sorted((tmp_path / "tasks").iterdir())), processing_class=tokenizer,
                        environment_factory=environment_factory(AgenticTaskArguments(task_dirs=[]), stats))
    trainer.train()
    assert stats.tool_calls > 0, "the SFT'd policy made no tool call: nothing to check"
    output = captured[0]
    checked = 0
    for ids, completion_mask, tool_mask in zip(output["completion_ids"], output["completion_mask"], output["tool_mask"]):
        trained = tokenizer.decode([t for t, c, m in zip(ids.tolist(), completion_mask, tool_mask) if c and m])
        untrained = tokenizer.decode([t for t, c, m in zip(ids.tolist(), completion_mask, tool_mask) if c and not m])
        assert "<tool_response>" not in trained and "</tool_response>" not in trained
        if "<tool_call>" in trained:
            assert "<tool_response>" in untrained  # the tool answered, and its output is in the untrained part
            checked += 1
    assert checked > 0
    assert stats.as_dict()["episodes"] == 4 and stats.as_dict()["masked"] == 0


def test_the_harness_sets_the_eval_agent_and_a_conflicting_one_is_refused(tmp_path):
    from common.errors import ConfigError
    from episodes.local import EpisodeStats
    from episodes.remote import RemoteTerminusEnvironment
    from trainers.agentic import AgenticTaskArguments, check_eval_agent, environment_factory

    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"harness": "terminus-2", "task_dirs": ["x"]}))
    terminus = AgenticTaskArguments(task_dirs=["x"], harness="terminus-2")
    # the eval setting's default (terminus-2) or any default follows the harness; only an explicit other one fails
    assert check_eval_agent(terminus, "bash-tool", str(config), []) == "terminus-2"
    assert check_eval_agent(AgenticTaskArguments(task_dirs=["x"]), "terminus-2", str(config), []) == "bash-tool"
    with pytest.raises(ConfigError, match="eval_agent bash-tool but harness terminus-2"):
        check_eval_agent(terminus, "bash-tool", str(config), ["--eval_agent", "bash-tool"])
    config.write_text(yaml.safe_dump({"harness": "terminus-2", "eval_agent": "bash-tool"}))
    with pytest.raises(ConfigError, match="drop eval_agent"):
        check_eval_agent(terminus, "bash-tool", str(config), [])
    with pytest.raises(ValueError, match="harness: 'xml' is not one of bash-tool, terminus-2"):
        AgenticTaskArguments(task_dirs=["x"], harness="xml")
    # Terminus-2 episodes run on episode servers too (episodes.remote.RemoteTerminusEnvironment)
    on_servers = AgenticTaskArguments(task_dirs=["x"], harness="terminus-2", sandbox_urls=["http://cpu1:8200"])
    assert on_servers.harness == "terminus-2" and on_servers.sandbox_urls == ["http://cpu1:8200"]
    assert environment_factory(on_servers, EpisodeStats()).func is RemoteTerminusEnvironment


def test_the_embedded_default_runs_in_the_terminus_2_harness(tmp_path):
    """`make grpo-agentic ARGS="--harness terminus-2"` on the embedded default, plus an eval on save: Terminus-2
    episodes run (the untrained model's answers are parse errors, counted), the summary names the harness, and the
    checkpoint is scored by Harbor's terminus-2, the harness it was trained in. The untrained model's answers run
    past `eval_max_tokens`, and Harbor's Terminus-2 asks again without counting a turn until the agent timeout: 0.1
    of the tasks' 180 s (the trials count, scored 0)."""
    held_out = tmp_path / "held-out"
    generate(held_out, 12, 2, FAMILIES)
    config = agentic_config(tmp_path, max_steps=1, save_strategy="steps", save_steps=1, eval_suites=[str(held_out)],
                            eval_max_tokens=32, eval_max_turns=2, eval_agent_timeout_multiplier=0.1,
                            max_completion_length=96)
    run = launch("recipes/grpo_agentic.py", config, tmp_path, "--harness", "terminus-2")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    summary = json.loads((tmp_path / "grpo-agentic" / "run_summary.json").read_text())
    assert summary["harness"] == "terminus-2" and "agentic GRPO (terminus-2): 1 steps" in run.stdout
    assert summary["episodes"] == 4 and summary["scored"] + summary["masked"] == 4 and summary["masked_by_kind"] == {}
    assert summary["tool_calls"] == 0 and "responses Terminus-2 could not parse" in run.stdout  # no bash tool
    results = json.loads((tmp_path / "grpo-agentic" / "checkpoint-1" / "eval_results.json").read_text())
    assert results["agent"] == "terminus-2" and results["metrics"]["n_trials"] == 2


def parse_agentic_config(config: Path):
    """(tasks, grpo, model, evals) of an agentic GRPO config as the recipe parses it (its env: restored after)."""
    from trl import GRPOConfig, ModelConfig

    from trainers.agentic import AgenticTaskArguments
    from trainers.eval_callback import EvalArguments
    from trainers.recipe_config import parse_config

    saved = dict(os.environ)
    try:
        return parse_config((AgenticTaskArguments, GRPOConfig, ModelConfig, EvalArguments), config,
                            ["--config", str(config)])
    finally:
        os.environ.clear()
        os.environ.update(saved)


def test_the_terminus_2_learning_config_trains_and_scores_one_harness():
    from trainers.agentic import check_eval_agent

    config = REPO / "configs" / "grpo" / "agentic-terminus-learn.yaml"
    learn = yaml.safe_load((REPO / "configs" / "sft" / "learn.yaml").read_text())
    tasks, grpo, model, evals = parse_agentic_config(config)
    assert model.model_name_or_path.startswith(learn["output_dir"] + "/checkpoint-")  # make learn's Terminus-2 student
    assert tasks.harness == "terminus-2" and check_eval_agent(tasks, evals.eval_agent, str(config), []) == "terminus-2"
    assert evals.eval_max_turns == grpo.max_tool_calling_iterations + 1 and evals.eval_temperature == 0.0
    assert tasks.generate_seed != tasks.heldout_seed and tasks.heldout_dir in evals.eval_suites
    assert evals.eval_max_tokens <= grpo.max_completion_length  # a response's cap (the evals') fits in an episode


def test_the_deep_config_trains_from_the_deep_sft_run_on_deep_tasks_and_scores_all_deep_families_as_it_did():
    from harbor_tasks.families import select
    from trainers.agentic import check_eval_agent

    config = REPO / "configs" / "grpo" / "agentic-terminus-deep.yaml"
    learn = yaml.safe_load((REPO / "configs" / "sft" / "learn-deep.yaml").read_text())
    tasks, grpo, model, evals = parse_agentic_config(config)
    assert model.model_name_or_path == learn["output_dir"]  # make learn ARGS="--families deep"'s final model
    trained, scored = select(tasks.generate_families), select(tasks.heldout_families)
    assert scored == select("deep") and trained and set(trained) <= set(scored)
    assert tasks.harness == "terminus-2" and check_eval_agent(tasks, evals.eval_agent, str(config), []) == "terminus-2"
    assert evals.eval_max_turns == grpo.max_tool_calling_iterations + 1
    for key in ("eval_max_turns", "eval_max_tokens", "eval_agent_timeout_multiplier", "eval_temperature"):
        assert getattr(evals, key) == learn[key], key
    assert tasks.generate_seed != tasks.heldout_seed and tasks.heldout_dir in evals.eval_suites
