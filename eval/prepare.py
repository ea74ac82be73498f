"""Prepare: build the local sandbox's cached layer of every task of a suite ahead of a run (sandbox/build_cache.py).
Runs in: the training venv (standard library only), in `python -m eval.run --suite DIR --prepare [--env_kwargs ...]`.

Each task's build is keyed as `--env local` keys it in a trial (the same network policy, image root and its config,
build args, mode and expose), so the run that follows finds its layers; per task it says built, cached, failed (and
why) or none.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

from eval.preflight import parse_env_kwargs
from harbor_tasks.folder import TaskFolder, TaskFolderError, task_folders
from sandbox import Sandbox, SandboxConfig, SandboxError, build_cache, dockerfile
from sandbox.images import ImageStore, load_images_file

TRUE = ("1", "true", "yes", "on")


def task_config(task: Path, kwargs: dict[str, str], store: ImageStore | None) -> SandboxConfig | str:
    """The sandbox config `--env local` gives a trial of ``task`` (what its build key depends on), or why none."""
    folder = TaskFolder.of(task)
    env_dir = folder.environment_dir
    if not (env_dir / "Dockerfile").is_file():
        return "no Dockerfile"
    root = None
    if store is not None:
        base = dockerfile.base_image(env_dir / "Dockerfile", folder.build_args)
        if folder.docker_image and store.can_provide(folder.docker_image):
            return f"its own image {folder.docker_image}: nothing replayed"
        if not store.can_provide(base):
            return f"no image for {base}"
        root = store.root(base)
    network = kwargs.get("network", "none") if folder.allow_internet else "none"
    return SandboxConfig(
        mode=kwargs.get("mode", "auto"), limits=kwargs.get("limits", "strict"),
        memory_mb=folder.memory_mb or int(kwargs.get("memory_mb", 4096)),
        storage_mb=folder.storage_mb or int(kwargs.get("storage_mb", 10240)), environment_dir=env_dir,
        dockerfile=kwargs.get("dockerfile", "emulate"), expose=[p for p in kwargs.get("expose", "").split(",") if p],
        build_args=folder.build_args, network=network, **(root.sandbox_fields() if root else {}),
        build_cache_dir=kwargs.get("build_cache_dir") or None, build_cache_mb=int(kwargs.get("build_cache_mb", 20480)),
        name=f"prepare-{task.name}"[:60])


async def _prepare_one(task: Path, kwargs: dict, store: ImageStore | None, gate: asyncio.Semaphore) -> dict:
    row = {"task": task.name, "status": "none", "size_bytes": 0, "seconds": 0.0, "why": ""}
    async with gate:
        started = time.monotonic()
        try:
            config = await asyncio.to_thread(task_config, task, kwargs, store)
            if isinstance(config, str):
                row["why"] = config
                return row
            found = build_cache.locate(config)
            if found is None:
                row["why"] = "build cache off (build_cache=false or dockerfile=ignore)"
                return row
            folder, key, _ = found
            cached = (folder / key / "meta.json").is_file()
            layer = await build_cache.acquire(Sandbox(config, logging.getLogger("eval.prepare")))
            if layer is None:
                row["why"] = "the build cache cannot be used here (see the warning above)"
                return row
            layer.release()
            row.update(status="cached" if cached else "built", size_bytes=build_cache.size(layer.path))
        except (SandboxError, OSError, ValueError, TaskFolderError) as err:
            row.update(status="failed", why=f"{type(err).__name__}: {(str(err).splitlines() or [''])[0][:300]}")
        finally:
            row["seconds"] = round(time.monotonic() - started, 2)
    return row


def prepare(suite_dir: str | Path, env_kwargs: str | None = None, concurrency: int = 2) -> list[dict]:
    """Build (or find) every task's layer; a row per task: task, status (built|cached|failed|none), size, seconds."""
    kwargs = parse_env_kwargs(env_kwargs)
    if kwargs.get("build_cache", "true").lower() not in TRUE:
        raise ValueError("--env_kwargs build_cache=false: there is no cache to prepare")
    pull = kwargs.get("pull", "").lower() in TRUE
    store = (ImageStore(load_images_file(kwargs["images"]) if kwargs.get("images") else {},
                        cache_dir=kwargs.get("image_cache"), pull=pull) if kwargs.get("images") or pull else None)

    async def run() -> list[dict]:
        gate = asyncio.Semaphore(max(1, concurrency))
        return list(await asyncio.gather(*(_prepare_one(t, kwargs, store, gate) for t in task_folders(suite_dir))))

    return asyncio.run(run())


def report_lines(rows: list[dict], seconds: float) -> list[str]:
    width = max([len(r["task"]) for r in rows] + [4])
    lines = [f"{'task':<{width}}  {'status':<7} {'MiB':>7} {'s':>7}  why"]
    for r in rows:
        lines.append(f"{r['task']:<{width}}  {r['status']:<7} {r['size_bytes'] / 2**20:>7.1f} {r['seconds']:>7.1f}  "
                     f"{r['why']}")
    count = {s: sum(r["status"] == s for r in rows) for s in ("built", "cached", "failed", "none")}
    lines.append(f"prepare: {len(rows)} tasks: {count['built']} built, {count['cached']} already cached, "
                 f"{count['failed']} failed, {count['none']} with nothing to build; "
                 f"{sum(r['size_bytes'] for r in rows) / 2**20:.1f} MiB in {seconds:.1f} s")
    return lines
