"""Tasks shaped like Terminal-Bench 2's (tests/fixtures/tb2_shaped/) through `python -m eval.run` with the oracle:
real Harbor jobs in the local sandbox. What runs scores; what cannot run here is a named infrastructure failure,
never a 0 in the mean: offline, with an image root file system built offline (mmdebstrap minbase plus the task's
Dockerfile steps), with user-mode networking only where the task allows internet, and with a pull that fails."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import REPO, debian_image, run

from sandbox.core import DEFAULT_PATH

pytestmark = pytest.mark.slow
HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"
TB2 = REPO / "tests" / "fixtures" / "tb2_shaped"


@pytest.fixture(autouse=True)
def needs_harbor():
    if not HARBOR.exists():
        pytest.fail(f"{HARBOR} missing: `make test` creates it (bash eval/setup_harbor.sh)")


def eval_run(checkpoint: Path, suite: Path, *args: str) -> tuple[dict, dict, str]:
    """(eval_results.json, {task: trial result.json}, stderr) of an oracle eval of `suite`."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    proc = run([sys.executable, "-m", "eval.run", "--checkpoint", str(checkpoint), "--suite", str(suite),
                "--agent", "oracle", "--concurrency", "2", *args], timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    results = json.loads((checkpoint / "eval_results.json").read_text())
    trials = {}
    for path in Path(results["harbor_job_dir"]).glob("*/result.json"):
        trial = json.loads(path.read_text())
        trials[trial["task_name"].split("/")[-1]] = trial
    return results, trials, proc.stderr


def outcomes(results: dict) -> dict[str, tuple]:
    return {t["task"].split("/")[-1]: (t["outcome"], t["infra_kind"], t["reward"]) for t in results["tasks"]}


def message(trial: dict) -> str:
    return (trial.get("exception_info") or {}).get("exception_message") or ""


def suite_of(tmp_path: Path, *tasks: str) -> Path:
    suite = tmp_path / "suite"
    for task in tasks:
        shutil.copytree(TB2 / task, suite / task)
    return suite


def test_offline_what_runs_scores_and_the_rest_are_named_infrastructure_failures(tmp_path):
    results, trials, stderr = eval_run(tmp_path / "run" / "checkpoint-3", TB2)
    got = outcomes(results)
    # what this host's userland has decides two of them: `python` (python-is-python3), and pip (PEP 668 refuses
    # it at once: no pytest; elsewhere it tries PyPI: network)
    has_python = shutil.which("python", path=DEFAULT_PATH) is not None
    assert got.pop("python-verifier") == (("scored", None, 1.0) if has_python else ("infra_failure", "verifier_tools", None))
    assert got.pop("pip-verifier")[:1] == ("infra_failure",)
    assert got == {
        "log-error-count": ("scored", None, 1.0),             # docker_image + a Dockerfile that sets up files
        "prebuilt-image-only": ("scored", None, 1.0),         # docker_image only: environment/ uploaded
        "uv-pytest-verifier": ("infra_failure", "network", None),       # the verifier fetches uv
        "apt-build-step": ("infra_failure", "network", None),           # RUN apt-get install
        "git-clone-build": ("infra_failure", "network", None),          # RUN git clone https://...
        "compose-services": ("infra_failure", "environment_build", None),  # several containers
    }
    m = results["metrics"]
    assert (m["mean_reward"], m["n_trials"], m["n_scored"] + m["n_infra_errors"]) == (1.0, 8, 8)
    assert m["n_infra_errors"] == 6 - has_python and m["infra_errors"]["environment_build"] == 1
    assert "astral.sh" in message(trials["uv-pytest-verifier"]) and "verifier" in message(trials["uv-pytest-verifier"])
    assert "Dockerfile RUN needed the network (it asked for deb.debian.org" in message(trials["apt-build-step"])
    assert "github.com" in message(trials["git-clone-build"])
    if not has_python:
        assert "python missing" in message(trials["python-verifier"])
    assert trials["compose-services"]["exception_info"]["exception_type"] == "SandboxBuildFailedError"
    assert "eval: step 3 " in stderr and f"mean_reward 1.000 over {m['n_scored']} scored trials" in stderr
    assert f"{m['n_infra_errors']} infrastructure failures left out (" in stderr
    # the same job, infrastructure failures counted as 0 (Harbor's own Mean)
    from eval.job_dir import read_job

    assert read_job(results["harbor_job_dir"]).metrics("zero")["mean_reward"] == m["n_scored"] / 8


def test_the_tasks_own_image_runs_instead_of_the_hosts_userland(tmp_path):
    built = debian_image("log-error-count", TB2 / "log-error-count" / "environment" / "Dockerfile")
    base = debian_image("minbase")
    images = tmp_path / "images.json"
    images.write_text(json.dumps({
        "registry.invalid/terminal-recipes/log-error-count:20260101": str(built),       # the task's image, built
        "registry.invalid/terminal-recipes/prebuilt-image-only:20260101": str(base),
        "python:3.13-slim": str(base),                                                # a FROM: replayed on top
    }))
    suite = suite_of(tmp_path, "log-error-count", "prebuilt-image-only", "python-verifier", "apt-build-step")
    results, trials, _ = eval_run(tmp_path / "run" / "checkpoint-1", suite, "--env_kwargs",
                                  f"images={images} image_cache={tmp_path / 'cache'}")
    assert outcomes(results) == {
        "log-error-count": ("scored", None, 1.0),
        "prebuilt-image-only": ("scored", None, 1.0),
        "python-verifier": ("infra_failure", "verifier_tools", None),
        "apt-build-step": ("infra_failure", "environment_build", None),
    }
    # python-verifier ran in the image (Debian minbase: no python either), not on the host
    assert f"image {tmp_path / 'cache'}" in message(trials["python-verifier"])
    assert "no image root file system for this task" in message(trials["apt-build-step"])
    assert "debian:bookworm-slim" in message(trials["apt-build-step"])


def test_a_pull_that_cannot_reach_the_registry_is_a_build_failure(tmp_path):
    if shutil.which("skopeo") is None:
        pytest.skip("skopeo is missing (make test installs it: apt-get install skopeo)")
    results, trials, _ = eval_run(tmp_path / "run" / "checkpoint-1", suite_of(tmp_path, "log-error-count"),
                                  "--env_kwargs", f"pull=true image_cache={tmp_path / 'cache'}")
    assert outcomes(results) == {"log-error-count": ("infra_failure", "environment_build", None)}
    assert "pull image registry.invalid/terminal-recipes/log-error-count:20260101: skopeo copy failed" in message(
        trials["log-error-count"])


def test_user_mode_network_only_for_tasks_that_allow_internet(tmp_path):
    if shutil.which("pasta") is None:
        pytest.skip("pasta is missing (make test installs it: apt-get install passt)")
    suite = tmp_path / "suite"
    for name, allow in (("allowed", "true"), ("not-allowed", "false")):
        task = suite / name
        shutil.copytree(TB2 / "log-error-count", task)
        toml = (task / "task.toml").read_text().replace("allow_internet = true", f"allow_internet = {allow}")
        (task / "task.toml").write_text(toml.replace("log-error-count", name))
        (task / "tests" / "test.sh").write_text(  # 1 when the sandbox has the network (pasta's DNS), else 0
            "#!/bin/bash\nif grep -q 'nameserver 10.0.2.3' /etc/resolv.conf; then echo 1; else echo 0; fi "
            "> /logs/verifier/reward.txt\n")
    results, _, _ = eval_run(tmp_path / "run" / "checkpoint-1", suite, "--env_kwargs", "network=pasta")
    assert outcomes(results) == {"allowed": ("scored", None, 1.0), "not-allowed": ("scored", None, 0.0)}


def test_an_agent_that_needed_the_network_counts_only_where_the_task_declares_internet(tmp_path):
    suite = tmp_path / "suite"
    for name, declared in (("declares-internet", True), ("says-nothing", False)):
        task = suite / name
        shutil.copytree(TB2 / "log-error-count", task)
        toml = (task / "task.toml").read_text().replace("log-error-count", name)
        (task / "task.toml").write_text(toml if declared else toml.replace("allow_internet = true\n", ""))
        # the agent tries a download, gets no answer and gives up: the verifier then fails
        (task / "solution" / "solve.sh").write_text("#!/bin/bash\ngetent hosts pypi.org || exit 1\n")
    results, trials, _ = eval_run(tmp_path / "run" / "checkpoint-1", suite)
    assert outcomes(results) == {"declares-internet": ("infra_failure", "network", None),
                                 "says-nothing": ("scored", None, 0.0)}  # Harbor's default is not a declaration
    assert "the agent asked for pypi.org" in message(trials["declares-internet"])
