"""Evaluate a checkpoint: serve it, run a Harbor job, score it, write eval_results.json, log to W&B.
Runs in: the training venv; it runs `.venv-harbor/bin/harbor run` as a subprocess and serves the model in another.

    python -m eval.run --checkpoint DIR --suite SUITE [--agent terminus-2|bash-tool|oracle|nop] [--attempts K]
        [--concurrency N] [--env local|docker|daytona|...] [--temperature T] [--max_tokens N] [--context_size N]
        [--parser json|xml] [--max_turns N] [--timeout_multiplier X] [--agent_timeout_multiplier X] [--jobs_dir DIR]
        [--env_kwargs "network=pasta images=FILE ..."] [--infra_errors exclude|zero]
        [--results_file NAME] [--wandb_run_id ID]
    python -m eval.run --model_url URL --model NAME [--api_key KEY] --suite SUITE [same options]
    python -m eval.run --suite DIR --dry_run [--env ENV] [--env_kwargs "..."]    # preflight: can each task run?
    python -m eval.run --suite DIR --prepare [--env_kwargs "..."]   # build the local sandbox's cached layers

SUITE is `builtin:terminal`, `builtin:evocode`, a Harbor dataset name (`terminal-bench@2.0`), a local path to
Harbor tasks, or a JSONL of decision points (eval/decision_points.py); `--env local` is this repo's sandbox. The
options and defaults are eval/settings.py's `EvalSettings`. Infrastructure failures are left out of the means and
counted (--infra_errors zero counts them 0). Agents, served models, keys and outcomes: docs/evaluation.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from common.checkpoints import global_step
from common.errors import UserError
from common.harnesses import BASH_TOOL_HARNESS, HARNESSES
from eval import settings as eval_settings
from eval.decision_points import evaluate_decision_points, is_decision_point_suite
from eval.job_dir import read_job
from eval import prepare as build_ahead
from eval.preflight import parse_env_kwargs, preflight, report_lines
from eval.results import RESULTS_FILE, build_results, suite_slug, summary_line, write_results
from eval.serve import eval_served_name, sanitize_model_name, serve_checkpoint
from eval.settings import EvalSettings
from eval.wandb_log import log_to_run
from harbor_tasks.suites import BUILTIN_SUITES, is_dataset_name

REPO = Path(__file__).resolve().parents[1]
HARBOR_VENV = REPO / ".venv-harbor"
LOCAL_ENV = "harbor_plugins.local_sandbox:LocalSandboxEnvironment"
TERMINUS_PROACTIVE_SUMMARIZATION = 8000  # Harbor 0.25's Terminus-2 default (free tokens)


class EvalError(RuntimeError):
    """An eval that could not run; the message says which step and why."""


@dataclass
class RemoteModel:
    """A model served elsewhere behind an OpenAI-compatible URL (`--model_url`), what harbor_command needs of
    eval/serve.py's ServedModel."""

    base_url: str
    model: str
    max_model_len: int | None = None

    @property
    def harbor_model(self) -> str:  # LiteLLM's provider for any OpenAI-compatible server, with api_base
        return f"hosted_vllm/{self.model}"


def endpoint_max_model_len(base_url: str, model: str, api_key: str | None = None) -> int | None:
    """`max_model_len` of `model` in the server's GET /v1/models (vLLM reports it), else None."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        data = httpx.get(f"{base_url.rstrip('/')}/models", headers=headers, timeout=10).json()["data"]
        return next((m.get("max_model_len") for m in data if isinstance(m, dict) and m.get("id") == model), None)
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return None


def suite_source(suite: str) -> list[str]:
    if suite in BUILTIN_SUITES:
        return ["-p", str(BUILTIN_SUITES[suite])]
    if Path(suite).exists():
        return ["-p", str(Path(suite).resolve())]
    if suite.startswith("builtin:"):
        raise EvalError(f"--suite {suite}: unknown built-in suite; use one of {', '.join(BUILTIN_SUITES)}")
    if is_dataset_name(suite):
        return ["-d", suite]
    raise EvalError(f"--suite {suite}: not a built-in suite, a local path or a Harbor dataset name (name@version "
                    "or org/name)")


def proactive_summarization_threshold(max_input: int) -> int:
    """Terminus-2 summarizes its chat once fewer than this many tokens are free: Harbor's 8,000, or a quarter of a
    smaller context (at 8,000 a model of 8,192 tokens was summarized after its first turn, every multi-turn task
    lost)."""
    return min(TERMINUS_PROACTIVE_SUMMARIZATION, max_input // 4)


def harbor_command(settings: EvalSettings, job_name: str, jobs_dir: Path, served=None) -> list[str]:
    harbor = HARBOR_VENV / "bin" / "harbor"
    if not harbor.exists():
        raise EvalError(f"{harbor}: Harbor is not installed; run `make setup` (it creates .venv-harbor)")
    command = [str(harbor), "run", *suite_source(settings.suite),
               "-a", HARNESSES[settings.agent].eval_agent if settings.agent in HARNESSES else settings.agent,
               "-k", str(settings.attempts), "-n", str(settings.concurrency), "-o", str(jobs_dir),
               "--job-name", job_name, "-y",
               "--env", LOCAL_ENV if settings.env == "local" else settings.env]
    if settings.timeout_multiplier != 1.0:
        command += ["--timeout-multiplier", str(settings.timeout_multiplier)]
    if settings.agent_timeout_multiplier is not None:
        command += ["--agent-timeout-multiplier", str(settings.agent_timeout_multiplier)]
    try:
        env_kwargs = parse_env_kwargs(settings.env_kwargs)
    except ValueError as err:
        raise EvalError(str(err)) from None
    for key, value in env_kwargs.items():
        command += ["--ek", f"{key}={value}"]
    if served is not None and settings.agent == BASH_TOOL_HARNESS:
        # the agent calls api_base itself: Harbor's provider mapping would only import LiteLLM (~8 s a job here)
        command += ["--skip-model-parsing-and-provider-mapping"]
        kwargs = {"api_base": served.base_url, "temperature": settings.temperature, "max_tokens": settings.max_tokens,
                  **({"max_turns": settings.max_turns} if settings.max_turns else {}),
                  **settings.extra_agent_kwargs}
    elif served is not None:
        max_input = settings.context_size or served.max_model_len or 32768
        model_info = {"max_input_tokens": max_input, "max_output_tokens": settings.max_tokens,
                      "input_cost_per_token": 0.0, "output_cost_per_token": 0.0}
        kwargs = {"api_base": served.base_url, "model_info": json.dumps(model_info),
                  "temperature": settings.temperature, "parser_name": settings.parser,
                  "llm_call_kwargs": json.dumps({"max_tokens": settings.max_tokens}),
                  "record_terminal_session": False,  # no asciinema recording (it may be absent, and it costs time)
                  "proactive_summarization_threshold": proactive_summarization_threshold(max_input),
                  **({"max_turns": settings.max_turns} if settings.max_turns else {}),
                  **settings.extra_agent_kwargs}
    if served is not None:
        command += ["-m", served.harbor_model]
        for key, value in kwargs.items():
            command += ["--ak", f"{key}={value}"]
    return command


def run_harbor(command: list[str], job_dir: Path, log_path: Path, extra_env: dict | None = None) -> None:
    env = dict(os.environ, LITELLM_LOCAL_MODEL_COST_MAP="True", HF_HUB_OFFLINE="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
               **(extra_env or {}))
    # Harbor's job-finished telemetry imports LiteLLM on its way out (5-6 s here, and offline it sends nothing);
    # off unless the user set HARBOR_TELEMETRY
    env.setdefault("HARBOR_TELEMETRY", "0")
    with open(log_path, "w") as log:
        result = subprocess.run(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL)
    if result.returncode != 0 or not (job_dir / "result.json").exists():
        tail = log_path.read_text(errors="replace")[-3000:]
        raise EvalError(f"harbor exited with code {result.returncode} (job {job_dir}); its log ({log_path}) ends "
                        f"with:\n{tail}")


def evaluate(checkpoint: str, settings: EvalSettings, results_file: str = RESULTS_FILE,
             progress=print, results_dir: str | Path | None = None) -> dict:
    """Run one suite on one checkpoint and write `results_file` into `results_dir` (default: the checkpoint dir)."""

    invalid = eval_settings.choice_error(settings)
    if invalid:
        raise EvalError(invalid)
    if is_decision_point_suite(settings.suite):  # a JSONL of pivot rows: one model call and one /verify per row
        return evaluate_decision_points(checkpoint, settings, results_file, progress, results_dir)
    checkpoint_dir = Path(checkpoint)
    jobs_dir = Path(settings.jobs_dir) if settings.jobs_dir else checkpoint_dir / "eval_jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    job_name = f"{suite_slug(settings.suite)}-{settings.agent}-{time.strftime('%Y%m%d-%H%M%S')}"
    started = time.monotonic()
    name = eval_served_name(checkpoint)
    serving = (serve_checkpoint(checkpoint, served_model_name=name, model_family=settings.model_family)
               if settings.agent in eval_settings.MODEL_AGENTS else nullcontext(None))
    with serving as served:
        command = harbor_command(settings, job_name, jobs_dir, served)
        progress(f"eval: {settings.suite} with {settings.agent} on {checkpoint}"
                 + (f" (served at {served.base_url} as {served.model})" if served else "") + f"; job {jobs_dir / job_name}")
        run_harbor(command, jobs_dir / job_name, jobs_dir / f"{job_name}.log")
        model = served.model if served else None
    job = read_job(jobs_dir / job_name)
    results = build_results(checkpoint=checkpoint_dir, global_step=global_step(checkpoint), settings=settings,
                            model=model, metrics=job.metrics(settings.infra_errors), trials=job.trials,
                            harbor_job_dir=jobs_dir / job_name, wall_seconds=time.monotonic() - started)
    write_results(results, checkpoint_dir, results_file, results_dir)
    return results


def evaluate_endpoint(model_url: str, model: str, settings: EvalSettings, api_key: str | None = None,
                      results_file: str = RESULTS_FILE, progress=print) -> dict:
    """Run one suite with Terminus-2 or the bash-tool agent (settings.agent) driving `model` at `model_url`
    (OpenAI-compatible, served elsewhere); the Harbor jobs go to settings.jobs_dir (default outputs/evals/<model>)
    and `results_file` into that jobs dir."""

    invalid = eval_settings.choice_error(settings)
    if invalid:
        raise EvalError(invalid)
    if settings.agent not in eval_settings.MODEL_AGENTS:
        raise EvalError(f"--model_url drives a model ({' or '.join(eval_settings.MODEL_AGENTS)}); --agent "
                        f"{settings.agent} uses none (use --checkpoint)")
    if not model_url.startswith(("http://", "https://")):
        raise EvalError(f"--model_url {model_url}: not an http(s) URL (e.g. http://127.0.0.1:8000/v1)")
    jobs_dir = Path(settings.jobs_dir) if settings.jobs_dir else REPO / "outputs" / "evals" / sanitize_model_name(model)
    jobs_dir.mkdir(parents=True, exist_ok=True)
    job_name = f"{suite_slug(settings.suite)}-{settings.agent}-{time.strftime('%Y%m%d-%H%M%S')}"
    started = time.monotonic()
    remote = RemoteModel(model_url.rstrip("/"), model,
                         None if settings.context_size else endpoint_max_model_len(model_url, model, api_key))
    command = harbor_command(settings, job_name, jobs_dir, remote)
    progress(f"eval: {settings.suite} with {settings.agent} on {model} at {remote.base_url}; job {jobs_dir / job_name}")
    # the key travels in the environment (LiteLLM's hosted_vllm provider reads HOSTED_VLLM_API_KEY), never in the
    # command line, which Harbor logs and records in the job's config
    run_harbor(command, jobs_dir / job_name, jobs_dir / f"{job_name}.log",
               {"HOSTED_VLLM_API_KEY": api_key} if api_key else None)
    job = read_job(jobs_dir / job_name)
    results = build_results(checkpoint=model_url, global_step=None, settings=settings, model=model,
                            metrics=job.metrics(settings.infra_errors), trials=job.trials,
                            harbor_job_dir=jobs_dir / job_name,
                            wall_seconds=time.monotonic() - started)
    write_results(results, jobs_dir, results_file)
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m eval.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", help="checkpoint dir (or builtin:tiny-qwen3), served for the eval; or "
                        "--model_url")
    parser.add_argument("--model_url", help=(
        "an OpenAI-compatible base URL (http://HOST:PORT/v1) the agent calls instead of serving a checkpoint; "
        "results: --jobs_dir (default outputs/evals/<model>) gets the Harbor jobs and the results file"))
    parser.add_argument("--model", help="with --model_url: the model name the server expects")
    parser.add_argument("--api_key", help=(
        "with --model_url: the server's API key (default: $HOSTED_VLLM_API_KEY); handed to Harbor through the "
        "environment"))
    eval_settings.add_arguments(parser)  # --suite, --agent, --concurrency, ...: one per EvalSettings field
    parser.add_argument("--results_file", default=RESULTS_FILE,
                        help="file written into the checkpoint dir, or with --model_url into the jobs dir "
                             "(default: %(default)s)")
    parser.add_argument("--dry_run", action="store_true", help=(
        "run nothing: say per task of --suite (a local folder) whether it can run under --env and why not"))
    parser.add_argument("--prepare", action="store_true", help=(
        "build the local sandbox's cached layer of every task of --suite (a local folder) with --env_kwargs, and say "
        "per task built, cached or failed; the run that follows starts every trial from them"))
    parser.add_argument("--wandb_run_id", help="log eval/<suite>/<metric> into this W&B run (resumed)")
    parser.add_argument("--wandb_project", default=os.environ.get("WANDB_PROJECT", "terminal-recipes"),
                        help="the W&B project of --wandb_run_id (default: $WANDB_PROJECT or %(default)s)")
    return parser


def dry_run(settings: EvalSettings) -> int:
    """Preflight of --suite under --env (eval/preflight.py): a line per task and a summary; nothing runs."""

    try:
        source = suite_source(settings.suite)
        if source[0] != "-p":
            raise EvalError(f"--suite {settings.suite}: a Harbor dataset is fetched when it runs; for a preflight "
                            f"download it first (harbor download {settings.suite} -o DIR) and pass --suite DIR")
        report = preflight(source[1], settings.env, settings.env_kwargs)
    except (EvalError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(report_lines(report)))
    return 0


def prepare_suite(settings: EvalSettings) -> int:
    """The cached layers of --suite's tasks (eval/prepare.py), built ahead of a run; a line per task and a summary."""
    started = time.monotonic()
    try:
        source = suite_source(settings.suite)
        if source[0] != "-p" or settings.env != "local":
            raise EvalError("--prepare builds the local sandbox's layers (--env local) of a local folder of tasks "
                            f"(--suite DIR), not --suite {settings.suite} --env {settings.env}")
        rows = build_ahead.prepare(source[1], settings.env_kwargs, settings.concurrency)
    except (EvalError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print("\n".join(build_ahead.report_lines(rows, time.monotonic() - started)))
    return 1 if any(r["status"] == "failed" for r in rows) else 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if Path(args.results_file).name != args.results_file:  # before the eval runs, not after it
        parser.error(f"--results_file {args.results_file}: a file name, written into the checkpoint dir (or with "
                     f"--model_url the jobs dir); pass e.g. --results_file {Path(args.results_file).name}")
    settings = eval_settings.from_args(args)
    if args.dry_run:
        return dry_run(settings)
    if args.prepare:
        return prepare_suite(settings)
    if bool(args.checkpoint) == bool(args.model_url):
        print("error: give exactly one of --checkpoint DIR (served for the eval) or --model_url URL --model NAME "
              "(already served)", file=sys.stderr)
        return 2
    if args.model_url and not args.model:
        print("error: --model_url needs --model NAME (the model name the server expects)", file=sys.stderr)
        return 2
    if args.checkpoint and (args.model or args.api_key):
        print("error: --model and --api_key go with --model_url, not --checkpoint", file=sys.stderr)
        return 2
    try:
        if args.model_url:
            results = evaluate_endpoint(args.model_url, args.model, settings,
                                        args.api_key or os.environ.get("HOSTED_VLLM_API_KEY"), args.results_file)
        else:
            results = evaluate(args.checkpoint, settings, args.results_file)
    except (EvalError, RuntimeError, TimeoutError, UserError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.wandb_run_id:
        log_to_run(results, run_id=args.wandb_run_id, project=args.wandb_project)
    metrics = results["metrics"]
    print(summary_line(results), file=sys.stderr)
    print(json.dumps({"suite": results["suite"], "agent": results["agent"], "global_step": results["global_step"],
                      "metrics": metrics, "harbor_job_dir": results["harbor_job_dir"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
