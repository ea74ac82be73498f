"""The two-stage chain, measured: SFT -> pivot GRPO -> agentic GRPO against each stage alone, on held-out tasks.

    make learn                    # the start: outputs/learn/checkpoint-304 (the Terminus-2 learning run)
    make learn-chain              # = python recipes/learn_chain.py; everything in outputs/learn-chain/
    python recipes/learn_chain.py [--seed 0] [--start DIR] [--steps 30] [--train_tasks 160] [--heldout_tasks 30]
                                  [--families a,b,...] [--pivot_reward string|functional] [--profile K] [--resume]
                                  [-- --key value ...]   (GRPO keys for every arm)

Four arms from one start, on the same train and held-out tasks, in one harness (Terminus-2): `sft` (the start, no
GRPO), `pivot` (pivot GRPO on the scripted teacher's decision points, configs/grpo/pivot-learn.yaml), `agentic`
(agentic GRPO, Terminus-2 episodes, configs/grpo/agentic-terminus-learn.yaml) and `pivot-agentic` (the pivot arm's
save at half its steps, then agentic from it for the other half: the same total GRPO steps as the one-stage arms; the
pivot half is not re-run, it is the pivot arm's own first half). `--pivot_reward functional --profile 8` makes the
pivot stage PivotRL's (the action judged by its effect, the rows the start's samples disagree on), as in make
learn-pivot. Every arm is scored at step 0 (the start, once), at half its steps and at the end: Harbor's terminus-2,
greedy, on the held-out tasks. `--seed N` moves train tasks (6+N), held-out tasks (1006+N) and the trainers' seed
(42+N) together. Seed 0 writes outputs/learn-chain, seed N outputs/learn-chain-seedN, replaced on each run: tasks/,
teacher/, pivots/, sft/checkpoint-0, pivot/, agentic/, pivot-agentic/agentic/, chain.png and learn_chain_summary.json
(the table: held-out pass rate per arm and step). `--resume` (same arguments) keeps the folder and goes on from the
stage where a run stopped: finished stages are read back from stages.json, a GRPO arm from its last save.
docs/agentic-grpo.md#the-chain-sft-pivot-agentic.
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
sys.path.insert(0, str(REPO))  # run as a script (python recipes/learn_chain.py), like the other recipes

from common.errors import ConfigError  # noqa: E402
from common.harnesses import TERMINUS_2_HARNESS  # noqa: E402
from eval.compare import collect, plot  # noqa: E402
from eval.run import evaluate  # noqa: E402
from harbor_tasks.folder import task_seeds  # noqa: E402
from trainers.eval_callback import EvalArguments  # noqa: E402
from trainers.learning_runs import PIVOT_REWARDS  # noqa: E402
from trainers.learning_runs import (Stages, build_pivots, checked_families, curve, fresh_tasks,  # noqa: E402
                                    pivot_reward_args, profile_pivots, run_seeds)
from trainers.recipe_config import exit_on_user_error  # noqa: E402

PIVOT_CONFIG = REPO / "configs" / "grpo" / "pivot-learn.yaml"
AGENTIC_CONFIG = REPO / "configs" / "grpo" / "agentic-terminus-learn.yaml"
TRAIN_SEED, HELDOUT_SEED, TRAINER_SEED = 6, 1006, 42  # + --seed; learn 1/1001, agentic 2/1002, pivot 3/1003
ARMS = ("sft", "pivot", "agentic", "pivot-agentic")
# what a run's outputs depend on: --resume refuses a folder made with other values
OUTPUT_ARGUMENTS = ("seed", "start", "steps", "train_tasks", "heldout_tasks", "families", "threshold", "pivot_reward",
                    "profile", "grpo_args")
MODEL_FILES = ("config.json", "generation_config.json", "*.safetensors", "*.safetensors.index.json", "tokenizer*",
               "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python recipes/learn_chain.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="moves train, held-out and trainer seeds together")
    parser.add_argument("--start", default="outputs/learn/checkpoint-304", help="the SFT model every arm starts "
                        "from (default: %(default)s, `make learn`'s first save: partly right, as for make learn-pivot)")
    parser.add_argument("--steps", type=int, default=30, help="GRPO steps of each arm; the chain gives half (rounded "
                        "up) to its pivot stage, the rest to its agentic stage (default: %(default)s)")
    parser.add_argument("--train_tasks", type=int, default=160, help="train tasks (default: %(default)s)")
    parser.add_argument("--heldout_tasks", type=int, default=30, help="held-out tasks (default: %(default)s)")
    parser.add_argument("--families", help="comma-separated task families (default: the agentic config's "
                        "generate_families, those the start gets partly right; all where it names none)")
    parser.add_argument("--threshold", type=float, default=1.0, help="the decision points' keystroke similarity for "
                        "reward 1 (default: %(default)s, as make learn-pivot)")
    parser.add_argument("--pivot_reward", default="string", choices=sorted(PIVOT_REWARDS), help=(
        "the pivot stage's reward: string (terminus_judge's keystroke similarity to the teacher's action) or "
        "functional (terminus_functional: the action judged by its effect in the task's sandbox) (default: "
        "%(default)s)"))
    parser.add_argument("--profile", type=int, default=0, metavar="K", help=(
        "profile the pivot rows with K samples of the start each and train the pivot stage on those whose rewards "
        "vary (PivotRL's filter; 0: every row) (default: %(default)s)"))
    parser.add_argument("--out", help="the output folder (default: outputs/learn-chain, -seedN for --seed N)")
    parser.add_argument("--resume", action="store_true", help="go on from where a run with the same arguments "
                        "stopped: its finished stages read back (stages.json), a GRPO arm from its last save")
    parser.add_argument("--teacher_concurrency", type=int, default=16)
    parser.add_argument("--accelerate_config", default="configs/accelerate/cpu.yaml")
    parser.add_argument("grpo_args", nargs="*", help="more `--key value` for both GRPO recipes, after `--`")
    return parser.parse_args(argv)


def half_of(steps: int) -> int:
    """Where a stage of `steps` steps saves first, and the chain's first stage ends: half, rounded up, so that an odd
    count saves once before its end (15 steps: 8 and 15; rounded down it saved at 7, 14 and 15)."""
    return (steps + 1) // 2


def grpo_command(recipe: str, config: Path, start: str, out: Path, steps: int, seed: int, args, *extra) -> list:
    """One GRPO stage: `steps` steps from `start` into `out`, saved (and scored) at half its steps and at the end."""
    return [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file", args.accelerate_config,
            recipe, "--config", str(config), "--model_name_or_path", start, "--output_dir", str(out),
            "--run_name", f"{out.parent.name}-{out.name}", "--seed", str(seed), "--max_steps", str(steps),
            "--save_steps", str(half_of(steps)), "--eval_on_start", "false", *extra, *args.grpo_args]


def agentic_task_args(train: Path, heldout: Path, seeds: dict, n_train: int, n_heldout: int, families: list[str]):
    """The agentic stages' tasks: the chain's folders, with the generation that made them (seeds, counts, families),
    which grpo_agentic checks the folders against; its config's own generate_seed would refuse them."""
    return ["--task_dirs", str(train), "--generate_seed", str(seeds["train"]), "--generate_n", str(n_train),
            "--generate_families", *families, "--heldout_dir", str(heldout), "--heldout_seed", str(seeds["heldout"]),
            "--heldout_n", str(n_heldout), "--heldout_families", *families, "--eval_suites", str(heldout)]


def run_stage_command(command: list, log: Path) -> None:
    print(" ".join(command), flush=True)
    with open(log, "w") as stream:
        result = subprocess.run(command, cwd=REPO, stdout=stream, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise ConfigError(f"{' '.join(command[4:6])} failed (exit {result.returncode}); its log: {log}")


def arm_curve(dirs: list[tuple[Path, int]], suite: str) -> list[tuple[int, float | None]]:
    """The held-out pass rate by step of an arm run in stages: each (folder, step offset)."""
    points = []
    for folder, offset in dirs:
        points += [(step + offset, score) for step, score in curve(collect([folder]), suite) if step > 0]
    return points


def chain_table(out: Path, suite: str, half: int) -> dict[str, list[tuple[int, float | None]]]:
    """Every arm's held-out pass rate by step, each from the start's score; the chain's points are the pivot arm's up
    to `half` (its first stage), then its agentic stage's, placed after them."""
    start = curve(collect([out / "sft"]), suite)
    pivot = arm_curve([(out / "pivot", 0)], suite)
    return {"sft": start, "pivot": start + pivot, "agentic": start + arm_curve([(out / "agentic", 0)], suite),
            "pivot-agentic": start + [point for point in pivot if point[0] <= half]
            + arm_curve([(out / "pivot-agentic" / "agentic", half)], suite)}


@exit_on_user_error
def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out or ("outputs/learn-chain" + (f"-seed{args.seed}" if args.seed else "")))
    start = args.start
    if not (Path(start) / "config.json").is_file():
        raise ConfigError(f"--start {start}: not a model folder (no config.json); run `make learn` first, or pass "
                          "--start DIR")
    if args.steps < 2:
        raise ConfigError(f"--steps {args.steps}: at least 2 (the chain gives half to each stage)")
    agentic = yaml.safe_load(AGENTIC_CONFIG.read_text())
    families = checked_families(args.families, agentic.get("generate_families"))
    seeds = run_seeds(TRAIN_SEED, HELDOUT_SEED, TRAINER_SEED, args.seed)
    timings: dict[str, float] = {}
    started = time.monotonic()
    arguments = {key: getattr(args, key) for key in OUTPUT_ARGUMENTS} | {"families": families}
    stage = Stages("learn-chain", out, timings, arguments, args.resume)
    train, heldout = out / "tasks" / "train", out / "tasks" / "heldout"

    def tasks():
        fresh_tasks({train: (seeds["train"], args.train_tasks), heldout: (seeds["heldout"], args.heldout_tasks)},
                    families)

    def teacher_and_pivots():
        from eval.scripted_teacher import collect as collect_teacher

        shutil.rmtree(out / "teacher", ignore_errors=True)
        teacher = collect_teacher(train, out / "teacher" / "train", args.teacher_concurrency)
        pivots = build_pivots(teacher["harbor_job_dir"], out / "pivots" / "train.jsonl", args.threshold,
                              PIVOT_REWARDS[args.pivot_reward][0])
        return {"teacher": teacher["metrics"], "pivots": pivots}

    def start_scored():
        step0 = out / "sft" / "checkpoint-0"
        shutil.rmtree(step0, ignore_errors=True)
        step0.mkdir(parents=True)
        for path in {p for pattern in MODEL_FILES for p in Path(start).glob(pattern) if p.is_file()}:
            shutil.copy2(path, step0 / path.name)  # the model alone: the start's own eval results stay behind
        eval_keys = {k: v for k, v in agentic.items() if k.startswith("eval_")}
        eval_keys.update(eval_suites=[str(heldout)], eval_agent=TERMINUS_2_HARNESS)
        eval_keys.pop("eval_on_start", None)
        evaluate(str(step0), EvalArguments(**eval_keys).settings(str(heldout)))

    stage("tasks", tasks)
    collected = stage("teacher trajectories on the train tasks and their decision points (the pivot arms' data)",
                      teacher_and_pivots)
    teacher, pivots = collected["teacher"], collected["pivots"]
    pivot_rows, profile = out / "pivots" / "train.jsonl", None
    if args.profile:
        profiled = out / "pivots" / "train.profiled.jsonl"
        profile = stage(f"profiling the decision points ({args.pivot_reward} reward, K {args.profile}, the start)",
                        lambda: profile_pivots(pivot_rows, profiled, start, args.profile, args.pivot_reward,
                                               yaml.safe_load(PIVOT_CONFIG.read_text())))
        pivot_rows = profiled
    stage("the start on the held-out tasks (step 0 of every arm)", start_scored)

    half, trainer_seed = half_of(args.steps), seeds["trainer"]
    pivot_data = ["--datasets", str(pivot_rows), "--eval_suites", str(heldout), *pivot_reward_args(args.pivot_reward)]
    agentic_data = agentic_task_args(train, heldout, seeds, args.train_tasks, args.heldout_tasks, families)
    # The chain's first stage is the pivot arm's first half: the same start, data, seed and constant schedule, saved
    # at `half`; its agentic stage starts from that save rather than re-running the same pivot steps.
    arms = {  # arm: (recipe, config, start, output folder, steps, data)
        "pivot": ("recipes/grpo.py", PIVOT_CONFIG, start, out / "pivot", args.steps, pivot_data),
        "pivot-agentic": ("recipes/grpo_agentic.py", AGENTIC_CONFIG, str(out / "pivot" / f"checkpoint-{half}"),
                          out / "pivot-agentic" / "agentic", args.steps - half, agentic_data),
        "agentic": ("recipes/grpo_agentic.py", AGENTIC_CONFIG, start, out / "agentic", args.steps, agentic_data),
    }
    commands = {}
    for arm, (recipe, config, model, folder, steps, data) in arms.items():
        command = grpo_command(recipe, config, model, folder, steps, trainer_seed, args, *data)
        commands[f"{arm}/{folder.name}"] = " ".join(command)
        folder.mkdir(parents=True, exist_ok=True)  # kept on --resume: the recipe goes on from its last save
        stage(f"arm {arm}: {Path(recipe).stem} {steps} steps from {model}",
              partial(run_stage_command, command, folder.parent / f"{folder.name}.log"))

    suite = str(heldout)
    table = chain_table(out, suite, half)
    rows = [{"run": arm, "suite": "held-out pass rate", "checkpoint": f"step-{step}", "step": step,
             "metrics": {"mean_reward": score}} for arm, points in table.items() for step, score in points]
    steps = sorted({step for points in table.values() for step, _ in points})
    rows += [{**row, "step": step} for row in rows if row["run"] == "sft" for step in steps if step]  # a flat line
    plot(rows, out / "chain.png")

    summary = {
        "start": start, "seed": args.seed, "seeds": seeds, "families": families, "steps": args.steps,
        "task_seeds": {side: task_seeds(out / "tasks" / side) for side in ("train", "heldout")},
        "teacher": {"trials": teacher.get("n_trials"), "solved": teacher.get("mean_reward")},
        "pivots": pivots.get("rows"), "pivot_reward": args.pivot_reward, "profile": profile,
        "heldout_pass_rate": table,
        "grpo": {arm: {folder.name: _grpo_summary(folder)} for arm, (_, _, _, folder, _, _) in arms.items()},
        "timings_s": timings, "total_s": round(time.monotonic() - started, 1), "stages_read_back": stage.read_back,
        "commands": {"this": " ".join(["python recipes/learn_chain.py", *(argv if argv is not None else sys.argv[1:])]),
                     **commands},
    }
    (out / "learn_chain_summary.json").write_text(json.dumps(summary, indent=2))
    resumed = f" ({len(stage.read_back)} stages read back, --resume)" if stage.read_back else ""
    print(f"\n=== learn-chain: done in {summary['total_s'] / 60:.1f} min{resumed}; start {start}; seeds train "
          f"{seeds['train']}, held-out {seeds['heldout']}, trainer {seeds['trainer']}; "
          f"{pivots.get('rows', {}).get('written')} decision points, pivot reward {args.pivot_reward}")
    if profile:
        print(f"profiled: {profile['kept']} of {profile['rows']} decision points kept (dropped {profile['dropped']})")
    print(f"held-out pass rate (Harbor's terminus-2, greedy, {args.heldout_tasks} tasks) by step:")
    width = max(len(arm) for arm in ARMS)
    print(f"  {'arm':<{width}}  " + "  ".join(f"{step:>5}" for step in steps))
    for arm in ARMS:
        scores = dict(table[arm])
        print(f"  {arm:<{width}}  " + "  ".join(f"{_fmt(scores.get(step)):>5}" for step in steps))
    print(f"figure {out / 'chain.png'}, summary {out / 'learn_chain_summary.json'}")
    return 0


def _grpo_summary(folder: Path) -> dict:
    path = folder / "run_summary.json"
    summary = json.loads(path.read_text()) if path.is_file() else {}
    return {key: summary.get(key) for key in ("global_step", "wall_seconds", "final_loss", "episodes", "pass_rate",
                                              "train_prompts") if key in summary}


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    sys.exit(main())
