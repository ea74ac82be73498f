"""Pivot GRPO from the learning run's student: does scoring its next action against a teacher's raise held-out scores?

    make learn                    # the start: outputs/learn (Terminus-2 harness)
    make learn-pivot              # = python recipes/learn_pivot.py; everything in outputs/learn-pivot/
    python recipes/learn_pivot.py [--config configs/grpo/pivot-learn.yaml] [--seed 0] [--start DIR]
                                  [--train_tasks 160] [--heldout_tasks 30] [--families a,b,...] [--threshold 1.0]
                                  [--reward string|functional] [--profile K [--max_mean M]]
                                  [--ablation | --arms string-unfiltered,functional-profiled] [--resume]

Stage one of NVIDIA's two-stage recipe (pivot RL, then end-to-end agentic RL): at each decision point of a teacher's
verified trajectory the policy writes the next Terminus-2 action, and string-only terminus_judge scores it against
the teacher's. `--seed N` moves the train tasks (seed 3+N), the held-out tasks (1003+N) and the trainer's seed
(42+N) together; the learning run used 1 and 1001, agentic GRPO 2 and 1002. PivotRL's two parts are flags: `--reward
functional` scores each action by its effect in the task (terminus_functional), `--profile K` keeps the train rows
whose K samples of the start vary (`trainers.data profile`); `--ablation` trains {string, functional} x {unfiltered,
profiled} from the same tasks and start, each arm in its own folder, and `--arms A,B` only the arms named. Seed 0
writes the config's output_dir, seed N that folder with `-seedN`, each replaced on every run (`--resume`, with the same
arguments: kept, finished stages read back from its stages.json, a GRPO arm going on from its last save):
  tasks/train, tasks/heldout         procedural Harbor tasks of the families (harbor_tasks/generate.py)
  teacher/train, teacher/heldout     the scripted teacher in Terminus-2 (eval.scripted_teacher --collect)
  pivots/train.jsonl, heldout.jsonl  decision points (python -m trainers.data pivots; -functional: for that reward)
  pivots/train.profiled.jsonl        the rows kept by profiling (--profile K)
  <reward>-<filter>/                 with --ablation or --arms: each arm's checkpoints, curve and summary, as below
  checkpoint-N/                      GRPO checkpoints (recipes/grpo.py with the config), checkpoint-0 the start, each
                                     scored on tasks/heldout (Terminus-2, greedy) and on pivots/heldout.jsonl
  curve.png, learn_pivot_summary.json   eval.compare's plot; seeds, counts, rewards, pass rates, timings, commands
"""

import argparse
import json
import shutil
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run as a script (python recipes/learn_pivot.py), like the other recipes

from common.errors import ConfigError  # noqa: E402
from eval.compare import collect, plot, print_table  # noqa: E402
from harbor_tasks.folder import task_seeds  # noqa: E402
from trainers.learning_runs import PIVOT_REWARDS  # noqa: E402
from trainers.learning_runs import (Stages, build_pivots, checked_families, curve, fresh_tasks,  # noqa: E402
                                    pivot_reward_args, profile_pivots, run_seeds)
from trainers.learning_runs import stage as run_stage  # noqa: E402
from trainers.recipe_config import exit_on_user_error  # noqa: E402

DEFAULT_CONFIG = REPO / "configs" / "grpo" / "pivot-learn.yaml"
TRAIN_SEED, HELDOUT_SEED, TRAINER_SEED = 3, 1003, 42  # + --seed
# what a run's outputs depend on: --resume refuses a folder made with other values
OUTPUT_ARGUMENTS = ("config", "seed", "train_tasks", "heldout_tasks", "threshold", "reward", "profile", "keep",
                    "max_mean", "ablation", "arms", "grpo_args")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python recipes/learn_pivot.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the GRPO config (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0, help="moves train, held-out and trainer seeds together")
    parser.add_argument("--start", help="the checkpoint GRPO starts from (default: the config's model_name_or_path)")
    parser.add_argument("--train_tasks", type=int, default=160, help="train tasks (default: %(default)s)")
    parser.add_argument("--heldout_tasks", type=int, default=30, help="held-out tasks (default: %(default)s)")
    parser.add_argument("--families", help="comma-separated families (default: the config's `families`)")
    parser.add_argument("--threshold", type=float, default=1.0,
                        help="the rows' keystroke similarity for reward 1, train and held-out (default: %(default)s, "
                             "exact: a wrong digit or name fails these tasks yet is 0.9 similar; NVIDIA's set: 0.9)")
    parser.add_argument("--reward", default="string", choices=sorted(PIVOT_REWARDS), help=(
        "string: terminus_judge's keystroke similarity to the teacher's action; functional: terminus_functional, the "
        "action judged by its effect in the task's sandbox (default: %(default)s)"))
    parser.add_argument("--profile", type=int, default=0, metavar="K", help=(
        "profile the train rows with K samples of the start each and train on those whose rewards vary (PivotRL's "
        "filter; 0: train on every row) (default: %(default)s)"))
    parser.add_argument("--keep", default="mixed", choices=("mixed", "hard"), help=(
        "with --profile: mixed keeps rows whose rewards vary, hard every row below --max_mean (default: %(default)s)"))
    parser.add_argument("--max_mean", type=float, default=1.0, help="with --profile: kept rows' mean reward is below "
                        "this (default: %(default)s)")
    parser.add_argument("--ablation", action="store_true", help=(
        "train the four arms {string, functional} x {unfiltered, profiled (K = --profile, else 8)} one after the "
        "other from the same tasks and start"))
    parser.add_argument("--arms", type=arm_names, help=(
        "comma-separated arms of --ablation's grid to train, e.g. string-unfiltered,functional-profiled (the "
        "three-seed comparison of docs/grpo.md); each in its own folder as with --ablation"))
    parser.add_argument("--resume", action="store_true", help="go on from where a run with the same arguments "
                        "stopped: its finished stages read back (stages.json), a GRPO arm from its last save")
    parser.add_argument("--teacher_concurrency", type=int, default=16)
    parser.add_argument("--accelerate_config", default="configs/accelerate/cpu.yaml")
    parser.add_argument("grpo_args", nargs="*", help="more `--key value` for recipes/grpo.py, after `--`")
    args = parser.parse_args(argv)
    if args.ablation and args.arms:
        parser.error("--ablation trains all four arms; --arms names some of them: pass one of the two")
    return args


def arm_name(reward: str, k: int) -> str:
    """An arm's name and folder: its reward and whether its rows were profiled (K > 0)."""
    return f"{reward}-{'profiled' if k else 'unfiltered'}"


ARMS = [arm_name(reward, k) for reward in PIVOT_REWARDS for k in (0, 1)]  # --ablation's grid, in its order


def arm_names(value: str) -> list[str]:
    """--arms: known arm names, in the grid's order."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in ARMS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"unknown arm {', '.join(unknown) or repr(value)}; "
                                         f"the arms: {', '.join(ARMS)}")
    return [name for name in ARMS if name in names]


def planned_arms(args: argparse.Namespace) -> list[tuple[str, int]]:
    """The arms to train as (reward, K): --ablation's four, --arms' named ones (K = --profile, else 8), else the
    one arm of --reward and --profile."""
    if not (args.ablation or args.arms):
        return [(args.reward, args.profile)]
    return [(reward, k) for reward in PIVOT_REWARDS for k in (0, args.profile or 8)
            if args.ablation or arm_name(reward, k) in args.arms]


def train_rewards(out: Path) -> list[tuple[int, float]]:
    """The rollouts' mean reward per logged step (the last checkpoint's trainer_state.json): the train side."""
    from common.checkpoints import last_complete_checkpoint

    last = last_complete_checkpoint(str(out))
    state = Path(last) / "trainer_state.json" if last else None
    if state is None or not state.is_file():
        return []
    return [(entry["step"], round(entry["reward"], 4)) for entry in json.loads(state.read_text())["log_history"]
            if "reward" in entry]


def first_action_rewards(out: Path, block: int = 10) -> list[float]:
    """The rollouts' mean reward on first actions (a prompt with no terminal output yet), per ``block`` steps, from
    TRL's completions logs: where the signal is (the task_complete turns score ~0.9 from the start)."""
    import pyarrow.parquet as pq

    sums: dict[int, list[float]] = {}
    for path in sorted((out / "completions").glob("*.parquet")):
        table = pq.read_table(path).to_pydict()
        for step, prompt, reward in zip(table["step"], table["prompt"], table["nemo_gym_verify"]):
            if "New Terminal Output" not in str(prompt) and reward is not None:
                total = sums.setdefault((step - 1) // block, [0.0, 0])
                total[0], total[1] = total[0] + reward, total[1] + 1
    return [round(total / n, 3) for _, (total, n) in sorted(sums.items())]


@exit_on_user_error
def main(argv=None) -> int:
    args = parse_args(argv)
    try:
        config = yaml.safe_load(args.config.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"--config {args.config}: {err}") from None
    out = Path(config["output_dir"] + (f"-seed{args.seed}" if args.seed else ""))
    start = args.start or config["model_name_or_path"]
    if not (REPO / start / "config.json").is_file() and not (Path(start) / "config.json").is_file():
        raise ConfigError(f"the start {start} is not a checkpoint folder (no config.json); run `make learn` first, "
                          "or pass --start DIR")
    families = checked_families(args.families, config.get("families"))
    seeds = run_seeds(TRAIN_SEED, HELDOUT_SEED, TRAINER_SEED, args.seed)
    timings: dict[str, float] = {}
    started = time.monotonic()
    arguments = {key: getattr(args, key) for key in OUTPUT_ARGUMENTS} | {"config": str(args.config), "start": start,
                                                                         "families": families}
    stage = Stages("learn-pivot", out, timings, arguments, args.resume)

    def tasks():
        fresh_tasks({out / "tasks" / side: (seeds[side], getattr(args, f"{side}_tasks"))
                     for side in ("train", "heldout")}, families)

    def teacher_trajectories():
        from eval.scripted_teacher import collect as collect_teacher

        shutil.rmtree(out / "teacher", ignore_errors=True)
        jobs = {side: collect_teacher(out / "tasks" / side, out / "teacher" / side, args.teacher_concurrency)
                for side in ("train", "heldout")}
        return {side: {"metrics": job["metrics"], "harbor_job_dir": str(job["harbor_job_dir"])}
                for side, job in jobs.items()}

    grid = args.ablation or bool(args.arms)  # arms in their own folders, their curves on one plot
    arms = planned_arms(args)

    def decision_points():
        pivots = {}
        for reward in sorted({reward for reward, _ in arms}):
            suffix = "" if reward == "string" else f"-{reward}"
            for side in ("train", "heldout"):
                pivots[f"{side}{suffix}"] = build_pivots(teacher[side]["harbor_job_dir"],
                                                         out / "pivots" / f"{side}{suffix}.jsonl", args.threshold,
                                                         PIVOT_REWARDS[reward][0])
        return pivots

    stage("tasks", tasks)
    teacher = stage("teacher trajectories (scripted teacher, Terminus-2 in the local sandbox)", teacher_trajectories)
    pivots = stage("decision points (python -m trainers.data pivots)", decision_points)

    results = {}
    for reward, k in arms:
        arm_out = out / arm_name(reward, k) if grid else out
        results[arm_out.name] = train_arm(args, config, reward, k, start, seeds, out, arm_out, timings, stage,
                                          f"{arm_out.name}: " if grid else "")
    if grid:
        plot(collect([out / name for name in results]), out / "curve.png")

    summary = {
        "start": start, "seed": args.seed, "seeds": seeds, "families": families, "threshold": args.threshold,
        "task_seeds": {side: task_seeds(out / "tasks" / side) for side in ("train", "heldout")},
        "teacher": {side: {"trials": t["metrics"].get("n_trials"), "solved": t["metrics"].get("mean_reward"),
                           "job": t["harbor_job_dir"]} for side, t in teacher.items()},
        "pivots": pivots, **(results[out.name] if not grid else {"arms": results}),
        "timings_s": timings, "total_s": round(time.monotonic() - started, 1), "stages_read_back": stage.read_back,
        "command": " ".join(["python recipes/learn_pivot.py", *(argv if argv is not None else sys.argv[1:])]),
    }
    (out / "learn_pivot_summary.json").write_text(json.dumps(summary, indent=2))
    resumed = f"; {len(stage.read_back)} stages read back, --resume" if stage.read_back else ""
    print(f"\n=== learn-pivot: done in {summary['total_s'] / 60:.1f} min{resumed} ("
          + ", ".join(f"{name.split(' (')[0]} {seconds:.0f} s" for name, seconds in timings.items()) + ")")
    print(f"start {start}; seeds train {seeds['train']}, held-out {seeds['heldout']}, trainer {seeds['trainer']}; "
          f"families {','.join(families)}")
    print("decision points: " + ", ".join(f"{side} {p['rows']['written']} from {p['rows']['tasks']} tasks"
                                          for side, p in pivots.items()))
    for name, arm in results.items():
        label = f"{name}: " if grid else ""
        if arm.get("profile"):
            print(f"{label}profiled: {arm['profile']['kept']} of {arm['profile']['rows']} train rows kept "
                  f"(dropped {arm['profile']['dropped']})")
        print(f"{label}held-out pass rate by step: " + ", ".join(f"{s}: {v}" for s, v in arm["heldout_pass_rate"]))
        print(f"{label}held-out decision-point reward by step: "
              + ", ".join(f"{s}: {v}" for s, v in arm["heldout_decision_point_reward"]))
    print(f"curve {out / 'curve.png'}, summary {out / 'learn_pivot_summary.json'}")
    return 0


def train_arm(args, config: dict, reward: str, k: int, start: str, seeds: dict, out: Path, arm_out: Path,
              timings: dict, stage: Stages, label: str = "") -> dict:
    """One arm: the train rows for `reward` (profiled with the start when `k`), GRPO with that reward, the start and
    every save scored on the held-out tasks and decision points, the curve; the arm's part of the summary. `label`
    names the arm in its stages' names (one name per stage: --resume reads stages back by name)."""
    environment = PIVOT_REWARDS[reward][0]
    suffix = "" if reward == "string" else f"-{reward}"
    rows, profile = out / "pivots" / f"train{suffix}.jsonl", None
    if k:
        profiled = out / "pivots" / f"train{suffix}.profiled.jsonl"
        profile = stage(f"{label}profiling the train rows ({reward} reward, K {k}, the start)",
                        partial(profile_pivots, rows, profiled, start, k, reward, config, args.keep, args.max_mean))
        rows = profiled

    heldout_tasks, heldout_pivots = str(out / "tasks" / "heldout"), str(out / "pivots" / f"heldout{suffix}.jsonl")
    command = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file", args.accelerate_config,
               "recipes/grpo.py", "--config", str(args.config), "--model_name_or_path", start,
               "--output_dir", str(arm_out), "--run_name", arm_out.name, "--seed", str(seeds["trainer"]),
               "--datasets", str(rows), "--eval_suites", heldout_tasks, heldout_pivots,
               *pivot_reward_args(reward), *args.grpo_args]

    def run_grpo():
        print(" ".join(command), flush=True)
        subprocess.run(command, cwd=REPO, check=True)  # on --resume it goes on from arm_out's last save

    stage(f"{label}pivot GRPO (recipes/grpo.py, {reward} reward), the start and every save scored on the held-out "
          "side", run_grpo)
    grpo = json.loads((arm_out / "run_summary.json").read_text())

    done = run_stage("learn-pivot", f"{label}curves (eval.compare)", timings)
    curves = collect([arm_out])
    print_table(curves)
    plot(curves, arm_out / "curve.png")
    done()
    return {"reward": reward, "environment": environment, "profile": profile,
            "train_rows": str(rows), "heldout_pass_rate": curve(curves, heldout_tasks),
            "heldout_decision_point_reward": curve(curves, heldout_pivots),
            "train_reward_by_step": train_rewards(arm_out),
            "first_action_reward_by_10_steps": first_action_rewards(arm_out),
            "grpo": {key: grpo.get(key) for key in ("train_prompts", "too_long_filtered", "verify_requests",
                                                    "global_step", "final_loss", "wall_seconds")},
            "grpo_command": " ".join(command)}


if __name__ == "__main__":
    sys.exit(main())
