"""Decision-point suites: a JSONL file of pivot rows (the Nemotron-RL-Agentic-Terminal-Pivot schema) scored on a checkpoint.
Runs in: the training venv; it serves the checkpoint (eval.serve) and starts a reward server (rewards.local).

Each row's `responses_create_params.input` goes to the served model as one chat completion (the suite's temperature
and max_tokens), and the reward server's /verify scores the answer against the row's `expected_answer`, as pivot
GRPO's reward does (string-only terminus_judge unless the row names another environment). eval_results.json is a
task suite's: one trial per row (task: the row's `metadata.task`, trial: its `uuid`), `mean_reward` the mean over
rows. A model call or a verify that did not answer is an infrastructure failure: counted, out of the mean.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
from tqdm import tqdm

from common.checkpoints import global_step
from common.errors import UserError
from eval.metrics import compute_metrics
from eval.results import build_results, write_results
from eval.serve import checkpoint_family, eval_served_name, resolve_checkpoint, serve_checkpoint
from harbor_tasks.verdict import INFRA_FAILURE, SCORED
from rewards.client import RewardClient, RewardClientConfig, completion_parts
from rewards.local import local_reward_server

SUFFIXES = (".jsonl",)
MODEL_TIMEOUT = 300.0  # seconds per chat completion: a CPU server answers one request at a time


def is_decision_point_suite(suite: str) -> bool:
    """A suite that is a JSONL file of decision points, not a folder of tasks or a dataset name."""
    return suite.endswith(SUFFIXES) and Path(suite).is_file()


def read_rows(path: str) -> list[dict]:
    """The rows of a decision-point file; a line that is not a row with an input and an expected answer is one
    line naming the file and the line."""
    rows = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            ok = isinstance(row["responses_create_params"]["input"], list) and isinstance(row["expected_answer"], str)
        except (ValueError, KeyError, TypeError):
            ok = False
        if not ok:
            raise UserError(f"{path}:{number}: not a decision point (a JSON object with responses_create_params.input "
                            "and a string expected_answer); build the file with `python -m trainers.data pivots`")
        rows.append(row)
    if not rows:
        raise UserError(f"{path}: no decision points in the file")
    return rows


def _trial(row: dict, index: int) -> dict:
    meta = row.get("metadata") or {}
    return {"task": str(meta.get("task") or f"row-{index}"), "trial": str(row.get("uuid") or index), "reward": None,
            "rounds": None, "exception": None, "outcome": SCORED, "infra_kind": None, "tamper": None}


async def answer_and_score(http: httpx.AsyncClient, client: RewardClient, row: dict, base_url: str, model: str,
                           temperature: float, max_tokens: int, family) -> tuple[float | None, str | None, str]:
    """One answer of the served model to `row`'s conversation, scored by the reward server's /verify against the row:
    (reward, None, ""), or (None, "model" | "verify", why) when the model call or the verify did not come back with
    a score (an infrastructure failure, never a 0)."""
    body = {"model": model, "messages": row["responses_create_params"]["input"], "temperature": temperature,
            "max_tokens": max_tokens}
    try:
        reply = await http.post(f"{base_url}/chat/completions", json=body, timeout=MODEL_TIMEOUT)
        reply.raise_for_status()
        message = reply.json()["choices"][0]["message"]
    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as err:
        return None, "model", f"model call to {base_url}: {type(err).__name__}: {err}"
    reasoning, answer = completion_parts([{"role": "assistant", **message}], family)
    outcome = await client.verify(row, answer, reasoning)
    if outcome.reward is None:  # the reward server did not score it (failed or masked)
        return None, "verify", f"verify: {outcome.status} ({outcome.failure_kind}): {outcome.details.get('error', '')}"
    return outcome.reward, None, ""


async def _score_rows(rows: list[dict], base_url: str, model: str, reward_url: str, settings, family) -> list[dict]:
    client = RewardClient(RewardClientConfig(urls=[reward_url], timeout=60.0, retries=2,
                                             max_consecutive_failures=len(rows) + 1))
    slots = asyncio.Semaphore(max(1, settings.concurrency))
    bar = tqdm(total=len(rows), desc="decision points", unit="row")

    async def one(index: int, row: dict, http: httpx.AsyncClient) -> dict:
        trial = _trial(row, index)
        async with slots:
            reward, failed, why = await answer_and_score(http, client, row, base_url, model, settings.temperature,
                                                         settings.max_tokens, family)
        if failed is not None:
            trial.update(outcome=INFRA_FAILURE, infra_kind="sandbox" if failed == "model" else "verifier_tools",
                         exception=why)
        else:
            trial["reward"] = reward
        bar.update()
        return trial

    try:
        async with httpx.AsyncClient() as http:
            return list(await asyncio.gather(*(one(i, row, http) for i, row in enumerate(rows))))
    finally:
        bar.close()
        await client.aclose()


def evaluate_decision_points(checkpoint: str, settings, results_file: str, progress=print,
                             results_dir: str | Path | None = None) -> dict:
    """Score `settings.suite` (a decision-point JSONL) on `checkpoint`; write `results_file` into `results_dir`
    (default: the checkpoint's folder)."""
    rows = read_rows(settings.suite)
    checkpoint_dir, started = Path(checkpoint), time.monotonic()
    family = checkpoint_family(resolve_checkpoint(checkpoint), settings.model_family)
    name = eval_served_name(checkpoint)
    with serve_checkpoint(checkpoint, served_model_name=name, model_family=settings.model_family) as served, \
            local_reward_server() as reward_url:
        progress(f"eval: {settings.suite} ({len(rows)} decision points) on {checkpoint} (served at {served.base_url} "
                 f"as {served.model}; reward server {reward_url})")
        trials = asyncio.run(_score_rows(rows, served.base_url, served.model, reward_url, settings, family))
    results = build_results(checkpoint=checkpoint_dir, global_step=global_step(checkpoint), settings=settings,
                            model=served.model, metrics=compute_metrics(trials, infra_errors=settings.infra_errors),
                            trials=trials, harbor_job_dir="", wall_seconds=time.monotonic() - started)
    write_results(results, checkpoint_dir, results_file, results_dir)
    return results
