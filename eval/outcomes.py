"""A trial record's outcome (scored, agent failure, infrastructure failure) and tamper kinds, as eval/metrics.py counts.
Runs in: any Python >= 3.11, standard library only (eval/ in the training venv); the kinds are harbor_tasks.verdict's.
"""

from __future__ import annotations

from harbor_tasks.verdict import INFRA_FAILURE, OUTCOMES, TAMPER_KINDS, classify

INFRA_MODES = ("exclude", "zero")  # infrastructure failures: left out of the means, or counted as 0 there


def outcome_of(trial) -> tuple[str, str | None]:
    """A trial record's (outcome, infra kind): as eval/job_dir.py recorded it, else from its exception alone."""
    if trial.get("outcome") in OUTCOMES:
        return trial["outcome"], trial.get("infra_kind")
    return classify(trial.get("exception"))


def is_infra(trial) -> bool:
    return outcome_of(trial)[0] == INFRA_FAILURE


def tamper_kinds(trial) -> list[str]:
    """The tamper evidence kinds (harbor_tasks.verdict.TAMPER_KINDS) the harness recorded for a trial record."""
    return [kind for kind in TAMPER_KINDS if kind in (trial.get("tamper") or {})]
