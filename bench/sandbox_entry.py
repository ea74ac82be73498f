"""What entering a sandbox costs per command: `true` through today's sandbox/enter.py and through the compiled
helper (sandbox/enter.c), side by side in one sandbox, and where the time of each goes.

    python bench/sandbox_entry.py [--runs 200] [--out bench/results/sandbox_entry.json]

The two ways alternate command by command in one `BlockingSandbox` (SandboxConfig.entry flipped between calls), so
load on the machine falls on both alike; per way: the median and quartiles of wall milliseconds per `exec("true")`,
and the CPU milliseconds its processes used (user + system of the children, which no other load inflates). The
parts: each host program of the two ways in, run on its own (`subprocess.run`; median wall and CPU ms). Builds the
helper first (python -m sandbox.build_enter's build). Writes the JSON report; docs/benchmarks.md has the numbers.
"""

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from sandbox import BlockingSandbox, SandboxConfig, entry  # noqa: E402
from sandbox.core import ENTER  # noqa: E402
from sandbox.enter import seccomp_filter  # noqa: E402

WAYS = ("python", "compiled")


def children_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def summary(values: list[float]) -> dict:
    q1, median, q3 = statistics.quantiles(values, n=4)
    return {"median": round(median, 2), "q1": round(q1, 2), "q3": round(q3, 2), "n": len(values)}


def timed(run, runs: int) -> dict:
    """Median wall and CPU ms (of the children) of ``run()``, which runs one host program to its end."""
    wall, cpu = [], []
    for _ in range(runs):
        cpu0, started = children_cpu_ms(), time.perf_counter()
        run()
        wall.append((time.perf_counter() - started) * 1000)
        cpu.append(children_cpu_ms() - cpu0)
    return {"wall": round(statistics.median(wall), 2), "cpu": round(statistics.median(cpu), 2)}


def parts(sb, runs: int) -> dict:
    """Each host program of the two ways in, on its own (``subprocess.run``): where a command's time goes."""
    s = sb.sandbox
    python = [sys.executable, "-I", "-S"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}

    def entering(way: str, pid: int, command: list[str]):
        """Run the way in: for PID 1 ``pid`` (0: none, so it stops at its first check, exit 251), ``command``."""
        def run():
            s.config.entry = way
            argv, spec_fd, pass_fds, env = s._enter_argv(command, {"PATH": "/usr/bin:/bin"}, None)
            if pid == 0:  # the spec of a sandbox that is not there: everything before entering, then exit 251
                os.ftruncate(spec_fd, 0)
                os.pwrite(spec_fd, _gone(way, spec_fd), 0)
            subprocess.run(argv, pass_fds=pass_fds, env=env, start_new_session=True, **quiet)
            os.close(spec_fd)
        return run

    prefix = s._limit_prefix()
    out = {"python -I -S -c pass (the interpreter's start)": timed(lambda: subprocess.run(python + ["-c", "pass"]),
                                                                   runs),
           "python -I -S -c 'import ctypes, json, ...' (enter.py's imports)": timed(lambda: subprocess.run(
               python + ["-c", "import ctypes, errno, json, os, select, signal, struct"]), runs),
           "python -I -S enter.py up to its first check (imports, seccomp.py, its own compile)": timed(
               entering("python", 0, ["/bin/true"]), runs),
           "compiled helper up to its first check": timed(entering("compiled", 0, ["/bin/true"]), runs),
           "sh: join the cgroup (root mode), exec": timed(lambda: subprocess.run(
               prefix[:prefix.index("prlimit")] + ["true"]), runs) if s._cgroup else None,
           "prlimit -- true": timed(lambda: subprocess.run(["prlimit", "--cpu=3600", "--core=0", "--", "true"]), runs),
           "bash -c true (the command itself, on the host)": timed(lambda: subprocess.run(["bash", "-c", "true"]), runs),
           "seccomp program build (in process; enter.py builds it per command)": {
               "wall": round(min(_ms(lambda: seccomp_filter(os.uname().machine)) for _ in range(runs)), 3)}}
    for way in WAYS:
        out[f"{way}: the whole way in, running /bin/true (no bash, no asyncio)"] = timed(
            entering(way, s.init_pid, ["/bin/true"]), runs)
    return out


def _gone(way: str, spec_fd: int) -> bytes:
    """A spec of ``way`` for a sandbox whose PID 1 is not there."""
    if way == "compiled":
        return entry.spec(pid=0, pidfd=-1, userns=False, uid=0, gid=0, groups=[], caps=[], cgroup_files=[],
                          rlimits={}, argv=["/bin/true"], env={}, program=b"")
    return json.dumps({"pid": 0, "pidfd": spec_fd, "argv": ["/bin/true"], "env": {}, "caps": []}).encode()


def _ms(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=200, help="commands per way (after 10 of warm-up each)")
    parser.add_argument("--out", default=str(REPO / "bench/results/sandbox_entry.json"))
    args = parser.parse_args()
    print(f"helper: {entry.build()}", flush=True)
    wall: dict[str, list[float]] = {w: [] for w in WAYS}
    cpu: dict[str, list[float]] = {w: [] for w in WAYS}
    with BlockingSandbox(SandboxConfig(memory_mb=512, storage_mb=128)) as sb:
        for i in range(args.runs + 10):
            for way in WAYS if i % 2 else reversed(WAYS):  # either first half the time
                sb.sandbox.config.entry = way
                cpu0, started = children_cpu_ms(), time.perf_counter()
                r = sb.exec("true")
                spent, used = (time.perf_counter() - started) * 1000, children_cpu_ms() - cpu0
                assert r.return_code == 0, r
                if i >= 10:
                    wall[way].append(spent)
                    cpu[way].append(used)
        split = parts(sb, max(10, args.runs // 10))
    report = {"command": "python " + " ".join(sys.argv), "enter_py": str(ENTER.relative_to(REPO)),
              "per_command_ms": {w: {"wall": summary(wall[w]), "cpu": summary(cpu[w])} for w in WAYS},
              "parts_ms": split}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    for way in WAYS:
        w, c = report["per_command_ms"][way]["wall"], report["per_command_ms"][way]["cpu"]
        print(f"{way:>9}: exec('true') {w['median']:6.1f} ms wall (quartiles {w['q1']}-{w['q3']}), "
              f"{c['median']:5.1f} ms CPU, n={w['n']}")
    for name, ms in split.items():
        if ms:
            print(f"  {ms['wall']:7.2f} ms wall {ms.get('cpu', ''):>6} ms CPU  {name}")


if __name__ == "__main__":
    main()
