"""One turn of agentic GRPO's generation on the transformers path, the KV cache TRL's `cache_implementation` picks.

    python bench/rollout_generation.py [--model builtin:tiny-qwen3] [--episodes 64] [--context 300,1200]
                                       [--new_tokens 160] [--repeats 2]

What a Terminus-2 rollout turn on CPU costs (trainers/terminus_rollout.py hands every active episode's tokens so far to
TRL's per-turn generation, which calls `model.generate` with GRPOConfig's sampling settings): `--episodes` contexts of
`--context` tokens each (random ids of the model's vocabulary, left-padded lengths drawn from 0.6-1.0 of it, as a
batch of episodes at different turns), `--new_tokens` sampled for each (`min_new_tokens` too, so both runs do the same
work). Baseline: the default dynamic cache (`cache_implementation` unset, each decoded token concatenated onto the
cache). Against it: `static` (a cache allocated for the whole call, written in place). The two alternate, `--repeats`
times each, with the same seed; the report gives each one's median seconds, tokens per second and the ratio, and
whether greedy decoding with each gives the same tokens (it must: the cache changes where keys live, not what is
attended). The learning runs' student: `--model outputs/learn-deep` (made by `make learn ARGS="--families deep"`).
Writes bench/results/rollout_generation.json. Timings are not asserted.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CACHES = {"dynamic": None, "static": "static"}  # the report's name -> GRPOConfig.cache_implementation


def batch(vocab: int, episodes: int, context: int, seed: int):
    """Left-padded ids and attention mask: `episodes` contexts of 0.6-1.0 x `context` tokens."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(int(0.6 * context), context + 1, (episodes,), generator=generator)
    ids = torch.zeros(episodes, context, dtype=torch.long)
    mask = torch.zeros(episodes, context, dtype=torch.long)
    for row, length in enumerate(lengths.tolist()):
        ids[row, context - length:] = torch.randint(3, vocab, (length,), generator=generator)
        mask[row, context - length:] = 1
    return ids, mask


def generate(model, ids, mask, cache: str | None, new_tokens: int, sample: bool, seed: int):
    import torch

    torch.manual_seed(seed)
    kwargs = {"do_sample": True, "temperature": 1.0, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
    started = time.perf_counter()
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             pad_token_id=0, cache_implementation=cache, **kwargs)
    return time.perf_counter() - started, out[:, ids.shape[1]:]


def main() -> int:
    parser = argparse.ArgumentParser(prog="python bench/rollout_generation.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="builtin:tiny-qwen3", help="a model folder or builtin: name")
    parser.add_argument("--episodes", type=int, default=64, help="contexts generated for at once (a step's episodes)")
    parser.add_argument("--context", default="300,1200", help="comma-separated context lengths in tokens")
    parser.add_argument("--new_tokens", type=int, default=160, help="tokens sampled per context (the turn's cap)")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs of each cache per context length")
    parser.add_argument("--out", default=str(REPO / "bench/results/rollout_generation.json"))
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM

    from modeling.tiny_model import resolve_model

    model = AutoModelForCausalLM.from_pretrained(resolve_model(args.model), dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    report: dict = {"command": " ".join(["python bench/rollout_generation.py", *sys.argv[1:]]), "model": args.model,
                    "threads": torch.get_num_threads(), "episodes": args.episodes, "new_tokens": args.new_tokens,
                    "contexts": {}}
    for context in (int(c) for c in args.context.split(",")):
        ids, mask = batch(vocab, args.episodes, context, seed=context)
        greedy = {name: generate(model, ids, mask, cache, 8, sample=False, seed=0)[1] for name, cache in CACHES.items()}
        seconds: dict[str, list[float]] = {name: [] for name in CACHES}
        for repeat in range(args.repeats):
            for name, cache in CACHES.items():  # alternating: the machine's load falls on both alike
                seconds[name].append(generate(model, ids, mask, cache, args.new_tokens, sample=True, seed=repeat)[0])
        tokens = args.episodes * args.new_tokens
        row = {name: {"seconds_median": round(statistics.median(s), 2), "seconds": [round(x, 2) for x in s],
                      "tokens_per_second": round(tokens / statistics.median(s), 1)} for name, s in seconds.items()}
        row["static_speedup"] = round(row["dynamic"]["seconds_median"] / row["static"]["seconds_median"], 2)
        row["greedy_tokens_equal"] = bool(torch.equal(greedy["dynamic"], greedy["static"]))
        report["contexts"][str(context)] = row
        print(f"context {context}: dynamic {row['dynamic']['seconds_median']} s, static "
              f"{row['static']['seconds_median']} s ({row['static_speedup']}x); greedy tokens equal: "
              f"{row['greedy_tokens_equal']}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"rollout generation: {args.episodes} episodes x {args.new_tokens} tokens on {report['threads']} threads, "
          f"{args.model}; {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
