"""One verifier run, one verdict: the same verifier outputs scored through the eval path (a real Harbor job in the
local sandbox, read back by eval.job_dir and counted by eval.metrics) and through the RL episode path (an in-process
episode of episodes.local) give the same outcome, infrastructure kind, score and tamper evidence (harbor_tasks.verdict
decides both, from what the harness captured and read from the host)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import REPO, run

from episodes.local import (
    EpisodeLimits,
    EpisodeStats,
    TaskEnvironment,
    episode_failure,
    episode_reward,
    episode_verdict,
)
from eval import metrics

pytestmark = pytest.mark.slow
BASE = REPO / "tests" / "fixtures" / "harbor_tasks" / "hello-world"
HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"
REWARD = "/logs/verifier"

# an agent that fails and leaves a daemon appending a missing tool to the verifier's output file (issue 20, finding 6)
FAKE_MISSING_TOOL = ("nohup sh -c 'while :; do [ -f /logs/verifier/test-stdout.txt ] && echo \"bash: line 3: "
                     "python3: command not found\" >> /logs/verifier/test-stdout.txt; sleep 0.02; done' "
                     ">/dev/null 2>&1 &")
# task name: (tests/test.sh after the shebang, verifier timeout_sec, the verdict: (outcome, infra kind, score, tamper
# kinds)[, the oracle's solve.sh after the shebang])
CASES = {
    "partial-json": (f"echo '{{\"a\": 1, \"b\": 0}}' > {REWARD}/reward.json", 60, ("scored", None, 0.5, ())),
    "reward-txt": (f"echo 1 > {REWARD}/reward.txt", 60, ("scored", None, 1.0, ())),
    "json-before-txt": (f"echo '{{\"reward\": 0.25}}' > {REWARD}/reward.json; echo 1 > {REWARD}/reward.txt", 60,
                        ("scored", None, 0.25, ())),
    "no-reward": ("echo 'the runner crashed before writing a reward'; exit 1", 60, ("agent_failure", None, 0.0, ())),
    "missing-runner": ("uvx pytest /tests/test_outputs.py", 60, ("infra_failure", "verifier_tools", None, ())),
    "name-offline": ("python3 -c 'import socket; socket.getaddrinfo(\"pypi.org\", 443)'; "
                     f"echo 0 > {REWARD}/reward.txt", 60, ("infra_failure", "network", None, ())),
    "timeout": (f"echo 1 > {REWARD}/reward.txt; sleep 60", 3, ("agent_failure", None, 0.0, ())),
    "daemon-fakes-missing-tool": (f"echo 0 > {REWARD}/reward.txt; sleep 0.5; echo done", 60,
                                  ("scored", None, 0.0, ()), FAKE_MISSING_TOOL),
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("verdicts")
    for name, (body, timeout, _, *solve) in CASES.items():
        task = root / name
        shutil.copytree(BASE, task)
        (task / "tests" / "test.sh").write_text(f"#!/bin/bash\n{body}\n")
        if solve:
            (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\n{solve[0]}\n")
        toml = (task / "task.toml").read_text().replace('name = "terminal-recipes/hello-world"',
                                                         f'name = "terminal-recipes/{name}"')
        (task / "task.toml").write_text(toml.replace("[verifier]\ntimeout_sec = 60.0",
                                                     f"[verifier]\ntimeout_sec = {float(timeout)}"))
    return root


def eval_path(suite: Path, tmp_path: Path) -> dict[str, tuple]:
    if not HARBOR.exists():
        pytest.fail(f"{HARBOR} missing: `make test` creates it (bash eval/setup_harbor.sh)")
    checkpoint = tmp_path / "run" / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    proc = run([sys.executable, "-m", "eval.run", "--checkpoint", str(checkpoint), "--suite", str(suite),
                "--agent", "oracle", "--concurrency", "4"], timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    results = json.loads((checkpoint / "eval_results.json").read_text())
    got, details = {}, {}
    for trial in results["tasks"]:
        infra = trial["outcome"] == "infra_failure"
        # what the mean counts: a missing reward is 0, an infrastructure failure is left out (eval.metrics)
        got[trial["task"].split("/")[-1]] = (trial["outcome"], trial["infra_kind"],
                                             None if infra else metrics.reward_or_zero(trial["reward"]),
                                             tuple(trial["tamper"]))
        details[trial["task"].split("/")[-1]] = trial["tamper"]
    assert results["metrics"]["n_infra_errors"] == sum(v[2] is None for v in got.values())
    assert results["metrics"]["n_tampered"] == sum(bool(v[3]) for v in got.values())
    return got, details


def episode_path(suite: Path) -> dict[str, tuple]:
    got = {}
    for name, case in CASES.items():
        stats = EpisodeStats()
        env = TaskEnvironment(EpisodeLimits(), stats)
        env.reset(task_dir=str(suite / name))
        if len(case) > 3:  # what the oracle runs on the eval path
            env.bash(case[3])
        reward = episode_reward(env)
        verdict = episode_verdict(env)
        failure = episode_failure(env)
        got[name] = (verdict.outcome, failure[0] if failure else None, reward, tuple(verdict.tamper_kinds))
        assert (reward is None) == (failure is not None) == (sum(stats.masked_by_kind.values()) == 1), name
    return got


def test_the_eval_path_and_the_episode_path_reach_the_same_verdict(suite, tmp_path):
    expected = {name: case[2] for name, case in CASES.items()}
    episodes = episode_path(suite)
    assert episodes == expected
    got, details = eval_path(suite, tmp_path)
    assert got == expected, f"tamper evidence: {details}"
