"""`python -m eval.run --suite DIR --prepare` (eval/prepare.py): each task's layer built ahead, said per task (built,
cached, failed, nothing to build), and keyed as `--env local` keys a trial, so a Harbor run that follows builds none."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.sandbox.test_sandbox import TASKS, harbor_e2e, harbor_run, reward, trials


def _suite(root: Path) -> Path:
    suite = root / "suite"
    shutil.copytree(TASKS / "hello-world", suite / "hello-world")
    hello = suite / "hello-world"  # a build arg from task.toml: a trial keys its build with it, so must prepare
    (hello / "task.toml").write_text((hello / "task.toml").read_text().replace(
        "[environment]\n", '[environment]\nbuild_args = { GREETING_DIR = "/app" }\n'))
    (hello / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nARG GREETING_DIR=/nowhere\n"
                                                      "WORKDIR $GREETING_DIR\nCOPY greeting.txt $GREETING_DIR/\n")
    shutil.copytree(TASKS / "hello-world", suite / "broken-build")
    (suite / "broken-build" / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nRUN exit 3\n")
    shutil.copytree(TASKS / "hello-world", suite / "no-dockerfile")
    (suite / "no-dockerfile" / "environment" / "Dockerfile").unlink()
    return suite


@harbor_e2e
def test_prepare_builds_the_layers_a_run_then_uses(tmp_path, capsys):
    from eval.run import main
    from sandbox import build_cache

    suite, cache = _suite(tmp_path), tmp_path / "cache"
    argv = ["--suite", str(suite), "--prepare", "--env_kwargs", f"build_cache_dir={cache}"]
    assert main(argv) == 1  # a task's build failed
    lines = capsys.readouterr().out.splitlines()
    status = {line.split()[0]: line.split()[1] for line in lines[1:-1]}
    assert status == {"broken-build": "failed", "hello-world": "built", "no-dockerfile": "none"}, lines
    assert "exit 3" in next(line for line in lines if line.startswith("broken-build"))
    assert lines[-1].startswith("prepare: 3 tasks: 1 built, 0 already cached, 1 failed, 1 with nothing to build")
    (suite / "broken-build" / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    assert main(argv) == 0 and "1 built, 1 already cached" in capsys.readouterr().out
    keys = sorted(e["key"] for e in build_cache.entries(cache))
    job = harbor_run(suite / "hello-world", "oracle", tmp_path / "jobs", "prepared", "--ek", f"build_cache_dir={cache}")
    assert [reward(t) for t in trials(job).values()] == [1.0]
    assert sorted(e["key"] for e in build_cache.entries(cache)) == keys  # the trial started from the prepared layer
