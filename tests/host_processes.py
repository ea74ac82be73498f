"""The host's processes whose command line holds any of some needles: what a sandbox test asserts is gone (a
command's process group, a sandbox's PID 1 named `sandbox_init:NAME`) or still running.

Tests import it as `from host_processes import host_processes` (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

from pathlib import Path


def host_processes(*needles: str) -> list[str]:
    """``"PID: command line"`` of each host process whose command line contains one of ``needles``."""
    hits = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in text for n in needles):
            hits.append(f"{cmdline.parent.name}: {text}")
    return hits
