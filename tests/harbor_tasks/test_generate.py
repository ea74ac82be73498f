"""Procedural task families (harbor_tasks/generate.py), every set: determinism, coverage, structure, oracle 1 / nop 0.

The fast tests run each generated instance through eval/tasks/check.py (no Harbor); the slow one runs real Harbor
oracle and nop jobs in the local sandbox over a set that covers every family.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harbor_tasks import generate as gen

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("eval_tasks_check_gen", REPO / "eval" / "tasks" / "check.py")
check = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = check
_spec.loader.exec_module(check)

N_FAMILIES = len(gen.FAMILIES)
EVERY_SET = ",".join(gen.SETS)


def snapshot(root: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under root: relative path -> (mode, bytes)."""
    return {str(p.relative_to(root)): (p.stat().st_mode & 0o7777, p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file()}


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harbor_tasks.generate", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> list[Path]:
    out = tmp_path_factory.mktemp("gen") / "tasks"
    result = cli("--out", out, "--seed", 11, "--n", 2 * N_FAMILIES, "--families", EVERY_SET)
    assert result.returncode == 0, result.stderr
    assert f"generated {2 * N_FAMILIES} tasks from {N_FAMILIES} families" in result.stdout
    return sorted(p for p in out.iterdir() if p.is_dir())


def test_at_least_eight_families():
    assert N_FAMILIES >= 8


def test_same_seed_is_byte_identical_other_seed_differs(tmp_path):
    gen.generate(tmp_path / "a", seed=5, n=N_FAMILIES, families=[EVERY_SET])
    gen.generate(tmp_path / "b", seed=5, n=N_FAMILIES, families=[EVERY_SET])
    gen.generate(tmp_path / "c", seed=6, n=N_FAMILIES, families=[EVERY_SET])
    a, b = snapshot(tmp_path / "a"), snapshot(tmp_path / "b")
    assert a and a == b
    c = snapshot(tmp_path / "c")
    for i, family in enumerate(gen.FAMILIES):  # every family's instance changes with the seed
        inst_a = {k.split("/", 1)[1]: v for k, v in a.items() if k.startswith(f"{family}-5-{i}/")}
        inst_c = {k.split("/", 1)[1]: v for k, v in c.items() if k.startswith(f"{family}-6-{i}/")}
        inst_a.pop("task.toml"), inst_c.pop("task.toml")
        assert inst_a != inst_c, family


def test_an_environment_is_dated_the_same_whenever_it_is_generated(generated):
    """COPY keeps mtimes: dated at generation, `ls -l` in the sandbox showed the hour the task was written, and two
    runs of one learning command trained on different screens."""
    dated = [p for task in generated for p in [task / "environment", *(task / "environment").rglob("*")]]
    assert len(dated) > 3 * len(generated)
    assert {p.lstat().st_mtime for p in dated} == {gen.WORLD_MTIME}


def test_every_family_appears_with_valid_names(generated):
    assert len(generated) == 2 * N_FAMILIES
    families = {p.name.rsplit("-", 2)[0] for p in generated}
    assert families == set(gen.FAMILIES)
    for p in generated:
        family, seed, index = p.name.rsplit("-", 2)
        assert seed == "11" and index.isdigit()
        assert check.NAME_RE.match(f"terminal-recipes/{p.name}")


@pytest.mark.parametrize("index", range(2 * N_FAMILIES))
def test_generated_task_is_valid_oracle_one_nop_zero(generated, index):
    task = generated[index]
    assert check.validate(task) == []
    for agent, reward in (("oracle", 1.0), ("nop", 0.0)):
        res = check.run_task(task, agent)
        assert check.problems(task, agent, res) == [], json.dumps(res, indent=1)[-3000:]
        assert res["reward"] == reward


def test_families_option(tmp_path):
    result = cli("--out", tmp_path / "o", "--seed", 1, "--n", 4, "--families", "sum-numbers,set-perms")
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in (tmp_path / "o").iterdir())
    assert names == ["set-perms-1-1", "set-perms-1-3", "sum-numbers-1-0", "sum-numbers-1-2"]


@pytest.mark.parametrize("args, message", [
    (["--n", "0"], "--n 0: must be at least 1"),
    (["--n", "3", "--families", "sum-numbers,nope"], "--families: unknown nope; sets: shallow, deep"),
    (["--n", "3", "--families", ","], "--families: none given"),
    (["--n", "3", "--world_seed", "-1"], "--world_seed -1: must be >= 0"),
])
def test_bad_arguments_are_one_clear_line(tmp_path, args, message):
    result = cli("--out", tmp_path / "o", "--seed", 1, *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_non_empty_out_needs_force(tmp_path):
    out = tmp_path / "o"
    assert cli("--out", out, "--seed", 1, "--n", 2).returncode == 0
    result = cli("--out", out, "--seed", 2, "--n", 2)
    assert result.returncode == 2 and "not empty" in result.stderr and "Traceback" not in result.stderr
    result = cli("--out", out, "--seed", 2, "--n", 3, "--force")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["count-lines-2-1", "count-words-2-2", "write-value-2-0"]
    (out / "notes.txt").write_text("mine\n")
    result = cli("--out", out, "--seed", 2, "--n", 3, "--force")
    assert result.returncode == 2 and "notes.txt" in result.stderr
    assert (out / "notes.txt").exists()


HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"


@pytest.mark.slow
def test_harbor_oracle_scores_one_and_nop_zero(tmp_path):
    """Real Harbor jobs in the local sandbox: every instance passes its own oracle and fails nop."""
    if not HARBOR.exists():
        pytest.fail(f"{HARBOR} missing: `make test` creates it (bash eval/setup_harbor.sh)")
    from conftest import run

    suite = tmp_path / "suite"
    gen.generate(suite, seed=1234, n=N_FAMILIES, families=[EVERY_SET])
    checkpoint = tmp_path / "run" / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    results = {}
    for agent in ("oracle", "nop"):
        result = run([sys.executable, "-m", "eval.run", "--checkpoint", str(checkpoint), "--suite", str(suite),
                      "--agent", agent, "--concurrency", "4", "--results_file", f"{agent}.json"], timeout=900)
        assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        results[agent] = json.loads((checkpoint / f"{agent}.json").read_text())
    n = N_FAMILIES
    oracle, nop = results["oracle"], results["nop"]
    for res in (oracle, nop):
        assert res["metrics"]["n_trials"] == n and len(res["tasks"]) == n
        assert res["metrics"]["exceptions"] == {}
    assert oracle["metrics"]["mean_reward"] == 1.0
    assert all(task["reward"] == 1.0 for task in oracle["tasks"]), oracle["tasks"]
    assert nop["metrics"]["mean_reward"] == 0.0
    assert all(task["reward"] == 0.0 for task in nop["tasks"]), nop["tasks"]
