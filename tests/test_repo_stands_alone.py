"""The repository stands alone: no code, test, config or doc reads or cites a path outside it (a machine's
/work/..., the design notes or reference files beside a checkout). A clone anywhere passes the same tests."""

import re
import subprocess
from pathlib import Path

from conftest import REPO

OUTSIDE = re.compile(r"/work/|\.\./shared|shared/reference|reference/(nemo_gym|terminal_bench|trl|peers)\.md"
                     r"|DESIGN\.md")


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [REPO / name for name in listed.decode().split("\0") if name]


def test_nothing_reads_or_cites_a_path_outside_the_repository():
    this = Path(__file__).resolve()
    hits = []
    for path in _tracked_text_files():
        if path.resolve() == this or not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert not hits, "paths outside the repository:\n" + "\n".join(hits)
