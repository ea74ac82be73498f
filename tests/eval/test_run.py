"""`python -m eval.run` end to end: real Harbor jobs in the local sandbox on the built-in suites."""

import json
import shutil
import sys

import pytest
from conftest import REPO, run

from eval.results import RESULT_KEYS

pytestmark = pytest.mark.slow
HARBOR = REPO / ".venv-harbor" / "bin" / "harbor"


@pytest.fixture(autouse=True)
def needs_harbor():
    if not HARBOR.exists():
        pytest.fail(f"{HARBOR} missing: `make test` creates it (bash eval/setup_harbor.sh)")


def eval_run(checkpoint, *args):
    result = run([sys.executable, "-m", "eval.run", "--checkpoint", str(checkpoint), *args], timeout=900)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return json.loads((checkpoint / "eval_results.json").read_text())


@pytest.mark.parametrize("suite, n_tasks", [("builtin:terminal", 10), ("builtin:evocode", 3)])
def test_oracle_scores_one_and_nop_zero(tmp_path, suite, n_tasks):
    checkpoint = tmp_path / "run" / "checkpoint-7"
    checkpoint.mkdir(parents=True)
    oracle = eval_run(checkpoint, "--suite", suite, "--agent", "oracle", "--concurrency", "2")
    assert tuple(oracle) == RESULT_KEYS  # eval/results.py's schema, which the callback and eval.compare read
    assert oracle["global_step"] == 7 and oracle["suite"] == suite and oracle["agent"] == "oracle"
    assert oracle["metrics"]["mean_reward"] == 1.0 and oracle["metrics"]["exceptions"] == {}
    assert oracle["metrics"]["n_trials"] == n_tasks and len(oracle["tasks"]) == n_tasks
    nop = eval_run(checkpoint, "--suite", suite, "--agent", "nop", "--concurrency", "2")
    assert nop["metrics"]["mean_reward"] == 0.0 and nop["metrics"]["exceptions"] == {}
    if suite == "builtin:evocode":
        assert oracle["metrics"]["case_score"] == 1.0 and oracle["metrics"]["mt_at_k"] == {"1": 1.0}
        assert nop["metrics"]["mt_at_k"] == {"1": 0.0} and nop["metrics"]["case_score"] < 1.0
        assert all(len(task["rounds"]) >= 3 for task in oracle["tasks"])


def test_terminus_2_with_the_tiny_model_completes_a_job(tmp_path, tiny_model_path):
    checkpoint = tmp_path / "run" / "checkpoint-3"
    shutil.copytree(tiny_model_path, checkpoint)
    # an untrained model never ends its answer, so Terminus-2 re-asks until the (shortened) agent timeout: an
    # agent outcome, scored 0 by the verifier; what must not happen is an infrastructure failure
    results = eval_run(checkpoint, "--suite", "builtin:terminal", "--agent", "terminus-2", "--concurrency", "5",
                       "--max_turns", "2", "--max_tokens", "32", "--agent_timeout_multiplier", "0.05")
    assert results["model"] == "run-checkpoint-3" and results["metrics"]["n_trials"] == 10
    assert set(results["metrics"]["exceptions"]) <= {"AgentTimeoutError"}
    assert all(task["reward"] is not None for task in results["tasks"])  # every verifier ran
    trials = list((checkpoint / "eval_jobs").glob("terminal-terminus-2-*/*/agent/trajectory.json"))
    assert len(trials) == 10
    for trial in trials:  # the Terminus-2 prompt with the task's instruction went to the served checkpoint
        first = json.loads(trial.read_text())["steps"][0]
        assert first["source"] == "user" and "Task Description" in first["message"]


def test_a_results_file_with_a_folder_is_refused_before_the_eval_runs(tmp_path):
    result = run([sys.executable, "-m", "eval.run", "--checkpoint", str(tmp_path), "--suite", "builtin:terminal",
                  "--results_file", "out/results.json"])
    assert result.returncode == 2 and "--results_file out/results.json: a file name" in result.stderr
    assert "Traceback" not in result.stderr and not list(tmp_path.iterdir())


def test_bad_suite_is_one_clear_line(tmp_path):
    result = run([sys.executable, "-m", "eval.run", "--checkpoint", str(tmp_path), "--suite", "builtin:nope",
                  "--agent", "oracle"])
    assert result.returncode == 2 and "unknown built-in suite" in result.stderr and "Traceback" not in result.stderr


def test_model_family_is_checked_only_when_set():
    from eval.settings import EvalSettings, choice_error

    assert choice_error(EvalSettings(suite="builtin:terminal")) is None  # unset: told from the checkpoint
    assert choice_error(EvalSettings(suite="builtin:terminal", model_family="qwen3_5")) is None
    assert choice_error(EvalSettings(suite="builtin:terminal", model_family="nope")).startswith(
        "--model_family nope: use one of qwen3, ")


@pytest.mark.parametrize("user_setting, seen", [(None, "0"), ("1", "1")])
def test_harbor_runs_without_its_exit_telemetry_unless_the_user_set_it(tmp_path, monkeypatch, user_setting, seen):
    from eval.run import run_harbor

    if user_setting is None:
        monkeypatch.delenv("HARBOR_TELEMETRY", raising=False)
    else:
        monkeypatch.setenv("HARBOR_TELEMETRY", user_setting)
    job = tmp_path / "job"
    job.mkdir()
    show_env = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(os.environ.get('HARBOR_TELEMETRY')))"
    run_harbor([sys.executable, "-c", show_env, str(job / "result.json")], job, tmp_path / "job.log")
    assert json.loads((job / "result.json").read_text()) == seen


@pytest.mark.parametrize("context, threshold", [(8192, 2048), (32768, 8000), (262144, 8000)])
def test_terminus_2_is_not_summarized_after_its_first_turn_in_a_small_context(tmp_path, context, threshold):
    """Harbor's Terminus-2 summarizes its chat once fewer than 8,000 tokens are free: with the learning runs'
    8,192-token students that was after the first turn, and every multi-turn trial was lost to the summary."""
    from eval.run import RemoteModel, harbor_command
    from eval.settings import EvalSettings

    command = harbor_command(EvalSettings(suite="builtin:terminal", agent="terminus-2"), "job", tmp_path,
                             RemoteModel("http://127.0.0.1:1/v1", "m", max_model_len=context))
    agent_kwargs = [command[i + 1] for i, word in enumerate(command) if word == "--ak"]
    assert f"proactive_summarization_threshold={threshold}" in agent_kwargs
    assert "--skip-model-parsing-and-provider-mapping" not in command  # Terminus-2 calls the model through LiteLLM
    assert f'"max_input_tokens": {context}' in next(k for k in agent_kwargs if k.startswith("model_info="))
