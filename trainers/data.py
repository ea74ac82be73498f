"""The corpus CLI: look at a corpus before training on it, and prepare it into the cache a run will find.
Runs in: the training venv, on any CPU machine (the model's tokenizer, no GPU).

    python -m trainers.data inspect PATH... [--strict] [--json] [--max_length N] [--model_name_or_path M]
    python -m trainers.data render PATH --index I [--json] [--model_name_or_path M]
    python -m trainers.data decontaminate CORPUS... --against SUITE... [--n 13] [--json]
    python -m trainers.data prepare [--config configs/sft/X.yaml] [--num_proc N] [--json] [--key value ...]
    python -m trainers.data pivots --jobs JOBS_DIR [JOBS_DIR ...] --out F.jsonl [--val_fraction X] [--json] [...]
    python -m trainers.data profile --rows F.jsonl --out G.jsonl (--model_url URL --model M | --checkpoint DIR) [...]
What each reports and how: docs/formats.md (inspect, render, decontaminate, pivots), docs/scaling.md (prepare),
docs/grpo.md#profiling-pivots (profile).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import random
import re
import statistics
import sys

from chat_corpus import decontaminate, pivots
from chat_corpus.cache import prepare_corpus
from chat_corpus.masking import (TRUNCATION_POLICIES, fit_to_length, load_tokenizer, tokenize_chat,
                                 training_chat_template)
from chat_corpus.records import RecordError
from chat_corpus.sft_corpus import CorpusArguments
from chat_corpus.sources import FORMATS, Source, load_source, to_record
from common.errors import UserError
from eval.decision_points import read_rows
from eval.serve import checkpoint_family, resolve_checkpoint, serve_checkpoint
from modeling.tiny_model import resolve_model
from rewards.local import local_reward_server
from trainers import profiling
from trainers.recipe_config import DEFAULT_SFT_CONFIG, parse_config

DEFAULT_MODEL = "builtin:tiny-qwen3"


def _load(path: str, fmt: str, split_key: str, min_reward: float | None = None):
    """Every row of `path`, SFT records and GRPO prompts alike (the SFT corpus refuses the prompts)."""
    return load_source(Source(path, format=fmt, min_reward=min_reward), split_key,
                       functools.partial(to_record, prompts=True))


def tokenize_prompt(tokenizer, record: dict) -> tuple[list[int], list[int]]:
    """A GRPO prompt as the policy sees it (its chat template, with the generation prompt); nothing is trained."""
    input_ids = tokenizer.apply_chat_template(record["prompt"], add_generation_prompt=True, tokenize=True,
                                              return_dict=True)["input_ids"]
    return list(input_ids), [0] * len(input_ids)


def _load_tokenizer(name: str, revision: str | None = None, chat_template_path: str | None = None):
    """The tokenizer as recipes/sft.py loads it, and its training chat template."""
    tokenizer = load_tokenizer(resolve_model(name), revision, chat_template_path)
    return tokenizer, training_chat_template(tokenizer)


def _percentiles(values: list[int]) -> dict:
    if not values:
        return {}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]
    return {"min": ordered[0], "mean": round(statistics.fmean(ordered), 1), "p50": pick(0.5), "p90": pick(0.9),
            "max": ordered[-1], "total": sum(ordered)}


def packing_efficiency(lengths: list[int], max_length: int) -> float:
    """Fill of BFD packs (TRL's `pack_dataset`, as the SFT recipe packs): real tokens / (packs x max_length)."""
    import datasets
    from trl.data_utils import pack_dataset

    datasets.disable_progress_bars()
    if not lengths:
        return 1.0
    packed = pack_dataset(datasets.Dataset.from_dict({"input_ids": [[0] * n for n in lengths]}), max_length, "bfd")
    return sum(lengths) / (len(packed) * max_length)


def padding_efficiency(lengths: list[int], batch_size: int, seed: int = 0) -> float:
    """Fill of randomly drawn batches padded to their longest record (TRL's default, no packing)."""
    order = lengths[:]
    random.Random(seed).shuffle(order)
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    padded = sum(max(batch) * len(batch) for batch in batches)
    return sum(order) / padded if padded else 1.0


def inspect_path(path: str, args) -> dict:
    loaded = _load(path, args.format, args.split_key, args.min_reward)
    report = {"path": path, "rows": loaded.n_rows, "valid": len(loaded.records), "invalid": len(loaded.problems),
              "formats": loaded.formats, "groups": len({r["group"] for r in loaded.records}),
              "missing_split_key": loaded.missing_split_key, "problems": loaded.problems,
              "below_min_reward": loaded.below_min_reward, "no_reward": loaded.no_reward}
    if args.no_tokens or not loaded.records:
        return report
    tokenizer, template = args.tokenizer
    prompts = [record for record in loaded.records if "prompt" in record]
    if prompts:
        report["prompt_tokens"] = _percentiles([len(tokenize_prompt(tokenizer, record)[0]) for record in prompts])
    records = [record for record in loaded.records if "messages" in record]
    if not records:
        return report
    lengths, trained, fitted_lengths, truncated, dropped = [], [], [], 0, []
    for record in records:
        try:
            input_ids, mask = tokenize_chat(tokenizer, template, record)
        except RecordError as err:
            report["problems"].append(f"{record['origin']}: {err}")
            continue
        lengths.append(len(input_ids))
        trained.append(sum(mask))
        try:
            fitted = fit_to_length(input_ids, mask, args.max_length, args.truncation)
        except RecordError as err:
            dropped.append(f"{record['origin']}: {err}")
            continue
        truncated += fitted.truncated
        fitted_lengths.append(len(fitted.input_ids))
    report["valid"] -= len(report["problems"]) - report["invalid"]  # records the template could not render
    report["invalid"] = len(report["problems"])
    report.update({
        "tokens": _percentiles(lengths), "trained_tokens": _percentiles(trained),
        "max_length": args.max_length, "truncation": args.truncation, "truncated": truncated,
        "dropped": len(dropped), "drops": dropped,
        "packing_efficiency": round(packing_efficiency(fitted_lengths, args.max_length), 4),
        f"padding_efficiency_batch{args.batch_size}": round(padding_efficiency(fitted_lengths, args.batch_size), 4),
    })
    return report


def print_report(report: dict) -> None:
    print(f"{report['path']}: {report['rows']} rows, {report['valid']} valid, {report['invalid']} invalid; "
          f"formats {report['formats']}; {report['groups']} split groups"
          + (f" ({report['missing_split_key']} records without the split key)" if report["missing_split_key"] else ""))
    if report["below_min_reward"] or report["no_reward"]:
        print(f"  min_reward: {report['below_min_reward']} below it, {report['no_reward']} without a reward "
              "(left out of 'valid')")
    for problem in report["problems"]:
        print(f"  {problem}")
    if "prompt_tokens" in report:
        t = report["prompt_tokens"]
        print(f"  GRPO prompt tokens (with the generation prompt): min {t['min']}  p50 {t['p50']}  mean {t['mean']}  "
              f"p90 {t['p90']}  max {t['max']}  (compare max_prompt_length: longer prompts are filtered out)")
    if "tokens" in report:
        t, tr = report["tokens"], report["trained_tokens"]
        print(f"  tokens per record: min {t['min']}  p50 {t['p50']}  mean {t['mean']}  p90 {t['p90']}  max {t['max']}"
              f"  (total {t['total']:,}; trained {tr['total']:,} = {tr['total'] / max(1, t['total']):.1%})")
        print(f"  at max_length {report['max_length']} (truncation: {report['truncation']}): "
              f"{report['truncated']} truncated, {report['dropped']} dropped")
        for drop in report["drops"]:
            print(f"    dropped {drop}")
        key = next(k for k in report if k.startswith("padding_efficiency_batch"))
        print(f"  batch fill: BFD packing {report['packing_efficiency']:.1%}, "
              f"padding without packing (batch {key.removeprefix('padding_efficiency_batch')}) {report[key]:.1%}")


def render(args) -> int:
    loaded = _load(args.path, args.format, "metadata.source_trajectory_uid")
    if not 0 <= args.index < len(loaded.records):
        print(f"error: --index {args.index} is out of range: {args.path} has {len(loaded.records)} valid records "
              f"(0..{len(loaded.records) - 1})", file=sys.stderr)
        return 2
    record = loaded.records[args.index]
    tokenizer, template = args.tokenizer
    if "prompt" in record:
        input_ids, mask = tokenize_prompt(tokenizer, record)
    else:
        input_ids, mask = tokenize_chat(tokenizer, template, record)
    tokens = [{"text": tokenizer.decode([token]), "trained": bool(bit)} for token, bit in zip(input_ids, mask)]
    if args.json:
        json.dump({"origin": record["origin"], "tokens": tokens}, sys.stdout, ensure_ascii=False)
        print()
        return 0
    from rich.console import Console
    from rich.text import Text

    console = Console(highlight=False, soft_wrap=True)
    plain = not console.is_terminal
    text = Text()
    for index, token in enumerate(tokens):
        opens = token["trained"] and (index == 0 or not tokens[index - 1]["trained"])
        closes = token["trained"] and (index == len(tokens) - 1 or not tokens[index + 1]["trained"])
        if plain:  # no colours in a pipe: mark trained spans with brackets instead
            text.append(("⟦" if opens else "") + token["text"] + ("⟧" if closes else ""))
        else:
            text.append(token["text"], style="bold green" if token["trained"] else "dim")
    n_trained = sum(t["trained"] for t in tokens)
    console.print(f"{record['origin']}: {len(tokens)} tokens, {n_trained} trained "
                  + ("(inside ⟦ ⟧)" if plain else "(green)"))
    console.print(text)
    return 0


def decontaminate_command(args) -> int:
    if args.n < 1:
        print(f"error: --n {args.n}: must be at least 1 (words per n-gram; default {decontaminate.DEFAULT_N})",
              file=sys.stderr)
        return 2
    try:
        checker = decontaminate.Decontaminator(args.against, args.n)
    except ValueError as err:
        print(f"error: --against {err}", file=sys.stderr)
        return 2
    try:
        result = decontaminate.scan_paths(args.paths, checker, args.format)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(result, sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        decontaminate.print_scan(result)
    return 0  # a report: contamination found is not a failure of the command


def pivots_command(args) -> int:
    from rewards.environments import AGENT_NAMES  # the agent_ref names our reward server routes, to which environment

    problems = []
    args.agent_name = args.agent_name or pivots.ENVIRONMENT_AGENT_NAMES[args.environment]
    if AGENT_NAMES.get(args.agent_name) != args.environment:
        routed = sorted(name for name, env in AGENT_NAMES.items() if env == args.environment)
        problems.append(f"--agent_name {args.agent_name}: not a name the reward server routes to {args.environment} "
                        f"(one of {', '.join(routed)})")
    if not 0 <= args.val_fraction < 1:
        problems.append(f"--val_fraction {args.val_fraction}: must be in [0, 1)")
    if args.threshold is not None and not 0 < args.threshold <= 1:
        problems.append(f"--threshold {args.threshold}: must be in (0, 1] (a keystroke similarity)")
    if args.max_per_task < 0 or args.max_keystroke_chars < 1:
        problems.append("--max_per_task must be >= 0 (0: no cap) and --max_keystroke_chars >= 1")
    for pattern in args.infra_pattern:
        try:
            re.compile(pattern)
        except re.error as err:
            problems.append(f"--infra_pattern {pattern!r}: not a regular expression ({err})")
    if problems:
        print(f"error: {problems[0]}", file=sys.stderr)
        return 2
    options = pivots.PivotOptions(min_reward=args.min_reward, max_per_task=args.max_per_task,
                                  max_keystroke_chars=args.max_keystroke_chars,
                                  infra_patterns=tuple(args.infra_pattern), agent_name=args.agent_name,
                                  val_fraction=args.val_fraction, seed=args.seed, skip_invalid=args.skip_invalid,
                                  threshold=args.threshold, environment=args.environment)
    try:
        train, val, report = pivots.build_pivots(args.jobs, options)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    report.files["train"] = str(args.out)
    pivots.write_rows(args.out, train)
    if args.val_fraction:
        report.files["val"] = str(pivots.val_path(args.out))
        pivots.write_rows(report.files["val"], val)
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        print()
    else:
        print("\n".join(pivots.summary_lines(report)))
    return 0


def profile_command(args) -> int:
    options = profiling.ProfileOptions(k=args.k, keep=args.keep, max_mean=args.max_mean, temperature=args.temperature,
                                       max_tokens=args.max_tokens, concurrency=args.concurrency)
    if (args.model_url is None) == (args.checkpoint is None):
        print("error: pass --model_url URL --model M (any OpenAI-compatible server: vLLM, python -m eval.serve) or "
              "--checkpoint DIR (served here for the run), not both", file=sys.stderr)
        return 2
    if args.model_url is not None and not args.model:
        print(f"error: --model_url {args.model_url} needs --model (the served name its requests ask for)",
              file=sys.stderr)
        return 2
    try:
        rows = read_rows(args.rows)
        with contextlib.ExitStack() as stack:
            model_url, model, family = args.model_url, args.model, None
            if args.checkpoint is not None:
                family = checkpoint_family(resolve_checkpoint(args.checkpoint))
                served = stack.enter_context(serve_checkpoint(args.checkpoint))
                model_url, model = served.base_url, served.model
            reward_url = args.reward_url or stack.enter_context(local_reward_server(args.reward_server_config))
            profiling.check_endpoints(model_url, model, reward_url)
            report = profiling.profile_rows(rows, args.out, model_url, model, reward_url, options, family)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(report.as_dict(), sys.stdout, indent=2)
        print()
    else:
        print("\n".join(profiling.summary_lines(report, options)))
    return 0


def prepare_command(argv: list[str]) -> int:
    """`prepare`: the recipe's config parsed by the recipe's parser, on CPU (a GPU config's bf16 and devices do
    not apply: the key has none of them), then the corpus prepared into its cache entry."""
    from trl import ModelConfig, SFTConfig

    from trainers.eval_callback import EvalArguments

    parser = argparse.ArgumentParser(prog="python -m trainers.data prepare", description=(
        "Prepare an SFT config's corpus into the cache its run loads. Other --key value pairs override the "
        "config, as on the recipe's command line."))
    parser.add_argument("--config", default=str(DEFAULT_SFT_CONFIG), help="recipe config (default: the embedded one)")
    parser.add_argument("--num_proc", type=int, default=None, help="processes that tokenize (default: dataset_num_proc)")
    parser.add_argument("--json", action="store_true", help="print the entry's meta.json summary as JSON")
    args, overrides = parser.parse_known_args(argv)
    try:
        corpus_args, training_args, model_args, _ = parse_config(
            (CorpusArguments, SFTConfig, ModelConfig, EvalArguments), DEFAULT_SFT_CONFIG,
            ["--config", args.config, *overrides, "--use_cpu", "true", "--bf16", "false", "--fp16", "false",
             "--report_to", "none"])
        tokenizer, _ = _load_tokenizer(model_args.model_name_or_path, model_args.model_revision,
                                       training_args.chat_template_path)
        prepared = prepare_corpus(corpus_args, tokenizer, training_args.max_length,
                                  args.num_proc or training_args.dataset_num_proc)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    corpus = prepared.corpus
    report = {"corpus_cache": prepared.cache, "path": prepared.path, "key": prepared.key,
              "seconds": round(prepared.seconds, 3), "changed": prepared.changed, "train_records": len(corpus.train),
              "eval_records": len(corpus.eval) if corpus.eval is not None else 0,
              "tokens": sum(stat.tokens for stat in corpus.stats),
              "trained_tokens": sum(stat.trained_tokens for stat in corpus.stats),
              "truncated": sum(stat.truncated for stat in corpus.stats), "dropped": len(corpus.drops),
              "invalid_skipped": len(corpus.problems)}
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        print()
    else:
        print(prepared.describe())
        print(f"  {report['train_records']} train / {report['eval_records']} eval records, {report['tokens']:,} tokens "
              f"({report['trained_tokens']:,} trained); truncated {report['truncated']}, dropped {report['dropped']}, "
              f"invalid skipped {report['invalid_skipped']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["prepare"]:  # its options are the recipe config's keys, which argparse cannot list up front
        return prepare_command(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m trainers.data", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--model_name_or_path", default=DEFAULT_MODEL, help="tokenizer and chat template to use")
    common.add_argument("--chat_template_path", default=None, help="a .jinja chat template used instead of the "
                        "model's (the SFT config's chat_template_path)")
    common.add_argument("--format", default="auto", choices=FORMATS)
    common.add_argument("--json", action="store_true", help="machine-readable output")
    inspect = commands.add_parser("inspect", parents=[common], help="validate and measure corpora")
    inspect.add_argument("paths", nargs="+", metavar="PATH")
    inspect.add_argument("--strict", action="store_true", help="exit 1 if any record is invalid")
    inspect.add_argument("--max_length", type=int, default=4096)
    inspect.add_argument("--truncation", default="turns", choices=TRUNCATION_POLICIES)
    inspect.add_argument("--batch_size", type=int, default=8, help="batch size for the padding estimate")
    inspect.add_argument("--split_key", default="metadata.source_trajectory_uid")
    inspect.add_argument("--no_tokens", action="store_true", help="validate only, without tokenizing")
    inspect.add_argument("--min_reward", type=float, default=None,
                         help="keep only records whose metadata.reward (a Harbor trial's verifier reward) is at least "
                              "this, as the `min_reward` key of a config's source does")
    show = commands.add_parser("render", parents=[common], help="show one record's tokens, trained or not")
    show.add_argument("path", metavar="PATH")
    show.add_argument("--index", type=int, required=True, help="0-based index among the file's valid records")
    clean = commands.add_parser("decontaminate", help="find records that overlap eval tasks (13-gram check)")
    clean.add_argument("paths", nargs="+", metavar="CORPUS", help="JSONL files, Harbor job dirs, HF dataset names")
    clean.add_argument("--against", nargs="+", required=True, metavar="SUITE",
                       help="eval suites: builtin:terminal, builtin:evocode, a folder of Harbor tasks or a task folder")
    clean.add_argument("--n", type=int, default=decontaminate.DEFAULT_N, help="n-gram size in words (default 13)")
    clean.add_argument("--format", default="auto", choices=FORMATS)
    clean.add_argument("--json", action="store_true", help="machine-readable output")
    build = commands.add_parser("pivots", help="terminal-pivot rows (NeMo Gym terminus_judge) from Harbor Terminus-2 "
                                "jobs", description=(
        "One row per valid action of each passing Terminus-2 trajectory: the conversation as Terminus-2 sent it up to "
        "that turn, the action as expected_answer. Rules and counts: docs/formats.md#pivot-rows-from-harbor-jobs."))
    build.add_argument("--jobs", nargs="+", required=True, metavar="JOBS_DIR",
                       help="Harbor job directories (or folders of them, or trial folders)")
    build.add_argument("--out", required=True, metavar="F.jsonl", help="the rows; with --val_fraction the validation "
                       "rows go to F.val.jsonl")
    build.add_argument("--min_reward", type=float, default=1.0,
                       help="keep trajectories whose verifier reward is at least this (default: %(default)s)")
    build.add_argument("--max_per_task", type=int, default=pivots.MAX_PER_TASK,
                       help="trajectories kept per task, a seeded choice (default: %(default)s; 0: all)")
    build.add_argument("--max_keystroke_chars", type=int, default=pivots.MAX_KEYSTROKE_CHARS, help=(
        "leave out actions whose keystrokes total more characters (default: %(default)s, where the reward's "
        "similarity cuts each side)"))
    build.add_argument("--infra_pattern", action="append", default=[], metavar="REGEX", help=(
        "a regular expression of collection-infrastructure output, added to the built-in list; rows whose "
        "conversation shows a match are left out (repeatable)"))
    build.add_argument("--environment", default="terminus_judge", choices=sorted(pivots.ENVIRONMENT_AGENT_NAMES),
                       help=("the reward the rows are for: terminus_judge (string similarity to the teacher's action) "
                             "or terminus_functional (the action judged by its effect in the task: each row also "
                             "carries its task folder and the teacher's keystrokes before and after it; trials whose "
                             "task folder is not on this machine are dropped as no_task_folder) "
                             "(default: %(default)s)"))
    build.add_argument("--agent_name", default=None,
                       help=("agent_ref.name of the rows, routed to --environment (default: "
                             f"{pivots.DEFAULT_AGENT_NAME}; terminus_functional_simple_agent for terminus_functional)"))
    build.add_argument("--threshold", type=float, default=None, help=(
        "each row's `threshold`: the keystroke similarity terminus_judge requires for reward 1 (the server's "
        "default, 0.9 string-only, where unset; 1.0: the teacher's keystrokes exactly)"))
    build.add_argument("--val_fraction", type=float, default=0.0,
                       help="share of trajectories whose rows go to the validation file (default: %(default)s)")
    build.add_argument("--seed", type=int, default=0, help="seed of the per-task choice and the split")
    build.add_argument("--skip_invalid", action="store_true",
                       help="leave out (and count) trials whose trajectory.json cannot be read, instead of stopping")
    build.add_argument("--json", action="store_true", help="print the summary as JSON")
    profile = commands.add_parser("profile", help="PivotRL's filter: K samples of the starting policy per pivot row, "
                                  "scored by /verify; keep the rows whose rewards vary", description=(
        "K samples per row from an OpenAI-compatible endpoint, each scored through the reward server's /verify; mean, "
        "std and K in each row's metadata.profile; resumable. Rules: docs/grpo.md#profiling-pivots."))
    profile.add_argument("--rows", required=True, metavar="F.jsonl", help="pivot rows (trainers.data pivots, or the "
                         "Nemotron-RL-Agentic-Terminal-Pivot rows)")
    profile.add_argument("--out", required=True, metavar="G.jsonl", help="the kept rows; G.progress.jsonl beside it "
                         "holds every row profiled so far (a rerun skips them)")
    profile.add_argument("--model_url", default=None, help="an OpenAI-compatible /v1 URL serving the starting policy")
    profile.add_argument("--model", default=None, help="the served model name (with --model_url)")
    profile.add_argument("--checkpoint", default=None, help="a checkpoint (or builtin:...) to serve here instead: vLLM "
                         "where installed, else the CPU server")
    profile.add_argument("--reward_url", default=None, help="a NeMo Gym compatible /verify server (default: one "
                         "started on loopback for the run)")
    profile.add_argument("--reward_server_config", default=None, help="configs/rewards/*.yaml of that local server")
    profile.add_argument("--k", type=int, default=8, help="samples per row (default: %(default)s)")
    profile.add_argument("--keep", default="mixed", choices=profiling.KEEP, help=(
        "mixed: rewards that vary and a mean below --max_mean (PivotRL's filter); hard: a mean below --max_mean; "
        "all: every row (default: %(default)s)"))
    profile.add_argument("--max_mean", type=float, default=1.0, help="the difficulty bar: a kept row's mean reward is "
                         "below it (default: %(default)s; PivotRL's lambda_diff)")
    profile.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: %(default)s, "
                         "GRPO's)")
    profile.add_argument("--max_tokens", type=int, default=512, help="tokens per sample (default: %(default)s)")
    profile.add_argument("--concurrency", type=int, default=8, help="samples in flight (default: %(default)s)")
    profile.add_argument("--json", action="store_true", help="print the summary as JSON")
    commands.add_parser("prepare", add_help=False, help="prepare an SFT config's corpus into the cache its run loads "
                        "(python -m trainers.data prepare --help)")
    args = parser.parse_args(argv)

    if args.command == "decontaminate":
        return decontaminate_command(args)
    if args.command == "pivots":
        return pivots_command(args)
    if args.command == "profile":
        return profile_command(args)
    try:
        if args.command == "render" or not args.no_tokens:
            args.tokenizer = _load_tokenizer(args.model_name_or_path, chat_template_path=args.chat_template_path)
        if args.command == "render":
            return render(args)
        reports = [inspect_path(path, args) for path in args.paths]
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(reports if len(reports) > 1 else reports[0], sys.stdout, indent=2)
        print()
    else:
        for report in reports:
            print_report(report)
    invalid = sum(report["invalid"] for report in reports)
    if args.strict and invalid:
        print(f"--strict: {invalid} invalid record(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
