"""The bundled sample corpora are what `data/make_samples.py` writes: regenerating them reproduces every committed
file byte for byte, and no committed corpus file is left that the generator does not make (but the hand-written
GRPO rows listed below)."""

import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO

DATA = REPO / "data"
HAND_WRITTEN = {"grpo/multichallenge.jsonl", "grpo/verifif.jsonl"}  # NeMo Gym-shaped rows written by hand
NOT_CORPORA = {".md", ".py"}


def _files(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")
            if p.is_file() and p.suffix not in NOT_CORPORA and "__pycache__" not in p.parts}


def test_make_samples_reproduces_the_committed_files(tmp_path):
    out = tmp_path / "data"
    out.mkdir()
    shutil.copy(DATA / "make_samples.py", out / "make_samples.py")
    result = subprocess.run([sys.executable, str(out / "make_samples.py")], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    generated = _files(out)
    assert generated, "the generator wrote nothing"
    differing = sorted(name for name in generated
                       if not (DATA / name).is_file() or (DATA / name).read_bytes() != (out / name).read_bytes())
    assert not differing, f"regenerated files differ from the committed ones: {differing[:10]}"
    committed = _files(DATA)
    stale = sorted(committed - generated - HAND_WRITTEN)
    assert not stale, f"committed sample files the generator does not make: {stale[:10]}"
