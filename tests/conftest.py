import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
ACCELERATE = str(Path(sys.executable).parent / "accelerate")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HARBOR_TELEMETRY", "0")  # the Harbor jobs the tests run: no exit-time telemetry (5-6 s each)
if os.environ.get("PYTEST_XDIST_WORKER"):  # `make test`: one thread per worker (2 workers, 2 cores); torch's default,
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # a thread per core in each spins them against each other


def pytest_collection_modifyitems(items):
    """The modules holding slow tests first (stable otherwise): under `make test`'s workers the long runs start at
    once and the short tests fill in around them, instead of one long module running alone at the end."""
    slow = {item.module.__name__ for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module.__name__ not in slow)


@pytest.fixture(scope="session", autouse=True)
def corpus_cache_dir(tmp_path_factory) -> Path:
    """The prepared corpora of this test session (chat_corpus/cache.py), away from the user's cache; the
    recipes the tests launch inherit it."""
    path = tmp_path_factory.mktemp("corpus-cache")
    os.environ["TERMINAL_RECIPES_CORPUS_CACHE"] = str(path)
    return path


@pytest.fixture(autouse=True)
def no_wandb_service_left_behind():
    """A test that starts W&B in the pytest process must tear its service down: W&B exports $WANDB_SERVICE, and
    every recipe a later test launches would log into that one service instead of its own run."""
    yield
    if "WANDB_SERVICE" in os.environ:
        import wandb

        wandb.teardown()
        pytest.fail("W&B's service was left running ($WANDB_SERVICE set): call wandb.teardown() after wandb.finish()")


@pytest.fixture(scope="session")
def tiny_model_path() -> str:
    from modeling.tiny_model import resolve_model

    return resolve_model("builtin:tiny-qwen3")


@pytest.fixture(scope="session")
def tokenizer(tiny_model_path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_path)


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))
    return path


def chat_row(i: int, n_turns: int = 2, group: str | None = None) -> dict:
    """A small valid tool-calling chat."""
    messages = [{"role": "system", "content": "You are a terminal agent."},
                {"role": "user", "content": f"Task {i}: find the failing unit in /srv/app{i}."}]
    for t in range(n_turns):
        call = f"call_{i}_{t}"
        messages.append({"role": "assistant", "content": f"Step {t}: inspect.", "tool_calls": [
            {"id": call, "type": "function", "function": {"name": "bash", "arguments": json.dumps({"cmd": f"ls /srv/app{i}/{t}"})}}]})
        messages.append({"role": "tool", "tool_call_id": call, "name": "bash", "content": f"unit{t}.service\nlog{t}.txt"})
    messages.append({"role": "assistant", "content": f"The failing unit of app{i} is unit0."})
    return {"messages": messages, "metadata": {"source_trajectory_uid": group or f"traj-{i}"}}


def run(cmd, env=None, timeout=900, **kwargs) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, DS_ACCELERATOR="cpu", **(env or {}))
    return subprocess.run(cmd, cwd=REPO, env=full_env, capture_output=True, text=True, timeout=timeout, **kwargs)


def scripted_teacher_job(root: Path, seed: int, n: int, families: list[str]) -> Path:
    """`n` generated tasks of `families` under root/tasks, solved by the scripted teacher through Harbor's Terminus-2
    (`--collect` into root/jobs); the job folder."""
    from harbor_tasks.generate import generate

    if not (REPO / ".venv-harbor" / "bin" / "harbor").exists():
        pytest.fail(f"{REPO / '.venv-harbor'} missing: `make test` creates it (bash eval/setup_harbor.sh)")
    generate(root / "tasks", seed, n, families)
    result = run([sys.executable, "-m", "eval.scripted_teacher", "--tasks", str(root / "tasks"), "--collect",
                  str(root / "jobs"), "--concurrency", "3"], timeout=900)
    assert result.returncode == 0 and "solved 1.0" in result.stderr, result.stderr[-3000:]
    [job] = [path for path in (root / "jobs").iterdir() if path.is_dir()]
    return job


def sft_command(*args, accelerate_config="configs/accelerate/cpu.yaml") -> list[str]:
    return [ACCELERATE, "launch", "--config_file", accelerate_config, "--num_cpu_threads_per_process", "1",
            "recipes/sft.py", *args]


def learn_recipe(name: str = "learn"):
    """recipes/<name>.py as a module (a script, not a package): its parser, layout and constants."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"{name}_recipe", REPO / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def process_gone(pid: int, wait: float = 30.0) -> bool:
    """True once `pid` has exited (or is a zombie) within `wait` seconds: a sandbox's PID 1 after its teardown."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def processes_matching(pattern: str) -> list[int]:
    """Pids whose command line matches `pattern` (pgrep -f), this test process left out."""
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
    return [int(p) for p in found if int(p) != os.getpid()]


UNBOUNDED_FILE_KINDS = ("dev-zero", "fifo", "sparse")


def make_unbounded_file(path: Path, kind: str) -> None:
    """A task file a bounded reader must refuse: a link to /dev/zero, a FIFO, or a 1 GiB sparse file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        with open(path, "wb") as f:
            f.truncate(1 << 30)


# ---------------------------------------------------------------- agentic GRPO runs (tests/recipes, tests/episodes)
AGENTIC_FAMILIES = ["write-value", "count-lines", "count-words", "sum-numbers"]


def launch(recipe: str, config: dict, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    """`accelerate launch` (one CPU process) of `recipe` with `config` written as YAML into `tmp_path`."""
    path = tmp_path / f"{Path(recipe).stem}.yaml"
    path.write_text(yaml.safe_dump(config))
    return subprocess.run([str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
                           "configs/accelerate/cpu.yaml", recipe, "--config", str(path), *args], cwd=REPO,
                          capture_output=True, text=True, timeout=900, env={**os.environ, "DS_ACCELERATOR": "cpu"})


def agentic_config(tmp_path: Path, **overrides) -> dict:
    """configs/grpo/agentic-tiny.yaml for a 2-step run on the tasks in `tmp_path / "tasks"`."""
    config = yaml.safe_load((REPO / "configs" / "grpo" / "agentic-tiny.yaml").read_text())
    config.update({"output_dir": str(tmp_path / "grpo-agentic"), "task_dirs": [str(tmp_path / "tasks")],
                   "report_to": [], "max_steps": 2, "save_strategy": "no", **overrides})
    return config


# ---------------------------------------------------------------- code that tests run as user 'nobody'
NOBODY_PACKAGES = ("sandbox",)  # what the scripts run as 'nobody' import (standard library only, so no venv is needed)


def _searchable_by_all(path: Path) -> bool:
    """Every folder from / down to `path` lets others in (o+x), so a user outside root's group can reach inside."""
    path = path.resolve()
    return all(os.stat(p).st_mode & stat.S_IXOTH for p in (path, *path.parents))


@pytest.fixture(scope="session")
def nobody_readable_repo() -> Iterator[Path]:
    """A copy of NOBODY_PACKAGES in a fresh temp folder that everyone can read, removed after the session: the
    folder to put on sys.path of code run as user 'nobody' (setpriv --reuid=65534). The checkout itself may be out
    of nobody's reach: a clone in a private folder (mktemp -d is 0700, and so is root's home) passes the same tests."""
    parents = [Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp"), Path("/dev/shm")]
    parent = next((p for p in parents if p.is_dir() and _searchable_by_all(p)), None)
    if parent is None:
        pytest.fail(f"no temp folder that user 'nobody' can reach: {', '.join(map(str, parents))} are all private")
    root = Path(tempfile.mkdtemp(prefix="tr-nobody-", dir=parent))
    try:
        for name in NOBODY_PACKAGES:
            shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        # modes set here, not copied: a clone made under umask 077 has 0600 files; root keeps the only write access
        for folder, _, files in os.walk(root):
            os.chmod(folder, 0o755)
            for f in files:
                os.chmod(os.path.join(folder, f), 0o644)
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


# ---------------------------------------------------------------- image root file systems built offline
TEST_IMAGE_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "terminal-recipes" / "test-images"


def debian_image(name: str, dockerfile: Path | None = None) -> Path:
    """A Debian bookworm minbase root file system tarball (plus `dockerfile`'s steps) built by mmdebstrap
    (sandbox.images.build_debian_image), cached under ~/.cache/terminal-recipes/test-images; skips the test where
    mmdebstrap is missing or cannot reach a Debian mirror."""
    import hashlib
    import shutil

    from sandbox.errors import EnvironmentBuildError
    from sandbox.images import build_debian_image, dockerfile_hooks

    key = hashlib.sha256("\n".join(dockerfile_hooks(dockerfile) if dockerfile else []).encode()).hexdigest()[:12]
    tar = TEST_IMAGE_CACHE / f"{name}-{key}.tar"
    if tar.is_file():  # (a directory of that name is an earlier build's mistake: build_debian_image replaces it)
        return tar
    if shutil.which("mmdebstrap") is None:
        pytest.skip("mmdebstrap is missing (make test installs it: apt-get install mmdebstrap)")
    TEST_IMAGE_CACHE.mkdir(parents=True, exist_ok=True)
    try:
        return build_debian_image(tar, dockerfile)
    except EnvironmentBuildError as err:
        pytest.skip(f"mmdebstrap could not build a Debian image (a Debian mirror is needed): {str(err)[-500:]}")


def with_reasoning(family, answer: str, reasoning: str = "The file is small; list it first.",
                   opened_in_prompt: bool = False) -> str:
    """What a family's model generates when it reasons before `answer` (special tokens kept): a `<think>` block
    (only its close when the template opened it in the prompt), gpt-oss's harmony analysis then final messages;
    a family without reasoning writes the answer alone."""
    if family.reasoning_format == "think_tags":
        return f"{'' if opened_in_prompt else '<think>'}\n{reasoning}\n</think>\n\n{answer}"
    if family.reasoning_format == "harmony_channels":
        return (f"<|channel|>analysis<|message|>{reasoning}<|end|><|start|>assistant"
                + (answer if answer.startswith(("<|channel|>", " to=")) else f"<|channel|>final<|message|>{answer}"))
    return answer
