"""Splits by trajectory or task id, and mixtures of sources by fraction or weight.
Runs in: the training venv (standard library only).
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence


def _rank(group: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{group}".encode()).hexdigest()


def split_by_group(records: Sequence[dict], eval_fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """Whole groups (records sharing `record["group"]`) go to one side: ceil(fraction * groups) go to eval."""
    if not eval_fraction:
        return list(records), []
    groups = sorted({record["group"] for record in records}, key=lambda group: _rank(group, seed))
    n_eval = min(len(groups) - 1, math.ceil(eval_fraction * len(groups))) if len(groups) > 1 else 0
    eval_groups = set(groups[:n_eval])
    train = [record for record in records if record["group"] not in eval_groups]
    held_out = [record for record in records if record["group"] in eval_groups]
    return train, held_out


def subsample(records: Sequence[dict], fraction: float | None, seed: int) -> list[dict]:
    """Keep round(fraction * n) records (at least one), chosen at random but reproducibly."""
    if fraction is None or fraction >= 1:
        return list(records)
    keep = max(1, round(fraction * len(records))) if records else 0
    return random.Random(seed).sample(list(records), keep)


def mix_by_weight(sources: Sequence[Sequence[dict]], weights: Sequence[float], seed: int) -> list[list[dict]]:
    """Each source's share of the mixture follows its weight; the mixture keeps the total record count.

    A source whose share exceeds its size is repeated (whole passes, then a random remainder); one whose
    share is smaller is subsampled. Returns the chosen records per source, in source order.
    """
    total = sum(len(records) for records in sources)
    weight_sum = sum(weights)
    chosen = []
    for index, (records, weight) in enumerate(zip(sources, weights)):
        target = round(total * weight / weight_sum) if records else 0
        passes, remainder = divmod(target, len(records)) if records else (0, 0)
        picked = list(records) * passes + random.Random(seed + index).sample(list(records), remainder)
        chosen.append(picked)
    return chosen
