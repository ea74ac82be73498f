"""Time to the first training step on a paper-shaped corpus, 2 ranks: no cache, a cold cache, a warm cache.

    python bench/corpus_prepare.py [--records 400] [--min_tokens 20000] [--max_tokens 60000] [--num_proc 2]
                                   [--max_length 16384] [--repeats 1] [--model_name_or_path M]
    # the paper's size: --records 32000 --max_length 131072 --num_proc 32 (on a cluster node)

Corpus: multi-turn tool-calling trajectories shaped like Terminal-Universe's (the paper averages ~44k tokens a
record), built from the bundled samples by repeating their tool calls and results until each record reaches a
length drawn uniformly from [--min_tokens, --max_tokens] tokens of the model's tokenizer. Each run is the real
recipe, `accelerate launch --config_file configs/accelerate/cpu_zero2.yaml recipes/sft.py` (DeepSpeed ZeRO-2, 2 CPU
ranks over loopback), for one step on the same corpus and config; the runs go side by side in this process,
in turn, `--repeats` times:
- no cache (`corpus_cache: false`): every rank loads, validates and tokenizes the whole corpus in one process,
  as the recipe did before the cache: the baseline;
- cold: an empty cache; the main process prepares with `--num_proc` processes while the other rank waits;
- warm: the cache the cold run filled; both ranks load it.
Reported from each run's run_summary.json: seconds_to_first_step (from the recipe's start to its first
micro-batch: imports, config, corpus, model, DeepSpeed) and corpus_prepare_seconds (until every rank holds the
corpus), per-rank cache outcomes, and the ratios to the baseline. --max_length only bounds the one training step
(records over it are cut at a turn and counted); every record is tokenized whole either way. Writes
bench/results/corpus_prepare.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def build_corpus(n_records: int, min_tokens: int, max_tokens: int, tokenizer, seed: int) -> list[dict]:
    """Chat trajectories of [min_tokens, max_tokens] tokens: bundled agent chats with (tool call, result) pairs
    repeated before the final answer. Characters per token are measured on one long record first."""
    from sft_throughput import lengthen_chat, message_chars  # bench/, beside this script

    from chat_corpus.masking import tokenize_chat, training_chat_template
    from chat_corpus.records import normalize_chat

    rng = random.Random(seed)
    chats = [json.loads(line) for line in (REPO / "data/sft/agent_tool_calls.jsonl").read_text().splitlines()]
    chats = [c for c in chats if any(m["role"] == "tool" for m in c["messages"])]

    template = training_chat_template(tokenizer)
    chars_per_token = []  # per bundled chat: their tool outputs tokenize differently
    for base in chats:
        messages = lengthen_chat(base["messages"], 4 * max_tokens, rng)
        tokens = len(tokenize_chat(tokenizer, template, normalize_chat(messages, base.get("tools")))[0])
        chars_per_token.append(message_chars(messages) / tokens)
    rows = []
    for i in range(n_records):
        index = rng.randrange(len(chats))
        target = rng.uniform(min_tokens, max_tokens) * chars_per_token[index]
        rows.append({"messages": lengthen_chat(chats[index]["messages"], target, rng),
                     "tools": chats[index].get("tools"),
                     "metadata": {"source_trajectory_uid": f"bench-traj-{i}"}})
    return rows


def launch(name: str, corpus: Path, cache: Path, out: Path, args, extra: list[str]) -> dict:
    command = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
               "configs/accelerate/cpu_zero2.yaml", "--num_cpu_threads_per_process", "1", "recipes/sft.py",
               "--model_name_or_path", args.model_name_or_path, "--datasets", str(corpus),
               "--corpus_cache_dir", str(cache), "--dataset_num_proc", str(args.num_proc),
               "--max_length", str(args.max_length), "--output_dir", str(out), "--max_steps", "1",
               "--per_device_train_batch_size", "1", "--save_strategy", "no", "--eval_strategy", "no",
               "--eval_fraction", "0", "--report_to", "none", "--eval_suites", "", "--logging_steps", "1", *extra]
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1", PYTHONPATH=str(REPO))
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{name}: exit {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}")
    summary = json.loads((out / "run_summary.json").read_text())
    row = {"run": name, "seconds_to_first_step": summary["seconds_to_first_step"],
           "corpus_prepare_seconds": summary["corpus_prepare_seconds"],
           "corpus_cache_ranks": summary["corpus_cache_ranks"],
           "corpus_prepare_seconds_ranks": summary["corpus_prepare_seconds_ranks"],
           "launch_wall_seconds": round(wall, 2), "train_records": summary["train_records"],
           "tokens": sum(source["tokens"] for source in summary["sources"]), "truncated": summary["truncated"]}
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=400)
    parser.add_argument("--min_tokens", type=int, default=20_000)
    parser.add_argument("--max_tokens", type=int, default=60_000)
    parser.add_argument("--num_proc", type=int, default=2, help="processes the main process prepares with (cold)")
    parser.add_argument("--max_length", type=int, default=16384, help="bounds the one training step only")
    parser.add_argument("--repeats", type=int, default=1, help="rounds of the three runs, in turn; medians reported")
    parser.add_argument("--model_name_or_path", default="builtin:tiny-qwen3")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(REPO / "bench/results/corpus_prepare.json"))
    args = parser.parse_args()

    from transformers import AutoTokenizer

    from chat_corpus.masking import tokenize_chat, training_chat_template
    from chat_corpus.records import normalize_chat
    from modeling.tiny_model import resolve_model

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(args.model_name_or_path))
    tmp = Path(tempfile.mkdtemp(prefix="corpus-prepare-bench-"))
    rows = build_corpus(args.records, args.min_tokens, args.max_tokens, tokenizer, args.seed)
    corpus = tmp / "trajectories.jsonl"
    corpus.write_text("".join(json.dumps(row) + "\n" for row in rows))
    template = training_chat_template(tokenizer)
    lengths = sorted(len(tokenize_chat(tokenizer, template, normalize_chat(r["messages"], r["tools"]))[0])
                     for r in rows[:min(len(rows), 8)])  # a sample: measuring every record would be the cold run
    runs = {"no cache (every rank prepares)": ["--corpus_cache", "false"], "cold cache": [], "warm cache": []}
    results: dict[str, list[dict]] = {name: [] for name in runs}
    for round_ in range(args.repeats):
        cache = tmp / f"cache-{round_}"
        for name, extra in runs.items():
            results[name].append(launch(name, corpus, cache, tmp / f"out-{round_}-{len(results[name])}-{name[:4]}",
                                        args, extra))
        shutil.rmtree(cache, ignore_errors=True)
    median = lambda name, key: statistics.median(row[key] for row in results[name])  # noqa: E731
    baseline = "no cache (every rank prepares)"
    table = [{"run": name, "seconds_to_first_step": median(name, "seconds_to_first_step"),
              "corpus_prepare_seconds": median(name, "corpus_prepare_seconds"),
              "first_step_vs_no_cache": round(median(name, "seconds_to_first_step")
                                              / median(baseline, "seconds_to_first_step"), 3),
              "prepare_vs_no_cache": round(median(name, "corpus_prepare_seconds")
                                           / median(baseline, "corpus_prepare_seconds"), 3),
              "corpus_cache_ranks": results[name][-1]["corpus_cache_ranks"]} for name in runs]
    report = {"command": "python " + " ".join(sys.argv), "records": args.records,
              "record_tokens_sample": {"min": lengths[0], "median": lengths[len(lengths) // 2], "max": lengths[-1],
                                       "sampled": len(lengths)},
              "corpus_file_mb": round(corpus.stat().st_size / 1e6, 1), "num_proc": args.num_proc,
              "max_length": args.max_length, "ranks": 2, "repeats": args.repeats,
              "cpu_threads": os.cpu_count(), "table": table, "runs": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=2))
    for row in table:
        print(f"{row['run']:32s} first step {row['seconds_to_first_step']:7.1f} s ({row['first_step_vs_no_cache']:.2f}x)"
              f"  corpus on every rank {row['corpus_prepare_seconds']:7.1f} s ({row['prepare_vs_no_cache']:.2f}x)"
              f"  ranks {row['corpus_cache_ranks']}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
