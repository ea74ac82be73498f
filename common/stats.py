"""Percentiles the servers and trainers report, and the sign test of `eval.compare --changes`.
Runs in: the training venv (standard library only).
"""

from __future__ import annotations

from math import comb


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in [0, 100])."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def sign_test_p(gained: int, lost: int) -> float:
    """Two-sided exact sign test: how likely a split at least this uneven between tasks gained and tasks lost is when
    each changed task is as likely to go either way (the binomial with p = 1/2; 1.0 when nothing changed). Written
    here: scipy is not a dependency, and the exact binomial is these three lines."""
    n, k = gained + lost, min(gained, lost)
    tail = sum(comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)
