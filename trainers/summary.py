"""The short report every SFT and GRPO run ends with: printed, written to run_summary.json and the W&B run summary.
Runs in: the training venv, on the main process at the end of a recipe.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from common.checkpoints import checkpoints
from common.harnesses import BASH_TOOL_HARNESS


def final_loss(log_history: list[dict]) -> float | None:
    """The last logged training loss; the run's mean (`train_loss`) when no logging step came."""
    losses = [entry["loss"] for entry in log_history if "loss" in entry]
    means = [entry["train_loss"] for entry in log_history if "train_loss" in entry]
    return losses[-1] if losses else (means[-1] if means else None)


def wandb_run_dir() -> str | None:
    try:
        import wandb
    except ImportError:
        return None
    return wandb.run.dir if wandb.run is not None else None


def build_sft_summary(trainer, corpus, tokens: dict, wall_seconds: float, resumed_from: str | None,
                      corpus_cache: dict | None = None, seconds_to_first_step: float | None = None) -> dict:
    """`corpus_cache`: corpus_cache.corpus_cache_report's keys (hit, miss or off on the main process and on each
    rank, the preparation's seconds); `seconds_to_first_step`: from the recipe's start to its first micro-batch."""
    state = trainer.state
    output_dir = Path(trainer.args.output_dir)
    return {
        "sources": [asdict(stat) for stat in corpus.stats],
        "invalid_skipped": len(corpus.problems),
        "invalid_records": corpus.problems,
        "dropped_records": corpus.drops,
        "dropped": len(corpus.drops),
        "truncated": sum(stat.truncated for stat in corpus.stats),
        "below_min_reward": sum(stat.below_min_reward for stat in corpus.stats),
        "decontaminated_against": corpus.decontaminated_against,  # the eval suites checked (decontaminate_against)
        "decontaminated": sum(stat.decontaminated for stat in corpus.stats),
        "decontaminated_records": corpus.decontaminated,
        "template_overlap": sum(stat.template_overlap for stat in corpus.stats),
        "trained_tokens_cut": sum(stat.trained_tokens_cut for stat in corpus.stats),
        **(corpus_cache or {}),
        "seconds_to_first_step": round(seconds_to_first_step, 3) if seconds_to_first_step is not None else None,
        "train_records": len(corpus.train),
        "eval_records": len(corpus.eval) if corpus.eval is not None else 0,
        **tokens,
        "trained_tokens_per_second": tokens["trained_tokens"] / wall_seconds if wall_seconds else 0.0,
        "global_step": state.global_step,
        "epochs": state.epoch,
        "final_loss": final_loss(state.log_history),
        "wall_seconds": wall_seconds,
        "resumed_from": resumed_from,
        "output_dir": str(output_dir),
        "checkpoints": [path.name for path in checkpoints(output_dir)],
        "wandb_run_dir": wandb_run_dir(),
    }


def print_sft_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="records per source", title_justify="left")
    rejected = any(source.get("below_min_reward") for source in summary["sources"])  # its column only when used
    decontaminated = bool(summary.get("decontaminated_against"))  # its column only when decontamination ran
    columns = ("path", "rows", "invalid", *(("below_min_reward",) if rejected else ()),
               *(("decontaminated",) if decontaminated else ()), "train_records",
               "eval_records", "truncated", "dropped", "not_sampled", "repeated", "tokens", "trained_tokens")
    for column in columns:
        table.add_column(column.replace("_records", "").replace("below_min_reward", "< min_reward")
                         .replace("decontaminated", "contaminated").replace("_", " "),
                         justify="left" if column == "path" else "right", no_wrap=column == "path")
    for source in summary["sources"]:
        table.add_row(*(str(source[column]) for column in columns))
    console = Console(width=140 + 15 * rejected + 15 * decontaminated)
    console.rule("[bold]SFT run summary")
    console.print(table)
    loss = summary["final_loss"]
    lines = [
        f"steps {summary['global_step']}  epochs {summary['epochs']:.2f}  final loss "
        f"{loss:.4f}" if loss is not None else f"steps {summary['global_step']}  final loss n/a",
        f"tokens trained {summary['trained_tokens']:,} of {summary['real_tokens']:,} real tokens in "
        f"{summary['batches']} batches; padding efficiency {summary['padding_efficiency']:.1%} "
        f"({summary['padded_tokens'] - summary['real_tokens']:,} pad positions)",
        f"invalid skipped {summary['invalid_skipped']}  truncated {summary['truncated']} "
        f"({summary['trained_tokens_cut']:,} trained tokens cut)  dropped {summary['dropped']}"
        + (f"  below min_reward {summary['below_min_reward']}" if summary.get("below_min_reward") else ""),
        *([f"decontaminated against {', '.join(summary['decontaminated_against'])}: {summary['decontaminated']} "
           f"contaminated record(s) dropped; {summary['template_overlap']} with template overlap kept (shared "
           "template n-grams only: not contamination)"] if decontaminated else []),
        *([f"corpus cache {summary['corpus_cache']} on the main process ({', '.join(summary['corpus_cache_ranks'])} "
           f"by rank), every rank holding its corpus after {summary['corpus_prepare_seconds']:.1f} s"
           + (f"; entry {summary['corpus_cache_path']}" if summary.get("corpus_cache_path") else "")
           + (f"; first step {summary['seconds_to_first_step']:.1f} s after the start"
              if summary.get("seconds_to_first_step") is not None else "")] if "corpus_cache" in summary else []),
        f"wall {summary['wall_seconds']:.1f} s  ({summary['trained_tokens_per_second']:,.0f} trained tokens/s)"
        + (f"  resumed from {summary['resumed_from']}" if summary["resumed_from"] else ""),
        f"output dir {summary['output_dir']}  checkpoints {', '.join(summary['checkpoints']) or 'none'}",
        f"W&B run dir {summary['wandb_run_dir'] or 'none (report_to has no wandb)'}",
    ]
    for line in lines:
        console.print(line, highlight=False)


def build_grpo_summary(trainer, prompts, verify_requests: dict, wall_seconds: float, resumed_from: str | None,
                       reward_urls: list[str]) -> dict:
    """`prompts`: the run's `grpo_prompts.GRPOPrompts`; `verify_requests`: the reward client's counts."""
    return {
        "sources": [asdict(stat) for stat in prompts.stats],
        "invalid_skipped": len(prompts.problems),
        "invalid_records": prompts.problems,
        "too_long_filtered": sum(stat.too_long for stat in prompts.stats),
        "train_prompts": len(prompts.train),
        "eval_prompts": len(prompts.eval) if prompts.eval is not None else 0,
        "verify_requests": dict(verify_requests),
        "global_step": trainer.state.global_step,
        "final_loss": final_loss(trainer.state.log_history),
        "wall_seconds": wall_seconds,
        "resumed_from": resumed_from,
        "reward_urls": reward_urls,
        "output_dir": str(trainer.args.output_dir),
        "wandb_run_dir": wandb_run_dir(),
    }


def print_grpo_summary(summary: dict) -> None:
    print("GRPO run summary")
    for source in summary["sources"]:
        print(f"  {source['path']}: {source['rows']} rows, {source['invalid']} invalid, {source['too_long']} "
              f"prompts over max_prompt_length, {source['train_prompts']} train / {source['eval_prompts']} eval; "
              f"environments {source['environments']}")
    print(f"  steps {summary['global_step']}, final loss {summary['final_loss']}, wall {summary['wall_seconds']:.1f} s")
    print(f"  /verify on this process: {summary['verify_requests']} (masked and failed samples are excluded "
          "from the advantage)")
    print(f"  output dir {summary['output_dir']}; W&B run dir {summary['wandb_run_dir'] or 'none'}")


def build_agentic_summary(trainer, tasks: list, task_dirs: list[str], episodes: dict, wall_seconds: float,
                          resumed_from: str | None, by_family: dict | None = None,
                          evals: list[dict] | None = None, seeds: dict | None = None,
                          harness: str = BASH_TOOL_HARNESS, task_profile: dict | None = None) -> dict:
    """`episodes`: the run's `task_env.EpisodeStats.as_dict()` (counts, not-scored kinds, sandbox timings);
    `by_family`: the reward's {family: {"scored", "passed"}}; `evals`: the eval callback's results, in order.
    `seeds`: {"train_seeds", "eval_seeds"} of the generated tasks (trainers.agentic.check_held_out); `harness`: how
    the policy acted (common/harnesses.py), which is also the agent its evals ran.
    `rollout_pass_rate_by_step`: [step, the logged episodes/pass_rate] (the train tasks' rollouts, at the sampling
    temperature); `eval_by_step`: {suite: [[step, mean_reward], ...]} (the held-out curve); `task_profile`: what
    profiling the train tasks kept (trainers/task_profiling.py), when the run profiled them."""
    rollouts = [[entry["step"], round(entry["episodes/pass_rate"], 4)] for entry in trainer.state.log_history
                if "episodes/pass_rate" in entry and "step" in entry]
    curves: dict[str, list] = {}
    for results in evals or []:
        curves.setdefault(results["suite"], []).append([results["global_step"], results["metrics"].get("mean_reward")])
    families = {family: {**counts, "pass_rate": round(counts["passed"] / counts["scored"], 4) if counts["scored"]
                         else None} for family, counts in sorted((by_family or {}).items())}
    return {"harness": harness, "tasks": len(tasks), "task_dirs": task_dirs, **episodes,
            "global_step": trainer.state.global_step,
            "final_loss": final_loss(trainer.state.log_history), "wall_seconds": round(wall_seconds, 1),
            "resumed_from": resumed_from, "output_dir": str(trainer.args.output_dir), "wandb_run_dir": wandb_run_dir(),
            **(seeds or {}), "by_family": families, "rollout_pass_rate_by_step": rollouts, "eval_by_step": curves,
            **({"task_profile": task_profile} if task_profile else {})}


def print_agentic_summary(summary: dict) -> None:
    harness = summary.get("harness", BASH_TOOL_HARNESS)
    actions = (f"{summary['tool_calls']} tool calls ({summary['tool_errors']} errors)"
               if harness == BASH_TOOL_HARNESS else
               f"{summary.get('commands', 0)} commands typed, {summary.get('parse_errors', 0)} responses Terminus-2 "
               f"could not parse, {summary.get('parse_warnings', 0)} with warnings")
    print(f"agentic GRPO ({harness}): {summary['global_step']} steps on {summary['tasks']} tasks, "
          f"{summary['episodes']} episodes ({summary['scored']} scored, pass rate {summary['pass_rate']}; not scored "
          f"by kind {summary['masked_by_kind'] or '{}'}; ended by the wall limit {summary['ended_by_limit']}; "
          f"tampered with the verifier {summary.get('tampered', 0)} {summary.get('tampered_by_kind') or '{}'}); "
          f"{actions}; sandbox start {summary['sandbox_start_seconds_mean']} s, verify {summary['verify_seconds_mean']} s on average; "
          f"wall {summary['wall_seconds']} s; output {summary['output_dir']}; W&B {summary['wandb_run_dir'] or 'none'}")
    if summary.get("train_seeds") or summary.get("eval_seeds"):
        print(f"generated tasks by seed: train {summary.get('train_seeds') or {}}, held out "
              f"{summary.get('eval_seeds') or {}}")
    if summary.get("task_profile"):
        from trainers.task_profiling import summary_line

        print(summary_line(summary["task_profile"]))
    if summary.get("by_family"):
        print("rollout pass rate by family: " + ", ".join(
            f"{family} {c['pass_rate']} ({c['passed']}/{c['scored']})" for family, c in summary["by_family"].items()))
    if summary.get("rollout_pass_rate_by_step"):
        print("rollout pass rate by step: " + ", ".join(f"{step}: {rate}"
                                                         for step, rate in summary["rollout_pass_rate_by_step"]))
    for suite, curve in (summary.get("eval_by_step") or {}).items():
        print(f"eval {suite} by step: " + ", ".join(f"{step}: {score}" for step, score in curve))


def write_summary(summary: dict) -> None:
    """run_summary.json in the output dir, and the W&B run's summary when a run is active."""
    Path(summary["output_dir"]).mkdir(parents=True, exist_ok=True)
    (Path(summary["output_dir"]) / "run_summary.json").write_text(json.dumps(summary, indent=2))
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is not None:
        flat = {f"data/{key}": value for key, value in summary.items()
                if isinstance(value, (int, float)) and not isinstance(value, bool)}
        for kind, count in summary.get("tampered_by_kind", {}).items():  # agentic GRPO: tamper evidence by kind
            flat[f"data/tampered_by_kind/{kind}"] = count
        for key, counts in summary.get("verify_requests", {}).items():  # GRPO: /verify outcomes
            flat[f"verify_requests/{key}"] = counts
        for source in summary.get("sources", []):  # SFT and GRPO corpora; agentic GRPO has tasks instead
            name = Path(source["path"]).name
            flat.update({f"data/{name}/{key}": value for key, value in source.items() if isinstance(value, int)})
        wandb.run.summary.update(flat)
