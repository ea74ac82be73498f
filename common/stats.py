"""Percentiles the servers and the trainers report (request latencies, sandbox start and verify seconds).
Runs in: the training venv (standard library only).
"""

from __future__ import annotations


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in [0, 100])."""
    if not sorted_values:
        return 0.0
    rank = max(1, min(len(sorted_values), round(q / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]
