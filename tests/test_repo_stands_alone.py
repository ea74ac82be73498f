"""The repository stands alone: no code, test, config or doc reads or cites a path outside it (this machine's work
folder, the design notes or reference files beside a checkout). A clone anywhere passes the same tests."""

import re
import subprocess
from pathlib import Path

from conftest import REPO

# each path spelled with a one-letter class ([k], [d], [N]) so that this file does not hold the paths it looks for
# and is searched like every other file
OUTSIDE = re.compile(r"/wor[k]/|\.\./share[d]|share[d]/reference|referenc[e]/(nemo_gym|terminal_bench|trl|peers)\.md"
                     r"|DESIG[N]\.md")


def _tracked_text_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    return [REPO / name for name in listed.decode().split("\0") if name]


def test_nothing_reads_or_cites_a_path_outside_the_repository():
    hits = []
    for path in _tracked_text_files():
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()[:120]}")
    assert not hits, "paths outside the repository:\n" + "\n".join(hits)
