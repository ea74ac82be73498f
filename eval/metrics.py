"""Suite metrics from per-trial records (pure functions, no I/O): `compute_metrics`, eval_results.json's `metrics`.
Runs in: the training venv (standard library only, with harbor_tasks.verdict's outcomes and PASS_THRESHOLD).

A trial record is what `eval.job_dir` reads. Infrastructure failures are never a score: by default
(`infra_errors="exclude"`) every mean is over the other trials, and they are counted next to it; with
`infra_errors="zero"` they count 0 (Harbor's own `Mean`). The keys and their definitions:
docs/evaluation.md#metrics-eval_resultsjson--metrics.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence

from eval import outcomes
from harbor_tasks.verdict import OUTCOMES, PASS_THRESHOLD, passed  # noqa: F401  (PASS_THRESHOLD: the docstring's)

# A round or trial "passes" at reward >= PASS_THRESHOLD (harbor_tasks.verdict.passed: Harbor's pass_at_k only accepts
# exact 0/1 rewards, for which it is the same); RL episodes and the Harbor adapter use the same rule.


def reward_or_zero(reward: float | None) -> float:
    """A missing reward counts 0 (Harbor's Mean, the leaderboard's COALESCE(reward, 0))."""
    return 0.0 if reward is None else float(reward)


def by_task(trials: Iterable[Mapping]) -> dict[str, list[Mapping]]:
    """Trials grouped by task, each group in attempt order, tasks in name order."""
    groups: dict[str, list[Mapping]] = defaultdict(list)
    for trial in trials:
        groups[trial["task"]].append(trial)
    return {task: sorted(group, key=lambda t: (t.get("attempt") or 0, t.get("trial") or ""))
            for task, group in sorted(groups.items())}


# ---------------------------------------------------------------- single-step

def mean_reward(trials: Sequence[Mapping]) -> float | None:
    if not trials:
        return None
    return sum(reward_or_zero(t["reward"]) for t in trials) / len(trials)


def pass_at_k_estimate(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: 1 - C(n-c, k) / C(n, k) = 1 - prod_{i<k} (n-c-i)/(n-i)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(k):
        product *= (n - c - i) / (n - i)
    return 1.0 - product


def pass_at_k(trials: Sequence[Mapping]) -> dict[str, float]:
    """{"k": mean over tasks of pass@k} for every k from 1 to the smallest number of attempts of a task."""
    groups = by_task(trials)
    if not groups:
        return {}
    max_k = min(len(group) for group in groups.values())
    counts = [(len(group), sum(passed(t["reward"]) for t in group)) for group in groups.values()]
    return {str(k): sum(pass_at_k_estimate(n, c, k) for n, c in counts) / len(counts)
            for k in range(1, max_k + 1)}


def leaderboard_score(trials: Sequence[Mapping], keep_exceptions: Iterable[str] | None = None
                      ) -> tuple[float | None, float | None]:
    """(accuracy, stderr) as the Terminal-Bench leaderboard computes them.

    p_t = mean reward of task t over its trials (missing = 0); accuracy = mean_t p_t;
    stderr = sqrt(sum_t p_t (1 - p_t) / (n_t - 1)) / N_tasks, None if some task has n_t < 2.
    With `keep_exceptions` (e.g. LEADERBOARD_KEPT_EXCEPTIONS) trials whose exception is not in it are
    dropped first, as the leaderboard does; by default every trial counts, as in `mean_reward`.
    """
    if keep_exceptions is not None:
        kept = set(keep_exceptions)
        trials = [t for t in trials if t.get("exception") is None or t["exception"] in kept]
    groups = by_task(trials)
    if not groups:
        return None, None
    p_hats = {task: mean_reward(group) for task, group in groups.items()}
    accuracy = sum(p_hats.values()) / len(p_hats)
    if any(len(group) < 2 for group in groups.values()):
        return accuracy, None
    variance = sum(p * (1 - p) / (len(groups[task]) - 1) for task, p in p_hats.items())
    return accuracy, math.sqrt(max(variance, 0.0)) / len(groups)


# Exceptions the leaderboard keeps (counted as their reward); other errored trials are dropped there.
LEADERBOARD_KEPT_EXCEPTIONS = ("AgentTimeoutError", "VerifierTimeoutError", "PermissionError",
                               "RewardFileNotFoundError", "NonZeroAgentExitCodeError")


def stderr(trials: Sequence[Mapping]) -> float | None:
    return leaderboard_score(trials)[1]


def exception_counts(trials: Iterable[Mapping]) -> dict[str, int]:
    counts = Counter(t["exception"] for t in trials if t.get("exception"))
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


# ---------------------------------------------------------------- multi-step

def is_multi_step(trials: Iterable[Mapping]) -> bool:
    return any(t.get("rounds") for t in trials)


def task_round_counts(trials: Sequence[Mapping], n_rounds: Mapping[str, int] | None = None) -> dict[str, int]:
    """Rounds per task: the task's declared count when known, never fewer than any attempt ran.

    A task none of whose attempts ran a round, with no declared count, gets 1 (one unreached round), so it
    counts 0 in the multi-step metrics instead of vanishing from the mean over tasks.
    """
    counts: dict[str, int] = {}
    for task, group in by_task(trials).items():
        seen = max((max(_rounds_by_number(t), default=0) for t in group), default=0)
        counts[task] = max(seen, (n_rounds or {}).get(task, 0), 1)
    return counts


def _rounds_by_number(trial: Mapping) -> dict[int, Mapping]:
    """The rounds that ran, keyed by round number (1-based)."""
    return {(rnd.get("round") or i + 1): rnd for i, rnd in enumerate(trial.get("rounds") or [])}


def fail_stop_passes(trial: Mapping, n: int) -> list[bool]:
    """r_i for i = 1..n: round i passed and every earlier round of this attempt passed."""
    rounds = _rounds_by_number(trial)
    out, alive = [], True
    for i in range(1, n + 1):
        alive = alive and passed((rounds.get(i) or {}).get("reward"))
        out.append(alive)
    return out


def mt_at_k(trials: Sequence[Mapping], n_rounds: Mapping[str, int] | None = None) -> dict[str, float]:
    """{"k": MT@k} for k = 1 .. min attempts per task (fail-stop, best of k per round, mean over rounds, then tasks)."""
    groups = by_task(trials)
    counts = task_round_counts(trials, n_rounds)
    if not groups:
        return {}
    max_k = min(len(group) for group in groups.values())
    result = {}
    for k in range(1, max_k + 1):
        per_task = []
        for task, group in groups.items():
            n_r = counts[task]
            passes = [fail_stop_passes(t, n_r) for t in group]
            c = [sum(p[i] for p in passes) for i in range(n_r)]
            per_task.append(sum(pass_at_k_estimate(len(group), c_i, k) for c_i in c) / n_r)
        result[str(k)] = sum(per_task) / len(per_task)
    return result


def round_case_fraction(rnd: Mapping | None) -> float:
    """success_count / total_cases of a round; 0 for a missing round, a missing line or total_cases=0."""
    if not rnd:
        return 0.0
    total, success = rnd.get("total_cases"), rnd.get("success_count")
    if not total or success is None:
        return 0.0
    return min(max(success / total, 0.0), 1.0)


def case_score(trials: Sequence[Mapping], n_rounds: Mapping[str, int] | None = None) -> float | None:
    counts = task_round_counts(trials, n_rounds)
    per_task = []
    for task, group in by_task(trials).items():
        n_r = counts[task]
        per_attempt = []
        for trial in group:
            by_round = _rounds_by_number(trial)
            per_attempt.append(sum(round_case_fraction(by_round.get(i)) for i in range(1, n_r + 1)) / n_r)
        per_task.append(sum(per_attempt) / len(per_attempt))
    return sum(per_task) / len(per_task) if per_task else None


def rounds_reached_of(trial: Mapping, n: int) -> int:
    """Rounds run up to and including the first failed one (fail-stop)."""
    rounds = _rounds_by_number(trial)
    reached = 0
    for i in range(1, n + 1):
        if i not in rounds:
            break
        reached += 1
        if not passed(rounds[i].get("reward")):
            break
    return reached


def rounds_reached(trials: Sequence[Mapping], n_rounds: Mapping[str, int] | None = None) -> float | None:
    counts = task_round_counts(trials, n_rounds)
    per_task = []
    for task, group in by_task(trials).items():
        per_task.append(sum(rounds_reached_of(t, counts[task]) for t in group) / len(group))
    return sum(per_task) / len(per_task) if per_task else None


# ---------------------------------------------------------------- all together

def scored_trials(trials: Sequence[Mapping], infra_errors: str = "exclude") -> list[Mapping]:
    """The trials the means are over: without infrastructure failures (`exclude`), or with them as reward 0, no
    rounds passed (`zero`)."""
    if infra_errors not in outcomes.INFRA_MODES:
        raise ValueError(f"infra_errors {infra_errors!r}: use one of {', '.join(outcomes.INFRA_MODES)}")
    if infra_errors == "exclude":
        return [t for t in trials if not outcomes.is_infra(t)]
    return [{**t, "reward": 0.0, "rounds": [{**r, "reward": 0.0} for r in t.get("rounds") or []]}
            if outcomes.is_infra(t) else t for t in trials]


def infra_counts(trials: Iterable[Mapping]) -> dict[str, int]:
    counts = Counter(outcomes.outcome_of(t)[1] or "sandbox" for t in trials if outcomes.is_infra(t))
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def tamper_counts(trials: Iterable[Mapping]) -> dict[str, int]:
    """Trials per tamper evidence kind (a trial with several counts under each)."""
    counts = Counter(kind for t in trials for kind in outcomes.tamper_kinds(t))
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def compute_metrics(trials: Sequence[Mapping], n_rounds: Mapping[str, int] | None = None,
                    infra_errors: str = "exclude") -> dict:
    """eval_results.json's `metrics` for one suite's trials (multi-step keys only when some trial has rounds)."""
    trials = list(trials)
    scored = scored_trials(trials, infra_errors)
    infra = infra_counts(trials)
    metrics = {
        "mean_reward": mean_reward(scored),
        "pass_at_k": pass_at_k(scored),
        "stderr": stderr(scored),
        "n_trials": len(trials),
        "n_scored": len(scored),
        "n_infra_errors": sum(infra.values()),
        "infra_errors": infra,
        "infra_errors_counted": "excluded" if infra_errors == "exclude" else "as 0",
        # trials whose agent touched its verifier's run (scored as the verifier said; counted here, by kind)
        "n_tampered": sum(1 for t in trials if outcomes.tamper_kinds(t)),
        "tampered": tamper_counts(trials),
        "outcomes": {o: sum(1 for t in trials if outcomes.outcome_of(t)[0] == o) for o in OUTCOMES},
        "exceptions": exception_counts(trials),
    }
    if is_multi_step(trials) or any((n_rounds or {}).values()):
        # A multi-step suite: every task enters, attempts that crashed before round 1 count 0.
        metrics["mt_at_k"] = mt_at_k(scored, n_rounds)
        metrics["case_score"] = case_score(scored, n_rounds)
        metrics["rounds_reached"] = rounds_reached(scored, n_rounds)
    return metrics
