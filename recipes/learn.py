"""The learning run: teacher trajectories -> SFT of a small model from scratch -> the held-out pass rate rises.

    make learn                                   # = python recipes/learn.py (Terminus-2, outputs/learn)
    make learn ARGS="--config configs/sft/learn-bash.yaml"   # the bash-tool harness, outputs/learn-bash
    python recipes/learn.py [--config configs/sft/learn.yaml] [--train_seed 1] [--train_tasks 400]
                            [--eval_seed 1001] [--eval_tasks 30] [--overfit_tasks 30] [--families a,b,...]
                            [--student PRESET] [--copy_steps N] [--output_dir DIR]
                            [--source_checkpoint DIR | --source JOB --source_use imitate|resolve]

The harness is the config's `eval_agent` (common/harnesses.py): `terminus-2` (Terminus-2's JSON keystrokes,
learn.yaml) or `bash-tool` (the bash tool agentic GRPO trains, learn-bash.yaml). The teacher's trajectories are
collected in it and every checkpoint is scored in it, so the student is trained and evaluated acting one way.

Everything lands in the SFT config's output_dir (outputs/learn, outputs/learn-bash; --output_dir: another, the
config's paths moved there and written as learn-config.yaml), replaced on each run:
  tasks/train, tasks/heldout   procedural Harbor tasks (harbor_tasks/generate.py), train and eval seeds disjoint
  teacher/                     the harness's agent driven by the scripted teacher on every train task
                               (eval/scripted_teacher.py --collect --agent <eval_agent>)
  source-policy/, source/      with --source_checkpoint: the copied checkpoint and its Harbor job on the train
                               tasks; then teacher/ holds that job (imitate, SFT config sft-config.yaml: no
                               min_reward) or the scripted teacher's re-solutions of tasks/rebuilt, the environments
                               rebuilt from it (resolve; trainers/trajectory_sources.py)
  student-init/                the student before SFT (--student, a preset of modeling/tiny_model.py): random init,
                               copy-pretrained on synthetic repeated spans (no task text; `student`) or an induction
                               circuit set by hand (`student-induction`, the deep families'), its tokenizer trained on
                               the teacher trajectories (student_corpus)
  student-corpus.jsonl         bash-tool harness only: the trajectories with the tool preamble the chat template
                               adds as their system message, what the tokenizer is trained on (student_corpus)
  checkpoint-N/                SFT checkpoints (recipes/sft.py with the config), each evaluated on tasks/heldout with
                               the harness's agent, step 0 included (eval_on_start), logged into the run as
                               eval/<suite>/*
  eval_results_*.json          the final model on tasks/train-sample (the first --overfit_tasks train instances:
                               the overfit check of the whole pipeline)
  curve.png, learn_summary.json  eval.compare's plot; seeds, counts, overlap report, scores and timings
The config names these paths (datasets, model_name_or_path, eval_suites) so that `accelerate launch
recipes/sft.py --config configs/sft/learn.yaml` reruns the SFT step alone; this recipe checks they agree.
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
sys.path.insert(0, str(REPO))  # run as a script (python recipes/learn.py), like the other recipes under accelerate

from common.errors import ConfigError  # noqa: E402
from common.harnesses import TERMINUS_2_HARNESS, UnknownHarness, harness_named  # noqa: E402
from common.model_families import trl_template_dir  # noqa: E402
from eval import settings as eval_settings  # noqa: E402
from eval.compare import collect, plot, print_table  # noqa: E402
from eval.results import results_file  # noqa: E402
from harbor_tasks.folder import task_seeds  # noqa: E402
from harbor_tasks.families import FAMILIES, SETS  # noqa: E402
from harbor_tasks.generate import generate  # noqa: E402
from trainers.learning_runs import checked_families, replay_tasks  # noqa: E402
from trainers.learning_runs import stage as run_stage  # noqa: E402
from trainers.recipe_config import exit_on_user_error  # noqa: E402
from trainers import trajectory_sources as sources  # noqa: E402

DEFAULT_CONFIG = REPO / "configs" / "sft" / "learn.yaml"
DEEP_CONFIG = REPO / "configs" / "sft" / "learn-deep.yaml"  # the default when --families names a deep family
# the student presets (modeling/tiny_model.py): a deep task's values are a different distance back every time, and
# the copy-pretrained student copies at one distance only; the deep families get one that copies from any distance
STUDENT, DEEP_STUDENT = "student", "student-induction"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python recipes/learn.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, help=f"the SFT config (default: {DEFAULT_CONFIG.relative_to(REPO)}; "
                        f"{DEEP_CONFIG.relative_to(REPO)} when --families names a deep family)")
    parser.add_argument("--train_seed", type=int, default=1, help="seed of the train instances (default: %(default)s)")
    parser.add_argument("--train_tasks", type=int, default=400, help="train instances (default: %(default)s)")
    parser.add_argument("--eval_seed", type=int, default=1001, help="seed of the held-out instances (default: %(default)s)")
    parser.add_argument("--eval_tasks", type=int, default=30, help="held-out instances (default: %(default)s)")
    parser.add_argument("--overfit_tasks", type=int, default=30, help="train instances the final model is scored on "
                        "(0: none; default: %(default)s)")
    parser.add_argument("--families", help=f"comma-separated sets ({', '.join(SETS)}) and families (python -m "
                        "harbor_tasks.generate --list); default: the shallow set")
    parser.add_argument("--output_dir", type=Path, help="run into this folder instead of the config's output_dir: "
                        "every path of the config under its output_dir is moved under this one (and run_name set to "
                        "its name), written as learn-config.yaml in it; two arms of one config side by side")
    parser.add_argument("--teacher_concurrency", type=int, default=16, help="teacher trials at once (default: %(default)s)")
    parser.add_argument("--student", help=f"the student's preset in modeling/tiny_model.py (default: {STUDENT}; "
                        f"{DEEP_STUDENT} when --families names a deep family)")
    parser.add_argument("--copy_steps", type=int, help="copy-pretraining steps of the student (default: the "
                        "student preset's, modeling/tiny_model.py)")
    parser.add_argument("--source_checkpoint", type=Path, help="re-solving against imitating (docs/learn.md): this "
                        "policy, run on the train tasks in the harness (greedy), gives the trajectories in place of "
                        "the scripted teacher's; with --source_use")
    parser.add_argument("--source", type=Path, help="the same from a Harbor job dir of a policy on this run's train "
                        "tasks (--train_seed, --train_tasks, --families as here)")
    parser.add_argument("--source_use", choices=sources.USES, help="imitate: SFT on the source's trajectories "
                        "as they are (solved or not); resolve: environments rebuilt from them alone, re-solved by "
                        "the scripted teacher, the verified kept")
    parser.add_argument("--accelerate_config", default="configs/accelerate/cpu.yaml")
    parser.add_argument("sft_args", nargs="*", help="more `--key value` for recipes/sft.py, after `--`")
    args = parser.parse_args(argv)
    if args.source and args.source_checkpoint:
        parser.error("--source and --source_checkpoint: give one")
    if bool(args.source or args.source_checkpoint) != bool(args.source_use):
        parser.error("--source_use goes with --source or --source_checkpoint (and they need it)")
    deep = any(FAMILIES[name].set != "shallow" for name in checked_families(args.families))
    if args.config is None:
        args.config = DEEP_CONFIG if deep else DEFAULT_CONFIG
    if args.student is None:
        args.student = DEEP_STUDENT if deep else STUDENT
    from modeling.tiny_model import PRESETS

    if args.student not in PRESETS:
        parser.error(f"--student {args.student}: not a preset of modeling/tiny_model.py; choose from "
                     f"{', '.join(sorted(PRESETS))}")
    return args


def layout(config_path: Path, output_dir: Path | None = None) -> tuple[dict, Path]:
    """The config and its output_dir, after checking that its paths are the ones this recipe writes. `output_dir`
    (--output_dir): the config relocated there first (relocated)."""
    try:
        config = yaml.safe_load(config_path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise ConfigError(f"--config {config_path}: {err}") from None
    out = Path(config.get("output_dir") or "")
    if not str(out) or str(out) == ".":
        raise ConfigError(f"{config_path}: output_dir is missing; the learning run writes everything under it")
    if output_dir is not None:
        config, out = relocated(config, out, output_dir), output_dir
    expected = {"model_name_or_path": str(out / "student-init"), "datasets": str(out / "teacher"),
                "eval_suites": str(out / "tasks" / "heldout")}
    given = {"model_name_or_path": str(config.get("model_name_or_path")),
             "datasets": str((config.get("datasets") or [{}])[0].get("path") if isinstance((config.get("datasets") or [None])[0], dict)
                             else (config.get("datasets") or [None])[0]),
             "eval_suites": str((config.get("eval_suites") or [None])[0])}
    for key, want in expected.items():
        if Path(given[key]) != Path(want):
            raise ConfigError(f"{config_path}: {key} is {given[key]!r}; the learning run writes {want!r} there "
                              f"(set it to that, or change output_dir)")
    harness(config, config_path)
    return config, out


def relocated(config, old: Path, new: Path):
    """`config` with every string that is `old` or a path under it moved to `new`, and run_name `new`'s name (by hand:
    a config's output paths are plain strings in any key; these are the ones under its output_dir)."""
    if isinstance(config, dict):
        moved = {key: relocated(value, old, new) for key, value in config.items()}
        return {**moved, "run_name": new.name} if "run_name" in config else moved
    if isinstance(config, list):
        return [relocated(value, old, new) for value in config]
    if isinstance(config, str) and (Path(config) == old or old in Path(config).parents):
        return str(new / Path(config).relative_to(old))
    return config


def harness(config: dict, config_path: Path | str = "the config") -> str:
    """The harness of the run: the config's eval_agent (the teacher is collected in it, the student scored in it)."""
    agent = config.get("eval_agent") or TERMINUS_2_HARNESS
    try:
        return harness_named(agent, key="eval_agent").name
    except UnknownHarness as err:
        raise ConfigError(f"{config_path}: {err}: the learning run collects the teacher and scores the student in "
                          "one harness") from None


def student_corpus(teacher: Path, out: Path, chat_template: str) -> Path:
    """What the student's tokenizer is trained on: the teacher's trajectories as the model sees them. Trajectories
    with tools (the bash-tool harness) are written to `out` with the system message the chat template adds for
    their tools (the tool's schema and how to call it, ~350 tokens of lines that are in no record's strings), so the
    tokenizer learns those lines as single tokens, as it learns Terminus-2's prompt lines (one token per frequent
    line, modeling/tiny_model.py). Without it the instruction starts ~350 tokens into every sequence, where the copy
    circuit of copy pretraining (sequences of ~100 tokens) does not reach: measured, copy accuracy 1.0 at position 0,
    0.004 behind 200 tokens; the student never learned to copy a name (held-out 0.03). Without tools: `teacher`.
    `chat_template`: the student's (its preset's, a TRL template name)."""
    from transformers.utils.chat_template_utils import render_jinja_template

    from chat_corpus.sources import Source, load_source

    records = load_source(Source(path=str(teacher)), split_key="metadata.source_trajectory_uid").records
    if not any(record.get("tools") for record in records):
        return teacher
    template = (trl_template_dir() / f"{chat_template}.jinja").read_text(encoding="utf-8")
    with out.open("w") as file:
        for record in records:
            tools = json.loads(record["tools"]) if isinstance(record.get("tools"), str) else record.get("tools")
            messages = record["messages"]
            if tools and messages[0].get("role") != "system":
                rendered = render_jinja_template([[{"role": "user", "content": ""}]], tools=tools,
                                                 chat_template=template)[0][0]
                preamble = rendered.split("<|im_start|>system\n", 1)[1].split("<|im_end|>", 1)[0]
                messages = [{"role": "system", "content": preamble}, *messages]
            file.write(json.dumps({"messages": messages, "tools": record.get("tools"),
                                   "metadata": record.get("metadata", {})}) + "\n")
    return out


@exit_on_user_error
def main(argv=None) -> int:
    args = parse_args(argv)
    config, out = layout(args.config, args.output_dir)
    if args.train_seed == args.eval_seed:
        raise ConfigError(f"--train_seed and --eval_seed are both {args.train_seed}: held-out instances must come from "
                          "a seed never used in training")
    families = checked_families(args.families)
    timings: dict[str, float] = {}
    stage = partial(run_stage, "learn")
    started = time.monotonic()
    given = args.source or args.source_checkpoint
    if given and (given.resolve() == out.resolve() or out.resolve() in given.resolve().parents):
        raise ConfigError(f"{given} lies under {out}, which this run replaces first: copy it out (cp -r {out} "
                          f"{out}-source) and name the copy")
    shutil.rmtree(out, ignore_errors=True)  # a learning run starts from nothing: no resume, no stale checkpoints

    done = stage("tasks", timings)
    generate(out / "tasks" / "train", args.train_seed, args.train_tasks, families)
    generate(out / "tasks" / "heldout", args.eval_seed, args.eval_tasks, families)
    if args.overfit_tasks:  # the same (seed, index) pairs: byte-identical to the first train instances
        generate(out / "tasks" / "train-sample", args.train_seed, min(args.overfit_tasks, args.train_tasks), families)
    done()

    agent = harness(config, args.config)
    from trainers.eval_callback import EvalArguments

    eval_keys = EvalArguments(**{k: v for k, v in config.items() if k in EvalArguments.__dataclass_fields__})
    sft_config, source = args.config, None
    if args.output_dir is not None:  # the SFT step reads the relocated config
        sft_config = out / "learn-config.yaml"
        sft_config.write_text(yaml.safe_dump(config, sort_keys=False))
    if args.source or args.source_checkpoint:
        done = stage(f"source trajectories ({args.source or args.source_checkpoint}), used to {args.source_use}",
                     timings)
        source, sft_config = trajectories_from_source(args, config, out, agent, eval_keys, sft_config)
        done()
        teacher = {"source": source}
    else:
        done = stage(f"teacher trajectories (scripted teacher, {agent} in the local sandbox)", timings)
        from eval.scripted_teacher import collect as collect_teacher

        solved = collect_teacher(out / "tasks" / "train", out / "teacher", args.teacher_concurrency, agent=agent)
        teacher = {"trials": solved["metrics"].get("n_trials"), "solved": solved["metrics"].get("mean_reward"),
                   "job": solved["harbor_job_dir"]}
        done()

    done = stage(f"student model ({args.student}; tokenizer from the teacher trajectories)", timings)
    from modeling.tiny_model import COPY_PRETRAINING_FILE, PRESETS
    from modeling.tiny_model import main as build_student

    copy_steps = [] if args.copy_steps is None else ["--copy_steps", str(args.copy_steps)]
    corpus = student_corpus(out / "teacher", out / "student-corpus.jsonl", PRESETS[args.student].chat_template)
    if build_student(["--out", str(out / "student-init"), "--corpus", str(corpus), "--preset", args.student,
                      *copy_steps]):
        raise ConfigError(f"could not build the student from {out / 'teacher'} (see above)")
    done()

    done = stage("SFT (recipes/sft.py), every checkpoint evaluated on the held-out tasks", timings)
    command = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file", args.accelerate_config,
               "recipes/sft.py", "--config", str(sft_config), *args.sft_args]
    print(" ".join(command), flush=True)
    subprocess.run(command, cwd=REPO, check=True)
    sft = json.loads((out / "run_summary.json").read_text())
    done()

    overfit = None
    if args.overfit_tasks:
        done = stage("overfit check: the final model on train instances", timings)
        from eval.run import evaluate

        suite = str(out / "tasks" / "train-sample")
        overfit = evaluate(str(out), eval_settings.from_recipe(eval_keys, suite), results_file(suite, several_suites=True))
        done()

    beside = {}
    if any(FAMILIES[name].ask is not None for name in families):  # a world the instruction does not state
        done = stage("beside the curve: the shallow families, and the train commands replayed on held-out worlds",
                     timings)
        beside = deep_baselines(out, args, eval_keys)
        done()

    done = stage("curve (eval.compare)", timings)
    rows = collect([out])
    print_table(rows)
    plot(rows, out / "curve.png")
    done()

    heldout = str(out / "tasks" / "heldout")
    curve = [(row["step"], row["metrics"].get("mean_reward")) for row in rows
             if row["suite"] == heldout and row["checkpoint"] != "final"]
    reproduce = " ".join(["python -m eval.run --checkpoint", str(out),
                          *eval_settings.to_cli_args(eval_settings.from_recipe(eval_keys, "NEW_TASKS"))])
    summary = {
        "train_seeds": task_seeds(out / "tasks" / "train"), "eval_seeds": task_seeds(out / "tasks" / "heldout"),
        "families": families, "harness": agent, "teacher": teacher,
        "student": args.student, "student_copy_pretraining": _read_json(out / "student-init" / COPY_PRETRAINING_FILE),
        "heldout_curve": curve, "overfit_mean_reward": overfit["metrics"].get("mean_reward") if overfit else None,
        **beside,
        "overlap": {key: sft.get(key) for key in ("decontaminated_against", "decontaminated", "template_overlap")},
        "sft": {key: sft.get(key) for key in ("train_records", "eval_records", "global_step", "final_loss",
                                              "trained_tokens", "wall_seconds")},
        "timings_s": timings, "total_s": round(time.monotonic() - started, 1),
        "reproduce": f"python -m harbor_tasks.generate --out NEW_TASKS --seed S --n N && {reproduce}",
    }
    (out / "learn_summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\n=== learn: done in {summary['total_s'] / 60:.1f} min ("
          + ", ".join(f"{name.split(' (')[0]} {seconds:.0f} s" for name, seconds in timings.items()) + ")")
    trained_on = (f"teacher solved {teacher['solved']}" if source is None else
                  f"the source solved {source['solved']}, used to {source['use']}: " + ", ".join(
                      f"{k} {v}" for k, v in source.items() if k not in ("use", "solved", "job")))
    print(f"harness {agent}; train seeds {summary['train_seeds']} ({args.train_tasks} tasks, {trained_on}); "
          f"held-out seeds {summary['eval_seeds']} ({args.eval_tasks} tasks); families {','.join(families)}")
    print(f"overlap with {', '.join(summary['overlap']['decontaminated_against'] or ['(not checked)'])}: "
          f"{summary['overlap']['decontaminated']} contaminated records dropped, {summary['overlap']['template_overlap']} "
          "share only the family templates (held out means new values)")
    if summary["student_copy_pretraining"]:
        print("student ({student}): copy pretraining {steps} steps, copy accuracy {copy_accuracy}, at random "
              "distances {copy_accuracy_any_distance}".format(student=args.student, **{
                  "copy_accuracy_any_distance": None, **summary["student_copy_pretraining"]}))
    print("held-out pass rate by step: " + ", ".join(f"{step}: {score}" for step, score in curve))
    if overfit:
        print(f"final model on {min(args.overfit_tasks, args.train_tasks)} train instances: "
              f"{overfit['metrics'].get('mean_reward')}")
    if beside:
        print(f"final model on {args.eval_tasks} held-out shallow tasks: {beside['shallow_mean_reward']}; the train "
              f"tasks' teacher commands replayed on {beside['replay_tasks']} held-out worlds: "
              f"{beside['replay_mean_reward']}")
    print(f"curve {out / 'curve.png'}, summary {out / 'learn_summary.json'}; score new held-out instances with:\n  "
          + summary["reproduce"])
    return 0


def trajectories_from_source(args, config: dict, out: Path, agent: str, eval_keys,
                             sft_config: Path) -> tuple[dict, Path]:
    """--source/--source_checkpoint: the source policy's trajectories on the train tasks, imitated or re-solved into
    out/teacher (trainers/trajectory_sources.py); what was used, and the SFT config (imitate: min_reward dropped;
    resolve: `sft_config`, the run's)."""
    train = out / "tasks" / "train"
    job = args.source or sources.run_policy(args.source_checkpoint, train, out,
                                            eval_settings.from_recipe(eval_keys, str(train)))
    source = {"use": args.source_use, **sources.check_source(job, train)}
    if args.source_use == "imitate":
        source.update(sources.imitate(job, out / "teacher"))
        return source, sources.imitate_config(config, out / "sft-config.yaml")
    source.update(sources.resolve(job, out, out / "teacher", args.teacher_concurrency, agent))
    return source, sft_config


def deep_baselines(out: Path, args, eval_keys) -> dict:
    """Beside a run on world-drawing families: the final model on held-out shallow tasks, and the replay baseline (the
    train tasks' recorded commands on held-out worlds of the same instructions, scored by the oracle agent)."""
    import dataclasses

    from eval.run import evaluate

    shallow, replay = out / "tasks" / "heldout-shallow", out / "tasks" / "replay"
    generate(shallow, args.eval_seed, args.eval_tasks, ["shallow"])
    replayed = replay_tasks(out / "tasks" / "train", replay, args.eval_seed, args.eval_tasks)
    on_shallow = evaluate(str(out), eval_settings.from_recipe(eval_keys, str(shallow)),
                          results_file(str(shallow), several_suites=True))
    settings = dataclasses.replace(eval_settings.from_recipe(eval_keys, str(replay)), agent="oracle")
    on_replay = evaluate(str(out), settings, results_file(str(replay), several_suites=True))
    return {"shallow_mean_reward": on_shallow["metrics"].get("mean_reward"), "replay_tasks": len(replayed),
            "replay_mean_reward": on_replay["metrics"].get("mean_reward")}


def _read_json(path: Path):
    return json.loads(path.read_text()) if path.is_file() else None


if __name__ == "__main__":
    sys.exit(main())
