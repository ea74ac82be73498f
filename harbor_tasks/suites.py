"""The built-in task suites and how a suite name (`builtin:<name>`, a folder, a Harbor dataset) resolves.
Runs in: any Python >= 3.11, standard library only; eval.run and the corpus's decontamination read suites here.
"""

from __future__ import annotations

from pathlib import Path

from harbor_tasks.folder import is_task, task_folders

REPO = Path(__file__).resolve().parents[1]
BUILTIN_SUITES = {"builtin:terminal": REPO / "eval" / "tasks" / "terminal",
                  "builtin:evocode": REPO / "eval" / "tasks" / "evocode"}


class SuiteError(ValueError):
    """A suite name that names no tasks here (one line with the fix)."""


def is_dataset_name(suite: str) -> bool:
    """A Harbor registry dataset (`name@version`, `org/name`) rather than a local path or a built-in suite."""
    return ("@" in suite or "/" in suite) and not suite.startswith((".", "/", "~", "builtin:"))


def local_suite(suite: str) -> tuple[Path, list[Path]]:
    """(folder, task folders) of a suite on this machine: `builtin:<name>`, a folder of task folders or one task
    folder; SuiteError naming the fix for anything else (a dataset name cannot be read offline)."""
    if suite in BUILTIN_SUITES:
        path = Path(BUILTIN_SUITES[suite])
    elif suite.startswith("builtin:"):
        raise SuiteError(f"{suite}: unknown built-in suite; use one of {', '.join(BUILTIN_SUITES)} or a local "
                         "folder of Harbor tasks")
    else:
        path = Path(suite)
        if not path.exists():
            if is_dataset_name(suite):
                raise SuiteError(f"{suite}: a Harbor dataset name cannot be read offline; download its tasks and "
                                 "pass the local folder (a folder of task folders with task.toml and instruction.md)")
            raise SuiteError(f"{suite}: no such file or directory; pass a folder of Harbor tasks, one task folder, "
                             f"or one of {', '.join(BUILTIN_SUITES)}")
    if not path.is_dir():
        raise SuiteError(f"{suite}: not a folder; pass a folder of Harbor tasks (each with task.toml and "
                         "instruction.md) or one task folder")
    tasks = task_folders(path)
    if not tasks:
        raise SuiteError(f"{suite}: no Harbor tasks in this folder (subfolders with task.toml and instruction.md); "
                         "pass a folder of task folders or one task folder")
    return path, tasks


__all__ = ["BUILTIN_SUITES", "SuiteError", "is_dataset_name", "is_task", "local_suite"]
