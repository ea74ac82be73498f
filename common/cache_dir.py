"""The project's cache folder on this machine (the embedded model, prepared corpora, built images).
Runs in: any Python >= 3.11, standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "TERMINAL_RECIPES_CACHE"


def cache_root() -> Path:
    """$TERMINAL_RECIPES_CACHE, else ~/.cache/terminal-recipes."""
    return Path(os.environ.get(CACHE_ENV, Path.home() / ".cache" / "terminal-recipes"))
