"""A Harbor task folder: whether a folder is one, and what it says (instruction, task.toml, limits, origin, digest).
Runs in: any Python >= 3.11, standard library only; the one module that opens task.toml.

A task folder holds task.toml and an instruction: `instruction.md`, or for a multi-step task `[[steps]]` in
task.toml with `steps/<name>/instruction.md`. Everything else (environment/, tests/, solution/) is read where it is
used; `single_step_runnable` says whether one episode or trial can run it as it stands.
"""

from __future__ import annotations

import functools
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from common.digest import files_digest
from sandbox import read_regular_file

CONFIG = "task.toml"
INSTRUCTION = "instruction.md"
DEFAULT_VERIFIER_TIMEOUT_SEC = 120.0  # Harbor's default for [verifier] timeout_sec
DEFAULT_AGENT_TIMEOUT_SEC = 600.0     # Harbor's default for [agent] timeout_sec


class TaskFolderError(ValueError):
    """A folder that is not a readable task folder (one line naming the folder and what is wrong)."""


def is_task(path: str | Path) -> bool:
    """Whether `path` is a Harbor task folder: task.toml and an instruction (instruction.md or steps/)."""
    path = Path(path)
    return (path / CONFIG).is_file() and ((path / INSTRUCTION).is_file() or (path / "steps").is_dir())


def task_folders(root: str | Path) -> list[Path]:
    """The task folders of a suite folder, sorted; `[root]` when root is itself one task folder."""
    root = Path(root)
    if is_task(root):
        return [root]
    if not root.is_dir():
        return []
    return sorted(child for child in root.iterdir() if child.is_dir() and is_task(child))


def read_text(path: str | Path) -> str:
    """The text of a task's file, bounded: TaskFolderError (one line naming it) when it cannot be read, is no regular
    file (a link to /dev/zero, a FIFO) or is over sandbox.TASK_FILE_MAX_BYTES. Every read of a task's file is this."""
    try:
        return read_regular_file(path).decode(errors="replace")
    except ValueError as err:
        raise TaskFolderError(str(err)) from None


def read_config(task: str | Path) -> dict:
    """task.toml as a dict; TaskFolderError (one line) when it is missing, unreadable (read_text) or does not parse."""
    path = Path(task) / CONFIG
    try:
        return tomllib.loads(read_regular_file(path).decode())
    except ValueError as err:  # read_regular_file's, TOMLDecodeError and UnicodeDecodeError are ValueErrors
        if isinstance(err, (tomllib.TOMLDecodeError, UnicodeDecodeError)):
            raise TaskFolderError(f"{path}: does not parse: {err}") from None
        raise TaskFolderError(str(err)) from None


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _positive_int(value) -> int | None:
    return value if _int(value) is not None and value > 0 else None


def _number(value, default: float) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else default


@dataclass(frozen=True)
class TaskFolder:
    """What a task folder says: `TaskFolder.of(path)`."""

    path: Path
    config: dict

    @classmethod
    def of(cls, path: str | Path) -> "TaskFolder":
        """The task folder at `path`; a task.toml that is missing or does not parse reads as empty (every value its
        default), as Harbor's defaults would apply to an empty one. Read again when task.toml changes."""
        path = Path(path)
        try:
            stat = (path / CONFIG).stat()
            version = (stat.st_mtime_ns, stat.st_size)
        except OSError:
            version = None
        return _task_folder(path, version)

    # --- the instruction and the steps --------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.path.name

    @property
    def instruction(self) -> str:
        """The instruction (instruction.md) of a single-step task (read_text: bounded)."""
        return read_text(self.path / INSTRUCTION)

    def read_text(self, relative: str) -> str:
        """The text of the task's file at ``relative`` (e.g. ``tests/test.sh``), bounded (module ``read_text``)."""
        return read_text(self.path / relative)

    @property
    def steps(self) -> list[str]:
        """The step names of a multi-step task, in order (task.toml `[[steps]]`); [] for a single-step one."""
        names = [s.get("name") for s in self.config.get("steps") or [] if isinstance(s, dict)]
        return [n for n in names if isinstance(n, str) and n]

    @property
    def single_step_runnable(self) -> bool:
        """One instruction and tests/test.sh: what an RL episode runs."""
        return (self.path / INSTRUCTION).is_file() and (self.path / "tests" / "test.sh").is_file()

    def test_scripts(self) -> list[Path]:
        """tests/test.sh and each step's steps/<name>/tests/test.sh that exist."""
        scripts = [self.path / "tests" / "test.sh"] + [self.path / "steps" / s / "tests" / "test.sh"
                                                      for s in self.steps]
        return [s for s in scripts if s.is_file()]

    # --- the environment and the limits -------------------------------------------------------------------------
    @property
    def environment(self) -> dict:
        env = self.config.get("environment")
        return env if isinstance(env, dict) else {}

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def workdir(self) -> str | None:
        workdir = self.environment.get("workdir")
        return workdir if isinstance(workdir, str) and workdir else None

    @property
    def docker_image(self) -> str | None:
        image = self.environment.get("docker_image")
        return image if isinstance(image, str) and image else None

    @property
    def build_args(self) -> dict[str, str]:
        """`[environment] build_args`: the Dockerfile's ARG values, as `docker build --build-arg NAME=value` gives them
        (a table of strings; numbers and booleans as TOML writes them, anything else left out)."""
        table = self.environment.get("build_args")
        if not isinstance(table, dict):
            return {}
        return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in table.items()
                if isinstance(v, (str, int, float))}

    @property
    def memory_mb(self) -> int | None:
        return _positive_int(self.environment.get("memory_mb"))

    @property
    def storage_mb(self) -> int | None:
        return _positive_int(self.environment.get("storage_mb"))

    @property
    def allow_internet(self) -> bool:
        """Harbor's rule: `network_mode` ("public" allows), else the older `allow_internet`, default allowed."""
        env = self.environment
        if "network_mode" in env:
            return env["network_mode"] == "public"
        return bool(env.get("allow_internet", True))

    @property
    def internet_declared(self) -> bool:
        """Whether the task says it needs internet (a key set to allow it, not Harbor's default)."""
        env = self.environment
        if "network_mode" in env:
            return env["network_mode"] == "public"
        return env.get("allow_internet") is True

    @property
    def verifier_timeout_sec(self) -> float:
        section = self.config.get("verifier")
        return _number((section if isinstance(section, dict) else {}).get("timeout_sec"), DEFAULT_VERIFIER_TIMEOUT_SEC)

    @property
    def agent_timeout_sec(self) -> float:
        section = self.config.get("agent")
        return _number((section if isinstance(section, dict) else {}).get("timeout_sec"), DEFAULT_AGENT_TIMEOUT_SEC)

    # --- where it came from -------------------------------------------------------------------------------------
    @property
    def metadata(self) -> dict:
        meta = self.config.get("metadata")
        return meta if isinstance(meta, dict) else {}

    @property
    def family(self) -> str | None:
        """A generated task's family (`[metadata] family`, harbor_tasks/generate.py), else None."""
        family = self.metadata.get("family")
        return family if isinstance(family, str) and family else None

    @property
    def seed(self) -> int | None:
        """A generated task's seed (`[metadata] seed`), else None."""
        return _int(self.metadata.get("seed"))

    @property
    def index(self) -> int | None:
        """A generated task's index within its seed (`[metadata] index`), else None."""
        return _int(self.metadata.get("index"))

    @property
    def digest(self) -> str:
        """Every file's relative path and bytes (common.digest.files_digest): two copies of a task are the same task
        only if their digests are (the trainer's and an episode server's)."""
        return _digest(self.path)

    # --- the reference solution ---------------------------------------------------------------------------------
    @property
    def solution_script(self) -> str | None:
        """solution/solve.sh's text (read_text: bounded), or None when the task has none."""
        path = self.path / "solution" / "solve.sh"
        return read_text(path) if os.path.lexists(path) else None


@functools.lru_cache(maxsize=None)
def _task_folder(path: Path, version) -> TaskFolder:
    try:
        config = read_config(path)
    except TaskFolderError:
        config = {}
    return TaskFolder(path, config)


@functools.lru_cache(maxsize=None)
def _digest(path: Path) -> str:
    return files_digest(sorted(p for p in path.rglob("*") if p.is_file()), path)


def task_seeds(path: str | Path) -> dict[int, int]:
    """{seed: number of tasks} of the generated tasks in a suite folder (or one task folder); tasks that were not
    generated (no `[metadata] seed`) are not counted."""
    seeds: dict[int, int] = {}
    for task in task_folders(path):
        seed = TaskFolder.of(task).seed
        if seed is not None:
            seeds[seed] = seeds.get(seed, 0) + 1
    return seeds
