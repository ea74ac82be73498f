"""What agentic GRPO trains on: task folders as TRL prompt rows, episodes as its environments, their tests as reward.
Runs in: the training venv, in the trainer's processes; `python -m trainers.agentic prepare CONFIG` for launchers.

The harness (`harness`, common/harnesses.py): the bash tool (common/bash_harness.py, shared with the eval agent;
episodes.local) or Terminus-2 (episodes.terminus, driven by trainers/terminus_rollout.py), in local sandboxes or on
episode servers with `sandbox_urls` (episodes.remote). docs/agentic-grpo.md has the rest.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from common.errors import ConfigError
from common.harnesses import BASH_TOOL_HARNESS, HARNESSES, TERMINUS_2_HARNESS, harness_named
from common.terminus_2 import first_message, shown_instruction
from common.stats import percentile
from episodes.local import EpisodeLimits, EpisodeStats, TaskEnvironment, episode_reward, task_prompt
from episodes.remote import EpisodeServers, RemoteTaskEnvironment, RemoteTerminusEnvironment
from episodes.terminus import TerminusEnvironment
from harbor_tasks.folder import TaskFolder, task_folders, task_seeds
from harbor_tasks.families import UnknownFamily, select
from harbor_tasks.generate import generate, task_names
from harbor_tasks.verdict import TAMPER_KINDS, passed
from trainers.profiling import KEEP, MIN_SCORED, ProfileOptions

VERIFY_WORKERS = 8  # episodes of one generation batch verified at once
_LIMITS = EpisodeLimits()


@dataclass
class AgenticTaskArguments:
    """The tasks of an agentic GRPO run and the limits of its episodes (the YAML keys of configs/grpo/agentic-*)."""

    harness: str = field(default=BASH_TOOL_HARNESS, metadata={
        "help": "how the policy acts: " + "; ".join(f"{h.name}: {h.acts}" for h in HARNESSES.values())
                + ". The checkpoints' evals run in the same harness (eval_agent)"})
    task_dirs: list[str] = field(default_factory=list, metadata={
        "help": "folders of Harbor task folders (instruction.md, environment/, tests/) to train on"})
    generate_seed: int | None = field(default=None, metadata={
        "help": "generate procedural tasks (harbor_tasks/generate.py) with this seed into task_dirs[0] first"})
    generate_n: int = field(default=20, metadata={"help": "how many to generate"})
    generate_families: list[str] = field(default_factory=list, metadata={
        "help": "which families: set (shallow, deep) and family names, python -m harbor_tasks.generate --list "
                "(default: the shallow set)"})
    heldout_dir: str | None = field(default=None, metadata={
        "help": "generate held-out procedural tasks into this folder first (name it in eval_suites to score every "
                "checkpoint on them)"})
    heldout_seed: int | None = field(default=None, metadata={
        "help": "the held-out tasks' seed: never generate_seed, nor any seed of the tasks in task_dirs"})
    heldout_n: int = field(default=20, metadata={"help": "how many held-out tasks"})
    heldout_families: list[str] = field(default_factory=list, metadata={
        "help": "the held-out tasks' families (default: generate_families)"})
    # task profiling (trainers/task_profiling.py): the keep rules of pivot profiling (trainers/profiling.py)
    profile_attempts: int = field(default=0, metadata={
        "help": "before the first step, run the start this many times on every train task at the training "
                "temperature (an eval in the run's harness) and train only on the tasks profile_keep keeps; 0: "
                "train on every task"})
    profile_keep: str = field(default="mixed", metadata={
        "help": "mixed: the tasks whose trials disagree, below profile_max_mean; hard: every task below "
                "profile_max_mean; all: every task (the profile is still written)"})
    profile_max_mean: float = field(default=1.0, metadata={
        "help": "the difficulty bar: a kept task passes less than this share of its scored trials"})
    # the episode limits: EpisodeLimits's defaults (episodes/local.py), one definition
    command_timeout_sec: float = _LIMITS.command_timeout_sec
    episode_wall_sec: float = _LIMITS.episode_wall_sec
    episode_clock: str = field(default=_LIMITS.episode_clock, metadata={
        "help": "what episode_wall_sec counts: environment (the seconds of the episode's commands and screens in its "
                "sandbox, not those it waits for the policy's next turn) | wall (every second since its sandbox "
                "started, the policy's generation included, as Harbor's agent timeout)"})
    max_output_chars: int = _LIMITS.max_output_chars
    limit_outcome: str = field(default=_LIMITS.limit_outcome, metadata={
        "help": "an episode ended by episode_wall_sec: zero | mask"})
    tamper_outcome: str = field(default=_LIMITS.tamper_outcome, metadata={
        "help": "an episode whose agent touched its verifier's run (its paths, its tools on PATH, processes writing "
                "while it ran: harbor_tasks.verdict.TAMPER_KINDS): zero (scored 0) | mask (not scored); counted by "
                "kind either way"})
    sandbox_memory_mb: int = _LIMITS.memory_mb
    sandbox_urls: list[str] = field(default_factory=list, metadata={
        "help": "episode servers (python -m episodes.server) to run the sandboxes on, e.g. http://cpu1:8200; "
                "sessions are spread over them. Empty: local sandboxes on the trainer's node"})
    sandbox_auth_token: str | None = field(default=None, metadata={
        "help": "bearer token of the episode servers (default: $EPISODE_SERVER_TOKEN)"})
    sandbox_start_timeout: float = field(default=300.0, metadata={
        "help": "seconds an episode may wait for a remote sandbox (servers at capacity included); then the "
                "episode is not scored (kind sandbox)"})
    sandbox_retries: int = field(default=3, metadata={
        "help": "retries of a remote call that failed on the network or with a 5xx (a bash call or Terminus-2 "
                "step only when the request never reached the server)"})

    def __post_init__(self):
        harness_named(self.harness)  # UnknownHarness (a ValueError) lists the harnesses
        urls = [url.strip().rstrip("/") for entry in self.sandbox_urls for url in str(entry).split(",")]
        self.sandbox_urls = [url for url in urls if url]
        bad = [url for url in self.sandbox_urls if not url.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"sandbox_urls: {', '.join(bad)} is not an http(s):// URL of an episode server")
        if self.sandbox_start_timeout <= 0 or self.sandbox_retries < 0:
            raise ValueError("sandbox_start_timeout must be positive and sandbox_retries at least 0")
        if self.profile_attempts and self.profile_attempts < MIN_SCORED:
            raise ValueError(f"profile_attempts: {self.profile_attempts} trials give no spread: use 0 (no "
                             f"profiling) or at least {MIN_SCORED}")
        if self.profile_attempts < 0 or self.profile_keep not in KEEP or not 0 < self.profile_max_mean <= 1:
            raise ValueError(f"profile_attempts must be 0 or more, profile_keep one of {', '.join(KEEP)}, "
                             f"profile_max_mean in (0, 1]; got {self.profile_attempts}, {self.profile_keep!r}, "
                             f"{self.profile_max_mean}")

    def profile_options(self, temperature: float) -> ProfileOptions:
        """The task profile's rules, its trials sampled at the training `temperature`."""
        return ProfileOptions(k=self.profile_attempts, keep=self.profile_keep, max_mean=self.profile_max_mean,
                              temperature=temperature)

    def limits(self) -> EpisodeLimits:
        try:
            return EpisodeLimits(command_timeout_sec=self.command_timeout_sec, episode_wall_sec=self.episode_wall_sec,
                                 episode_clock=self.episode_clock,
                                 max_output_chars=self.max_output_chars, limit_outcome=self.limit_outcome,
                                 tamper_outcome=self.tamper_outcome, memory_mb=self.sandbox_memory_mb)
        except ValueError as err:
            raise ConfigError(f"episode limits: {err}") from None


def prepare_tasks(args: AgenticTaskArguments) -> list[Path]:
    """The task folders of the run (generated first when generate_seed is set), sorted; the held-out tasks generated
    too when heldout_seed is set (prepare_heldout)."""
    if not args.task_dirs:
        raise ConfigError("task_dirs is empty: name at least one folder of Harbor task folders")
    for key in ("generate_families", "heldout_families"):
        try:
            select(getattr(args, key), key)
        except UnknownFamily as err:
            raise ConfigError(str(err)) from None
    if args.heldout_seed is not None and args.heldout_seed == args.generate_seed:
        raise ConfigError(f"heldout_seed and generate_seed are both {args.heldout_seed}: held-out tasks must come "
                          "from a seed never used in training")
    if args.generate_seed is not None:
        generate_once(Path(args.task_dirs[0]), "task_dirs[0]", args.generate_seed, args.generate_n,
                      args.generate_families or None)
    prepare_heldout(args)
    tasks = []
    for root in map(Path, args.task_dirs):
        if not root.is_dir():
            raise ConfigError(f"task_dirs: {root} is not a folder (give folders of Harbor task folders)")
        found = [d for d in task_folders(root) if TaskFolder.of(d).single_step_runnable]
        if not found:
            raise ConfigError(f"task_dirs: {root} holds no task folder (task.toml, instruction.md, tests/test.sh)")
        tasks += found
    return tasks


def prepare_heldout(args: AgenticTaskArguments) -> None:
    """With heldout_seed: the held-out procedural tasks in heldout_dir (generated when the folder is empty)."""
    if args.heldout_seed is None:
        return
    if not args.heldout_dir:
        raise ConfigError("heldout_seed is set but heldout_dir is not: name the folder to generate them into")
    generate_once(Path(args.heldout_dir), "heldout_dir", args.heldout_seed, args.heldout_n,
                  args.heldout_families or args.generate_families or None)


def generate_once(out: Path, key: str, seed: int, n: int, families: list[str] | None) -> None:
    """Generate the tasks into an empty `out`; a folder already holding them is used as it is, one holding other
    tasks (another seed, count or family set: a config changed since) is refused rather than trained on."""
    if not (out.is_dir() and any(out.iterdir())):
        generate(out, seed, n, families)
        return
    found = sorted(d.name for d in task_folders(out))
    expected = sorted(task_names(seed, n, families))
    if found != expected:
        other = sorted(set(found) - set(expected))[:3] or sorted(set(expected) - set(found))[:3]
        raise ConfigError(f"{key}: {out} holds tasks of another generation than seed {seed}, n {n}, families "
                          f"{','.join(families or ['default'])} (e.g. {', '.join(other)} differs); remove the "
                          "folder to generate them again, or name another one")


def check_held_out(task_dirs: list[str], eval_suites: list[str]) -> dict:
    """{"train_seeds", "eval_seeds"}: the generated tasks' seeds on each side ({seed: tasks}; eval suites that are
    not local folders count none), after refusing a run whose eval suites share a seed with its train tasks."""
    train: dict[int, int] = {}
    for root in task_dirs:
        for seed, n in task_seeds(root).items():
            train[seed] = train.get(seed, 0) + n
    held: dict[str, dict[int, int]] = {suite: task_seeds(suite) for suite in eval_suites if Path(suite).is_dir()}
    for suite, seeds in held.items():
        shared = sorted(set(seeds) & set(train))
        if shared:
            raise ConfigError(f"eval_suites: {suite} has tasks of seed {', '.join(map(str, shared))}, which the train "
                              "tasks use too: held-out tasks must come from a seed never used in training")
    return {"train_seeds": train, "eval_seeds": held}


def task_dataset(tasks: list[Path], harness: str = BASH_TOOL_HARNESS):
    """One row per task: the conversational prompt TRL generates from, and `task_dir`, which reset() receives. In
    the Terminus-2 harness the rollout renders the first message itself (it needs the sandbox's first screen): the
    row's prompt, which TRL logs, is that message without the screen."""
    from datasets import Dataset

    def prompt(task: Path) -> list[dict]:
        if harness == TERMINUS_2_HARNESS:
            return [{"role": "user", "content": first_message(shown_instruction(TaskFolder.of(task).instruction), "")}]
        return task_prompt(task)

    rows = [{"prompt": prompt(t), "task_dir": str(t.resolve()), "task": t.name} for t in tasks]
    return Dataset.from_list(rows)


def check_eval_agent(args: AgenticTaskArguments, eval_agent: str, config_path: str | None, argv: list[str]) -> str:
    """The eval agent of the run's checkpoints: the harness it trains. An eval_agent set in the config or on the
    command line to another harness is refused (a model is evaluated acting as it was trained to act)."""
    explicit = "--eval_agent" in argv or any(a.startswith("--eval_agent=") for a in argv)
    if not explicit and config_path:
        import yaml

        explicit = "eval_agent" in (yaml.safe_load(Path(config_path).read_text()) or {})
    if explicit and eval_agent != args.harness:
        raise ConfigError(f"eval_agent {eval_agent} but harness {args.harness}: the checkpoints are evaluated in the "
                          f"harness they are trained in; drop eval_agent (it follows harness) or set it to "
                          f"{args.harness}")
    return args.harness


def environment_factory(args: AgenticTaskArguments, stats: EpisodeStats):
    """What GRPOTrainer(environment_factory=...) calls, once per pooled environment: a local sandbox per episode,
    or a session on one of the episode servers of `sandbox_urls` (the same tool or turns, reward and failure kinds).
    Terminus-2's environments have no tools: trainers/terminus_rollout.py drives them."""
    terminus = args.harness == TERMINUS_2_HARNESS
    if not args.sandbox_urls:  # a batch's sandboxes start side by side (TRL resets its environments in turn)
        return partial(TerminusEnvironment if terminus else TaskEnvironment, args.limits(), stats,
                       background_start=True)
    servers = EpisodeServers(args.sandbox_urls, auth_token=args.sandbox_auth_token,
                             start_timeout=args.sandbox_start_timeout, retries=args.sandbox_retries)
    return partial(RemoteTerminusEnvironment if terminus else RemoteTaskEnvironment, servers, args.limits(), stats)


def task_tests_reward(stats: EpisodeStats):
    """The reward function: each rollout's episode verified by its task's tests; None (not scored: kept out of the
    group's mean and std, advantage 0) for an infrastructure failure. Logs the episode counts as it goes, the pass
    rate of this call's episodes, overall and per generated task family (`episodes/pass_rate/<family>`), and the
    distribution (p50, p90, max) of the sandbox start and verify seconds of this call's episodes: TRL calls it once
    per generation batch, and averages what it logs over ranks and the logging step. `task_tests.by_family` holds
    the run's {family: {"scored", "passed"}} (the summary's)."""
    starts_seen = [0]  # stats.start_seconds of the episodes scored by earlier calls
    by_family: dict[str, dict[str, int]] = {}

    def task_tests(environments, log_metric=None, task_dir=None, **kwargs):
        verifies_seen = len(stats.verify_seconds)
        # the batch's episodes verified side by side: each runs its tests in its own sandbox
        with ThreadPoolExecutor(max_workers=max(1, min(len(environments), VERIFY_WORKERS)),
                                thread_name_prefix="verify") as pool:
            rewards = list(pool.map(episode_reward, environments))
        starts, verifies = stats.start_seconds[starts_seen[0]:], stats.verify_seconds[verifies_seen:]
        starts_seen[0] += len(starts)
        batch: dict[str, list[float]] = {}
        for reward, task in zip(rewards, task_dir or []):
            family = TaskFolder.of(task).family if task else None
            if reward is not None and family is not None:
                batch.setdefault(family, []).append(reward)
        for family, scored in batch.items():
            counts = by_family.setdefault(family, {"scored": 0, "passed": 0})
            counts["scored"] += len(scored)
            counts["passed"] += sum(passed(r) for r in scored)
        if log_metric is not None:
            scored = [r for r in rewards if r is not None]
            if scored:
                log_metric("episodes/pass_rate", sum(passed(r) for r in scored) / len(scored))
            for family, family_scored in sorted(batch.items()):
                log_metric(f"episodes/pass_rate/{family}", sum(passed(r) for r in family_scored) / len(family_scored))
            log_metric("episodes/masked", float(len(rewards) - len(scored)))
            totals = stats.as_dict()
            for kind, count in totals["masked_by_kind"].items():
                log_metric(f"episodes/masked_total/{kind}", float(count))
            for kind in TAMPER_KINDS:  # every kind at every step, so the charts have no gaps
                log_metric(f"episodes/tampered_total/{kind}", float(totals["tampered_by_kind"].get(kind, 0)))
            log_metric("episodes/tool_errors_total", float(totals["tool_errors"]))
            if totals["sandbox_start_seconds_mean"] is not None:
                log_metric("episodes/sandbox_start_seconds", totals["sandbox_start_seconds_mean"])
            for name, values in (("sandbox_start_seconds", starts), ("verify_seconds", verifies)):
                if values:
                    ordered = sorted(values)
                    log_metric(f"episodes/{name}_p50", percentile(ordered, 50))
                    log_metric(f"episodes/{name}_p90", percentile(ordered, 90))
                    log_metric(f"episodes/{name}_max", ordered[-1])
        return rewards

    task_tests.by_family = by_family
    return task_tests


def episode_transcript(messages) -> str:
    """An episode's messages (TRL's completion: assistant turns, their bash calls, the tool's output) as text, one
    line per turn: what the completions table logs. W&B's table refuses TRL's message lists once some turns carry
    tool_calls and others do not (mixed types in one column), and the run would stop at its first log."""
    if isinstance(messages, str):
        return messages
    lines = []
    for message in messages or []:
        role = message.get("role", "?")
        if message.get("content"):
            lines.append(f"[{role}] {message['content']}")
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            arguments = function.get("arguments")
            if isinstance(arguments, dict) and set(arguments) == {"command"}:
                arguments = arguments["command"]
            elif not isinstance(arguments, str):
                arguments = json.dumps(arguments)
            lines.append(f"[{role} -> {function.get('name', '?')}] {arguments}")
    return "\n".join(lines)



def main(argv: list[str] | None = None) -> int:
    """`python -m trainers.agentic prepare CONFIG`: generate the config's train tasks as the trainer would and print
    their folders, one a line (the agentic launcher serves them from episode servers before the run starts)."""
    import argparse
    import sys

    import yaml

    parser = argparse.ArgumentParser(prog="python -m trainers.agentic", description=main.__doc__)
    parser.add_argument("command", choices=["prepare"])
    parser.add_argument("config")
    args = parser.parse_args(argv)
    keys = ("task_dirs", "generate_seed", "generate_n", "generate_families")
    try:
        config = yaml.safe_load(Path(args.config).read_text()) or {}
        task_args = AgenticTaskArguments(**{k: config[k] for k in keys if k in config})
        tasks = prepare_tasks(task_args)
    except (OSError, yaml.YAMLError, ConfigError, ValueError) as err:
        print(f"error: {args.config}: {err}", file=sys.stderr)
        return 2
    print(f"{len(tasks)} tasks under {', '.join(task_args.task_dirs)}", file=sys.stderr)
    print("\n".join(task_args.task_dirs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
