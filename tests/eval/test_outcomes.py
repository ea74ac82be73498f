"""The three outcomes of a trial (harbor_tasks/verdict.py), infrastructure failures out of the means (eval/metrics.py),
the summary line and W&B keys, the preflight (eval/preflight.py, `eval.run --dry_run`) on the Terminal-Bench-2
shaped fixtures (tests/fixtures/tb2_shaped/), and the verifier diagnosis (harbor_tasks/verdict.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from eval import metrics as M
from eval import preflight
from eval.results import summary_line
from eval.settings import EvalSettings, recipe_fields
from eval.wandb_log import eval_payload
from harbor_tasks import verdict as outcomes
from harbor_tasks.verdict import TAMPER_KINDS, diagnose, judge_verifier_run, missing_tools, reward_of
from sandbox import NetworkNeededError, VerifierToolsMissingError

REPO = Path(__file__).resolve().parents[2]
TB2 = REPO / "tests" / "fixtures" / "tb2_shaped"
HARBOR_PY = REPO / ".venv-harbor" / "bin" / "python"


def trial(task, reward, exception=None, agent_started=True, attempt=1):
    outcome, kind = outcomes.classify(exception, agent_started)
    return {"task": task, "trial": f"{task}{attempt}", "attempt": attempt, "reward": reward, "rounds": [],
            "exception": exception, "outcome": outcome, "infra_kind": kind}


def test_classify():
    assert outcomes.classify(None) == ("scored", None)
    assert outcomes.classify("AgentTimeoutError") == ("agent_failure", None)
    assert outcomes.classify("RewardFileNotFoundError") == ("agent_failure", None)  # as the leaderboard keeps it
    assert outcomes.classify("NetworkNeededError") == ("infra_failure", "network")
    assert outcomes.classify("VerifierToolsMissingError") == ("infra_failure", "verifier_tools")
    assert outcomes.classify("SandboxBuildFailedError") == ("infra_failure", "environment_build")
    assert outcomes.classify("SandboxError") == ("infra_failure", "sandbox")
    # anything before the agent started is the environment's, but not the user's own Ctrl-C
    assert outcomes.classify("ValueError", agent_started=False) == ("infra_failure", "sandbox")
    assert outcomes.classify("CancelledError", agent_started=False) == ("agent_failure", None)
    assert set(outcomes.INFRA_EXCEPTIONS.values()) == set(outcomes.INFRA_KINDS)


@pytest.mark.skipif(not HARBOR_PY.exists(), reason=".venv-harbor missing: `make test` creates it")
def test_harbor_sandbox_and_harbor_failures_are_all_infrastructure_failures():
    # Harbor's own error policy: every exception it files under "sandbox failed" or "harbor failed" is ours too
    code = ("import json; from harbor.models.trial.error_policy import ERROR_POLICIES, FailureCause as F; "
            "print(json.dumps(sorted(n for n, p in ERROR_POLICIES.items() "
            "if p.cause in (F.SANDBOX_FAILED, F.HARBOR_FAILED))))")
    proc = subprocess.run([str(HARBOR_PY), "-c", code], capture_output=True, text=True, timeout=120,
                          env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    harbor_infra = set(json.loads(proc.stdout))
    assert harbor_infra and harbor_infra <= set(outcomes.INFRA_EXCEPTIONS), harbor_infra - set(outcomes.INFRA_EXCEPTIONS)


def test_infra_failures_are_left_out_of_the_means_and_counted():
    trials = [trial("a", 1.0), trial("a", 0.0, attempt=2), trial("b", None, "NetworkNeededError"),
              trial("b", 1.0, attempt=2), trial("c", None, "SandboxBuildFailedError", agent_started=False),
              trial("c", 0.0, "AgentTimeoutError", attempt=2)]
    m = M.compute_metrics(trials)
    # scored: a 1, 0; b 1; c 0 (an agent timeout scores its reward) -> 2/4
    assert m["mean_reward"] == pytest.approx(0.5) and m["n_scored"] == 4 and m["n_trials"] == 6
    assert m["n_infra_errors"] == 2 and m["infra_errors"] == {"environment_build": 1, "network": 1}
    assert m["outcomes"] == {"scored": 3, "agent_failure": 1, "infra_failure": 2}
    assert m["pass_at_k"] == {"1": pytest.approx((0.5 + 1 + 0) / 3)}  # k = 1: b and c have one scored trial each
    zero = M.compute_metrics(trials, infra_errors="zero")
    assert zero["mean_reward"] == pytest.approx(2 / 6) and zero["n_scored"] == 6 and zero["infra_errors_counted"] == "as 0"
    assert zero["pass_at_k"]["2"] == pytest.approx((1 + 1 + 0) / 3)
    only_infra = M.compute_metrics([trial("x", None, "NetworkNeededError")])
    assert only_infra["mean_reward"] is None and only_infra["n_infra_errors"] == 1
    with pytest.raises(ValueError, match="infra_errors"):
        M.compute_metrics(trials, infra_errors="ignore")


def test_summary_line_and_wandb_keys():
    trials = [trial("a", 1.0), trial("b", None, "NetworkNeededError"), trial("c", None, "VerifierToolsMissingError")]
    results = {"suite": "builtin:terminal", "agent": "oracle", "global_step": 7, "harbor_job_dir": "/jobs/x",
               "metrics": M.compute_metrics(trials), "tasks": trials}
    line = summary_line(results)
    assert line.startswith("eval: step 7 builtin:terminal (oracle): mean_reward 1.000 over 1 scored trials")
    assert "2 infrastructure failures left out (network 1, verifier_tools 1)" in line and "\n" not in line
    payload = eval_payload(results)
    assert payload["eval/terminal/n_infra_errors"] == 2 and payload["eval/terminal/mean_reward"] == 1.0
    # every kind, every step: 0 where none
    assert {k: payload[f"eval/terminal/infra_errors/{k}"] for k in outcomes.INFRA_KINDS} == {
        "environment_build": 0, "verifier_tools": 1, "network": 1, "sandbox": 0}
    assert payload["eval/terminal/outcomes/infra_failure"] == 2
    clean = {**results, "metrics": M.compute_metrics([trial("a", 1.0)])}
    assert "no infrastructure failures" in summary_line(clean)


def test_eval_settings_give_cli_flags_and_recipe_keys():
    assert EvalSettings(suite="x").infra_errors == "exclude" and EvalSettings(suite="x").env_kwargs is None
    assert {"infra_errors", "env_kwargs"} <= {f.name for f in recipe_fields()}


# ---------------------------------------------------------------- the verifier diagnosis (harbor_tasks/verdict.py)

def test_verifier_diagnosis():
    assert reward_of('{"reward": 0.5}', "1") == 0.5 and reward_of(None, " 1\n") == 1.0 and reward_of("", "") is None
    out = "/tests/test.sh: line 2: python: command not found\nsh: 1: uvx: not found\nfoo: command not found\n"
    assert missing_tools(out) == ["python", "uvx"]  # foo may be what the agent had to provide
    assert missing_tools("E   ModuleNotFoundError: No module named 'pytest'") == ["pytest"]
    assert diagnose(1.0, out, verifier_names=["astral.sh"]) is None  # a pass stands
    net = diagnose(0.0, out, verifier_names=["astral.sh"])
    assert isinstance(net, NetworkNeededError) and net.phase == "verifier" and "astral.sh" in str(net)
    tools = diagnose(None, out, verifier_names=[])
    assert isinstance(tools, VerifierToolsMissingError) and "python, uvx" in str(tools)
    assert diagnose(0.0, "assert 1 == 2", verifier_names=[]) is None  # a plain failure is the agent's
    # the agent asked for names: infrastructure only where the task allowed internet the sandbox did not give
    assert diagnose(0.0, "", verifier_names=[], agent_names=["pypi.org"], internet_allowed=False) is None
    agent = diagnose(0.0, "", verifier_names=[], agent_names=["pypi.org"], internet_allowed=True)
    assert isinstance(agent, NetworkNeededError) and agent.phase == "agent"


# ---------------------------------------------------------------- preflight

def test_shell_reading():
    script = ("#!/bin/bash\n# curl in a comment\napt-get update > /dev/null 2>&1\nexport X=1\n"
              "cat <<'EOF' > /tmp/x.py\nimport requests\nEOF\nif [ -f /app/a ]; then python /tests/check.py; fi\n"
              "jq -r .x /app/a | sort -u && my_fn\nmy_fn() { true; }\n"
              "uvx -p 3.13 \\\n  -w pytest pytest /tests/t.py\n")
    assert [n for n, _ in preflight.network_lines(script)] == [3, 11]
    assert preflight.commands(script) == ["apt-get", "cat", "python", "jq", "sort", "uvx"]
    assert preflight.parse_env_kwargs("network=pasta images=/x/images.json") == {"network": "pasta",
                                                                                "images": "/x/images.json"}
    with pytest.raises(ValueError, match="key=value"):
        preflight.parse_env_kwargs("pasta")


def test_preflight_of_the_tb2_shaped_suite():
    report = preflight.preflight(TB2, "local")
    by_task = {t["task"]: t for t in report["tasks"]}
    assert by_task["log-error-count"]["verdict"] == "differs"  # the host userland stands in for its image
    assert by_task["prebuilt-image-only"]["verdict"] == "differs"
    assert "needs network at test time: tests/test.sh" in by_task["uv-pytest-verifier"]["reasons"][0]
    assert "needs network at build: RUN apt-get update" in by_task["apt-build-step"]["reasons"][0]
    assert "needs network at build: RUN git clone" in by_task["git-clone-build"]["reasons"][0]
    assert "needs network at test time" in by_task["pip-verifier"]["reasons"][0]
    assert by_task["python-verifier"]["reasons"] == [
        "its verifier's tools are missing from the host userland: python (tests/test.sh)"]
    assert "docker-compose" in by_task["compose-services"]["reasons"][0]
    assert report["counts"] == {"runs": 0, "differs": 2, "cannot": 6}
    # with user-mode networking the downloads can happen; `python` is still missing
    online = {t["task"]: t for t in preflight.preflight(TB2, "local", "network=pasta")["tasks"]}
    assert online["apt-build-step"]["verdict"] == online["uv-pytest-verifier"]["verdict"] == "differs"
    assert online["python-verifier"]["verdict"] == "cannot" and "network by pasta" in online["apt-build-step"]["notes"]
    # Harbor's environments: compose runs on docker and daytona only; an engine or a key must be there
    daytona = {t["task"]: t for t in preflight.preflight(TB2, "daytona")["tasks"]}
    assert daytona["compose-services"]["userland"].startswith("Harbor's daytona")


def test_preflight_names_what_the_dockerfile_replay_does_not_obey(tmp_path):
    task = tmp_path / "multi-stage"
    (task / "environment").mkdir(parents=True)
    (task / "instruction.md").write_text("Do it.\n")
    (task / "task.toml").write_text('[environment]\nbuild_args = { GO = "1.22", UNUSED = "x" }\n')
    (task / "environment" / "Dockerfile").write_text(
        "ARG GO=1.21\nFROM golang:${GO} AS build\nRUN --mount=type=cache,target=/root/.cache echo built\n"
        "FROM debian:12\nCOPY --from=build /out /usr/local/bin/\nUSER nobody\nHEALTHCHECK CMD true\nCMD [\"sh\"]\n")
    (tmp_path / "typo").mkdir()
    (tmp_path / "typo" / "instruction.md").write_text("Do it.\n")
    (tmp_path / "typo" / "task.toml").write_text("")
    (tmp_path / "typo" / "environment").mkdir()
    (tmp_path / "typo" / "environment" / "Dockerfile").write_text("FROM debian:12\nRUNN true\n")
    report = {t["task"]: t for t in preflight.preflight(tmp_path, "local", "mode=userns")["tasks"]}
    notes = report["multi-stage"]["notes"]
    assert report["multi-stage"]["verdict"] == "differs"
    named = {n.split(": ")[0]: n for n in notes}
    assert sorted(k for k in named if k.startswith("environment/Dockerfile:")) == [
        f"environment/Dockerfile:{line}" for line in (3, 4, 5, 6, 7)]  # RUN --mount, FROM, COPY --from, USER, ...
    assert "COPY --from: no other stage or image is kept" in named["environment/Dockerfile:5"]
    assert "USER nobody: runs as root" in named["environment/Dockerfile:6"]  # mode=userns maps only root
    assert "build_args UNUSED: no ARG of the Dockerfile declares them" in notes
    assert not any("CMD" in n for n in notes)  # Harbor runs its own command: CMD changes nothing there
    assert report["typo"]["verdict"] == "cannot" and "Dockerfile:2: RUNN true: unknown instruction" in \
        report["typo"]["reasons"][0]


def test_dry_run_cli(tmp_path):
    def dry(*args):
        return subprocess.run([sys.executable, "-m", "eval.run", "--suite", str(TB2), "--dry_run", *args],
                              cwd=REPO, capture_output=True, text=True, timeout=120)

    proc = dry()
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("preflight: ") and "--env local" in lines[0]
    assert any(line.startswith("uv-pytest-verifier") and "cannot" in line and "astral" not in line for line in lines)
    assert lines[-1] == "preflight: 8 tasks: 0 run, 2 run differently from their image, 6 cannot run here"
    bad = dry("--env_kwargs", "pasta")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --env_kwargs: 'pasta' is not key=value")
    dataset = subprocess.run([sys.executable, "-m", "eval.run", "--suite", "terminal-bench@2.0", "--dry_run"],
                             cwd=REPO, capture_output=True, text=True, timeout=120)
    assert dataset.returncode == 2 and "harbor download terminal-bench@2.0 -o DIR" in dataset.stderr


def test_a_tampered_run_is_never_an_infrastructure_failure_and_only_tools_the_harness_finds_missing_count():
    out = "bash: line 1: python3: command not found"
    assert isinstance(diagnose(0.0, out, verifier_names=[]), VerifierToolsMissingError)
    assert isinstance(diagnose(0.0, out, verifier_names=[], absent_tools=["python3"]), VerifierToolsMissingError)
    assert diagnose(0.0, out, verifier_names=[], absent_tools=[]) is None  # python3 is there: someone else said so
    assert diagnose(0.0, out, verifier_names=[], tampered=True) is None
    assert diagnose(0.0, "", verifier_names=["pypi.org"], tampered=True) is None
    verdict = judge_verifier_run(None, "0", out, tamper={"background_writes": "sh (pid 7) wrote 40 bytes"})
    assert (verdict.outcome, verdict.score, verdict.tamper_kinds) == ("scored", 0.0, ["background_writes"])
    assert judge_verifier_run(None, None, tamper={"verifier_paths": "x"}).tamper_kinds == ["verifier_paths"]
    assert TAMPER_KINDS == ("verifier_paths", "shadowed_tools", "background_writes")
    with pytest.raises(ValueError, match="tamper kind 'sneaky'"):
        judge_verifier_run(None, "1", tamper={"sneaky": "x"})
