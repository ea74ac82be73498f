"""Reward server throughput: verify requests/s and latency at 64 concurrent clients on terminal-pivot rows.

    python bench/reward_server.py [--requests 3000] [--max_seconds 60] [--clients 64] [--workers 1,2]

Rows: the bundled terminal-pivot rows (data/pivot/terminal_pivot.jsonl), lengthened to the size of
Nemotron-RL-Agentic-Terminal-Pivot: prompts drawn around 40k characters (more assistant/observation exchanges
in `responses_create_params.input`), expected answers padded to about 1k characters. The policy answers are a mix
of the gold action (reward 1), a near copy (keystrokes edited), another row's action (reward 0 below 0.9) and
prose around the JSON (model_output_invalid), about 1k characters each.
Server: `python -m rewards.server --config configs/rewards/terminus_judge_string_only.yaml` (string-only
terminus_judge, as NVIDIA scores the set) in its own process on loopback, once per `--workers` value. Client: 64
asyncio tasks over one pooled httpx client, bodies serialized beforehand; each request is timed from send to
parsed reply. Baseline, side by side: the same rows scored in this process without HTTP (the environment's
`verify` called directly, one at a time), which is the scoring cost alone.
Writes bench/results/reward_server.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from common.net import free_port  # noqa: E402
from rewards.protocol import make_response  # noqa: E402

PAD = (" The previous command's output shows the state of the working tree, the files that changed and the"
       " services involved, so the next step checks the remaining failure before editing anything.")


def _chars(items) -> int:
    return sum(len(m.get("content") or "") for m in items)


def build_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    base = [json.loads(line) for line in (REPO / "data/pivot/terminal_pivot.jsonl").read_text().splitlines()]
    base = [r for r in base if r["metadata"]["harness"] == "terminus_2"]
    exchanges = [(a, u) for r in base for a, u in zip(r["responses_create_params"]["input"][1::2],
                                                      r["responses_create_params"]["input"][2::2])]
    golds = []
    for r in base:
        gold = json.loads(r["expected_answer"])
        while len(json.dumps(gold, indent=2)) < 900:
            gold["analysis"] += PAD
        golds.append(gold)
    rows = []
    for i in range(n):
        k = rng.randrange(len(base))
        row = json.loads(json.dumps(base[k]))
        items = row["responses_create_params"]["input"]
        target = rng.lognormvariate(10.55, 0.3)  # median ~38k characters, mean ~40k
        while _chars(items) < target:
            assistant, user = rng.choice(exchanges)
            items[-1:-1] = [assistant, user]  # keep the row ending on its own last observation
        gold = golds[k]
        row["expected_answer"] = json.dumps(gold, indent=2)
        kind = ("gold", "near", "other", "prose")[i % 4]
        if kind == "gold":
            answer = json.dumps(gold, indent=2)
        elif kind == "near":
            near = json.loads(json.dumps(gold))
            for command in near["commands"][:1]:
                command["keystrokes"] = command["keystrokes"].replace(" ", "  ", 1)
            answer = json.dumps(near, indent=2)
        elif kind == "other":
            answer = json.dumps(golds[(k + 1) % len(golds)], indent=2)
        else:
            answer = "Here is my next action:\n" + json.dumps(gold, indent=2)
        row["response"] = make_response(answer, model="bench-policy")
        row["_kind"] = kind
        rows.append(row)
    return rows


def start_server(workers: int) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "rewards.server", "--config", "configs/rewards/terminus_judge_string_only.yaml",
           "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers), "--log_level", "warning"]
    process = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        if process.poll() is not None:
            raise SystemExit(f"the server exited: {process.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return process, url
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            process.kill()
            raise SystemExit("the server did not start within 60 s")
        time.sleep(0.2)


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU seconds of a process and its descendants so far (Linux /proc)."""
    parents, cpu = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(fields[1])
            cpu[int(entry.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    total = 0.0
    for pid in cpu:
        node = pid
        while node not in (0, 1) and node != root:
            node = parents.get(node, 0)
        if node == root:
            total += cpu[pid]
    return total


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


async def load(url: str, bodies: list[bytes], requests: int, clients: int, max_seconds: float) -> dict:
    latencies: list[float] = []
    rewards: list[float] = []
    errors = 0
    counter = iter(range(requests))
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(limits=limits, timeout=60) as client:
        for body in bodies[:clients]:  # warm-up: one request per connection
            await client.post(f"{url}/verify", content=body, headers={"content-type": "application/json"})
        start = time.perf_counter()
        stop_at = start + max_seconds

        async def worker():
            nonlocal errors
            for i in counter:
                if time.perf_counter() > stop_at:
                    return
                t0 = time.perf_counter()
                reply = await client.post(f"{url}/verify", content=bodies[i % len(bodies)],
                                          headers={"content-type": "application/json"})
                out = reply.json()
                latencies.append(time.perf_counter() - t0)
                if reply.status_code == 200:
                    rewards.append(out["reward"])
                else:
                    errors += 1

        await asyncio.gather(*[worker() for _ in range(clients)])
        wall = time.perf_counter() - start
    return {"requests": len(latencies), "errors": errors, "wall_s": wall, "requests_per_s": len(latencies) / wall,
            "p50_ms": 1e3 * pct(latencies, 50), "p99_ms": 1e3 * pct(latencies, 99),
            "mean_reward": statistics.fmean(rewards) if rewards else None}


async def load_raw(url: str, bodies: list[bytes], requests: int, clients: int, max_seconds: float) -> dict:
    """The same load from a lean HTTP/1.1 keep-alive client (asyncio streams, requests prebuilt, the reward read
    with a byte search), so that the client's own CPU takes less of the 2 cores than httpx does."""
    host, port = url.removeprefix("http://").split(":")
    heads = [f"POST /verify HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
             f"Content-Length: {len(b)}\r\n\r\n".encode() + b for b in bodies]
    latencies: list[float] = []
    rewards: list[float] = []
    errors = 0
    counter = iter(range(requests))

    async def one(reader, writer, payload) -> tuple[int, bytes]:
        writer.write(payload)
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
        length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
        return status, await reader.readexactly(length)

    connections = [await asyncio.open_connection(host, int(port), limit=2 ** 22) for _ in range(clients)]
    for (reader, writer), payload in zip(connections, heads):  # warm-up: one request per connection
        await one(reader, writer, payload)
    start = time.perf_counter()
    stop_at = start + max_seconds

    async def worker(reader, writer):
        nonlocal errors
        for i in counter:
            if time.perf_counter() > stop_at:
                return
            t0 = time.perf_counter()
            status, body = await one(reader, writer, heads[i % len(heads)])
            latencies.append(time.perf_counter() - t0)
            at = body.rfind(b'"reward":')
            if status == 200 and at >= 0:
                rewards.append(float(body[at + 9:body.index(b",", at)]))
            else:
                errors += 1

    await asyncio.gather(*[worker(r, w) for r, w in connections])
    wall = time.perf_counter() - start
    for _, writer in connections:
        writer.close()
    return {"requests": len(latencies), "errors": errors, "wall_s": wall, "requests_per_s": len(latencies) / wall,
            "p50_ms": 1e3 * pct(latencies, 50), "p99_ms": 1e3 * pct(latencies, 99),
            "mean_reward": statistics.fmean(rewards) if rewards else None}


def in_process(rows: list[dict], seconds: float) -> dict:
    """The scoring alone: the environment's verify on the same rows, one at a time, no HTTP, no JSON."""
    from rewards.config import load_config
    from rewards.judge import Judge
    from rewards.environments.terminus_judge import TerminusJudge

    config = load_config(REPO / "configs/rewards/terminus_judge_string_only.yaml")
    env = TerminusJudge(config.terminus_judge, Judge(config.judge))

    async def run():
        latencies = []
        start = time.perf_counter()
        i = 0
        while time.perf_counter() - start < seconds:
            raw = rows[i % len(rows)]
            t0 = time.perf_counter()
            await env.verify_failsafe(env.request_model.model_validate(raw), raw)
            latencies.append(time.perf_counter() - t0)
            i += 1
        wall = time.perf_counter() - start
        return {"requests": i, "wall_s": wall, "requests_per_s": i / wall, "p50_ms": 1e3 * pct(latencies, 50),
                "p99_ms": 1e3 * pct(latencies, 99)}

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="verify requests per server run")
    parser.add_argument("--max_seconds", type=float, default=60.0, help="stop a run after this long")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--rows", type=int, default=128, help="distinct rows (cycled)")
    parser.add_argument("--workers", default="1,2", help="uvicorn worker counts to run, comma-separated")
    parser.add_argument("--client", choices=["raw", "httpx"], default="raw",
                        help="raw: a lean asyncio HTTP client (default); httpx: httpx.AsyncClient, as the GRPO client")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(REPO / "bench/results/reward_server.json"))
    args = parser.parse_args()

    rows = build_rows(args.rows, args.seed)
    for row in rows:
        row.pop("_kind")
    bodies = [json.dumps(r).encode() for r in rows]
    prompt_chars = [_chars(r["responses_create_params"]["input"]) for r in rows]
    answer_chars = [len(r["response"]["output"][-1]["content"][0]["text"]) for r in rows]
    corpus = {"rows": len(rows), "prompt_chars_mean": statistics.fmean(prompt_chars),
              "prompt_chars_median": statistics.median(prompt_chars), "answer_chars_mean": statistics.fmean(answer_chars),
              "expected_chars_mean": statistics.fmean(len(r["expected_answer"]) for r in rows),
              "body_bytes_mean": statistics.fmean(len(b) for b in bodies)}
    print(f"rows: {corpus['rows']}, prompts {corpus['prompt_chars_mean']:,.0f} characters on average "
          f"(median {corpus['prompt_chars_median']:,.0f}), answers {corpus['answer_chars_mean']:,.0f}, "
          f"request bodies {corpus['body_bytes_mean'] / 1024:,.0f} KiB; {os.cpu_count()} CPU cores")

    results = {"corpus": corpus, "clients": args.clients, "client": args.client, "cpu_count": os.cpu_count(), "runs": {}}
    print("baseline: scoring in process, no HTTP ...", flush=True)
    results["runs"]["in_process_scoring"] = in_process(rows, seconds=min(10.0, args.max_seconds))
    for workers in [int(w) for w in args.workers.split(",") if w]:
        print(f"server with --workers {workers}: {args.requests} requests, {args.clients} clients ...", flush=True)
        process, url = start_server(workers)
        try:
            cpu_before = tree_cpu_seconds(process.pid)
            driver = load_raw if args.client == "raw" else load
            run = asyncio.run(driver(url, bodies, args.requests, args.clients, args.max_seconds))
            run["server_cpu_s"] = tree_cpu_seconds(process.pid) - cpu_before  # (includes the warm-up requests)
            run["server_cpu_ms_per_request"] = 1e3 * run["server_cpu_s"] / (run["requests"] + args.clients)
            results["runs"][f"server_workers_{workers}"] = run
        finally:
            process.terminate()
            process.wait(timeout=30)

    print()
    print(f"| run ({os.cpu_count()} CPU cores, {args.clients} concurrent clients) | requests | req/s | p50 ms | p99 ms |"
          " server CPU ms/request | errors | mean reward |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, run in results["runs"].items():
        label = {"in_process_scoring": "baseline: scoring alone, in process, one at a time"}.get(
            name, f"server, uvicorn --workers {name.rsplit('_', 1)[-1]}")
        reward = run.get("mean_reward")
        print(f"| {label} | {run['requests']} | {run['requests_per_s']:,.0f} | {run['p50_ms']:.1f} | "
              f"{run['p99_ms']:.1f} | {run.get('server_cpu_ms_per_request', 1e3 / run['requests_per_s']):.2f} | "
              f"{run.get('errors', '-')} | {'-' if reward is None else f'{reward:.3f}'} |")
    base = results["runs"]["in_process_scoring"]["requests_per_s"]
    for name, run in results["runs"].items():
        if name != "in_process_scoring":
            run["ratio_to_in_process_scoring"] = run["requests_per_s"] / base
            print(f"{name}: {run['ratio_to_in_process_scoring']:.2f}x the in-process scoring rate")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
