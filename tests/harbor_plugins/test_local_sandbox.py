"""The Harbor adapter (harbor_plugins/local_sandbox.py) through real Harbor jobs: what a verifier run that needed the
network leaves in the trial, after a build that asked the resolver thousands of names.

Harbor runs in .venv-harbor as a subprocess (the helpers of tests/sandbox/test_sandbox.py).
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.sandbox.test_sandbox import ASK_NAMES, exception_type, harbor_e2e, harbor_run, reward, trials

MARKER = "verifier-output-begins-here"
LONG_OUTPUT = 6000  # well past the 1,500-character tail an error message carries

TASK_TOML = """schema_version = "1.1"
[task]
name = "terminal-recipes/{name}"
description = "Fixture: {description}"
[agent]
timeout_sec = 60.0
[verifier]
timeout_sec = 60.0
[environment]
build_timeout_sec = 120.0
cpus = 1
memory_mb = 512
storage_mb = 256
"""

# the verifier's output runs long, then it tries to download its runner (as Terminal-Bench 2's fetch uv), fails, 0
TEST_SH = textwrap.dedent(f"""\
    #!/bin/bash
    echo {MARKER}
    head -c {LONG_OUTPUT} /dev/zero | tr '\\0' 'v'; echo
    getent hosts astral.sh || echo "curl: (6) Could not resolve host: astral.sh"
    echo 0 > /logs/verifier/reward.txt
    """)


def _task(root: Path, name: str, description: str, dockerfile: str, context: dict[str, str] | None = None) -> None:
    task = root / name
    (task / "environment").mkdir(parents=True)
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    for fname, text in (context or {}).items():
        (task / "environment" / fname).write_text(text)
    (task / "solution").mkdir()
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\necho done > /app/done.txt\n")
    (task / "tests").mkdir()
    (task / "tests" / "test.sh").write_text(TEST_SH)
    (task / "task.toml").write_text(TASK_TOML.format(name=name, description=description))
    (task / "instruction.md").write_text("Write /app/done.txt.\n")


@pytest.fixture(scope="module")
def network_job(tmp_path_factory):
    tasks = tmp_path_factory.mktemp("network-tasks")
    # the build asks 2,500 names (an offline apt-get install asks that many) and succeeds
    _task(tasks, "many-names-then-verifier-network", "a build that asks thousands of names; a verifier that downloads",
          "FROM debian:bookworm\nWORKDIR /app\nCOPY ask_names.py /app/ask_names.py\n"
          "RUN python3 /app/ask_names.py 2500 mirror\n", {"ask_names.py": ASK_NAMES})
    _task(tasks, "verifier-network", "a verifier that downloads its runner", "FROM debian:bookworm\nWORKDIR /app\n")
    job = harbor_run(tasks, "oracle", tmp_path_factory.mktemp("network-jobs"), "network", "-n", "2")
    return trials(job) | {"_job": job}


@harbor_e2e
def test_a_verifier_that_needs_the_network_after_a_chatty_build_is_an_infra_failure(network_job):
    t = network_job["many-names-then-verifier-network"]
    assert exception_type(t) == "NetworkNeededError", (exception_type(t), reward(t))  # not a scored 0.0
    assert "asked for astral.sh" in t["exception_info"]["exception_message"]


@harbor_e2e
@pytest.mark.parametrize("task", ["verifier-network", "many-names-then-verifier-network"])
def test_a_verifier_run_the_sandbox_fails_keeps_its_outputs(network_job, task):
    t = network_job[task]
    assert exception_type(t) == "NetworkNeededError"
    verifier = t["_dir"] / "verifier"
    assert (verifier / "reward.txt").read_text().strip() == "0"  # what the tests wrote, kept beside the failure
    output = (verifier / "test-stdout.txt").read_text()
    assert output.startswith(MARKER) and "v" * LONG_OUTPUT in output  # the whole output, not a tail
    assert "verifier/test-stdout.txt" in t["exception_info"]["exception_message"]  # the message says where it is


@harbor_e2e
def test_kept_verifier_files_do_not_turn_the_failure_into_a_score(network_job):
    from eval.job_dir import read_job

    job = read_job(network_job["_job"])
    assert {(t["task"], t["outcome"], t["infra_kind"], t["reward"]) for t in job} == {
        (f"terminal-recipes/{task}", "infra_failure", "network", None)
        for task in ("verifier-network", "many-names-then-verifier-network")}
    assert job.metrics()["n_infra_errors"] == 2


USER_DOCKERFILE = """FROM debian:bookworm
ARG GREETING=the-default
RUN useradd -m -u 4321 agent && mkdir -p /app && chown agent /app
USER agent
WORKDIR /app
RUN echo "$GREETING" > /app/greeting
"""
USER_TEST_SH = """#!/bin/bash
echo "verifier: $(id -un) greeting=$(cat /app/greeting) agent=$(cat /app/agent-user) arg=${GREETING:-unset}"
if [ "$(id -un)" = agent ] && [ "$(cat /app/agent-user)" = agent ] && [ "$(cat /app/greeting)" = from-task-toml ] \\
   && [ -z "${GREETING:-}" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
"""


@harbor_e2e
def test_the_agent_and_the_verifier_run_as_the_final_user_with_the_tasks_build_args(tmp_path):
    tasks = tmp_path / "tasks"
    _task(tasks, "user-and-build-args", "USER and [environment] build_args", USER_DOCKERFILE)
    task = tasks / "user-and-build-args"
    with open(task / "task.toml", "a") as f:
        f.write('build_args = { GREETING = "from-task-toml" }\n')
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nid -un > /app/agent-user\n")
    (task / "tests" / "test.sh").write_text(USER_TEST_SH)
    t = trials(harbor_run(tasks, "oracle", tmp_path / "jobs", "user"))["user-and-build-args"]
    output = (t["_dir"] / "verifier" / "test-stdout.txt").read_text()
    assert reward(t) == 1.0, (exception_type(t), output)
    assert "verifier: agent greeting=from-task-toml agent=agent arg=unset" in output


@pytest.mark.slow
def test_a_multi_step_trial_is_not_flagged_for_harbors_own_resets_but_an_agents_plant_is(tmp_path):
    """Harbor's shared multi-step mode empties /logs/verifier and /tests before each round and before its verifier:
    the harness's doing, not evidence (every round of builtin:evocode's oracle was flagged `/tests appeared`). An agent
    that plants a file in /tests in round 2, or writes the reward in round 3, is still flagged, in that round."""
    import json
    import subprocess
    import sys

    from conftest import REPO
    from harbor_tasks.generate import write_task

    task = write_task(tmp_path / "tasks", "orders-rounds", 5, 0)
    for step, cheat in (("round-2", "mkdir -p /tests && echo planted > /tests/extra.sh"),
                        ("round-3", "echo 1 > /logs/verifier/reward.txt")):
        solve = task / "steps" / step / "solution" / "solve.sh"
        solve.write_text(solve.read_text() + cheat + "\n")
    checkpoint = tmp_path / "run" / "checkpoint-1"
    checkpoint.mkdir(parents=True)
    done = subprocess.run([sys.executable, "-m", "eval.run", "--checkpoint", str(checkpoint), "--suite",
                           str(tmp_path / "tasks"), "--agent", "oracle"], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((checkpoint / "eval_results.json").read_text())
    assert "round-2" in results["tasks"][0]["tamper"]["verifier_paths"]  # the trial's: its first flagged round
    trial = next(Path(results["harbor_job_dir"]).glob("orders-rounds-5-0__*"))
    rounds = {step: json.loads((trial / "steps" / step / "verifier" / "tamper.json").read_text())
              for step in ("round-1", "round-2", "round-3")}
    assert rounds["round-1"] == {}
    assert rounds["round-2"] == {"verifier_paths": "changed before the verifier ran: /tests/extra.sh appeared"}
    assert rounds["round-3"] == {"verifier_paths": "changed before the verifier ran: /logs/verifier/reward.txt "
                                                   "appeared"}
