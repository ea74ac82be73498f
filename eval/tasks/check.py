#!/usr/bin/env python3
"""Validate and dry-run the built-in Harbor task suites without Harbor.
Runs in: any Python >= 3.11, standard library only (with harbor_tasks); no root, namespace or container.

For every task under eval/tasks/terminal (single-step) and eval/tasks/evocode (multi-step, `[[steps]]`) it checks
the structure Harbor expects, then runs the task in a temporary directory that stands in for the container
($APP_DIR, $SOLUTION_DIR, $TESTS_DIR, $LOGS_DIR): agent "oracle" runs solution/solve.sh, "nop" nothing.
What it checks, step by step: eval/tasks/README.md.

usage: python eval/tasks/check.py [TASK_DIR ...] [--agent oracle|nop|both] [--validate-only] [--json]
exit status 0 when every task is valid, oracle scores 1 (all cases pass) and nop scores 0.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harbor_tasks.folder import read_config, task_folders
from harbor_tasks.suites import BUILTIN_SUITES

TASKS_ROOT = Path(__file__).resolve().parent
SUITES = {name.removeprefix("builtin:"): path for name, path in BUILTIN_SUITES.items()}
CASE_RE = re.compile(r"CASE_SUMMARY\s+total_cases=(\d+)\s+success_count=(\d+)")
NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9._-]*/[a-zA-Z0-9][a-zA-Z0-9._-]*$")

# Keys Harbor 0.25 knows (harbor/models/task/config.py). Pydantic there ignores unknown keys,
# so a typo would be dropped silently; we reject it instead.
ROOT_KEYS = {"schema_version", "version", "task", "metadata", "verifier", "agent", "environment",
             "solution", "source", "multi_step_reward_strategy", "steps", "artifacts"}
TASK_KEYS = {"name", "version", "description", "authors", "keywords"}
VERIFIER_KEYS = {"timeout_sec", "env", "user", "environment_mode", "environment", "collect",
                 "network_mode", "allowed_hosts"}
AGENT_KEYS = {"timeout_sec", "user", "network_mode", "allowed_hosts"}
ENV_KEYS = {"build_timeout_sec", "docker_image", "os", "cpus", "memory_mb", "storage_mb", "gpus",
            "gpu_types", "tpu", "mcp_servers", "env", "skills_dir", "healthcheck", "workdir",
            "allow_internet", "network_mode", "allowed_hosts"}
STEP_KEYS = {"name", "agent", "verifier", "min_reward", "healthcheck", "artifacts"}
METADATA_REQUIRED = {"difficulty", "category", "tags"}


def find_tasks(suite: str | None = None) -> list[Path]:
    roots = [SUITES[suite]] if suite else list(SUITES.values())
    return sorted(p for r in roots for p in task_folders(r))


def load_config(task: Path) -> dict:
    return read_config(task)


def _check_script(path: Path, errors: list[str], task: Path) -> None:
    rel = path.relative_to(task)
    if not path.is_file():
        errors.append(f"missing {rel}")
        return
    text = path.read_bytes()
    if not text.startswith(b"#!"):
        errors.append(f"{rel} has no shebang")
    if b"\r" in text:
        errors.append(f"{rel} has CR line endings")


def _unknown(d: dict, allowed: set[str], where: str, errors: list[str]) -> None:
    for key in d:
        if key not in allowed:
            errors.append(f"unknown key {key!r} in {where}")


def validate(task: Path) -> list[str]:
    """Structural problems of one task, as messages (empty list: valid)."""
    errors: list[str] = []
    try:
        cfg = load_config(task)
    except Exception as exc:  # noqa: BLE001
        return [f"task.toml does not parse: {exc}"]
    _unknown(cfg, ROOT_KEYS, "task.toml", errors)
    _unknown(cfg.get("task", {}), TASK_KEYS, "[task]", errors)
    _unknown(cfg.get("verifier", {}), VERIFIER_KEYS, "[verifier]", errors)
    _unknown(cfg.get("agent", {}), AGENT_KEYS, "[agent]", errors)
    _unknown(cfg.get("environment", {}), ENV_KEYS, "[environment]", errors)
    name = cfg.get("task", {}).get("name", "")
    if not NAME_RE.match(name) or name.split("/")[1] != task.name:
        errors.append(f"[task] name {name!r} must be 'org/{task.name}'")
    missing_meta = METADATA_REQUIRED - set(cfg.get("metadata", {}))
    if missing_meta:
        errors.append(f"[metadata] lacks {sorted(missing_meta)}")
    agent_t = cfg.get("agent", {}).get("timeout_sec")
    if not isinstance(agent_t, (int, float)) or not 60 <= agent_t <= 600:
        errors.append(f"[agent] timeout_sec {agent_t!r} should be set, 60..600 s")
    ver_t = cfg.get("verifier", {}).get("timeout_sec")
    if not isinstance(ver_t, (int, float)) or not 10 <= ver_t <= 120:
        errors.append(f"[verifier] timeout_sec {ver_t!r} should be set, 10..120 s")
    env = cfg.get("environment", {})
    for key in ("build_timeout_sec", "cpus", "memory_mb"):
        if key not in env:
            errors.append(f"[environment] lacks {key}")

    envdir = task / "environment"
    dockerfile = envdir / "Dockerfile"
    if not dockerfile.is_file():
        errors.append("missing environment/Dockerfile")
    else:
        df = dockerfile.read_text()
        if not re.search(r"^COPY\s+app/?\s+/app/?\s*$", df, re.M):
            errors.append("environment/Dockerfile must COPY app/ /app/")
        if (envdir / "setup.sh").exists() and "setup.sh" not in df:
            errors.append("environment/setup.sh exists but the Dockerfile does not run it")
        # the local sandbox (sandbox/dockerfile.py) replays the Dockerfile on the host's userland,
        # without network: a RUN that installs packages would fail the trial's start there
        if re.search(r"^RUN\b.*\b(apt-get|apt|apk|yum|dnf|pip3?|uv|curl|wget)\b", df, re.M):
            errors.append("environment/Dockerfile RUN must not install or download (no network in the "
                          "local sandbox); choose a base image that has the tools")
    app = envdir / "app"
    if not app.is_dir() or not any(app.iterdir()):
        errors.append("missing or empty environment/app/ (the /app workspace)")
    if (envdir / "setup.sh").exists():
        _check_script(envdir / "setup.sh", errors, task)

    steps = cfg.get("steps")
    if steps is None:
        instr = task / "instruction.md"
        if not instr.is_file() or not instr.read_text().strip():
            errors.append("missing or empty instruction.md")
        _check_script(task / "solution" / "solve.sh", errors, task)
        _check_script(task / "tests" / "test.sh", errors, task)
        if "multi_step_reward_strategy" in cfg:
            errors.append("multi_step_reward_strategy on a single-step task")
    else:
        if str(cfg.get("schema_version", cfg.get("version"))) != "1.2":
            errors.append("multi-step tasks use schema_version = \"1.2\" (EvoCode-Bench v2)")
        if cfg.get("multi_step_reward_strategy") not in ("mean", "final"):
            errors.append("multi_step_reward_strategy must be 'mean' or 'final'")
        if not isinstance(steps, list) or len(steps) < 3:
            errors.append("multi-step tasks need 3 or more [[steps]]")
            steps = steps if isinstance(steps, list) else []
        names = []
        for i, step in enumerate(steps, start=1):
            _unknown(step, STEP_KEYS, f"[[steps]] #{i}", errors)
            _unknown(step.get("agent", {}), AGENT_KEYS, f"[steps.agent] #{i}", errors)
            _unknown(step.get("verifier", {}), VERIFIER_KEYS, f"[steps.verifier] #{i}", errors)
            sname = step.get("name")
            if sname != f"round-{i}":
                errors.append(f"step #{i} must be named 'round-{i}', got {sname!r}")
            if not sname:
                continue
            names.append(sname)
            sdir = task / "steps" / sname
            instr = sdir / "instruction.md"
            if not instr.is_file() or not instr.read_text().strip():
                errors.append(f"missing or empty steps/{sname}/instruction.md")
            _check_script(sdir / "solution" / "solve.sh", errors, task)
            _check_script(sdir / "tests" / "test.sh", errors, task)
        if (task / "steps").is_dir():
            orphans = {d.name for d in (task / "steps").iterdir() if d.is_dir()} - set(names)
            if orphans:
                errors.append(f"steps/ directories not declared in [[steps]]: {sorted(orphans)}")
    return errors


def _run(cmd: list[str], cwd: Path, env: dict, timeout: float) -> tuple[int, str]:
    # Own session and process group, killed afterwards: a script that leaves a daemon behind
    # (the service task's start.sh does) must not outlive its run, as in a Harbor sandbox.
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            rc = p.wait(timeout=timeout)
            note = ""
        except subprocess.TimeoutExpired:
            rc, note = 124, f"\n[check.py] timed out after {timeout}s"
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        out.seek(0)
        return rc, out.read().decode(errors="replace") + note


def _copy_in(src: Path, dst: Path) -> None:
    """Copy a directory's contents into dst (merging), keeping modes, like Harbor's upload_dir."""
    if src.is_dir():
        shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)


def _read_reward(verifier_dir: Path) -> float | None:
    rj, rt = verifier_dir / "reward.json", verifier_dir / "reward.txt"
    try:
        if rj.exists():
            data = json.loads(rj.read_text())
            return float(data.get("reward", next(iter(data.values()))))
        if rt.exists():
            return float(rt.read_text().strip())
    except (ValueError, StopIteration, OSError):
        return None
    return None


def run_task(task: Path, agent: str = "oracle", keep: bool = False, stale_check: bool = True) -> dict:
    """Run one task with agent 'oracle' or 'nop'; returns reward, per-step results and output tails.

    stale_check (oracle, multi-step): also run round k's tests before round k's solution (k >= 2), recorded
    as stale_reward; a round that already passes on the previous round's solution asks for no new work.
    """
    cfg = load_config(task)
    t0 = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix=f"tr-{task.name}-"))
    app, logs, tests, solution, home = (tmp / "app", tmp / "logs", tmp / "tests", tmp / "solution", tmp / "home")
    for d in (app, logs / "verifier", logs / "agent", logs / "artifacts", home):
        d.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(APP_DIR=str(app), LOGS_DIR=str(logs), TESTS_DIR=str(tests), SOLUTION_DIR=str(solution),
               HOME=str(home), LC_ALL="C.UTF-8", PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    ver_timeout = float(cfg.get("verifier", {}).get("timeout_sec", 60))
    result: dict = {"task": task.name, "agent": agent, "reward": None, "steps": [], "error": None}
    try:
        _copy_in(task / "environment" / "app", app)
        setup = task / "environment" / "setup.sh"
        if setup.exists():
            rc, out = _run(["bash", str(setup)], app, env, 120)
            if rc != 0:
                result["error"] = f"environment/setup.sh failed ({rc}): {out[-2000:]}"
                return result

        def solve(sol_dir: Path) -> str | None:
            if solution.exists():
                shutil.rmtree(solution)
            solution.mkdir()
            _copy_in(sol_dir, solution)
            rc, out = _run(["bash", str(solution / "solve.sh")], app, env, 300)
            return None if rc == 0 else f"solve.sh failed ({rc}): {out[-2000:]}"

        def verify(test_dirs: list[Path], timeout: float) -> dict:
            if tests.exists():
                shutil.rmtree(tests)
            tests.mkdir()
            for d in test_dirs:
                _copy_in(d, tests)
            for f in ("reward.txt", "reward.json"):
                (logs / "verifier" / f).unlink(missing_ok=True)
            rc, out = _run(["bash", str(tests / "test.sh")], app, env, timeout)
            cases = CASE_RE.findall(out)
            res = {"reward": _read_reward(logs / "verifier"), "output_tail": out[-3000:]}
            if cases:
                res["total_cases"], res["success_count"] = map(int, cases[-1])
            return res

        steps = cfg.get("steps")
        if not steps:
            if agent == "oracle":
                err = solve(task / "solution")
                if err:
                    result["error"] = err
                    return result
            res = verify([task / "tests"], ver_timeout)
            result["reward"] = res["reward"]
            result["output_tail"] = res["output_tail"]
        else:
            rewards = []
            for i, step in enumerate(steps):
                sdir = task / "steps" / step["name"]
                timeout = float(step.get("verifier", {}).get("timeout_sec", ver_timeout))
                stale = None
                if agent == "oracle" and stale_check and i > 0:
                    # every round must ask for new work: its tests fail on the previous round's solution
                    stale = verify([task / "tests", sdir / "tests"], timeout)["reward"]
                if agent == "oracle":
                    err = solve(sdir / "solution")
                    if err:
                        result["error"] = f"{step['name']}: {err}"
                        return result
                res = verify([task / "tests", sdir / "tests"], timeout)
                res["step"] = step["name"]
                res["stale_reward"] = stale
                result["steps"].append(res)
                rewards.append(res["reward"] or 0.0)
            if cfg.get("multi_step_reward_strategy", "mean") == "final":
                result["reward"] = rewards[-1]
            else:
                result["reward"] = sum(rewards) / len(rewards)
        return result
    finally:
        result["seconds"] = round(time.monotonic() - t0, 2)
        if keep:
            result["workdir"] = str(tmp)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def problems(task: Path, agent: str, res: dict) -> list[str]:
    """What is wrong with a run's outcome: oracle must score 1 with every case passing, nop 0."""
    out: list[str] = []
    if res.get("error"):
        return [res["error"]]
    if agent == "oracle":
        if res["reward"] != 1.0:
            out.append(f"oracle reward {res['reward']} != 1")
        for s in res["steps"]:
            if s["reward"] != 1.0:
                out.append(f"oracle {s['step']} reward {s['reward']}: {s['output_tail'][-800:]}")
            if s.get("stale_reward") not in (None, 0.0):
                out.append(f"{s['step']} already passes on the previous round's solution")
            if "total_cases" not in s:
                out.append(f"{s['step']} printed no CASE_SUMMARY")
            elif s["success_count"] != s["total_cases"] or s["total_cases"] == 0:
                out.append(f"oracle {s['step']} CASE_SUMMARY {s['success_count']}/{s['total_cases']}")
        if res["reward"] != 1.0 and not res["steps"]:
            out.append(res.get("output_tail", "")[-1500:])
    else:
        if res["reward"] != 0.0:
            out.append(f"nop reward {res['reward']} != 0")
        for s in res["steps"]:
            if s["reward"] != 0.0:
                out.append(f"nop {s['step']} reward {s['reward']}")
            if "total_cases" not in s:
                out.append(f"{s['step']} printed no CASE_SUMMARY under nop")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tasks", nargs="*", type=Path, help="task dirs (default: every built-in task)")
    ap.add_argument("--suite", choices=sorted(SUITES))
    ap.add_argument("--agent", choices=["oracle", "nop", "both"], default="both")
    ap.add_argument("--validate-only", action="store_true")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    tasks = [t.resolve() for t in args.tasks] or find_tasks(args.suite)
    agents = ["oracle", "nop"] if args.agent == "both" else [args.agent]
    report: dict = {}
    bad = 0
    for t in tasks:
        errs = validate(t)
        report[t.name] = {"valid": not errs, "errors": errs, "runs": {}}
        bad += bool(errs)
    if not args.validate_only:
        jobs = [(t, a) for t in tasks if report[t.name]["valid"] for a in agents]
        with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futs = {pool.submit(run_task, t, a): (t, a) for t, a in jobs}
            for fut in cf.as_completed(futs):
                t, a = futs[fut]
                res = fut.result()
                errs = problems(t, a, res)
                report[t.name]["runs"][a] = {"reward": res["reward"], "seconds": res["seconds"],
                                             "steps": [{k: s.get(k) for k in ("step", "reward", "total_cases",
                                                                              "success_count", "stale_reward")}
                                                       for s in res["steps"]],
                                             "problems": errs}
                bad += bool(errs)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, r in report.items():
            runs = "  ".join(f"{a}={v['reward']} ({v['seconds']}s)" for a, v in sorted(r["runs"].items()))
            status = "ok  " if r["valid"] and not any(v["problems"] for v in r["runs"].values()) else "FAIL"
            print(f"{status} {name:32s} {runs}")
            for e in r["errors"]:
                print(f"       - {e}")
            for a, v in r["runs"].items():
                for e in v["problems"]:
                    print(f"       - [{a}] {e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
