"""Per-command entry and stop cost of the local sandbox: this tree's `sandbox/` against another commit's, side by side.

    python bench/sandbox_cost.py [--baseline 6e16302] [--rounds 5] [--cycles 3] [--written_mb 1024] [--scenarios ...]

`BlockingSandbox` as training code drives it: start, one `true` (a command's entry: sandbox/enter.py, then bash),
stop (`close()`); with a tmpfs root (storage_mb 512), with the disk-backed root of the default 10 GiB storage (root
only), and with that disk after a command wrote `--written_mb` MiB to /app (its stop only). The baseline's `sandbox/`
is unpacked from git (`git archive`) into a temporary folder; each round runs one child process per tree, the two
trees alternating, each doing `--cycles` sandboxes per scenario after a warm-up one. Medians and minima are
reported, with the ratio of the medians, baseline / this tree (on a busy machine the minima say more). `freed` is when the last loop device of the disk let go of its file (this tree lets go of
the disk on a thread after the stop returns; the baseline before). Writes bench/results/sandbox_cost.json.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASELINE = "6e16302"  # the last commit before the cheap stop (docs/sandbox.md#stopping-a-sandbox)
SCENARIOS = {"tmpfs root": {"storage_mb": 512}, "disk root": {}, "disk root, written": {}}


def _backed_in(folder: str) -> bool:
    """Whether a loop device still holds a file of ``folder`` (the disk of a sandbox of this process)."""
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        try:
            if backing.read_text().startswith(folder):
                return True
        except OSError:
            continue
    return False


def child(scenario: str, cycles: int, written_mb: int) -> None:
    """One tree's measurements (the `sandbox` on PYTHONPATH), printed as JSON: seconds per phase, one entry a cycle."""
    from sandbox import BlockingSandbox, SandboxConfig

    out = {"start": [], "true": [], "stop": [], "freed": []}
    with tempfile.TemporaryDirectory(prefix="sandbox-cost-") as disk_dir:
        for cycle in range(cycles + 1):  # the first one warms up (imports, page cache), unrecorded
            t0 = time.perf_counter()
            box = BlockingSandbox(SandboxConfig(disk_dir=Path(disk_dir), **SCENARIOS[scenario]))
            box.start()
            t1 = time.perf_counter()
            assert box.exec("true").return_code == 0
            t2 = time.perf_counter()
            if scenario.endswith("written"):
                box.exec(f"head -c {written_mb}M /dev/zero > /app/written")
                t2 = time.perf_counter()
            box.close()
            t3 = time.perf_counter()
            while _backed_in(disk_dir) and time.perf_counter() - t3 < 30:
                time.sleep(0.001)
            t4 = time.perf_counter()
            if cycle:
                for phase, seconds in (("start", t1 - t0), ("true", t2 - t1), ("stop", t3 - t2), ("freed", t4 - t2)):
                    out[phase].append(seconds)
    if scenario.endswith("written"):
        del out["start"], out["true"]
    if scenario.startswith("tmpfs"):
        del out["freed"]
    print(json.dumps(out))


def measure(tree: Path, scenario: str, cycles: int, written_mb: int) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    proc = subprocess.run([sys.executable, __file__, "--child", scenario, "--cycles", str(cycles), "--written_mb",
                           str(written_mb)], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"{tree} ({scenario}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default=BASELINE, help="the commit whose sandbox/ is compared")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cycles", type=int, default=3, help="sandboxes per scenario, tree and round")
    parser.add_argument("--written_mb", type=int, default=1024)
    parser.add_argument("--scenarios", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    parser.add_argument("--out", default=str(REPO / "bench/results/sandbox_cost.json"))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child, args.cycles, args.written_mb)

    scenarios = [s for s in args.scenarios if os.geteuid() == 0 or s == "tmpfs root"]  # a disk needs root
    with tempfile.TemporaryDirectory(prefix="sandbox-baseline-") as baseline:
        archive = subprocess.run(["git", "archive", args.baseline, "sandbox"], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", baseline], input=archive.stdout, check=True)
        trees = {"baseline": Path(baseline), "this tree": REPO}
        samples = {(s, t): {} for s in scenarios for t in trees}
        for round_ in range(args.rounds):
            for scenario in scenarios:
                for tree in (trees if round_ % 2 == 0 else reversed(trees)):  # alternate who goes first
                    for phase, values in measure(trees[tree], scenario, args.cycles, args.written_mb).items():
                        samples[scenario, tree].setdefault(phase, []).extend(values)
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    rows = []
    for scenario in scenarios:
        for phase in samples[scenario, "baseline"]:
            (old, old_min), (new, new_min) = ((statistics.median(samples[scenario, t][phase]) * 1000,
                                               min(samples[scenario, t][phase]) * 1000) for t in trees)
            rows.append({"scenario": scenario, "phase": phase, "baseline_ms": round(old, 1),
                         "baseline_min_ms": round(old_min, 1), "this_tree_ms": round(new, 1),
                         "this_tree_min_ms": round(new_min, 1), "ratio": round(old / new, 2)})
    report = {"command": "python " + " ".join(sys.argv), "baseline": args.baseline, "rounds": args.rounds,
              "cycles": args.cycles, "written_mb": args.written_mb, "rows": rows,
              "samples_ms": {f"{s} | {t}": {p: [round(v * 1000, 1) for v in vs] for p, vs in phases.items()}
                             for (s, t), phases in samples.items()}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"| scenario | phase | baseline ({args.baseline}) ms, median (min) | this tree ms, median (min) "
          "| baseline / this tree |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print(f"| {r['scenario']} | {r['phase']} | {r['baseline_ms']} ({r['baseline_min_ms']}) "
              f"| {r['this_tree_ms']} ({r['this_tree_min_ms']}) | {r['ratio']} |")


if __name__ == "__main__":
    main()
