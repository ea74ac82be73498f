"""Build locks of torch extensions that a killed run left behind: found and removed before DeepSpeed builds its ops.
Runs in: the training venv (torch, for its extensions folder); every training recipe calls it at start.

DeepSpeed builds some of its C++ ops on first use (on CPU, `deepspeed_shm_comm` at every launch's start) through torch's
`cpp_extension.load`, which holds `<extensions folder>/<python>_<device>/<op>/lock` (`$TORCH_EXTENSIONS_DIR/<op>/lock`
where that is set) while it compiles and, when it finds the file there, waits until it is gone, without a limit. A
run killed while compiling (SIGTERM, SIGKILL, a test's or a scheduler's timeout) leaves the file, and from then on
every launch waits forever before its first step, printing nothing. Torch's lock records no owner, so it is written
here by hand: a lock that no process on this machine holds open, twice, half a second apart (a build holds it open
from creating it to just before removing it), is stale; only an empty `lock` in a folder of nothing but build files
is taken for torch's.

Launches over several machines are left alone: there a build on another machine that shares the folder would look
stale from here. Give each machine a folder of its own (`TORCH_EXTENSIONS_DIR` on local disk) there.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

SECOND_LOOK_SEC = 0.5  # a build removes its lock microseconds after closing it: half a second tells it from a stale one
# what torch's build writes in an op's folder: a folder holding anything else is not taken for one (TORCH_EXTENSIONS_DIR
# may name a folder that other programs use too)
BUILD_FILES = ("lock", "build.ninja", ".ninja_deps", ".ninja_log", "*.o", "*.so", "*.cu", "*.cpp", "*.hip")


def ops_folder() -> Path:
    """The folder torch builds each extension in a subfolder of: `TORCH_EXTENSIONS_DIR`, else its default under the
    user's cache folder, per Python and device (as `torch.utils.cpp_extension._get_build_directory` picks it)."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return Path(os.environ["TORCH_EXTENSIONS_DIR"])
    import torch
    from torch.utils.cpp_extension import get_default_build_root

    if torch.version.hip is not None:
        device = "rocm" + torch.version.hip.replace(".", "")
    elif torch.version.cuda is not None:
        device = "cu" + torch.version.cuda.replace(".", "")
    else:
        device = "cpu"
    python = f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}"
    return Path(get_default_build_root()) / f"{python}_{device}"


def _open_paths() -> set[str]:
    """The paths this machine's processes (those we may inspect) have open, in one pass over /proc."""
    paths = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
        except OSError:  # gone, or another user's process
            continue
        for fd in fds:
            try:
                paths.add(os.readlink(fd))
            except OSError:
                continue
    return paths


def _is_build_lock(lock: Path) -> bool:
    """An empty `lock` (torch's baton writes nothing) in a folder holding only what torch's build writes."""
    try:
        return lock.stat().st_size == 0 and all(any(entry.match(pattern) for pattern in BUILD_FILES)
                                                for entry in lock.parent.iterdir())
    except OSError:
        return False


def _unheld(folder: Path) -> dict[Path, int]:
    """The build locks under `folder` that no process holds open, with their inode numbers."""
    locks = {}
    for lock in folder.glob("*/lock"):
        try:
            locks[lock] = lock.stat().st_ino
        except FileNotFoundError:
            continue
    locks = {lock: inode for lock, inode in locks.items() if _is_build_lock(lock)}
    held = _open_paths() if locks else set()
    return {lock: inode for lock, inode in locks.items() if str(lock.resolve()) not in held}


def clear_stale_build_locks(folder: Path | None = None) -> list[Path]:
    """Remove the build locks in `folder` (`ops_folder()` by default: `<folder>/<op>/lock`) that no process holds; each
    removed one is printed with what it means. The locks removed; none on a launch over several machines."""
    if int(os.environ.get("WORLD_SIZE", 1)) > int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1))):
        return []
    folder = ops_folder() if folder is None else folder
    if not folder.is_dir():
        return []
    first = _unheld(folder)
    if not first:
        return []
    time.sleep(SECOND_LOOK_SEC)
    second = _unheld(folder)
    removed = []
    for lock, inode in first.items():
        if second.get(lock) != inode:  # gone (its build finished), or a new build's
            continue
        try:
            lock.unlink()
        except FileNotFoundError:  # another rank of this launch removed it first
            continue
        removed.append(lock)
        print(f"removed {lock}: a build lock no process holds (a run killed while it built {lock.parent.name}); "
              f"its build starts again", flush=True)
    return removed
