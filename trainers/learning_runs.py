"""What the learning-run recipes (learn, learn_pivot, learn_chain) share: stages, families, seeds, pivots, curves.
Runs in: the training venv, in those recipes' driver process (each stage is a subprocess or a library call).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from common.errors import ConfigError
from harbor_tasks.families import FAMILIES, UnknownFamily, select
from harbor_tasks.folder import TaskFolder, task_folders
from harbor_tasks.generate import generate, write_task

REPO = Path(__file__).resolve().parents[1]
# A pivot GRPO run's reward (learn_pivot --reward, learn_chain --pivot_reward): the environment its rows are built
# for, the reward server's config, the verify timeout GRPO waits
PIVOT_REWARDS = {"string": ("terminus_judge", "configs/rewards/terminus_judge_string_only.yaml", 30),
                 "functional": ("terminus_functional", "configs/rewards/terminus_functional.yaml", 180)}


def checked_families(arg: str | None, default: list[str] | None = None) -> list[str]:
    """`--families` (set and family names, harbor_tasks.families.select), else `default`, else the default set;
    ConfigError naming the unknown ones and what is known."""
    try:
        return select(arg or default)
    except UnknownFamily as err:
        raise ConfigError(str(err)) from None


def fresh_tasks(folders: dict[Path, tuple[int, int]], families: list[str]) -> None:
    """Each folder ({folder: (seed, n)}) emptied and generated again: a tasks stage that stopped midway starts over."""
    for folder, (seed, n) in folders.items():
        shutil.rmtree(folder, ignore_errors=True)
        generate(folder, seed, n, families)


def run_seeds(train: int, heldout: int, trainer: int, offset: int) -> dict[str, int]:
    """`--seed N` moves the train tasks', the held-out tasks' and the trainer's seeds together."""
    return {"train": train + offset, "heldout": heldout + offset, "trainer": trainer + offset}


def stage(run: str, name: str, timings: dict):
    """Print the stage's header (`=== run: name`); returns a function that records its duration in `timings`."""
    print(f"\n=== {run}: {name}", flush=True)
    started = time.monotonic()
    return lambda: timings.__setitem__(name, round(time.monotonic() - started, 1))


class Stages:
    """A learning run's finished stages, each with what it returned, in OUT/stages.json beside the arguments that made
    them, so that `--resume` reads a finished stage back instead of running it again (a chain's stages take minutes
    to an hour; no library keeps a pipeline of subprocesses resumable). Without `resume` the folder starts empty; with it,
    a folder that has files but no stages.json is refused, not emptied."""

    def __init__(self, run: str, out: Path, timings: dict, arguments: dict, resume: bool):
        self.run, self.timings, self.path = run, timings, out / "stages.json"
        self.arguments = json.loads(json.dumps(arguments))  # as it reads back: tuples become lists
        self.done: dict[str, dict] = {}
        self.read_back: list[str] = []  # the stages this run did not run
        if resume and self.path.is_file():
            recorded = json.loads(self.path.read_text())
            differ = [key for key in sorted(set(self.arguments) | set(recorded["arguments"]))
                      if self.arguments.get(key) != recorded["arguments"].get(key)]
            if differ:
                raise ConfigError(f"--resume: {out} was made with other arguments ("
                                  + "; ".join(f"{key}: {recorded['arguments'].get(key)!r} there, "
                                              f"{self.arguments.get(key)!r} now" for key in differ)
                                  + "); pass the same ones, or leave out --resume to start again")
            self.done = recorded["stages"]
            return
        if resume and out.is_dir() and any(out.iterdir()):  # made before --resume, or by something else: keep it
            raise ConfigError(f"--resume: {out} holds a run without {self.path.name}, which --resume cannot read back; "
                              "nothing removed; leave out --resume to start again there (it is emptied first)")
        if resume:
            print(f"--resume: no {self.path}, starting from nothing", flush=True)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        self._write()

    def __call__(self, name: str, work):
        """`work()`'s result (JSON), run under the stage's header and timed, or read back where it finished before."""
        if name in self.done:
            print(f"\n=== {self.run}: {name}: done before ({self.path})", flush=True)
            self.timings[name] = self.done[name]["seconds"]
            self.read_back.append(name)
            return self.done[name]["result"]
        done = stage(self.run, name, self.timings)
        result = work()
        done()
        self.done[name] = {"result": result, "seconds": self.timings[name]}
        self._write()
        return result

    def _write(self) -> None:
        self.path.write_text(json.dumps({"arguments": self.arguments, "stages": self.done}, indent=2))


def build_pivots(job_dir: str, out: Path, threshold: float, environment: str = "terminus_judge") -> dict:
    """`python -m trainers.data pivots` on one teacher job, rows for `environment`'s reward; its summary (counts per
    rule)."""
    command = [sys.executable, "-m", "trainers.data", "pivots", "--jobs", job_dir, "--out", str(out),
               "--environment", environment, "--json"]
    if environment == "terminus_judge":
        command += ["--threshold", str(threshold)]
    print(" ".join(command), flush=True)
    done = subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True)
    return json.loads(done.stdout)


def pivot_reward_args(reward: str) -> list[str]:
    """recipes/grpo.py's flags for a pivot reward: its reward server's config and verify timeout."""
    _, config, timeout = PIVOT_REWARDS[reward]
    return ["--reward_server_config", config, "--reward_timeout", str(timeout)]


def profile_pivots(rows: Path, out: Path, start: str, k: int, reward: str, grpo_config: dict, keep: str = "mixed",
                   max_mean: float = 1.0) -> dict:
    """PivotRL's filter: `python -m trainers.data profile` of `rows` with K samples each of the start (sampled as the
    GRPO config samples: its temperature and completion length) under `reward`; its summary. ConfigError when it
    keeps no row (nothing to train on)."""
    command = [sys.executable, "-m", "trainers.data", "profile", "--rows", str(rows), "--out", str(out),
               "--checkpoint", start, "--k", str(k), "--keep", keep, "--max_mean", str(max_mean),
               "--temperature", str(grpo_config.get("temperature", 1.0)),
               "--max_tokens", str(grpo_config.get("max_completion_length", 256)),
               "--reward_server_config", PIVOT_REWARDS[reward][1], "--json"]
    print(" ".join(command), flush=True)
    profile = json.loads(subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.PIPE, text=True).stdout)
    if not profile["kept"]:
        raise ConfigError(f"profiling kept none of {rows}'s {profile['rows']} rows (dropped {profile['dropped']}): "
                          "the start gets every row always or never right; lower --max_mean's bar or pick "
                          "another --start")
    return profile


def curve(rows: list[dict], suite: str) -> list[tuple[int, float | None]]:
    """[(step, mean_reward)] of one suite in eval.compare's rows, by step (the final model's row left out)."""
    return sorted((row["step"], row["metrics"].get("mean_reward")) for row in rows
                  if row["suite"] == suite and row["checkpoint"] != "final" and row["step"] is not None)


def replay_tasks(train: Path, out: Path, world_seed: int, n: int) -> list[Path]:
    """The replay baseline's tasks: the first `n` train tasks of a world-drawing family (deep, multi-round) again over
    the held-out world `world_seed` (the same instruction, another environment), each with the train task's own
    solution (the teacher's commands as recorded on the train world). The oracle agent scores what copying them gets."""
    made = []
    for task in sorted(task_folders(train), key=lambda t: TaskFolder.of(t).index or 0):  # by index, as generated
        folder = TaskFolder.of(task)
        family = FAMILIES.get(folder.family or "")
        if family is None or family.ask is None or folder.seed is None or folder.index is None:
            continue  # a shallow task's world is its instruction: no other world to replay it on
        replay = write_task(out, family.name, folder.seed, folder.index, world_seed)
        for solve in task.rglob("solution/solve.sh"):
            shutil.copy2(solve, replay / solve.relative_to(task))
        made.append(replay)
        if len(made) == n:
            break
    return made
