"""Evaluate every checkpoint as it is saved, step 0 included, and log the scores into the training run at its step.
Runs in: the trainer's main process (training venv); evals run inline, as a detached `python -m eval.run`, or on SLURM.

Modes (`eval_mode`: inline, subprocess, slurm), step 0 (`eval_on_start`), what a failed eval logs:
docs/evaluation.md ("Every checkpoint, in the training run").
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from transformers import TrainerCallback

from eval import settings as eval_settings
from eval.results import results_file, suite_slug, summary_line
from eval.run import evaluate
from eval.wandb_log import log_results

EVAL_MODES = ("inline", "subprocess", "slurm")
REPO = Path(__file__).resolve().parents[1]


@dataclass
class CallbackKeys:
    """The keys only the callback has: which suites, how they run. The settings of each eval (`eval_agent`,
    `eval_concurrency`, ...) are added from eval/settings.py's EvalSettings, below."""

    eval_suites: list[str] = field(default_factory=list, metadata={
        "help": "Suites to run on every checkpoint: builtin:terminal, builtin:evocode, a Harbor dataset name or a "
                "task path; with eval_on_start also on the model before training (checkpoint-0, step 0). Empty: no "
                "evals on save."})
    eval_mode: str = field(default="inline", metadata={"help": "inline, subprocess or slurm"})
    eval_slurm_script: str = field(default="launch/slurm/eval.sbatch", metadata={"help": "For eval_mode slurm."})

    def __post_init__(self):
        self.eval_suites = parse_suites(self.eval_suites)
        if self.eval_mode not in EVAL_MODES:
            raise ValueError(f"eval_mode: {self.eval_mode!r} is not one of {', '.join(EVAL_MODES)}")

    def settings(self, suite: str) -> eval_settings.EvalSettings:
        return eval_settings.from_recipe(self, suite)

    def cli_args(self, suite: str) -> list[str]:
        """`python -m eval.run` options for this suite with these settings (subprocess and slurm modes)."""
        return eval_settings.to_cli_args(self.settings(suite))


def parse_suites(value) -> list[str]:
    """`eval_suites` as given: a list (YAML config), a string, or the command line's words (`--eval_suites a b`);
    each may be comma-separated, or the whole a JSON/YAML list string (`'[]'`, `'["builtin:terminal"]'`)."""
    entries = [value] if isinstance(value, str) else list(value or [])
    if not all(isinstance(entry, str) for entry in entries):
        raise ValueError(f"eval_suites: expected suite names (strings), got {value!r}")
    joined = " ".join(entries).strip()
    if joined.startswith("[") and joined.endswith("]"):
        import yaml

        try:
            parsed = yaml.safe_load(joined)
        except yaml.YAMLError as err:
            raise ValueError(f"eval_suites: {joined!r} is not a list ({str(err).splitlines()[0]})") from None
        if not isinstance(parsed, list) or not all(isinstance(s, str) for s in parsed):
            raise ValueError(f"eval_suites: {joined!r} must be a list of suite names (strings)")
        entries = parsed
    return [s.strip() for entry in entries for s in entry.split(",") if s.strip()]


# CallbackKeys + an eval_<name> key per EvalSettings field (eval_agent, eval_attempts, eval_concurrency, eval_env,
# eval_temperature, eval_max_tokens, eval_context_size, eval_parser, eval_max_turns, eval_timeout_multiplier,
# eval_agent_timeout_multiplier).
EvalArguments = eval_settings.recipe_arguments(
    "EvalArguments", base=CallbackKeys, module=__name__,
    doc="Eval-on-save keys of the recipe configs: the callback's own, then one per eval setting.")


@dataclass
class PendingEval:
    step: int
    suite: str
    results_path: Path
    started: float
    process: subprocess.Popen | None = None
    job_id: str | None = None


class EvalOnSaveCallback(TrainerCallback):
    def __init__(self, eval_args: EvalArguments, wait_at_end_seconds: float = 3600, eval_on_start: bool | None = None):
        """`eval_on_start`: evaluate step 0 (checkpoint-0) or not, whatever the Trainer's own `eval_on_start` says
        (None: as it says). A recipe with no eval split (agentic GRPO) turns the Trainer's off, which would ask for an
        eval dataset, and gives it here."""
        self.eval_args = eval_args
        self.wait_at_end_seconds = wait_at_end_seconds
        self.eval_on_start = eval_on_start
        self.pending: list[PendingEval] = []
        self.completed: list[dict] = []
        self.failed: list[str] = []

    def _results_file(self, suite: str) -> str:
        return results_file(suite, several_suites=len(self.eval_args.eval_suites) > 1)

    def on_train_begin(self, args, state, control, **kwargs):
        """With `eval_on_start` and a fresh run (global step 0): save the model before training into
        output_dir/checkpoint-0 and evaluate it at step 0 (skipped under DeepSpeed ZeRO-3)."""
        wanted = getattr(args, "eval_on_start", False) if self.eval_on_start is None else self.eval_on_start
        if not wanted or state.global_step != 0:
            return
        if not state.is_world_process_zero or not self.eval_args.eval_suites:
            return
        from transformers.integrations import is_deepspeed_zero3_enabled

        if is_deepspeed_zero3_enabled():
            commands = "; ".join(shlex.join(["python", "-m", "eval.run", "--checkpoint", "<base model dir>",
                                             *self.eval_args.cli_args(suite)]) for suite in self.eval_args.eval_suites)
            print(f"eval: step 0 (eval_on_start) skipped: under DeepSpeed ZeRO-3 the weights are partitioned across "
                  f"ranks; evaluate the base model by hand: {commands}")
            return
        checkpoint = Path(args.output_dir) / "checkpoint-0"
        try:
            from accelerate.utils import extract_model_from_parallel

            model = extract_model_from_parallel(kwargs["model"], keep_torch_compile=False)
            model.save_pretrained(checkpoint)
            if kwargs.get("processing_class") is not None:
                kwargs["processing_class"].save_pretrained(checkpoint)
        except Exception as err:  # reported like a failed eval, never fatal to training
            for suite in self.eval_args.eval_suites:
                self._fail(0, suite, f"could not save the initial model into {checkpoint}: "
                                     f"{type(err).__name__}: {err}")
            return
        self.evaluate_checkpoint(checkpoint, 0)

    def on_save(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or not self.eval_args.eval_suites:
            return
        self.evaluate_checkpoint(Path(args.output_dir) / f"checkpoint-{state.global_step}", state.global_step)

    def evaluate_checkpoint(self, checkpoint: Path, step: int):
        """Run every suite on `checkpoint` (logged at `step`), in the configured mode: inline it is logged now,
        subprocess and slurm are polled (`_collect`)."""
        for suite in self.eval_args.eval_suites:
            results_path = checkpoint / self._results_file(suite)
            mode = self.eval_args.eval_mode
            try:
                if mode == "inline":

                    self._log(evaluate(str(checkpoint), self.eval_args.settings(suite), results_path.name))
                elif mode == "subprocess":
                    log = open(checkpoint / f"{results_path.stem}.log", "w")
                    process = subprocess.Popen(
                        [sys.executable, "-m", "eval.run", "--checkpoint", str(checkpoint),
                         "--results_file", results_path.name, *self.eval_args.cli_args(suite)],
                        cwd=REPO, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                        start_new_session=True)
                    self.pending.append(PendingEval(step, suite, results_path, time.time(), process))
                else:
                    job = subprocess.run(
                        ["sbatch", "--parsable", self.eval_args.eval_slurm_script],
                        cwd=REPO, capture_output=True, text=True, check=True,
                        env=dict(os.environ, CHECKPOINT=str(checkpoint), RESULTS_FILE=results_path.name,
                                 EVAL_ARGS=shlex.join(self.eval_args.cli_args(suite))))
                    self.pending.append(PendingEval(step, suite, results_path, time.time(),
                                                    job_id=job.stdout.strip()))
            except Exception as err:  # a failed eval is reported, never fatal to training
                self._fail(step, suite, f"{type(err).__name__}: {err}")

    def on_log(self, args, state, control, **kwargs):
        self._collect()

    def on_train_end(self, args, state, control, **kwargs):
        deadline = time.monotonic() + self.wait_at_end_seconds
        while self.pending and time.monotonic() < deadline and any(p.process for p in self.pending):
            self._collect()
            time.sleep(2)
        self._collect()
        for pending in self.pending:
            print(f"eval: {pending.suite} at step {pending.step} still running"
                  + (f" (SLURM job {pending.job_id})" if pending.job_id else "")
                  + f"; its results will be in {pending.results_path}")

    def _collect(self):
        still = []
        for pending in self.pending:
            fresh = pending.results_path.exists() and pending.results_path.stat().st_mtime >= pending.started
            if fresh and (pending.process is None or pending.process.poll() is not None):
                try:
                    self._log(json.loads(pending.results_path.read_text()))
                except (OSError, ValueError) as err:
                    self._fail(pending.step, pending.suite, f"unreadable {pending.results_path}: {err}")
            elif pending.process is not None and pending.process.poll() is not None:
                self._fail(pending.step, pending.suite, f"eval.run exited with code {pending.process.returncode}; "
                           f"see {pending.results_path.with_suffix('.log')}")
            else:
                still.append(pending)
        self.pending = still

    def _log(self, results: dict):
        self.completed.append(results)
        print(summary_line(results))
        import wandb

        if wandb.run is not None:

            log_results(wandb.run, results)

    def _fail(self, step: int, suite: str, reason: str):
        message = f"eval: {suite} at step {step} failed: {reason}"
        self.failed.append(message)
        print(message, file=sys.stderr)
        import wandb

        if wandb.run is not None:
            wandb.run.log({f"eval/{suite_slug(suite)}/failed": 1, "train/global_step": step})
