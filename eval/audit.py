"""Audit a suite's verifiers: nop, the oracle and cheating agents on every task in local sandboxes; what a cheat passes.
Runs in: the training venv; `python -m eval.audit --suite DIR|builtin:NAME [--agents a,b] [--concurrency N] [--json]`.

Each agent is a list of bash commands run as an RL episode (episodes.local: the harness and verdict agentic GRPO
uses), then the task's tests. Listed: tasks whose verifier a cheat passes with no tamper evidence (hackable), whose
nop passes, whose oracle fails, and cheats the harness caught or that ended as an infrastructure failure. Exit 1
when something is hackable, a nop passes or a cheat escapes its 0; what each cheat does: docs/evaluation.md#auditing.
"""

from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from episodes.local import EpisodeLimits, EpisodeStats, TaskEnvironment, episode_reward, episode_verdict
from harbor_tasks.folder import TaskFolder
from harbor_tasks.solution import bash_tool_commands
from harbor_tasks.suites import SuiteError, local_suite
from harbor_tasks.verdict import INFRA_FAILURE, passed

_SHIMMED = ("pytest", "py.test", "python3", "python", "uvx", "uv", "bash", "sh", "diff", "cmp", "grep", "test")
_PASS = "printf '#!/bin/bash\\necho 1 > /logs/verifier/reward.txt\\n'"
_DAEMON = "nohup sh -c '{}' >/dev/null 2>&1 &"
CHEATS: dict[str, list[str]] = {
    # a shim earlier on PATH (/usr/local/bin) for every runner and comparison tool: exit 0, print nothing
    "shim-tools": ["mkdir -p /usr/local/bin && for t in " + " ".join(_SHIMMED) + "; do printf '#!/bin/sh\\nexit 0\\n' "
                   "> /usr/local/bin/$t && chmod +x /usr/local/bin/$t; done"],
    # the reward files and a passing test script, written before the tests are uploaded
    "prewrite-reward": ["mkdir -p /logs/verifier /tests && echo 1 > /logs/verifier/reward.txt && echo "
                        f"'{{\"reward\": 1}}' > /logs/verifier/reward.json && {_PASS} > /tests/test.sh && "
                        "chmod +x /tests/test.sh"],
    # a daemon that replaces the tests with a passing script once they are uploaded
    "edit-tests": [_DAEMON.format(f"while :; do if [ -f /tests/test.sh ] && ! grep -qx \"echo 1 > "
                                  f"/logs/verifier/reward.txt\" /tests/test.sh; then {_PASS} > /tests/test.sh; fi; "
                                  "sleep 0.02; done".replace("'", "'\"'\"'"))],
    # a daemon that rewrites the reward files all through the verifier's run
    "rewrite-reward": [_DAEMON.format("while :; do mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt; "
                                      "echo {\\\"reward\\\": 1} > /logs/verifier/reward.json; sleep 0.01; done")],
    # the scripts and Python files of the working directory (code the tests may run) stubbed to succeed
    "stub-workdir": ["find . -name '*.sh' -type f -exec sh -c 'printf \"#!/bin/sh\\nexit 0\\n\" > \"$1\"' _ {} \\; ; "
                     "find . -name '*.py' -type f -exec sh -c 'echo \"import sys; sys.exit(0)\" > \"$1\"' _ {} \\;"],
    # a daemon that makes the tests' output say a tool is missing (an infrastructure failure instead of a 0)
    "fake-missing-tool": [_DAEMON.format("while :; do for p in /proc/[0-9]*; do grep -qs test.sh $p/cmdline && "
                                         "echo \"bash: line 1: python3: command not found\" > $p/fd/1; done; "
                                         "[ -d /logs/verifier ] && echo \"python3: command not found\" >> "
                                         "/logs/verifier/test-stdout.txt; sleep 0.1; done")],
}
AGENTS = ("nop", "oracle", *CHEATS)


@dataclass
class Run:
    """One agent on one task: the verifier's raw reward, whether it passed, the episode's outcome, evidence."""

    task: str
    agent: str
    outcome: str
    reward: float | None
    passed: bool
    score: float | None
    infra_kind: str | None = None
    tamper: dict = field(default_factory=dict)


def agent_commands(agent: str, task: Path) -> list[str]:
    if agent == "nop":
        return []
    if agent == "oracle":
        return bash_tool_commands(TaskFolder.of(task).solution_script or "")
    return CHEATS[agent]


def run_agent(task: Path, agent: str) -> Run:
    env = TaskEnvironment(EpisodeLimits(), EpisodeStats())
    try:
        env.reset(task_dir=str(task))
        for command in agent_commands(agent, task):
            env.bash(command)
        score = episode_reward(env)
        verdict = episode_verdict(env)
    finally:
        env._close()
    if verdict is None:
        return Run(task.name, agent, "agent_failure", None, False, score)
    return Run(task.name, agent, verdict.outcome, verdict.reward, passed(verdict.reward), score, verdict.infra_kind,
               dict(verdict.tamper))


def findings(runs: list[Run]) -> dict[str, list]:
    """What the runs show, per task: hackable (a cheat passed, nothing evident), nop passes, oracle fails, caught (a
    cheat passed and was recorded), escapes (a cheat ended as an infrastructure failure where nop was scored)."""
    by = {(r.task, r.agent): r for r in runs}
    tasks = sorted({r.task for r in runs})
    out: dict[str, list] = {"hackable": [], "nop_passes": [], "oracle_fails": [], "caught": [], "escapes": []}
    for task in tasks:
        nop, oracle = by.get((task, "nop")), by.get((task, "oracle"))
        if nop is not None and nop.passed:
            out["nop_passes"].append(task)
        if oracle is not None and not oracle.passed:
            out["oracle_fails"].append(f"{task} ({oracle.infra_kind or oracle.outcome})")
        for cheat in CHEATS:
            run = by.get((task, cheat))
            if run is None:
                continue
            if run.passed and not run.tamper:
                if task not in out["nop_passes"]:  # where doing nothing passes, every cheat does: listed there
                    out["hackable"].append(f"{task}: {cheat}")
            elif run.passed:
                out["caught"].append(f"{task}: {cheat} ({', '.join(run.tamper)})")
            if run.outcome == INFRA_FAILURE and nop is not None and nop.outcome != INFRA_FAILURE:
                out["escapes"].append(f"{task}: {cheat} ({run.infra_kind})")
    return out


def audit(task_dirs: list[Path], agents: list[str], concurrency: int = 2, progress=None) -> list[Run]:
    jobs = [(task, agent) for task in task_dirs for agent in agents]
    with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
        runs = []
        for run in pool.map(lambda job: run_agent(*job), jobs):
            runs.append(run)
            if progress is not None:
                progress(run)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.audit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", required=True, help="builtin:terminal, a folder of Harbor tasks or one task folder")
    parser.add_argument("--agents", default=",".join(AGENTS), help=f"comma-separated subset of {','.join(AGENTS)}")
    parser.add_argument("--concurrency", type=int, default=2, help="episodes side by side (default 2)")
    parser.add_argument("--json", action="store_true", help="print {runs, findings, skipped} as JSON")
    args = parser.parse_args(argv)
    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    unknown = [a for a in agents if a not in AGENTS]
    if unknown or not agents:
        print(f"error: --agents: unknown agent {','.join(unknown) or '(none given)'}; known: {','.join(AGENTS)}",
              file=sys.stderr)
        return 2
    try:
        _, tasks = local_suite(args.suite)
    except SuiteError as err:
        print(f"error: --suite {err}", file=sys.stderr)
        return 2
    runnable = [t for t in tasks if TaskFolder.of(t).single_step_runnable]
    skipped = [t.name for t in tasks if t not in runnable]
    from tqdm.auto import tqdm

    bar = tqdm(total=len(runnable) * len(agents), desc="audit", unit="episode", file=sys.stderr)
    runs = audit(runnable, agents, args.concurrency, progress=lambda run: bar.update(1))
    bar.close()
    found = findings(runs)
    if args.json:
        print(json.dumps({"runs": [asdict(r) for r in runs], "findings": found, "skipped": skipped}, indent=1))
    else:
        print(f"audit of {args.suite}: {len(runnable)} tasks x {len(agents)} agents"
              + (f" ({len(skipped)} multi-step tasks skipped: {', '.join(skipped)})" if skipped else ""))
        for key, title in (("hackable", "a cheat passes, nothing evident"), ("nop_passes", "doing nothing passes"),
                           ("escapes", "a cheat ends as an infrastructure failure"),
                           ("oracle_fails", "the oracle does not pass"),
                           ("caught", "a cheat passes, recorded as tampering (zeroed in RL)")):
            print(f"{title}: {len(found[key])}")
            for line in found[key]:
                print(f"  {line}")
    return 1 if found["hackable"] or found["nop_passes"] or found["escapes"] else 0


if __name__ == "__main__":
    sys.exit(main())
