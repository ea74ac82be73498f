"""Finding the checkpoint to resume from."""

from __future__ import annotations

import re
from pathlib import Path

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The newest `checkpoint-N` whose trainer_state.json exists (the Trainer writes it last, so a run killed
    while saving leaves a checkpoint without it, which is skipped)."""
    root = Path(output_dir)
    if not root.is_dir():
        return None
    steps = sorted(((int(m.group(1)), path) for path in root.iterdir()
                    if path.is_dir() and (m := _CHECKPOINT.match(path.name))), reverse=True)
    for _, path in steps:
        if (path / "trainer_state.json").is_file():
            return str(path)
    return None
