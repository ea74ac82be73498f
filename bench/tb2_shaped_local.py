"""Which Terminal-Bench-2-shaped tasks run in the local sandbox, and how the rest end: the oracle on
tests/fixtures/tb2_shaped under four settings of `--env local`, beside the preflight's verdict.

    python bench/tb2_shaped_local.py [--suite tests/fixtures/tb2_shaped] [--no_images] [--no_network]

Settings: offline on the host's userland (the default); `network=pasta` (user-mode networking, for tasks that allow
internet); `images=FILE`, each task in a Debian image built offline here (sandbox.images.build_debian_image:
mmdebstrap minbase, plus the task's Dockerfile steps for the tasks whose docker_image is built, or as the `FROM`
the Dockerfile is then replayed on); and images with pasta. Each run is a real `python -m eval.run --agent oracle`
(Harbor job); a cell is the trial's reward, or its infrastructure failure's kind. Prints a Markdown table (the
one in docs/sandbox.md) and writes bench/results/tb2_shaped_local.json. What the network reaches is this machine's:
here PyPI and Debian's mirror are reachable and astral.sh and GitHub are not.
"""

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from eval.preflight import preflight  # noqa: E402
from harbor_tasks.folder import TaskFolder, task_folders  # noqa: E402
from sandbox import dockerfile  # noqa: E402
from sandbox.images import build_debian_image, default_cache_dir  # noqa: E402

IMAGE_BUILT = ("log-error-count", "prebuilt-image-only")  # their docker_image is built here; the rest get a FROM


def build_images(suite: Path, out: Path) -> Path:
    """images.json for the suite: each built task's docker_image -> minbase + its Dockerfile, every FROM -> minbase."""
    cache = default_cache_dir().parent / "bench-images"
    cache.mkdir(parents=True, exist_ok=True)
    base = cache / "minbase-bookworm.tar"
    if not base.is_file():
        print("building a Debian bookworm minbase image with mmdebstrap ...", flush=True)
        build_debian_image(base)
    images = {}
    for task in task_folders(suite):
        ref = TaskFolder.of(task).docker_image
        df = task / "environment" / "Dockerfile"
        if task.name in IMAGE_BUILT and ref and not df.is_file():
            images[ref] = str(base)  # nothing to build on top
        elif task.name in IMAGE_BUILT and ref:
            tar = cache / f"{task.name}.tar"
            if not tar.is_file():
                print(f"building {task.name}'s image: minbase + its Dockerfile ...", flush=True)
                build_debian_image(tar, df if df.is_file() else None)
            images[ref] = str(tar)
        elif dockerfile.base_image(df):
            images[dockerfile.base_image(df)] = str(base)
    out.write_text(json.dumps(images, indent=2))
    return out


def oracle(suite: Path, work: Path, name: str, env_kwargs: str | None) -> dict:
    checkpoint = work / name / "checkpoint-0"
    checkpoint.mkdir(parents=True)
    started = time.monotonic()
    cmd = [sys.executable, "-m", "eval.run", "--checkpoint", str(checkpoint), "--suite", str(suite),
           "--agent", "oracle", "--concurrency", "2", *(["--env_kwargs", env_kwargs] if env_kwargs else [])]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: eval.run failed:\n{proc.stderr[-3000:]}")
    results = json.loads((checkpoint / "eval_results.json").read_text())
    cells = {}
    for t in results["tasks"]:
        task = t["task"].split("/")[-1]
        cells[task] = (f"{t['reward']:.1f}" if t["outcome"] != "infra_failure" and t["reward"] is not None
                       else f"infra: {t['infra_kind']}" if t["outcome"] == "infra_failure" else "0.0")
    m = results["metrics"]
    print(f"{name}: {next(line for line in proc.stderr.splitlines() if line.startswith('eval: step'))}", flush=True)
    return {"cells": cells, "mean_reward": m["mean_reward"], "n_scored": m["n_scored"], "n_trials": m["n_trials"],
            "infra_errors": m["infra_errors"], "wall_seconds": round(time.monotonic() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default=str(REPO / "tests" / "fixtures" / "tb2_shaped"))
    parser.add_argument("--no_images", action="store_true", help="skip the image settings (no mmdebstrap)")
    parser.add_argument("--no_network", action="store_true", help="skip the pasta settings")
    args = parser.parse_args()
    suite = Path(args.suite).resolve()
    work = Path(tempfile.mkdtemp(prefix="tb2-bench-"))
    settings = {"local (offline, host userland)": None}
    if not args.no_network and shutil.which("pasta"):
        settings["network=pasta"] = "network=pasta"
    if not args.no_images:
        images = build_images(suite, work / "images.json")
        settings["images (offline)"] = f"images={images}"
        if "network=pasta" in settings:
            settings["images + network=pasta"] = f"images={images} network=pasta"
    runs = {name: oracle(suite, work, f"run{i}", kwargs) for i, (name, kwargs) in enumerate(settings.items())}
    verdicts = {t["task"]: t for t in preflight(suite, "local")["tasks"]}
    shapes = {p.name: TaskFolder.of(p).metadata.get("shape", "") for p in task_folders(suite)}
    header = ["task", "shape", "preflight (offline)", *settings]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for task in sorted(verdicts):
        lines.append("| " + " | ".join([task, shapes.get(task, ""), verdicts[task]["verdict"],
                                        *[runs[s]["cells"].get(task, "-") for s in settings]]) + " |")
    lines.append("| **mean_reward** (scored / trials) | | | " + " | ".join(
        f"{r['mean_reward']:.2f} ({r['n_scored']}/{r['n_trials']})" if r["mean_reward"] is not None else "-"
        for r in runs.values()) + " |")
    lines.append("| wall seconds (2 CPUs, concurrency 2) | | | " + " | ".join(
        str(r["wall_seconds"]) for r in runs.values()) + " |")
    print("\n".join(lines))
    out = REPO / "bench" / "results" / "tb2_shaped_local.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"suite": str(suite), "settings": settings, "runs": runs,
                               "preflight": verdicts, "table": lines}, indent=2))
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
