"""SFT throughput: this repo's recipe against TRL's default SFT config, side by side in one process.

    python bench/sft_throughput.py [--records 24] [--max_length 16384] [--batch_size 2] [--model_name_or_path M]

Corpus: long terminal-agent records shaped like the real sets, built from the bundled samples: half are
terminal-pivot rows (prompt lengths drawn around 40k characters, answers about 1k, as in
Nemotron-RL-Agentic-Terminal-Pivot), half multi-turn tool-calling trajectories (Terminal-Universe style, a
long tail past max_length). Both runs train one epoch over the same records with the same model, batch size,
max_length and optimizer settings, and both train on assistant tokens only:
- ours: the recipe's pipeline (validation, whole-turn truncation, BFD packing, padding-free);
- baseline: TRL's defaults (no packing, pad to the longest record of the batch, keep_start truncation and
  silent dropping of records left without trained tokens), with `assistant_only_loss=True`.
Reported: trained (non-padding) tokens per second, the fraction of computed positions that are padding, and
records silently dropped; on a GPU, peak memory and MFU by modeling/flops.py's formula (6 x matmul weights x
tokens, plus each record's own causal attention, against --peak_tflops), and the dense-only MFU (6 x weights x
tokens) beside it. Ours runs `attn_implementation: varlen` (flash-attn's kernels where installed, else PyTorch's
varlen attention on CUDA, one SDPA call per record on CPU); `--use_liger_kernel` adds Liger to ours only.
Writes bench/results/sft_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


RANDOM_MODELS = {  # Qwen3 shapes (config.json of the released checkpoints), any vocab
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128),
    "qwen3-1.7b": dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128),
}


def build_random_model(shape: str, tokenizer_dir: str, out: Path) -> str:
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = Qwen3Config(vocab_size=len(tokenizer), max_position_embeddings=40960, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, **RANDOM_MODELS[shape])
    Qwen3ForCausalLM(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return str(out)


def record_lengths(dataset) -> list[int]:
    """Token count of every record a trainer's dataset holds (a packed row's records one by one)."""
    if "seq_lengths" in dataset.column_names:
        return [int(n) for row in dataset["seq_lengths"] for n in row]
    return [len(ids) for ids in dataset["input_ids"]]


def message_chars(messages) -> int:
    return sum(len(m.get("content") or "") + len(json.dumps(m.get("tool_calls", []))) for m in messages)


def lengthen_chat(messages: list[dict], target_chars: float, rng: random.Random) -> list[dict]:
    """`messages` with (single tool call, its result) pairs drawn from it repeated before the final answer, until
    the chat holds `target_chars` characters (unchanged when it has no such pair). bench/corpus_prepare.py uses it
    too."""
    calls = [(m, n) for m, n in zip(messages, messages[1:]) if m["role"] == "assistant" and m.get("tool_calls")
             and len(m["tool_calls"]) == 1 and n["role"] == "tool"]
    chars, extra = message_chars(messages), []
    while chars < target_chars and calls:
        call, result = rng.choice(calls)
        extra += [call, result]
        chars += message_chars([call, result])
    return messages[:-1] + extra + messages[-1:]


def build_corpus(n_records: int, seed: int) -> tuple[list[dict], list[dict]]:
    """Pivot rows (raw NeMo Gym shape) and chat trajectories, lengthened from the bundled samples."""
    rng = random.Random(seed)
    pivots = [json.loads(line) for line in (REPO / "data/pivot/terminal_pivot.jsonl").read_text().splitlines()]
    pivots = [p for p in pivots if p["metadata"]["harness"] == "terminus_2"]
    chats = [json.loads(line) for line in (REPO / "data/sft/agent_tool_calls.jsonl").read_text().splitlines()]
    chats = [c for c in chats if not any(m.get("train") is False for m in c["messages"])]
    # (assistant action, terminal output) pairs to lengthen pivot prompts with
    exchanges = [(a, u) for p in pivots for a, u in zip(p["responses_create_params"]["input"][1::2],
                                                          p["responses_create_params"]["input"][2::2])]
    pivot_rows, chat_rows = [], []
    for i in range(n_records // 2):
        row = json.loads(json.dumps(rng.choice(pivots)))
        items = row["responses_create_params"]["input"]
        target = rng.lognormvariate(10.5, 0.35)  # median ~36k characters, mean ~40k
        while message_chars(items) < target:
            assistant, user = rng.choice(exchanges)
            items += [assistant, user]
        row["metadata"]["source_trajectory_uid"] = f"bench-pivot-{i}"
        pivot_rows.append(row)
    for i in range(n_records - n_records // 2):
        base = rng.choice(chats)
        target = min(rng.lognormvariate(10.8, 0.7), 250_000)  # median ~49k characters, a tail past max_length
        messages = lengthen_chat(base["messages"], target, rng)
        chat_rows.append({"messages": messages, "tools": base.get("tools"),
                          "metadata": {"source_trajectory_uid": f"bench-traj-{i}"}})
    return pivot_rows, chat_rows


def trl_dataset(records):
    """The same records in TRL's conversational prompt/completion form (pivot rows: the input is the prompt;
    trajectories: everything up to the first assistant turn), tool-call arguments and tools as JSON strings."""
    from datasets import Dataset

    rows = []
    for record in records:
        messages = []
        for m in record["messages"]:
            m = {k: v for k, v in m.items() if k != "train"}
            if m.get("tool_calls"):
                m["tool_calls"] = [{"type": "function", "function": {"name": c["function"]["name"],
                                    "arguments": json.dumps(c["function"]["arguments"])}} for c in m["tool_calls"]]
            messages.append(m)
        trained = [i for i, m in enumerate(record["messages"]) if m["role"] == "assistant" and m.get("train", True)]
        split = trained[0] if record["format"] == "chat" else len(messages) - 1
        rows.append({"prompt": messages[:split], "completion": messages[split:],
                     "tools": json.dumps(record["tools"] or [])})
    return Dataset.from_list(rows)


def train_once(name, trainer) -> dict:
    started = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - started
    counts = trainer.token_counts.totals()
    padding = 1 - counts["real_tokens"] / counts["padded_tokens"]
    result = {"name": name, "seconds": round(seconds, 2), "steps": trainer.state.global_step, **counts,
              "trained_tokens_per_second": round(counts["trained_tokens"] / seconds, 1),
              "padding_fraction": round(padding, 4), "train_records": len(trainer.train_dataset)}
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=24)
    parser.add_argument("--max_length", type=int, default=16384)
    parser.add_argument("--batch_size", type=int, default=2)
    parser.add_argument("--model_name_or_path", default="builtin:tiny-qwen3")
    parser.add_argument("--random_model", choices=sorted(RANDOM_MODELS), help=(
        "instead of --model_name_or_path: random weights in a real model's shape, with the tiny model's tokenizer "
        "(for GPU timings where no checkpoint can be downloaded)"))
    parser.add_argument("--peak_tflops", type=float, default=989.0,
                        help="accelerator's dense bf16 peak for MFU (H100/H200 SXM datasheet: 989)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gradient_checkpointing", action="store_true", help="for every run (memory on GPUs)")
    parser.add_argument("--use_liger_kernel", action="store_true", help="ours with Liger's kernels (GPU, liger-kernel)")
    parser.add_argument("--out", default=str(REPO / "bench/results/sft_throughput.json"))
    args = parser.parse_args()

    import torch
    from datasets.utils.logging import disable_progress_bar
    from transformers import AutoConfig, AutoTokenizer
    from trl import SFTConfig

    import modeling.varlen_attention  # noqa: F401  (registers attn_implementation "varlen")
    from chat_corpus.sft_corpus import CorpusArguments, build_sft_corpus
    from chat_corpus.sources import Source, load_source
    from modeling.flops import flops_model
    from modeling.kernels import check_liger, select_attention
    from modeling.tiny_model import resolve_model
    from trainers.token_accounting import CountingSFTTrainer

    disable_progress_bar()
    tmp = Path(tempfile.mkdtemp(prefix="sft-bench-"))
    model_path = resolve_model(args.model_name_or_path)
    if args.random_model:
        model_path = build_random_model(args.random_model, model_path, tmp / "model")
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    flops = flops_model(AutoConfig.from_pretrained(model_path))
    check_liger(AutoConfig.from_pretrained(model_path), args.use_liger_kernel, torch.cuda.is_available())
    pivots, chats = build_corpus(args.records, args.seed)
    for name, rows in (("pivot.jsonl", pivots), ("chat.jsonl", chats)):
        (tmp / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    prompt_chars = [message_chars(r["responses_create_params"]["input"]) for r in pivots]
    answer_chars = [len(r["expected_answer"]) for r in pivots]
    chat_chars = [message_chars(r["messages"]) for r in chats]

    common = dict(max_length=args.max_length, per_device_train_batch_size=args.batch_size, num_train_epochs=1,
                  learning_rate=1e-4, lr_scheduler_type="constant", logging_steps=1000, save_strategy="no",
                  report_to="none", use_cpu=not torch.cuda.is_available(), bf16=torch.cuda.is_available(),
                  gradient_checkpointing=args.gradient_checkpointing, seed=args.seed, dataloader_num_workers=0, disable_tqdm=True)

    corpus_args = CorpusArguments(datasets=[str(tmp / "pivot.jsonl"), str(tmp / "chat.jsonl")], truncation="turns")
    records = [r for path in ("pivot.jsonl", "chat.jsonl")
               for r in load_source(Source(str(tmp / path)), "metadata.source_trajectory_uid").records]
    ours_attention = select_attention("varlen")  # flash_attention_2 where flash-attn is installed on CUDA

    def baseline(name, **config):
        dataset = trl_dataset(records)
        return lambda: CountingSFTTrainer(model=model_path, train_dataset=dataset, processing_class=tokenizer,
                                          args=SFTConfig(output_dir=str(tmp / name), assistant_only_loss=True,
                                                         **config, **common))

    def ours():
        corpus = build_sft_corpus(corpus_args, tokenizer, args.max_length, show_progress=False)
        trainer = CountingSFTTrainer(model=model_path, train_dataset=corpus.train, processing_class=tokenizer,
                                     args=SFTConfig(output_dir=str(tmp / "ours"), packing=True, packing_strategy="bfd",
                                                    model_init_kwargs={"attn_implementation": ours_attention},
                                                    use_liger_kernel=args.use_liger_kernel, **common))
        trainer.corpus = corpus
        return trainer

    variants = [("baseline: TRL defaults (no packing, padded batches)", baseline("trl-default")),
                ("TRL defaults + packing=True (bfd, sdpa)", baseline("trl-packing", packing=True)),
                (f"ours: recipe pipeline, bfd packing, {ours_attention}", ours)]
    results = []
    for name, make in variants:
        prep = time.perf_counter()
        trainer = make()
        prep_seconds = time.perf_counter() - prep
        result = train_once(name, trainer)
        result["prep_seconds"] = round(prep_seconds, 2)
        lengths = record_lengths(trainer.train_dataset)
        result["model_tflops_per_second"] = round(flops.records(lengths) / result["seconds"] / 1e12, 3)
        result["dense_tflops_per_second"] = round(flops.dense(result["real_tokens"]) / result["seconds"] / 1e12, 3)
        if torch.cuda.is_available():
            result["mfu"] = round(result["model_tflops_per_second"] / args.peak_tflops, 4)
            result["dense_mfu"] = round(result["dense_tflops_per_second"] / args.peak_tflops, 4)
            result["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
            torch.cuda.reset_peak_memory_stats()

        if hasattr(trainer, "corpus"):
            result["dropped_records"] = len(trainer.corpus.drops)
            result["truncated_records"] = sum(stat.truncated for stat in trainer.corpus.stats)
        elif not trainer.args.packing:  # TRL truncates keep_start and drops fully masked records without a word
            result["dropped_records"] = len(records) - len(trainer.train_dataset)
        results.append(result)
        del trainer
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    report = {
        "command": "python " + " ".join(sys.argv),
        "corpus": {"records": len(records), "pivot_prompt_chars_mean": round(sum(prompt_chars) / len(prompt_chars)),
                   "pivot_answer_chars_mean": round(sum(answer_chars) / len(answer_chars)),
                   "trajectory_chars_median": sorted(chat_chars)[len(chat_chars) // 2],
                   "trajectory_chars_max": max(chat_chars)},
        "max_length": args.max_length, "batch_size": args.batch_size, "ours_attention": ours_attention,
        "flops_formula": "modeling/flops.py: 6*P*L + 12*A*H*d*L^2/2 (+ linear-attention recurrences) per record",
        "flops_model": flops.__dict__,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)",
        "model": args.random_model or args.model_name_or_path, "versions": {
            "torch": torch.__version__, "transformers": __import__("transformers").__version__,
            "trl": __import__("trl").__version__},
        "results": results,
        "ratio_trained_tokens_per_second_ours_vs_baseline": round(results[-1]["trained_tokens_per_second"]
                                                                  / results[0]["trained_tokens_per_second"], 3),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: v for k, v in report.items() if k != "results"}, indent=2))
    for r in results:
        print(f"{r['name']:58s} {r['trained_tokens_per_second']:>8,.0f} trained tok/s  padding "
              f"{r['padding_fraction']:.1%}  trained {r['trained_tokens']:,} in {r['seconds']} s  "
              f"dropped {r.get('dropped_records', 'n/a')}  model {r['model_tflops_per_second']} TFLOP/s"
              + (f"  MFU {r['mfu']:.1%} (dense-only {r['dense_mfu']:.1%})  peak {r['peak_memory_gib']} GiB"
                 if "mfu" in r else ""))


if __name__ == "__main__":
    main()
