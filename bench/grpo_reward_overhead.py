"""The reward phase of one GRPO step against a reward server that adds 200 ms per /verify request.

    python bench/grpo_reward_overhead.py [--completions 64] [--delay 0.2] [--repeats 3]

A stand-in /verify server (`python tests/servers.py slow-verify`: uvicorn, in its own process on loopback, so it
shares neither the GIL nor the event loop of the client measured) sleeps `--delay` seconds per request and returns
a reward. Side by side in one process, the same 64 completions are scored:
- ours: the GRPO recipe's reward function (`rewards.client.make_reward_function`): all requests
  concurrent over pooled connections, as TRL awaits it on its async loop;
- baseline: one request at a time, awaited in turn (a plain loop over the rows, as a synchronous reward
  function with an HTTP call per completion does).
Writes bench/results/grpo_reward_overhead.json.
"""


import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--completions", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default=str(REPO / "bench/results/grpo_reward_overhead.json"))
    args = parser.parse_args()

    from common.net import free_port, wait_until_healthy
    from rewards.client import RewardClient, RewardClientConfig, make_reward_function

    port = free_port()
    server = subprocess.Popen([sys.executable, str(REPO / "tests/servers.py"), "slow-verify", "--port", str(port),
                               "--delay", str(args.delay)])
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(url, server, timeout=60)
        row = json.dumps({"responses_create_params": {"input": [{"role": "user", "content": "task " * 2000}]},
                          "expected_answer": "{}", "metadata": {"harness": "terminus_2"}})
        rows = [row] * args.completions
        completions = [[{"role": "assistant", "content": '{"analysis": "' + "x" * (1000 + i) + '"}'}]
                       for i in range(args.completions)]
        client = RewardClient(RewardClientConfig(urls=[url], timeout=30))
        reward_fn = make_reward_function(client)

        async def concurrent():
            return await reward_fn(prompts=[None] * len(rows), completions=completions, row=rows)

        async def one_at_a_time():
            return [await reward_fn(prompts=[None], completions=[c], row=[r]) for r, c in zip(rows, completions)]

        async def timed(phase):
            started = time.perf_counter()
            rewards = await phase()
            return time.perf_counter() - started, rewards

        async def run_all():
            await timed(concurrent)  # warm the connection pool once, as a running job has it warm
            results = {"ours (concurrent, pooled)": [], "baseline (one request at a time)": []}
            for _ in range(args.repeats):
                for name, phase in (("ours (concurrent, pooled)", concurrent),
                                    ("baseline (one request at a time)", one_at_a_time)):
                    seconds, _ = await timed(phase)
                    results[name].append(seconds)
            await client.aclose()
            return results

        results = asyncio.run(run_all())
    finally:
        server.terminate()
        server.wait()
    medians = {name: statistics.median(times) for name, times in results.items()}
    ours, baseline = medians["ours (concurrent, pooled)"], medians["baseline (one request at a time)"]
    report = {"command": "python " + " ".join(sys.argv), "completions": args.completions, "delay_s": args.delay,
              "repeats": args.repeats, "seconds": results, "median_seconds": medians,
              "speedup": round(baseline / ours, 1), "ours_overhead_over_one_delay_s": round(ours - args.delay, 3)}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    for name, seconds in medians.items():
        print(f"{name:36s} {seconds:8.3f} s for {args.completions} completions (median of {args.repeats})")
    print(f"speedup {report['speedup']}x; ours takes {report['ours_overhead_over_one_delay_s']} s beyond one {args.delay} s delay")


if __name__ == "__main__":
    main()
