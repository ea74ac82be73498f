"""Stale build locks of torch extensions: a run killed while DeepSpeed compiled an op must not hang every later
start."""

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import chat_row, run, sft_command, write_jsonl

from common import build_locks
from common.build_locks import clear_stale_build_locks, ops_folder

OP = "deepspeed_shm_comm"  # the op every DeepSpeed launch on CPU builds at its start


def plant_lock(folder, op=OP):
    lock = folder / op / "lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.touch()
    return lock


def test_a_lock_no_process_holds_is_removed_and_said(tmp_path, capsys):
    lock = plant_lock(tmp_path)
    assert clear_stale_build_locks(tmp_path) == [lock]
    assert not lock.exists()
    assert f"removed {lock}" in capsys.readouterr().out


def test_a_lock_a_running_build_holds_is_kept(tmp_path):
    lock = plant_lock(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", f"f = open({str(lock)!r}); import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 20
        while str(lock.resolve()) not in build_locks._open_paths() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert clear_stale_build_locks(tmp_path) == []
        assert lock.exists()
    finally:
        holder.kill()
        holder.wait()


def test_a_lock_a_new_build_made_between_the_two_looks_is_kept(tmp_path, monkeypatch):
    lock = plant_lock(tmp_path)
    monkeypatch.setattr(build_locks, "SECOND_LOOK_SEC", 1.0)

    def new_build():  # the stale lock went and a new build made its own, seen just as it closes it (not held then)
        time.sleep(0.3)
        os.link(lock, tmp_path / "old")  # the old inode lives on: the new lock cannot reuse its number
        lock.unlink()
        lock.touch()

    thread = threading.Thread(target=new_build)
    thread.start()
    try:
        assert clear_stale_build_locks(tmp_path) == []
        assert lock.exists()
    finally:
        thread.join()


def test_a_lock_that_is_not_a_torch_builds_is_kept(tmp_path):
    """TORCH_EXTENSIONS_DIR may name a folder other programs use: only an empty lock beside build files is torch's."""
    other = plant_lock(tmp_path, "some-service")
    (other.parent / "service.pid").write_text("4242\n")
    written = plant_lock(tmp_path, "another")
    written.write_text("held by pid 4242\n")
    built = plant_lock(tmp_path)
    for name in ("build.ninja", ".ninja_log", "shm.o", "deepspeed_shm_comm.so"):
        (built.parent / name).write_text("")
    assert clear_stale_build_locks(tmp_path) == [built]
    assert other.exists() and written.exists()


def test_launches_over_several_machines_are_left_alone(tmp_path, monkeypatch):
    lock = plant_lock(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "16")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert clear_stale_build_locks(tmp_path) == []
    assert lock.exists()


def test_the_folder_is_the_one_torch_builds_in(monkeypatch, tmp_path):
    from torch.utils.cpp_extension import _get_build_directory  # torch's own choice (it makes the folder)

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # torch's default is under the user's cache folder
    for extensions_dir in (None, str(tmp_path / "ext")):
        if extensions_dir is None:
            monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
        else:
            monkeypatch.setenv("TORCH_EXTENSIONS_DIR", extensions_dir)
        assert Path(_get_build_directory("some_op", verbose=False)) == ops_folder() / "some_op"


@pytest.mark.slow
def test_two_ranks_start_past_the_lock_of_a_build_that_was_killed(tmp_path):
    """Before the fix both ranks waited on the lock forever, printing nothing (the CI run of d6880b0 lost 4 tests x
    900 s this way, after an earlier run was killed while it compiled the op)."""
    folder = tmp_path / "extensions"
    # the op built (or waited for, under torch's own lock, while another test's launch builds it) where every launch
    # finds it, then copied: this test does not compile it a second time (about a minute of both cores)
    clear_stale_build_locks()
    built = run([sys.executable, "-c", "from deepspeed.ops.op_builder.cpu.comm import ShareMemCommBuilder; "
                 "ShareMemCommBuilder().load()"], timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    shutil.copytree(ops_folder(), folder, ignore=shutil.ignore_patterns("lock"))
    lock = plant_lock(folder)
    corpus = write_jsonl(tmp_path / "chat.jsonl", [chat_row(i) for i in range(8)])
    result = run(sft_command("--datasets", str(corpus), "--output_dir", str(tmp_path / "out"), "--max_steps", "1",
                             "--save_strategy", "no", "--eval_strategy", "no", "--report_to", "none",
                             "--max_length", "1024", "--eval_suites", "",
                             accelerate_config="configs/accelerate/cpu_zero2.yaml"),
                 env={"TORCH_EXTENSIONS_DIR": str(folder)}, timeout=600)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    assert f"removed {lock}" in result.stdout
    assert not lock.exists()
