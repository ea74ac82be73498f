"""Evaluate a checkpoint: serve it, run a Harbor job, score it, write eval_results.json, log to W&B.

    python -m eval.run --checkpoint DIR --suite SUITE [--agent terminus-2|oracle|nop] [--attempts K]
        [--concurrency N] [--env local|docker|daytona|...] [--temperature T] [--max_tokens N] [--context_size N]
        [--parser json|xml] [--max_turns N] [--wandb_run_id ID]

SUITE is `builtin:terminal`, `builtin:evocode`, a Harbor dataset name (`terminal-bench@2.0`,
`terminal-bench/terminal-bench-2-1`) or a local path to Harbor tasks. `--env local` is this repo's sandbox
(eval/sandbox.py); every other value is one of Harbor's environments. Terminus-2 reaches the checkpoint through an
OpenAI-compatible URL: vLLM where a GPU and vLLM are present, the built-in CPU server otherwise (eval/serve.py).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HARBOR_VENV = REPO / ".venv-harbor"
BUILTIN_SUITES = {"builtin:terminal": REPO / "eval" / "tasks" / "terminal",
                  "builtin:evocode": REPO / "eval" / "tasks" / "evocode"}
LOCAL_ENV = "eval.sandbox:LocalSandboxEnvironment"
AGENTS = ("terminus-2", "oracle", "nop")


class EvalError(RuntimeError):
    """An eval that could not run; the message says which step and why."""


@dataclass
class EvalSettings:
    suite: str
    agent: str = "terminus-2"
    attempts: int = 1
    concurrency: int = 1
    env: str = "local"
    temperature: float = 0.7
    max_tokens: int = 512  # per model call
    context_size: int | None = None  # max input tokens the agent may use; default the served model's length
    parser: str = "json"  # Terminus-2's response format: json or xml
    max_turns: int | None = None  # Terminus-2 episodes per trial (None: Harbor's default)
    timeout_multiplier: float = 1.0
    jobs_dir: str | None = None  # default: <checkpoint>/eval_jobs
    extra_agent_kwargs: dict = field(default_factory=dict)


def suite_slug(suite: str) -> str:
    """The suite's name in W&B keys and file names: builtin:terminal -> terminal, a local task folder -> its name,
    terminal-bench@2.0 -> terminal-bench_2.0."""
    name = Path(suite).name if suite not in BUILTIN_SUITES and Path(suite).exists() else suite.removeprefix("builtin:")
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def suite_source(suite: str) -> list[str]:
    if suite in BUILTIN_SUITES:
        return ["-p", str(BUILTIN_SUITES[suite])]
    if Path(suite).exists():
        return ["-p", str(Path(suite).resolve())]
    if suite.startswith("builtin:"):
        raise EvalError(f"--suite {suite}: unknown built-in suite; use one of {', '.join(BUILTIN_SUITES)}")
    if "@" in suite or "/" in suite:
        return ["-d", suite]
    raise EvalError(f"--suite {suite}: not a built-in suite, a local path or a Harbor dataset name (name@version "
                    "or org/name)")


def global_step_of(checkpoint: str) -> int | None:
    state = Path(checkpoint) / "trainer_state.json"
    if state.is_file():
        return json.loads(state.read_text()).get("global_step")
    match = re.search(r"checkpoint-(\d+)$", str(checkpoint).rstrip("/"))
    return int(match.group(1)) if match else None


def harbor_command(settings: EvalSettings, job_name: str, jobs_dir: Path, served=None) -> list[str]:
    harbor = HARBOR_VENV / "bin" / "harbor"
    if not harbor.exists():
        raise EvalError(f"{harbor}: Harbor is not installed; run `make setup` (it creates .venv-harbor)")
    command = [str(harbor), "run", *suite_source(settings.suite), "-a", settings.agent,
               "-k", str(settings.attempts), "-n", str(settings.concurrency), "-o", str(jobs_dir),
               "--job-name", job_name, "-y",
               "--env", LOCAL_ENV if settings.env == "local" else settings.env]
    if settings.timeout_multiplier != 1.0:
        command += ["--timeout-multiplier", str(settings.timeout_multiplier)]
    if served is not None:
        max_input = settings.context_size or served.max_model_len or 32768
        model_info = {"max_input_tokens": max_input, "max_output_tokens": settings.max_tokens,
                      "input_cost_per_token": 0.0, "output_cost_per_token": 0.0}
        kwargs = {"api_base": served.base_url, "model_info": json.dumps(model_info),
                  "temperature": settings.temperature, "parser_name": settings.parser,
                  "llm_call_kwargs": json.dumps({"max_tokens": settings.max_tokens}),
                  "record_terminal_session": False,  # no asciinema recording (it may be absent, and it costs time)
                  **({"max_turns": settings.max_turns} if settings.max_turns else {}),
                  **settings.extra_agent_kwargs}
        command += ["-m", served.harbor_model]
        for key, value in kwargs.items():
            command += ["--ak", f"{key}={value}"]
    return command


def run_harbor(command: list[str], job_dir: Path, log_path: Path) -> None:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    with open(log_path, "w") as log:
        result = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    if result.returncode != 0 or not (job_dir / "result.json").exists():
        tail = log_path.read_text(errors="replace")[-3000:]
        raise EvalError(f"harbor exited with code {result.returncode} (job {job_dir}); its log ({log_path}) ends "
                        f"with:\n{tail}")


def evaluate(checkpoint: str, settings: EvalSettings, results_file: str = "eval_results.json",
             progress=print) -> dict:
    """Run one suite on one checkpoint and write `results_file` into the checkpoint dir."""
    from eval.job_dir import read_job
    from eval.serve import serve_checkpoint

    if settings.agent not in AGENTS:
        raise EvalError(f"--agent {settings.agent}: use one of {', '.join(AGENTS)}")
    checkpoint_dir = Path(checkpoint)
    jobs_dir = Path(settings.jobs_dir) if settings.jobs_dir else checkpoint_dir / "eval_jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    job_name = f"{suite_slug(settings.suite)}-{settings.agent}-{time.strftime('%Y%m%d-%H%M%S')}"
    started = time.monotonic()
    # a distinct served name per run and checkpoint: Harbor keys its results by model name
    name = "-".join(part for part in (checkpoint_dir.resolve().parent.name, checkpoint_dir.name) if part)
    serving = (serve_checkpoint(checkpoint, served_model_name=name) if settings.agent == "terminus-2"
               else nullcontext(None))
    with serving as served:
        command = harbor_command(settings, job_name, jobs_dir, served)
        progress(f"eval: {settings.suite} with {settings.agent} on {checkpoint}"
                 + (f" (served at {served.base_url} as {served.model})" if served else "") + f"; job {jobs_dir / job_name}")
        run_harbor(command, jobs_dir / job_name, jobs_dir / f"{job_name}.log")
        model = served.model if served else None
    job = read_job(jobs_dir / job_name)
    trials = job.trials
    results = {
        "checkpoint": str(checkpoint_dir), "global_step": global_step_of(checkpoint), "suite": settings.suite,
        "agent": settings.agent, "model": model, "metrics": job.metrics(),
        "tasks": [{key: trial.get(key) for key in ("task", "trial", "reward", "rounds", "exception")} for trial in trials],
        "harbor_job_dir": str(jobs_dir / job_name), "settings": asdict(settings),
        "wall_seconds": round(time.monotonic() - started, 1),
    }
    if checkpoint_dir.is_dir():
        (checkpoint_dir / results_file).write_text(json.dumps(results, indent=2))
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="checkpoint dir (or builtin:tiny-qwen3)")
    parser.add_argument("--suite", required=True)
    parser.add_argument("--agent", default="terminus-2", choices=AGENTS)
    parser.add_argument("--attempts", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=1)
    parser.add_argument("--env", default="local", help="local (this repo's sandbox) or a Harbor environment")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--max_tokens", type=int, default=512)
    parser.add_argument("--context_size", type=int)
    parser.add_argument("--parser", default="json", choices=("json", "xml"))
    parser.add_argument("--max_turns", type=int)
    parser.add_argument("--timeout_multiplier", type=float, default=1.0)
    parser.add_argument("--jobs_dir")
    parser.add_argument("--results_file", default="eval_results.json")
    parser.add_argument("--wandb_run_id", help="log eval/<suite>/<metric> into this W&B run (resumed)")
    parser.add_argument("--wandb_project", default=os.environ.get("WANDB_PROJECT", "terminal-recipes"))
    args = parser.parse_args(argv)
    settings = EvalSettings(suite=args.suite, agent=args.agent, attempts=args.attempts, concurrency=args.concurrency,
                            env=args.env, temperature=args.temperature, max_tokens=args.max_tokens,
                            context_size=args.context_size, parser=args.parser, max_turns=args.max_turns,
                            timeout_multiplier=args.timeout_multiplier, jobs_dir=args.jobs_dir)
    try:
        results = evaluate(args.checkpoint, settings, args.results_file)
    except (EvalError, RuntimeError, TimeoutError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.wandb_run_id:
        from eval.wandb_log import log_to_run

        log_to_run(results, run_id=args.wandb_run_id, project=args.wandb_project)
    metrics = results["metrics"]
    print(json.dumps({"suite": results["suite"], "agent": results["agent"], "global_step": results["global_step"],
                      "metrics": metrics, "harbor_job_dir": results["harbor_job_dir"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
