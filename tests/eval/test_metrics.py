"""Eval metrics against hand-computed values on hand-made Harbor job dirs (tests/fixtures/eval_jobs/).

single-step/  (3 tasks x 3 attempts; Harbor 0.25 single-step trial layout)
  alpha  rewards 1, 0, 1                                         c = 2 of n = 3
  beta   0 (AgentTimeoutError), missing (VerifierTimeoutError, no verifier_result), 1     c = 1
  gamma  no result.json + exception.txt (EnvironmentStartTimeoutError: an infrastructure failure, out of
         the means by default); no result.json but a stray verifier/reward.txt = 1 (counts 0: Harbor never
         finished it); 0 (BadRequestError)  c = 0
  notes/ a stray folder, not a trial

multi-step/   (EvoCode-style, 3 tasks x 2 attempts; Harbor 0.25 steps/<step>/verifier/ layout)
  evo-a  3 rounds, run to the end.  A1 rewards 1,0,1  cases 4/4 2/4 5/5
                                    A2 rewards 1,1,0  cases 4/4 3/3 1/5 (an earlier CASE_SUMMARY line, 9/9,
                                                                         is overridden by the last one)
  evo-b  4 rounds declared in tasks/evo-b/task.toml, min_reward stops at the first failure.
                                    A1 rewards 1,0    cases 2/2, build failure (no CASE_SUMMARY line)
                                    A2 rewards 0      cases 1/2, step exception AgentTimeoutError
  evo-c  3 rounds.                  A1 no result.json (crashed in round 2: exception.txt CancelledError);
                                       steps/round-1 reward 1, cases 3/3; steps/round-2 without reward
                                    A2 rewards 1,1,1  cases 3/3 4/4 5/5
"""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from eval import compare, metrics as M, score
from eval.job_dir import (NotAJobDir, exception_from_text, parse_case_summary, read_job)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "eval_jobs"
SINGLE = FIXTURES / "single-step"
MULTI = FIXTURES / "multi-step"


def approx(x):
    return pytest.approx(x, abs=1e-9)


# ------------------------------------------------------------------ reading job dirs

def test_reads_single_step_trials():
    job = read_job(SINGLE)
    assert not job.multi_step
    assert job.agent == "terminus-2" and job.model == "openai/ckpt-50"
    by_trial = {t["trial"]: t for t in job.trials}
    assert "notes" not in by_trial and len(job.trials) == 9
    assert [(t["task"], t["attempt"]) for t in job.trials] == [
        (task, a) for task in ("alpha", "beta", "gamma") for a in (1, 2, 3)]
    assert by_trial["alpha__A2bbbbb"] == {"task": "alpha", "trial": "alpha__A2bbbbb", "attempt": 2, "reward": 0.0,
                                          "rounds": [], "exception": None, "outcome": "scored", "infra_kind": None,
                                          "tamper": {}}
    assert by_trial["beta__B1aaaaa"]["outcome"] == "agent_failure" and by_trial["beta__B1aaaaa"]["infra_kind"] is None
    assert (by_trial["gamma__G1aaaaa"]["outcome"], by_trial["gamma__G1aaaaa"]["infra_kind"]) == (
        "infra_failure", "environment_build")
    assert by_trial["beta__B1aaaaa"]["exception"] == "AgentTimeoutError" and by_trial["beta__B1aaaaa"]["reward"] == 0.0
    assert by_trial["beta__B2bbbbb"]["reward"] is None
    assert by_trial["beta__B2bbbbb"]["exception"] == "VerifierTimeoutError"
    # no result.json: type from the last line of exception.txt; a stray reward.txt is not a trial reward
    assert by_trial["gamma__G1aaaaa"]["exception"] == "EnvironmentStartTimeoutError"
    assert by_trial["gamma__G1aaaaa"]["reward"] is None
    assert by_trial["gamma__G2bbbbb"]["reward"] is None and by_trial["gamma__G2bbbbb"]["exception"] is None


def test_reads_multi_step_rounds():
    job = read_job(MULTI)
    assert job.multi_step
    assert job.n_rounds == {"evo-b": 4}  # from tasks/evo-b/task.toml's [[steps]]
    t = {x["trial"]: x for x in job.trials}
    assert t["evo-a__E2bbbbb"]["rounds"] == [
        {"round": 1, "name": "round-1", "reward": 1.0, "total_cases": 4, "success_count": 4, "exception": None},
        {"round": 2, "name": "round-2", "reward": 1.0, "total_cases": 3, "success_count": 3, "exception": None},
        {"round": 3, "name": "round-3", "reward": 0.0, "total_cases": 5, "success_count": 1, "exception": None},
    ]
    assert t["evo-a__E2bbbbb"]["reward"] == approx(2 / 3)  # Harbor's "mean" strategy, read from result.json
    # build failure: the round ran, reward 0, no CASE_SUMMARY line
    assert t["evo-b__F1aaaaa"]["rounds"][1]["total_cases"] is None
    # a step-level exception is the trial's exception when the trial has none
    assert t["evo-b__F2bbbbb"]["exception"] == "AgentTimeoutError"
    assert t["evo-b__F2bbbbb"]["rounds"][0]["exception"] == "AgentTimeoutError"
    # no result.json: rounds from steps/<step>/verifier files, trial reward missing
    c1 = t["evo-c__C1aaaaa"]
    assert c1["reward"] is None and c1["exception"] == "CancelledError"
    assert [(r["round"], r["name"], r["reward"], r["total_cases"]) for r in c1["rounds"]] == [
        (1, "round-1", 1.0, 3), (2, "round-2", None, None)]


def test_sample_job_matches_harbor_own_mean():
    # data/harbor/sample-job/result.json: Harbor's stats say mean 0.6, one AgentTimeoutError
    sample = REPO / "data" / "harbor" / "sample-job"
    m = read_job(sample).metrics()
    harbor = json.loads((sample / "result.json").read_text())["stats"]["evals"]
    (stats,) = harbor.values()
    assert m["mean_reward"] == approx(stats["metrics"][0]["mean"])
    assert m["exceptions"] == {k: len(v) for k, v in stats["exception_stats"].items()}
    assert m["pass_at_k"] == {"1": approx(0.6)} and m["stderr"] is None  # one attempt per task: no stderr


# ------------------------------------------------------------------ single-step metrics

SINGLE_KEYS = {"mean_reward", "pass_at_k", "stderr", "n_trials", "n_scored", "n_infra_errors", "infra_errors",
               "n_tampered", "tampered",
               "infra_errors_counted", "outcomes", "exceptions"}


def test_single_step_metrics_by_hand():
    m = read_job(SINGLE).metrics()
    assert set(m) == SINGLE_KEYS
    # gamma G1 (EnvironmentStartTimeoutError) is an infrastructure failure: counted, not scored
    assert (m["n_trials"], m["n_scored"], m["n_infra_errors"]) == (9, 8, 1)
    assert m["infra_errors"] == {"environment_build": 1} and m["infra_errors_counted"] == "excluded"
    assert m["outcomes"] == {"scored": 5, "agent_failure": 3, "infra_failure": 1}
    # mean over the 8 scored trials, missing = 0: (1+0+1) + (0+0+1) + (0+0) = 3 -> 3/8
    assert m["mean_reward"] == approx(3 / 8)
    # per task: alpha c=2 of 3, beta c=1 of 3, gamma c=0 of 2 -> k up to 2
    assert m["pass_at_k"] == {"1": approx(1 / 3), "2": approx(5 / 9)}
    assert m["stderr"] == approx(math.sqrt(2 / 9) / 3)  # gamma's p = 0 adds nothing with n = 2 or 3


def test_single_step_metrics_with_infra_errors_as_zero():
    m = read_job(SINGLE).metrics(infra_errors="zero")
    assert set(m) == SINGLE_KEYS
    assert (m["n_trials"], m["n_scored"], m["n_infra_errors"], m["infra_errors_counted"]) == (9, 9, 1, "as 0")
    # mean over the 9 trials, missing = 0: (1+0+1) + (0+0+1) + (0+0+0) = 3 -> 3/9
    assert m["mean_reward"] == approx(3 / 9)
    # per task (n=3): alpha c=2, beta c=1, gamma c=0
    # pass@1 = mean c/n = (2/3 + 1/3 + 0) / 3 = 1/3
    # pass@2 = 1 - C(n-c,2)/C(3,2): alpha n-c=1<2 -> 1; beta 1 - C(2,2)/3 = 2/3; gamma 1 - 3/3 = 0 -> (5/3)/3 = 5/9
    # pass@3: alpha 1, beta n-c=2<3 -> 1, gamma 0 -> 2/3
    assert m["pass_at_k"] == {"1": approx(1 / 3), "2": approx(5 / 9), "3": approx(2 / 3)}
    # leaderboard stderr: p = 2/3, 1/3, 0; sum p(1-p)/(n-1) = (2/9)/2 + (2/9)/2 + 0 = 2/9; sqrt(2/9) / 3 tasks
    assert m["stderr"] == approx(math.sqrt(2 / 9) / 3)
    assert m["exceptions"] == {"AgentTimeoutError": 1, "BadRequestError": 1,
                               "EnvironmentStartTimeoutError": 1, "VerifierTimeoutError": 1}


def test_pass_at_k_estimator_is_the_combinatorial_one():
    # pass@k = P(a random k-subset of the n attempts holds a success), by enumeration
    for n in range(1, 7):
        for c in range(n + 1):
            for k in range(1, n + 1):
                attempts = [1] * c + [0] * (n - c)
                subsets = list(itertools.combinations(attempts, k))
                expected = sum(any(s) for s in subsets) / len(subsets)
                assert M.pass_at_k_estimate(n, c, k) == approx(expected)


def test_leaderboard_drops_infra_errors_only_when_asked():
    trials = read_job(SINGLE).trials
    assert M.leaderboard_score(trials) == (approx(1 / 3), approx(math.sqrt(2 / 9) / 3))
    # keeping only the leaderboard's exceptions drops gamma's EnvironmentStartTimeoutError and BadRequestError
    # trials: gamma keeps G2 alone (reward missing -> 0), so n=1 there and the stderr is undefined;
    # accuracy = (2/3 + 1/3 + 0) / 3 = 1/3
    acc, err = M.leaderboard_score(trials, keep_exceptions=M.LEADERBOARD_KEPT_EXCEPTIONS)
    assert acc == approx(1 / 3) and err is None


def test_uneven_attempts_use_the_smallest_count_for_k():
    trials = [{"task": "a", "trial": "a1", "attempt": 1, "reward": 1.0, "rounds": [], "exception": None},
              {"task": "a", "trial": "a2", "attempt": 2, "reward": 0.0, "rounds": [], "exception": None},
              {"task": "b", "trial": "b1", "attempt": 1, "reward": 0.0, "rounds": [], "exception": None}]
    m = M.compute_metrics(trials)
    # k only up to 1 (task b has one attempt): pass@1 = (1/2 + 0)/2; mean over trials = 1/3
    assert m["pass_at_k"] == {"1": approx(0.25)} and m["mean_reward"] == approx(1 / 3)
    assert m["stderr"] is None
    assert M.compute_metrics([])["mean_reward"] is None


# ------------------------------------------------------------------ multi-step metrics

def test_multi_step_metrics_by_hand():
    m = read_job(MULTI).metrics()
    assert set(m) == SINGLE_KEYS | {"mt_at_k", "case_score", "rounds_reached"}
    assert m["n_infra_errors"] == 0 and m["n_scored"] == 6
    # fail-stop round passes (a round counts only if every earlier round of the attempt passed):
    #   evo-a (N=3)  A1 1,0,1 -> T,F,F    A2 1,1,0 -> T,T,F         c_i = 2,1,0 of n=2
    #   evo-b (N=4)  A1 1,0   -> T,F,F,F  A2 0     -> F,F,F,F       c_i = 1,0,0,0
    #   evo-c (N=3)  A1 1,-   -> T,F,F    A2 1,1,1 -> T,T,T         c_i = 2,1,1
    # MT@1 = mean_i c_i/n:  evo-a (1 + .5 + 0)/3 = .5;  evo-b (.5)/4 = .125;  evo-c (1 + .5 + .5)/3 = 2/3
    # MT@2 = mean_i [c_i >= 1]: evo-a 2/3; evo-b 1/4; evo-c 1
    assert m["mt_at_k"] == {"1": approx((0.5 + 0.125 + 2 / 3) / 3), "2": approx((2 / 3 + 0.25 + 1) / 3)}
    # Case: mean over rounds (N_t, unreached and build failures = 0), mean over attempts, mean over tasks
    #   evo-a A1 (4/4 + 2/4 + 5/5)/3 = 2.5/3   A2 (4/4 + 3/3 + 1/5)/3 = 2.2/3     -> 4.7/6
    #   evo-b A1 (2/2 + 0 + 0 + 0)/4 = .25     A2 (1/2)/4 = .125                  -> .1875
    #   evo-c A1 (3/3 + 0 + 0)/3 = 1/3         A2 1                               -> 2/3
    assert m["case_score"] == approx((4.7 / 6 + 0.1875 + 2 / 3) / 3)
    # rounds reached (fail-stop: up to and including the first failed round):
    #   evo-a 2, 3 -> 2.5;  evo-b 2, 1 -> 1.5;  evo-c 2 (round 2 ran, no reward), 3 -> 2.5
    assert m["rounds_reached"] == approx((2.5 + 1.5 + 2.5) / 3)
    # trial rewards (Harbor's mean over steps): evo-a 2/3, 2/3; evo-b 1/2, 0; evo-c missing, 1
    assert m["mean_reward"] == approx((2 / 3 + 2 / 3 + 0.5 + 0 + 0 + 1) / 6)
    # a trial passes at reward 1 (all rounds): only evo-c A2 -> pass@1 = (0 + 0 + 1/2)/3, pass@2 = (0 + 0 + 1)/3
    assert m["pass_at_k"] == {"1": approx(1 / 6), "2": approx(1 / 3)}
    # stderr: p = 2/3, 1/4, 1/2 with n = 2: sqrt(2/9 + 3/16 + 1/4) / 3
    assert m["stderr"] == approx(math.sqrt(2 / 9 + 3 / 16 + 1 / 4) / 3)
    assert m["exceptions"] == {"AgentTimeoutError": 1, "CancelledError": 1}


def test_mt_at_n_is_best_of_n_per_round():
    # MT@n equals the paper's mean_t (1/N_t) sum_i max_a r_{t,a,i} with fail-stop r
    trials = read_job(MULTI).trials
    n_rounds = {"evo-a": 3, "evo-b": 4, "evo-c": 3}
    per_task = []
    for task, group in M.by_task(trials).items():
        n = n_rounds[task]
        r = [M.fail_stop_passes(t, n) for t in group]
        per_task.append(sum(max(a[i] for a in r) for i in range(n)) / n)
    assert M.mt_at_k(trials, n_rounds)["2"] == approx(sum(per_task) / len(per_task))


def test_fail_stop_counts_no_round_after_a_failure():
    trial = {"task": "t", "trial": "t1", "attempt": 1, "reward": 0.75, "exception": None,
             "rounds": [{"round": i + 1, "reward": r, "total_cases": 1, "success_count": int(r)}
                        for i, r in enumerate([1.0, 0.0, 1.0, 1.0])]}
    assert M.fail_stop_passes(trial, 4) == [True, False, False, False]
    assert M.mt_at_k([trial]) == {"1": approx(0.25)}        # 1 of 4 rounds, not 3 of 4
    assert M.case_score([trial]) == approx(0.75)            # Case has no fail-stop: 1 + 0 + 1 + 1 over 4
    assert M.rounds_reached([trial]) == approx(2)
    # a declared 6th round nobody reached lowers every per-round mean
    assert M.mt_at_k([trial], {"t": 5})["1"] == approx(1 / 5)


def test_case_summary_parsing():
    assert parse_case_summary("CASE_SUMMARY total_cases=12 success_count=7\n") == (12, 7)
    assert parse_case_summary("x\nCASE_SUMMARY success_count=3 total_cases=4 extra=1\n") == (4, 3)
    assert parse_case_summary("CASE_SUMMARY total_cases=2 success_count=2\nCASE_SUMMARY total_cases=5 success_count=1") == (5, 1)
    assert parse_case_summary("[log] CASE_SUMMARY total_cases = 8 success_count = 8") == (8, 8)
    assert parse_case_summary("CASE_SUMMARY total_cases=3\nbuild failed") == (None, None)
    assert parse_case_summary("") == (None, None)
    assert M.round_case_fraction({"total_cases": 0, "success_count": 0}) == 0.0


def test_exception_type_from_traceback_text(tmp_path):
    p = tmp_path / "exception.txt"
    p.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n    g()\n"
                 "harbor.trial.trial.AgentTimeoutError: Agent execution timed out after 900.0 seconds\n")
    assert exception_from_text(p) == "AgentTimeoutError"
    p.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1\nasyncio.exceptions.CancelledError\n")
    assert exception_from_text(p) == "CancelledError"
    assert exception_from_text(tmp_path / "missing.txt") is None


# ------------------------------------------------------------------ eval.score CLI

def _run(*args):
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=60)


def test_score_cli_json():
    proc = _run("eval.score", str(MULTI), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["multi_step"] is True and report["agent"] == "terminus-2"
    assert report["metrics"]["mt_at_k"]["2"] == approx((2 / 3 + 0.25 + 1) / 3)
    assert len(report["tasks"]) == 6 and {"task", "trial", "attempt", "reward", "rounds", "exception"} <= set(report["tasks"][0])
    single = score.score_job(SINGLE)
    assert single["metrics"]["mean_reward"] == approx(3 / 8) and "mt_at_k" not in single["metrics"]
    assert single["metrics"]["infra_errors"] == {"environment_build": 1}
    proc = _run("eval.score", str(SINGLE), "--json", "--infra_errors", "zero")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["metrics"]["mean_reward"] == approx(1 / 3)


def test_score_cli_table_help_and_errors(tmp_path, capsys):
    assert score.main([str(SINGLE)]) == 0
    out = capsys.readouterr().out
    assert "mean_reward" in out and "pass@2" in out and "AgentTimeoutError" in out and "gamma" in out
    assert "environment_build: 1" in out and "EnvironmentStartTimeoutError (infra: environment_build)" in out
    assert "--json" in _run("eval.score", "--help").stdout
    assert score.main([str(tmp_path / "nope")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert score.main([str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "not a Harbor job directory" in err
    assert score.main([str(FIXTURES)]) == 2  # the folder holding the jobs
    assert "pass one of: multi-step, single-step" in capsys.readouterr().err
    assert score.main([str(SINGLE / "alpha__A1aaaaa")]) == 2  # a trial dir
    assert "a trial directory" in capsys.readouterr().err
    with pytest.raises(NotAJobDir):
        read_job(REPO / "README.md")


# ------------------------------------------------------------------ eval.compare

def _eval_results(ckpt: Path, step: int, suite: str, metrics: dict, name: str = "eval_results.json") -> None:
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / name).write_text(json.dumps({
        "checkpoint": str(ckpt), "global_step": step, "suite": suite, "agent": "terminus-2", "model": "ckpt",
        "metrics": metrics, "tasks": [], "harbor_job_dir": str(ckpt / "jobs" / "x")}))


def _single(mean, stderr=0.05):
    return {"mean_reward": mean, "pass_at_k": {"1": mean, "2": min(1.0, mean + 0.1)}, "stderr": stderr,
            "n_trials": 20, "exceptions": {"AgentTimeoutError": 2}}


def _multi(mt, case):
    return {"mean_reward": mt, "pass_at_k": {"1": mt}, "stderr": None, "n_trials": 6, "exceptions": {},
            "mt_at_k": {"1": mt, "2": mt + 0.1}, "case_score": case, "rounds_reached": 2.0}


def test_compare_runs_table_and_plot(tmp_path, capsys):
    run_a, run_b = tmp_path / "runs" / "sft-a", tmp_path / "runs" / "sft-b"
    _eval_results(run_a / "checkpoint-10", 10, "builtin:terminal", _single(0.2))
    _eval_results(run_a / "checkpoint-20", 20, "builtin:terminal", _single(0.4))
    _eval_results(run_a / "checkpoint-20", 20, "builtin:evocode", _multi(0.3, 0.6), "eval_results_evocode.json")
    _eval_results(run_b / "checkpoint-10", 10, "builtin:terminal", _single(0.1))
    _eval_results(run_b / "checkpoint-30", 30, "builtin:terminal", {**_single(0.5), "n_infra_errors": 3})
    (run_b / "checkpoint-40").mkdir()  # a checkpoint not evaluated yet
    out = tmp_path / "plots" / "report.png"

    # run dirs and a single checkpoint dir, JSON rows
    assert compare.main([str(run_a), str(run_b / "checkpoint-30"), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["header"][:3] == ["run", "checkpoint", "step"]
    assert "builtin:terminal mean_reward" in report["header"] and "builtin:evocode MT@2" in report["header"]
    assert "builtin:evocode case_score" in report["header"]
    rows = {(r[0], r[2]): dict(zip(report["header"], r)) for r in report["rows"]}
    assert set(rows) == {("sft-a", 10), ("sft-a", 20), ("sft-b", 30)}
    assert rows[("sft-a", 20)]["builtin:terminal mean_reward"] == 0.4
    assert rows[("sft-a", 20)]["builtin:evocode MT@2"] == approx(0.4)
    assert rows[("sft-a", 10)]["builtin:evocode case_score"] is None     # not evaluated on that suite
    assert rows[("sft-b", 30)]["builtin:terminal errors"] == 2
    assert rows[("sft-b", 30)]["builtin:terminal n_infra_errors"] == 3  # counted next to the mean
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 5000

    # terminal table
    out2 = tmp_path / "t.png"
    assert compare.main([str(run_a), str(run_b), "--out", str(out2)]) == 0
    text = capsys.readouterr().out
    for needle in ("sft-a", "sft-b", "checkpoint-20", "checkpoint-30", "0.400", "0.500", "builtin:evocode"):
        assert needle in text
    assert out2.stat().st_size > 5000


def test_compare_by_family_groups_trials_of_generated_tasks(tmp_path, capsys):
    ckpt = tmp_path / "run" / "checkpoint-4"
    _eval_results(ckpt, 4, "tasks", _single(0.5))
    results = json.loads((ckpt / "eval_results.json").read_text())
    results["tasks"] = [{"task": "count-lines-2-0", "reward": 1.0}, {"task": "terminal-recipes/count-lines-2-0", "reward": 0.0},
                        {"task": "count-lines-2-4", "reward": 1.0}, {"task": "sum-numbers-2-1", "reward": None},
                        {"task": "hello-world", "reward": 1.0}]
    (ckpt / "eval_results.json").write_text(json.dumps(results))
    assert compare.main([str(tmp_path / "run"), "--out", str(tmp_path / "x.png"), "--json", "--by_family"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["by_family"]
    assert row["step"] == 4 and row["families"] == {"count-lines": [0.667, 3], "hello-world": [1.0, 1],
                                                    "sum-numbers": [0.0, 1]}
    assert compare.main([str(tmp_path / "run"), "--out", str(tmp_path / "x.png"), "--by_family"]) == 0
    text = capsys.readouterr().out
    assert "mean reward by task family" in text and "step 4" in text
    assert any("count-lines" in line and "0.67 (3)" in line for line in text.splitlines())


def test_compare_errors(tmp_path, capsys):
    assert compare.main([str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    (tmp_path / "run" / "checkpoint-5").mkdir(parents=True)
    assert compare.main([str(tmp_path / "run"), "--out", str(tmp_path / "x.png")]) == 2
    assert "no eval_results" in capsys.readouterr().err
    (tmp_path / "run" / "checkpoint-5" / "eval_results.json").write_text("{not json")
    assert compare.main([str(tmp_path / "run"), "--out", str(tmp_path / "x.png")]) == 2
    assert "not readable JSON" in capsys.readouterr().err


def test_job_iterates_as_its_trials():
    job = read_job(SINGLE)
    assert list(job) == job.trials and len(job) == 9 and job[0]["task"] == "alpha"
    assert M.compute_metrics(job) == job.metrics()  # single-step: no declared rounds involved


def _scored_checkpoint(ckpt: Path, trials: dict[str, tuple[float | None, str | None]], edit=None) -> None:
    """A checkpoint scored on a suite of data/harbor/sample-job's real Terminus-2 trials: task -> (reward, exception);
    `edit(task, trajectory)` changes a trajectory before it is written."""
    job = ckpt / "eval_jobs" / "suite-terminus-2-20261207"
    sample = REPO / "data" / "harbor" / "sample-job"
    tasks = []
    for trial_dir in sorted(p for p in sample.iterdir() if p.is_dir()):
        task = trial_dir.name.split("__")[0]
        if task not in trials:
            continue
        trajectory = json.loads((trial_dir / "agent" / "trajectory.json").read_text())
        if edit:
            edit(task, trajectory)
        (job / trial_dir.name / "agent").mkdir(parents=True)
        (job / trial_dir.name / "agent" / "trajectory.json").write_text(json.dumps(trajectory))
        reward, exception = trials[task]
        tasks.append({"task": f"sample/{task}", "trial": trial_dir.name, "reward": reward, "exception": exception})
    where_it_ran = ckpt.parent / "before-the-copy" / job.name  # the run was copied: its job is found beside the results
    (ckpt / "eval_results.json").write_text(json.dumps({
        "checkpoint": str(ckpt), "global_step": int(ckpt.name.split("-")[1]), "suite": "suite", "agent": "terminus-2",
        "model": "m", "metrics": {"mean_reward": 0.5}, "tasks": tasks, "harbor_job_dir": str(where_it_ran)}))


def test_compare_changes_names_each_task_that_moved_and_the_first_command_that_differs(tmp_path, capsys):
    def mistype(task, trajectory):  # the third command of csv-pipeline with another field count
        if task == "csv-pipeline":
            calls = [c for s in trajectory["steps"] if s.get("source") == "agent" for c in s.get("tool_calls") or []
                     if "keystrokes" in (c.get("arguments") or {})]
            calls[1]["arguments"]["keystrokes"] = calls[1]["arguments"]["keystrokes"].replace("NF!=7", "NF!=5")

    before, after = tmp_path / "run" / "checkpoint-0", tmp_path / "run" / "checkpoint-8"
    _scored_checkpoint(before, {"csv-pipeline": (1.0, None), "nginx-config": (0.0, "AgentTimeoutError"),
                                "make-link-error": (1.0, None), "git-move-commits": (None, "EnvironmentStartTimeoutError")})
    _scored_checkpoint(after, {"csv-pipeline": (0.0, None), "nginx-config": (1.0, None),
                               "make-link-error": (1.0, None), "git-move-commits": (0.0, None)}, edit=mistype)
    assert compare.main([str(before), str(after), "--changes"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("1 lost, 1 gained, 1 scored on one side only, 1 unchanged (of 4 tasks in both); sign test "
                           "p = 1"), out
    assert out[1].startswith("  lost   csv-pipeline: 1 -> 0; action 2: awk -F',' 'NF!=7 {print"), out
    assert "->  awk -F',' 'NF!=5 {print" in out[1], out
    # an infrastructure failure on one side is neither a loss nor a gain
    assert out[2] == ("  unscored git-move-commits: not scored (EnvironmentStartTimeoutError) -> 0; the same "
                      "commands"), out
    assert out[3] == "  gained nginx-config: 0 (AgentTimeoutError) -> 1; the same commands", out

    assert compare.main([str(before), str(after), "--changes", "--json"]) == 0
    [report] = json.loads(capsys.readouterr().out)
    lost = report["changed"][0]
    assert (lost["task"], lost["difference"]["index"]) == ("csv-pipeline", 1)
    assert "NF!=5" in lost["difference"]["to"] and "NF!=7" in lost["difference"]["from"]
    assert report["sign_test_p"] == 1.0

    # several seeds: a pair of checkpoints each, and the tasks of all pairs pooled under them
    assert compare.main([str(before), str(after), str(after), str(before), str(before), str(after), "--changes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == out[0] and lines[-1] == ("pooled over 3 comparisons: 3 lost, 3 gained, 3 scored on one side "
                                                "only, 3 unchanged (of 12 tasks in both); sign test p = 1"), lines
    assert compare.main([str(before), str(after), str(before), str(after), "--changes", "--json"]) == 0
    several = json.loads(capsys.readouterr().out)
    assert [len(pair) for pair in several["pairs"]] == [1, 1]
    assert several["pooled"] == {"comparisons": 2, "tasks_in_both": 8, "lost": 2, "gained": 2, "unscored": 2,
                                 "unchanged": 2, "sign_test_p": 1.0}

    # a run dir holds a result per checkpoint: which one is meant must be named
    assert compare.main([str(tmp_path / "run"), str(after), "--changes"]) == 2
    assert "name a checkpoint dir" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # not in pairs
        compare.main([str(before), str(after), str(after), "--changes"])
    assert "in pairs (A B, or A B A2 B2 ...), got 3" in capsys.readouterr().err

    # two runs, each scored on its own copy of the suite: matched by the suite's folder name
    for ckpt, suite in ((before, "outputs/run-a/heldout"), (after, "outputs/run-b/heldout")):
        data = json.loads((ckpt / "eval_results.json").read_text())
        (ckpt / "eval_results.json").write_text(json.dumps({**data, "suite": suite}))
    assert compare.main([str(before), str(after), "--changes"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == out[1:]

    # a checkpoint scored twice on the suite (other settings): the directory is ambiguous, its files are not
    data = json.loads((after / "eval_results.json").read_text())
    (after / "eval_results_timeout1.json").write_text(json.dumps({**data, "settings": {"agent_timeout_multiplier": 1}}))
    assert compare.main([str(before), str(after), "--changes"]) == 2
    assert "or one results file, e.g. " in capsys.readouterr().err
    assert compare.main([str(before), str(after / "eval_results_timeout1.json"), "--changes"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == out[1:]
