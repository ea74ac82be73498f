"""Pivot profiling (PivotRL): K samples of the starting policy per pivot row, scored by /verify; keep rows that teach.
Runs in: the training venv; `python -m trainers.data profile` calls `profile_rows`.

A row's K rewards give its mean and std (`metadata.profile`). Under GRPO a row whose K rewards agree has zero
advantage: `--keep mixed` keeps the rows whose rewards vary and whose mean is below `--max_mean`, `hard` every row
below the bar, `all` every row. A sample whose model call or verify fails is counted, never a 0; a row left with
fewer than two scored samples is dropped as `infrastructure` (and sampled again by a rerun). Each row's profile is
appended to OUT.progress.jsonl as it finishes: a rerun with the same model, K, temperature and max_tokens skips it.
Rules, counts and the recipe for the Nemotron pivot rows on vLLM: docs/grpo.md#profiling-pivots.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import statistics
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from tqdm import tqdm

from common.errors import UserError
from eval.decision_points import answer_and_score
from rewards.client import RewardClient, RewardClientConfig

KEEP = ("mixed", "hard", "all")
MIN_SCORED = 2  # a std needs two scores
MAX_CONSECUTIVE_MODEL_FAILURES = 20  # then the endpoint is down, not slow: stop (the rows done are kept)
DROP_REASONS = ("infrastructure", "too_easy", "no_variance")


@dataclass
class ProfileOptions:
    k: int = 8
    keep: str = "mixed"
    max_mean: float = 1.0  # the difficulty bar: kept rows have a mean reward below it
    temperature: float = 1.0
    max_tokens: int = 512
    concurrency: int = 8


@dataclass
class ProfileReport:
    rows: int = 0
    profiled: int = 0  # rows sampled in this run
    reused: int = 0  # rows whose profile an earlier run left in the progress file
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    samples: int = 0  # samples requested in this run
    scored: int = 0
    failed: Counter = field(default_factory=Counter)  # "model" | "verify" -> samples
    mean_of_means: float | None = None
    seconds: float = 0.0
    files: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = asdict(self)
        out["dropped"], out["failed"] = dict(self.dropped), dict(self.failed)
        out["samples_per_second"] = round(self.samples / self.seconds, 3) if self.seconds else None
        return out


def row_key(row: dict) -> str:
    """A row's identity in the progress file: its uuid, else a digest of its conversation and expected answer."""
    if row.get("uuid"):
        return str(row["uuid"])
    body = json.dumps([row["responses_create_params"]["input"], row["expected_answer"]], sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:24]


def progress_path(out: str | Path) -> Path:
    out = Path(out)
    return out.with_name(out.name.removesuffix(".jsonl") + ".progress.jsonl")


def row_profile(rewards: list[float | None], model: str) -> dict:
    """The statistics a row carries: K, the scored rewards, their mean and population std, failures, the model."""
    scored = [r for r in rewards if r is not None]
    return {"k": len(rewards), "scored": len(scored), "infra_failures": len(rewards) - len(scored),
            "mean": round(statistics.fmean(scored), 6) if scored else None,
            "std": round(statistics.pstdev(scored), 6) if len(scored) >= MIN_SCORED else None,
            "rewards": scored, "model": model}


def drop_reason(profile: dict, options: ProfileOptions) -> str | None:
    """Why a profiled row is left out under `options` (one of DROP_REASONS), None when it is kept."""
    if profile["scored"] < MIN_SCORED:
        return "infrastructure"
    if options.keep == "all":
        return None
    if profile["mean"] >= options.max_mean:
        return "too_easy"
    if options.keep == "mixed" and profile["std"] == 0:
        return "no_variance"
    return None


def _setting(model: str, options: ProfileOptions) -> dict:
    """What a reused profile must have been made with."""
    return {"model": model, "k": options.k, "temperature": options.temperature, "max_tokens": options.max_tokens}


def read_progress(path: Path, setting: dict) -> dict[str, dict]:
    """key -> profile of the rows an earlier run profiled with the same setting (a torn last line is ignored)."""
    done = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("setting") == setting and "key" in entry:
                done[entry["key"]] = entry["profile"]
    return done


def check_endpoints(model_url: str, model: str, reward_url: str) -> None:
    """One line naming the URL when the model endpoint or the reward server does not answer (or does not serve
    `model`), before any sampling."""
    try:
        reply = httpx.get(f"{model_url.rstrip('/')}/models", timeout=10)
        reply.raise_for_status()
        served = [m.get("id") for m in reply.json().get("data", [])]
    except (httpx.HTTPError, ValueError, AttributeError) as err:
        raise UserError(f"--model_url {model_url}: no OpenAI-compatible server answers GET /models "
                        f"({type(err).__name__}: {err}); start one (python -m eval.serve --checkpoint DIR, or vLLM) "
                        "or pass --checkpoint DIR")
    if served and model not in served:
        raise UserError(f"--model {model}: {model_url} serves {', '.join(map(str, served))}; pass one of them")
    try:
        httpx.get(f"{reward_url.rstrip('/')}/health", timeout=10).raise_for_status()
    except httpx.HTTPError as err:
        raise UserError(f"--reward_url {reward_url}: the reward server does not answer GET /health "
                        f"({type(err).__name__}: {err}); start one (python -m rewards.server) or leave the flag out "
                        "for a local one")


async def _profile(todo: list[tuple[str, dict]], model_url: str, model: str, reward_url: str, options: ProfileOptions,
                   family, progress_file: Path, setting: dict, report: ProfileReport) -> dict[str, dict]:
    client = RewardClient(RewardClientConfig(urls=[reward_url], retries=2))
    slots = asyncio.Semaphore(max(1, options.concurrency))
    bar = tqdm(total=len(todo), desc="profiling pivots", unit="row")
    model_failures_in_a_row = 0
    profiles: dict[str, dict] = {}

    async def sample(row: dict, http: httpx.AsyncClient) -> float | None:
        nonlocal model_failures_in_a_row
        async with slots:
            reward, failed, why = await answer_and_score(http, client, row, model_url, model, options.temperature,
                                                         options.max_tokens, family)
        report.samples += 1
        if failed is None:
            report.scored += 1
            model_failures_in_a_row = 0
            return reward
        report.failed[failed] += 1
        if failed == "model":
            model_failures_in_a_row += 1
            if model_failures_in_a_row >= MAX_CONSECUTIVE_MODEL_FAILURES:
                raise UserError(f"--model_url {model_url}: {model_failures_in_a_row} model calls failed in a row "
                                f"(last: {why}); the rows profiled so far are in {progress_file}, a rerun goes on")
        return None

    async def one(key: str, row: dict, http: httpx.AsyncClient, progress) -> None:
        rewards = await asyncio.gather(*(sample(row, http) for _ in range(options.k)))
        profiles[key] = profile = row_profile(list(rewards), model)
        if profile["scored"] >= MIN_SCORED:  # a row the infrastructure failed is sampled again by a rerun
            progress.write(json.dumps({"key": key, "setting": setting, "profile": profile}) + "\n")
            progress.flush()
        report.profiled += 1
        bar.update()

    try:
        with progress_file.open("a", encoding="utf-8") as progress:
            async with httpx.AsyncClient() as http:
                tasks = [asyncio.create_task(one(key, row, http, progress)) for key, row in todo]
                try:
                    await asyncio.gather(*tasks)
                except BaseException:
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
                    raise
    finally:
        bar.close()
        await client.aclose()
    return profiles


def profile_rows(rows: list[dict], out: str | Path, model_url: str, model: str, reward_url: str,
                 options: ProfileOptions, family=None) -> ProfileReport:
    """Profile `rows` (the rows a previous run finished are read back), write the kept ones, with
    `metadata.profile`, to `out`; the report counts what happened."""
    if options.keep not in KEEP:
        raise UserError(f"--keep {options.keep}: one of {', '.join(KEEP)}")
    if options.k < MIN_SCORED:
        raise UserError(f"--k {options.k}: at least {MIN_SCORED} samples a row (a std needs two)")
    started, out = time.monotonic(), Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    report = ProfileReport(rows=len(rows))
    setting = _setting(model, options)
    progress_file = progress_path(out)
    done = read_progress(progress_file, setting)
    keys = [row_key(row) for row in rows]
    todo = list({key: row for key, row in zip(keys, rows) if key not in done}.items())
    report.reused = len(set(keys) & set(done))
    done.update(asyncio.run(_profile(todo, model_url, model, reward_url, options, family, progress_file, setting,
                                     report)))
    kept, means = [], []
    for key, row in zip(keys, rows):
        profile = done[key]
        if profile["mean"] is not None:
            means.append(profile["mean"])
        reason = drop_reason(profile, options)
        if reason:
            report.dropped[reason] += 1
            continue
        kept.append(dict(row, metadata={**(row.get("metadata") or {}), "profile": profile}))
    report.kept = len(kept)
    report.mean_of_means = round(statistics.fmean(means), 4) if means else None
    partial = out.with_name(out.name + ".partial")
    partial.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in kept), encoding="utf-8")
    partial.replace(out)
    report.seconds = round(time.monotonic() - started, 2)
    report.files = {"out": str(out), "progress": str(progress_file)}
    return report


def summary_lines(report: ProfileReport, options: ProfileOptions) -> list[str]:
    rate = f"{report.samples / report.seconds:.2f} samples/s" if report.seconds and report.samples else "no samples"
    dropped = ", ".join(f"{reason} {report.dropped[reason]}" for reason in DROP_REASONS if report.dropped[reason])
    failed = ", ".join(f"{kind} {n}" for kind, n in sorted(report.failed.items()))
    return [
        f"profile: {report.rows} rows ({report.profiled} sampled now, {report.reused} from an earlier run), K "
        f"{options.k}, keep {options.keep} ("
        + {"mixed": f"rewards that vary, mean < {options.max_mean:g}", "hard": f"mean < {options.max_mean:g}",
           "all": "every row scored twice or more"}[options.keep] + ")",
        f"kept {report.kept}; dropped {report.dropped.total()}" + (f" ({dropped})" if dropped else ""),
        f"samples {report.samples} in {report.seconds:.1f} s ({rate}); scored {report.scored}, infrastructure "
        f"failures {sum(report.failed.values())}" + (f" ({failed}: not scores, out of every mean)" if failed else ""),
        f"mean reward over rows {report.mean_of_means if report.mean_of_means is not None else 'n/a'}",
        f"rows: {report.files.get('out')}  progress: {report.files.get('progress')}",
    ]
