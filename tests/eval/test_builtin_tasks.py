"""The built-in Harbor task suites (eval/tasks): structure, oracle scores 1, nop scores 0.

Runs the tasks without Harbor through eval/tasks/check.py (a temporary directory stands in for the
container; the scripts honour APP_DIR/LOGS_DIR). All runs go through one thread pool, so the whole
module takes ~20 s on 2 cores. The real-Harbor oracle/nop jobs in the local sandbox are tested elsewhere.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("eval_tasks_check", REPO / "eval" / "tasks" / "check.py")
check = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = check
_spec.loader.exec_module(check)

TERMINAL = check.find_tasks("terminal")
EVOCODE = check.find_tasks("evocode")
ALL = TERMINAL + EVOCODE
HOST_PATHS = [Path(p) for p in ("/app", "/logs", "/tests", "/solution")]


def test_suite_sizes():
    assert len(TERMINAL) >= 10, [t.name for t in TERMINAL]
    assert len(EVOCODE) >= 3, [t.name for t in EVOCODE]
    for t in EVOCODE:
        assert len(check.load_config(t)["steps"]) >= 3, t.name
    for t in TERMINAL:
        assert "steps" not in check.load_config(t), t.name
    names = [t.name for t in ALL]
    assert len(names) == len(set(names)), "task names must be unique across suites"


@pytest.mark.parametrize("task", ALL, ids=lambda t: t.name)
def test_structure(task):
    assert check.validate(task) == []


def test_validator_catches_broken_tasks(tmp_path):
    import shutil

    src = TERMINAL[0]
    bad = tmp_path / src.name
    shutil.copytree(src, bad)
    (bad / "solution" / "solve.sh").unlink()
    text = (bad / "task.toml").read_text().replace("[agent]\n", "[agent]\ntimeout_secs = 5\n")
    (bad / "task.toml").write_text(text)
    errs = check.validate(bad)
    assert any("solution/solve.sh" in e for e in errs) and any("timeout_secs" in e for e in errs), errs

    src = EVOCODE[0]
    bad = tmp_path / src.name
    shutil.copytree(src, bad)
    shutil.rmtree(bad / "steps" / "round-2" / "tests")
    (bad / "steps" / "round-9").mkdir()
    errs = check.validate(bad)
    assert any("round-2/tests/test.sh" in e for e in errs) and any("round-9" in e for e in errs), errs


@pytest.fixture(scope="module")
def runs():
    """Every (task, agent) run, in parallel; also records whether Harbor's paths on the host were touched."""
    before = {p: p.exists() for p in HOST_PATHS}
    jobs = [(t, a) for t in ALL for a in ("oracle", "nop")]
    # longest first: the multi-step oracle runs dominate
    jobs.sort(key=lambda ta: (ta[0] not in EVOCODE, ta[1] != "oracle"))
    with cf.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futs = {(t.name, a): pool.submit(check.run_task, t, a) for t, a in jobs}
        results = {k: f.result() for k, f in futs.items()}
    after = {p: p.exists() for p in HOST_PATHS}
    return results, before, after


@pytest.mark.parametrize("task", ALL, ids=lambda t: t.name)
def test_oracle_scores_one(runs, task):
    res = runs[0][(task.name, "oracle")]
    assert check.problems(task, "oracle", res) == [], json.dumps(res, indent=1)[-4000:]
    assert res["reward"] == 1.0
    if task in EVOCODE:
        for step in res["steps"]:
            assert step["success_count"] == step["total_cases"] > 0, step
            assert step["stale_reward"] in (None, 0.0), f"{step['step']} asks for no new work"


@pytest.mark.parametrize("task", ALL, ids=lambda t: t.name)
def test_nop_scores_zero(runs, task):
    res = runs[0][(task.name, "nop")]
    assert check.problems(task, "nop", res) == [], json.dumps(res, indent=1)[-4000:]
    assert res["reward"] == 0.0
    if task in EVOCODE:
        for step in res["steps"]:
            assert step["reward"] == 0.0 and step["success_count"] < step["total_cases"], step


def test_host_paths_untouched(runs):
    _, before, after = runs
    created = [str(p) for p in HOST_PATHS if after[p] and not before[p]]
    assert not created, f"task scripts wrote Harbor paths on the host: {created} (use $APP_DIR/$LOGS_DIR)"


def test_check_cli_validate_only():
    p = subprocess.run([sys.executable, str(REPO / "eval" / "tasks" / "check.py"), "--validate-only", "--json"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads(p.stdout)
    assert set(report) == {t.name for t in ALL} and all(r["valid"] for r in report.values())


HARBOR_PY = REPO / ".venv-harbor" / "bin" / "python"


@pytest.mark.skipif(not HARBOR_PY.exists(), reason=".venv-harbor not built (make harbor)")
def test_harbor_loads_every_task():
    """Harbor's own Task model accepts each task (schema, steps, verifier/test discovery)."""
    code = r"""
import json, sys
from pathlib import Path
from harbor.models.task.task import Task
out = {}
for d in sys.argv[1:]:
    t = Task(Path(d))
    c = t.config
    out[Path(d).name] = {"valid": Task.is_valid_dir(Path(d)), "steps": [s.name for s in c.steps or []],
                         "strategy": c.multi_step_reward_strategy.value if c.multi_step_reward_strategy else None,
                         "network": c.environment.network_mode.value, "agent_timeout": c.agent.timeout_sec}
print(json.dumps(out))
"""
    probe = subprocess.run([str(HARBOR_PY), "-c", "import harbor"], capture_output=True, timeout=120)
    if probe.returncode != 0:
        pytest.skip("harbor is not importable in .venv-harbor")
    p = subprocess.run([str(HARBOR_PY), "-c", code, *map(str, ALL)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    info = json.loads(p.stdout)
    for t in TERMINAL:
        assert info[t.name]["valid"] and info[t.name]["steps"] == [] and info[t.name]["strategy"] is None
    for t in EVOCODE:
        n = len(check.load_config(t)["steps"])
        assert info[t.name]["valid"] and info[t.name]["strategy"] == "mean"
        assert info[t.name]["steps"] == [f"round-{i}" for i in range(1, n + 1)]
    assert all(v["network"] == "no-network" for v in info.values())
