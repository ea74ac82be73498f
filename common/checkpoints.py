"""Checkpoint directories (`checkpoint-N`, the Trainer's names): their step, a run's checkpoints, where to resume.
Runs in: the training venv (standard library only); the trainers, the eval callback and eval/.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

CHECKPOINT_NAME = re.compile(r"^checkpoint-(\d+)$")


def step_from_name(path: str | Path) -> int | None:
    """N of a `checkpoint-N` directory; None for any other name."""
    match = CHECKPOINT_NAME.match(Path(str(path).rstrip("/")).name)
    return int(match.group(1)) if match else None


def global_step(checkpoint: str | Path) -> int | None:
    """The checkpoint's global step: its trainer_state.json when readable, else the `checkpoint-N` name."""
    state = Path(checkpoint) / "trainer_state.json"
    try:
        step = json.loads(state.read_text()).get("global_step")
        if isinstance(step, int):
            return step
    except (OSError, ValueError, AttributeError):
        pass
    return step_from_name(checkpoint)


def checkpoints(output_dir: str | Path) -> list[Path]:
    """The `checkpoint-N` directories of a run's output dir, by step."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [path for path in root.iterdir() if path.is_dir() and step_from_name(path) is not None]
    return sorted(found, key=step_from_name)


def state_is_complete(checkpoint: str | Path) -> bool:
    """Whether the checkpoint's trainer_state.json parses as a JSON object with an integer `global_step` (a file
    cut short by a kill, a full disk or a crashed filesystem does not, and resuming from it would crash)."""
    try:
        state = json.loads((Path(checkpoint) / "trainer_state.json").read_text())
    except (OSError, ValueError, RecursionError):  # missing, unreadable, empty, truncated, not UTF-8
        return False
    step = state.get("global_step") if isinstance(state, dict) else None
    return isinstance(step, int) and not isinstance(step, bool)


def last_complete_checkpoint(output_dir: str | Path) -> str | None:
    """The newest `checkpoint-N` whose trainer_state.json is complete (`state_is_complete`): the Trainer writes it
    last, so a run killed while saving leaves a checkpoint without it, or with a truncated one; both are skipped."""
    for path in reversed(checkpoints(output_dir)):
        if state_is_complete(path):
            return str(path)
    return None
