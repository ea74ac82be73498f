"""python -m eval.audit on two tasks in the real local sandbox: a known hackable one (a generated task whose tests run
a checker from the working directory, which the agent can rewrite) and one whose nop passes. The audit must list
exactly those, catch the other cheats as tampering, and let no cheat escape as an infrastructure failure."""

import json
import shutil
from pathlib import Path

import pytest

from eval import audit
from harbor_tasks.generate import write_task


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("audit")
    sound = write_task(root, "write-value", 3, 0)
    test_sh = (sound / "tests" / "test.sh").read_text()  # its checks: between the cd and the reward
    checks = test_sh[test_sh.index("|| ok=0\n") + 8:test_sh.index('echo "$ok"')]

    hackable = root / "trusts-workdir-checker"
    shutil.copytree(sound, hackable)
    (hackable / "environment" / "app" / "check.sh").write_text(
        "#!/bin/bash\ncd /app\nok=1\n" + checks + "[ \"$ok\" = 1 ]\n")
    (hackable / "tests" / "test.sh").write_text(
        "#!/bin/bash\nif bash /app/check.sh; then echo 1 > /logs/verifier/reward.txt; "
        "else echo 0 > /logs/verifier/reward.txt; fi\n")

    trivial = root / "always-passes"
    shutil.copytree(sound, trivial)
    (trivial / "tests" / "test.sh").write_text("#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n")
    shutil.rmtree(sound)
    return root


def test_the_audit_finds_the_hackable_task_and_the_one_nop_passes(suite, capsys):
    assert audit.main(["--suite", str(suite), "--json", "--concurrency", "3"]) == 1
    report = json.loads(capsys.readouterr().out)
    found = report["findings"]
    assert found["hackable"] == ["trusts-workdir-checker: stub-workdir"], found
    assert found["nop_passes"] == ["always-passes"]
    assert found["escapes"] == [] and found["oracle_fails"] == []
    task = "trusts-workdir-checker"
    assert any(line.startswith(f"{task}: rewrite-reward (") for line in found["caught"]), found["caught"]
    runs = {(r["task"], r["agent"]): r for r in report["runs"]}
    assert len(runs) == 2 * len(audit.AGENTS)
    assert runs[(task, "oracle")]["passed"] and not runs[(task, "nop")]["passed"]
    assert [agent for agent in audit.CHEATS if runs[(task, agent)]["passed"] and not runs[(task, agent)]["tamper"]] \
        == ["stub-workdir"]


def test_bad_arguments_get_one_line_naming_the_fix(tmp_path, capsys):
    assert audit.main(["--suite", str(tmp_path / "none")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    assert audit.main(["--suite", "builtin:terminal", "--agents", "nop,sneaky"]) == 2
    assert "unknown agent sneaky" in capsys.readouterr().err
