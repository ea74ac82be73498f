"""The sandbox's build cache: start latency and episodes per minute of N starts of one task, with no cache (the
Dockerfile replayed at every start), a cold cache (the first start builds, the others wait for it) and a warm one.

    python bench/build_cache.py [--starts 16] [--concurrency 4] [--sleep 10] [--pip six] [--out FILE]

Tasks: `slow-run` (`RUN sleep S && echo x > /opt/x`), and where the package registry answers through pasta,
`pip-install` (`RUN pip install --target /opt/pkgs PACKAGE`, network=pasta). An "episode" here is a start, one command
(`cat` of what the build made) and a stop, `--concurrency` at a time, side by side in one process run. Reported per
task and setting: wall seconds, episodes per minute, mean and max start seconds, plus warm starts one at a time beside
starts of a sandbox with no Dockerfile (the floor on this machine's load); and the two targets: the mean warm start
(<= 0.3 s) and the cold run's wall against one build plus the warm run's wall (<= 1.2). Timings are not asserted.
"""

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sandbox import BlockingSandbox, SandboxConfig, build_cache  # noqa: E402


def episode(config: SandboxConfig, check: str) -> float:
    """Start, one command, stop; the start's seconds."""
    started = time.perf_counter()
    with BlockingSandbox(config) as sb:
        start = time.perf_counter() - started
        r = sb.exec(check, timeout_sec=60)
        if r.return_code != 0:
            raise SystemExit(f"the episode's command failed: {r}")
    return start


def run_setting(make_config, starts: int, concurrency: int, check: str) -> dict:
    began = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        latencies = list(pool.map(lambda i: episode(make_config(i), check), range(starts)))
    wall = time.perf_counter() - began
    return {"wall_seconds": round(wall, 2), "episodes_per_minute": round(60 * starts / wall, 1),
            "start_mean_seconds": round(statistics.mean(latencies), 3),
            "start_max_seconds": round(max(latencies), 3)}


def bench_task(name: str, dockerfile: str, check: str, network: str, args, work: Path) -> dict:
    env = work / name / "environment"
    env.mkdir(parents=True)
    (env / "Dockerfile").write_text(dockerfile)
    cache = work / f"cache-{name}"

    def config(use_cache: bool):
        return lambda i: SandboxConfig(memory_mb=1024, storage_mb=1024, environment_dir=env, network=network,
                                       build_cache=use_cache, build_cache_dir=cache, name=f"bench-{name}-{i}")

    row = {"task": name, "network": network}
    for setting, use_cache in (("no_cache", False), ("cold_cache", True), ("warm_cache", True)):
        row[setting] = run_setting(config(use_cache), args.starts, args.concurrency, check)
        print(json.dumps({"task": name, setting: row[setting]}), flush=True)
    # one at a time: a warm start's own latency, beside a sandbox with no Dockerfile at all (the floor, on this load)
    row["warm_one_at_a_time"] = run_setting(config(True), args.starts, 1, check)
    bare = lambda i: SandboxConfig(memory_mb=1024, storage_mb=1024, network=network, name=f"bench-bare-{i}")
    row["no_dockerfile_one_at_a_time"] = run_setting(bare, args.starts, 1, "true")
    build = json.loads(next(cache.glob("*/meta.json")).read_text())["build_seconds"]
    row["one_build_seconds"] = build
    row["cold_over_build_plus_warm"] = round(row["cold_cache"]["wall_seconds"]
                                             / (build + row["warm_cache"]["wall_seconds"]), 2)
    row["layer_mb"] = round(build_cache.size(next(cache.glob("*/layer"))) / 2**20, 2)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--sleep", type=float, default=10)
    parser.add_argument("--pip", default="six", help="the package of the pip-install task ('' to leave it out)")
    parser.add_argument("--out", default=str(REPO / "bench/results/build_cache.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="build-cache-bench-"))
    rows = []
    try:
        rows.append(bench_task("slow-run", f"FROM ubuntu:24.04\nRUN sleep {args.sleep} && echo x > /opt/x\n",
                               "cat /opt/x", "none", args, work))
        if args.pip and shutil.which("pasta"):
            probe = SandboxConfig(memory_mb=512, network="pasta", build_cache=False)
            with BlockingSandbox(probe) as sb:
                reachable = sb.exec("python3 -c \"import urllib.request as u; u.urlopen('https://pypi.org/simple/', "
                                    "timeout=10)\"", timeout_sec=30).return_code == 0
            if reachable:
                rows.append(bench_task("pip-install", f"FROM python:3.11-slim\nRUN python3 -m pip install -q "
                                       f"--no-cache-dir --break-system-packages --target /opt/pkgs {args.pip}\n",
                                       f"PYTHONPATH=/opt/pkgs python3 -c 'import {args.pip}'", "pasta", args, work))
            else:
                print("pip-install left out: pypi.org is not reachable through pasta", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {"command": "python " + " ".join(sys.argv), "starts": args.starts, "concurrency": args.concurrency,
              "tasks": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"{'task':<12} {'setting':<27} {'wall s':>7} {'episodes/min':>12} {'start mean s':>12} {'start max s':>11}")
    for row in rows:
        for setting in ("no_cache", "cold_cache", "warm_cache", "warm_one_at_a_time", "no_dockerfile_one_at_a_time"):
            r = row[setting]
            print(f"{row['task']:<12} {setting:<27} {r['wall_seconds']:>7} {r['episodes_per_minute']:>12} "
                  f"{r['start_mean_seconds']:>12} {r['start_max_seconds']:>11}")
        print(f"{row['task']:<12} one build {row['one_build_seconds']} s; cold wall / (one build + warm wall) = "
              f"{row['cold_over_build_plus_warm']}; layer {row['layer_mb']} MiB")


if __name__ == "__main__":
    main()
