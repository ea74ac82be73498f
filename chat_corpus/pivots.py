"""Terminal-pivot rows (Nemotron-RL-Agentic-Terminal-Pivot-v1, NeMo Gym terminus_judge) from Harbor Terminus-2 jobs.
Runs in: the training venv (openapi-schema-validator); `python -m trainers.data pivots` calls `build_pivots`.

One row per valid action of a passing trajectory: the conversation as Terminus-2 sent it up to that turn, and the
action as `expected_answer`. What each Harbor record holds, the rules and the counts:
docs/formats.md#pivot-rows-from-harbor-jobs.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from chat_corpus.harbor_trajectory import content_text, observation_text, terminus_action
from chat_corpus.mixture import split_by_group
from common.errors import CorpusError
from common.terminus_actions import MAX_SIMILARITY_CHARS, answer_text, json_object, keystrokes, schema_errors
from harbor_tasks.verdict import INFRA_FAILURE, SCORED, read_tamper_dir, trial_verdict

HARNESS = "terminus_2"
TERMINUS_2 = ("terminus-2", "terminus_2")  # the trajectory's agent.name
DEFAULT_AGENT_NAME = "terminus_judge_string_only_simple_agent"  # NVIDIA's name for the pivot set's reward (string-only)
# the reward environments a row can name, and the agent_ref name each gets by default
ENVIRONMENT_AGENT_NAMES = {"terminus_judge": DEFAULT_AGENT_NAME,
                           "terminus_functional": "terminus_functional_simple_agent"}
MAX_PER_TASK = 5
MAX_KEYSTROKE_CHARS = MAX_SIMILARITY_CHARS  # longer actions would be scored on a prefix of their keystrokes
# Terminus-2's question after a first task_complete; the turn that answers it is not a decision worth a row
CONFIRMATION = "Are you sure you want to mark the task as complete?"
PARSE_ERROR = "Previous response had parsing errors:"  # Terminus-2's reply to a response it could not parse
# What the collection machinery, not the task, put on the screen: Harbor's log folders in the sandbox, asciinema's
# recorder, tmux errors and Terminus's own plumbing (each a regular expression; --infra_pattern adds more)
INFRA_PATTERNS = (
    r"/logs/(?:agent|verifier|artifacts)\b",       # Harbor's EnvironmentPaths (the recording, the verifier's files)
    r"\basciinema(?::| rec\b)|get-asciinema-timestamp",  # the terminal recorder's messages and helper
    r"; tmux wait -S done",                         # Terminus's completion marker for blocking commands
    r"/tmp/\.runtime-tmux-paste-",                  # Harbor's staging file for long keystrokes
    r"no server running on /tmp/tmux-|error connecting to /tmp/tmux-|can't find (?:session|pane|window)\b",
)
# each row is counted under the first of these rules that drops it, in this order
ROW_RULES = ("context_summarized", "invalid_action", "confirmation", "infra_observation", "long_keystrokes",
             "repeated_prompt")
TRAJECTORY_RULES = ("other_agent", "xml_parser", "invalid_trajectory", "infra_failure", "no_reward",
                    "below_min_reward", "tampered", "no_task_folder", "over_task_cap")


@dataclass
class PivotOptions:
    min_reward: float = 1.0
    max_per_task: int = MAX_PER_TASK  # 0: no cap
    max_keystroke_chars: int = MAX_KEYSTROKE_CHARS
    infra_patterns: tuple[str, ...] = ()  # added to INFRA_PATTERNS
    agent_name: str | None = None  # None: the environment's (ENVIRONMENT_AGENT_NAMES)
    val_fraction: float = 0.0
    seed: int = 0
    skip_invalid: bool = False
    threshold: float | None = None  # the rows' `threshold` (the similarity terminus_judge requires); None: none
    environment: str = "terminus_judge"  # terminus_functional: rows carry their task and the teacher's keystrokes


@dataclass
class Turn:
    prompt: str  # the user turn Terminus-2 sent
    response: str  # the assistant turn as it stayed in Terminus-2's chat


@dataclass
class Trajectory:
    trial_dir: Path
    uid: str
    task: str
    trial_name: str
    run_id: str
    turns: list[Turn]
    turns_from: str  # the Harbor record the turns were read from (TURN_RECORDS)
    cut: int  # turns past it followed a context summarization (the chat was rebuilt; no record of it)
    host_paths: list[str] = field(default_factory=list)
    task_dir: str | None = None  # the task folder the trial ran (its config), where it is on this machine


TURN_RECORDS = ("all_messages", "episode_files", "trajectory_raw", "trajectory_rebuilt")


@dataclass
class PivotReport:
    jobs: list[str]
    trials: int = 0
    kept_trajectories: int = 0
    dropped_trajectories: Counter = field(default_factory=Counter)
    turns_from: Counter = field(default_factory=Counter)
    turns: int = 0
    rows: int = 0
    dropped_rows: Counter = field(default_factory=Counter)
    tasks: int = 0
    train_rows: int = 0
    val_rows: int = 0
    train_trajectories: int = 0
    val_trajectories: int = 0
    files: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"jobs": self.jobs, "trials": self.trials,
                "trajectories": {"kept": self.kept_trajectories,
                                 "dropped": {rule: self.dropped_trajectories[rule] for rule in TRAJECTORY_RULES},
                                 "turns_from": {record: self.turns_from[record] for record in TURN_RECORDS}},
                "rows": {"turns": self.turns, "written": self.rows, "tasks": self.tasks,
                         "dropped": {rule: self.dropped_rows[rule] for rule in ROW_RULES},
                         "train": self.train_rows, "val": self.val_rows,
                         "train_trajectories": self.train_trajectories, "val_trajectories": self.val_trajectories},
                "files": self.files, "options": self.options}


class _Drop(Exception):
    def __init__(self, reason: str):
        self.reason = reason


def _read_json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def find_trials(path: str | Path) -> list[Path]:
    """The trial folders (`<trial>/agent/trajectory.json`) under a job folder, a folder of jobs, or a trial."""
    root = Path(path)
    if not root.is_dir():
        raise CorpusError(f"{root}: no such directory; --jobs takes Harbor job directories (jobs/<job>/ with "
                          "<trial>/agent/trajectory.json in it)")
    trials = sorted({file.parent.parent for file in root.rglob("agent/trajectory.json")})
    if not trials:
        raise CorpusError(f"{root}: no Harbor trials under it (no <trial>/agent/trajectory.json); pass a job "
                          "directory that `harbor run`, `python -m eval.run` or `python -m eval.scripted_teacher "
                          "--collect` wrote")
    return trials


FIX = "re-run or delete the trial, or pass --skip_invalid to leave such trials out (counted)"


def _trajectory_file(path: Path) -> dict:
    """A trial's trajectory.json as a JSON object (CorpusError naming the path and what is wrong)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise CorpusError(f"{path}: not valid UTF-8; {FIX}") from None
    except json.JSONDecodeError as err:
        raise CorpusError(f"{path}: invalid JSON ({err.msg}, line {err.lineno} column {err.colno}); {FIX}") from None
    except OSError as err:
        raise CorpusError(f"{path}: cannot read it ({err.strerror}); {FIX}") from None
    if not isinstance(data, dict):
        raise CorpusError(f"{path}: the top level is a {type(data).__name__}, not an ATIF trajectory object; {FIX}")
    return data


def _atif_problem(data: dict) -> str | None:
    """What keeps a trajectory from being read as Terminus-2's steps, or None."""
    steps = data.get("steps")
    if not isinstance(steps, list) or not steps:
        return "no 'steps' list"
    for index, step in enumerate(steps):
        if not isinstance(step, dict) or step.get("source") not in ("system", "user", "agent"):
            return f"steps[{index}] is not a step with source system, user or agent"
        if not isinstance(step.get("message", ""), (str, list)):
            return f"steps[{index}].message is neither text nor content parts"
        calls, observation = step.get("tool_calls") or [], step.get("observation") or {}
        if not isinstance(calls, list) or not all(isinstance(c, dict) and isinstance(c.get("arguments") or {}, dict)
                                                  for c in calls):
            return f"steps[{index}].tool_calls is not a list of calls with object arguments"
        if not isinstance(observation, dict) or not isinstance(observation.get("results") or [], list) or \
                not all(isinstance(r, dict) for r in observation.get("results") or []):
            return f"steps[{index}].observation is not an object with a list of results"
    if steps[0].get("source") != "user":
        return "steps[0] is not the user step with Terminus-2's prompt"
    return None


def _linear_steps(steps: list[dict]) -> tuple[list[dict], int]:
    """The agent steps of the main chat, and how many of them precede the first context summarization (a system or
    user step after the prompt, or a step copied from an earlier chat): Terminus-2 rebuilt its chat there."""
    agents, cut = [], None
    for step in steps[1:]:
        if step["source"] != "agent" or step.get("is_copied_context"):
            cut = len(agents) if cut is None else cut
            if step["source"] != "agent":
                continue
        agents.append(step)
    return agents, len(agents) if cut is None else cut


def _sent_response(step: dict) -> tuple[str, bool]:
    """(the assistant turn as it stayed in Terminus-2's chat, whether the trajectory kept it raw): raw in
    raw_content mode and for a response that failed to parse; otherwise Harbor kept only the parsed action (an
    `Analysis:/Plan:` message and tool calls), rebuilt here."""
    message = content_text(step.get("message"))
    parsed = bool(step.get("tool_calls")) or not message or message.startswith(("Analysis:", "Plan:"))
    if parsed and not observation_text(step).startswith(PARSE_ERROR):
        return terminus_action(step), False
    return message, True


def _messages_turns(messages) -> list[Turn] | None:
    """Turns from Terminus-2's chat as Harbor stored it (`store_all_messages`): user and assistant alternating."""
    if not isinstance(messages, list) or not messages or len(messages) % 2:
        return None
    turns = []
    for user, assistant in zip(messages[::2], messages[1::2]):
        if not (isinstance(user, dict) and isinstance(assistant, dict) and user.get("role") == "user"
                and assistant.get("role") == "assistant" and isinstance(user.get("content"), str)
                and isinstance(assistant.get("content"), str)):
            return None
        turns.append(Turn(user["content"], assistant["content"]))
    return turns


def _episode_turns(agent_dir: Path, n: int) -> list[Turn] | None:
    """Turns from the per-episode files older Harbor versions wrote (`agent/episode-N/prompt.txt`, `response.txt`)."""
    turns = []
    for index in range(n):
        folder = agent_dir / f"episode-{index}"
        try:
            turns.append(Turn((folder / "prompt.txt").read_text(encoding="utf-8"),
                              (folder / "response.txt").read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError):
            return None
    return turns if turns and not (agent_dir / f"episode-{n}").exists() else None


def _host_paths(trial_dir: Path, result: dict) -> list[str]:
    """The collecting machine's own folders (the job's, the task's) as they may show on a screen: a sandbox leak."""
    paths = {str(trial_dir.resolve().parent), str(trial_dir.parent)}
    uri = result.get("trial_uri")
    if isinstance(uri, str) and uri.startswith("file://"):
        paths.add(str(Path(unquote(urlparse(uri).path)).parent))
    config_task = (result.get("config") or {}).get("task") or {}
    for task in ((result.get("task_id") or {}).get("path"), config_task.get("path")):
        if isinstance(task, str):
            paths.add(task)
    return sorted(p for p in paths if p.startswith("/") and len(Path(p).parts) > 2)


def read_trajectory(trial_dir: Path, options: PivotOptions) -> Trajectory:
    """A trial as a Trajectory, or _Drop(reason) when the trial gives no rows (TRAJECTORY_RULES)."""
    path = trial_dir / "agent" / "trajectory.json"
    try:
        data = _trajectory_file(path)
        agent = data.get("agent") if isinstance(data.get("agent"), dict) else {}
        if str(agent.get("name", "")).lower() not in TERMINUS_2:
            raise _Drop("other_agent")
        if (agent.get("extra") or {}).get("parser", "json") != "json":
            raise _Drop("xml_parser")
        problem = _atif_problem(data)
        if problem:
            raise CorpusError(f"{path}: not a Terminus-2 trajectory as Harbor writes it ({problem}); {FIX}")
    except CorpusError:
        if not options.skip_invalid:
            raise
        raise _Drop("invalid_trajectory") from None
    result = _read_json(trial_dir / "result.json") or {}
    verdict = trial_verdict(result)
    if verdict.outcome == INFRA_FAILURE:
        raise _Drop("infra_failure")
    reward = verdict.reward if verdict.outcome == SCORED else verdict.score  # as rejection sampling reads it
    if reward is None:
        raise _Drop("no_reward")
    if reward < options.min_reward:
        raise _Drop("below_min_reward")
    if read_tamper_dir(trial_dir / "verifier"):
        raise _Drop("tampered")

    steps = data["steps"]
    agents, cut = _linear_steps(steps)
    metadata = ((result.get("agent_result") or {}).get("metadata") or {})
    turns, turns_from = None, None
    if cut == len(agents) and not metadata.get("summarization_count"):
        turns, turns_from = _messages_turns(metadata.get("all_messages")), "all_messages"
        if turns is None:
            turns, turns_from = _episode_turns(trial_dir / "agent", len(agents)), "episode_files"
        if turns is not None:
            cut = len(turns)
    if turns is None:
        prompts = [content_text(steps[0].get("message"))] + [observation_text(step) for step in agents]
        sent = [_sent_response(step) for step in agents]
        turns = [Turn(prompt, text) for prompt, (text, _) in zip(prompts, sent)]
        turns_from = "trajectory_raw" if all(raw for _, raw in sent) else "trajectory_rebuilt"
    name = result.get("trial_name") or trial_dir.name
    task_dir = ((result.get("config") or {}).get("task") or {}).get("path")
    if options.environment == "terminus_functional":
        if not isinstance(task_dir, str) or not (Path(task_dir) / "tests" / "test.sh").is_file():
            raise _Drop("no_task_folder")  # its functional reward rebuilds the task: the folder must be here
        task_dir = str(Path(task_dir).resolve())
    return Trajectory(
        trial_dir=trial_dir, uid=str(result.get("id") or data.get("session_id") or name),
        task=str(result.get("task_name") or trial_dir.name.split("__")[0]), trial_name=str(name),
        run_id=str((result.get("config") or {}).get("job_id") or trial_dir.parent.name),
        turns=turns, turns_from=turns_from, cut=cut, host_paths=_host_paths(trial_dir, result),
        task_dir=task_dir if isinstance(task_dir, str) else None)


def parse_action(text: str) -> tuple[str, dict] | None:
    """(the action text, the action) of a response the terminus_judge reward accepts as a Terminus-2 action: the text
    after the last `</think>`, stripped, strict JSON of an object that passes the schema; else None."""
    text = answer_text(text)
    action = json_object(text)
    if action is None or schema_errors(action, HARNESS) is not None:
        return None
    return text, action


def _rank(uid: str, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{uid}".encode()).hexdigest()


class _Rows:
    """The row rules applied to trajectories in order; the inputs of the rows written so far (repeated prompts)."""

    def __init__(self, options: PivotOptions, report: PivotReport):
        self.options, self.report = options, report
        self.patterns = [re.compile(p) for p in (*INFRA_PATTERNS, *options.infra_patterns)]
        self.seen: set[str] = set()

    def _infra(self, text: str, host_paths: list[str]) -> bool:
        return any(p.search(text) for p in self.patterns) or any(path in text for path in host_paths)

    def of(self, trajectory: Trajectory) -> list[dict]:
        rows, leaked = [], False
        messages: list[dict] = []
        # every turn's keystrokes, as the terminal received them (an invalid action typed nothing)
        typed = [keystrokes(parsed[1]) if (parsed := parse_action(turn.response)) else [] for turn in trajectory.turns]
        for index, turn in enumerate(trajectory.turns):
            messages.append({"role": "user", "content": turn.prompt})
            leaked = leaked or self._infra(turn.prompt, trajectory.host_paths)
            self.report.turns += 1
            rule, row = self._rule(trajectory, index, turn, messages, leaked)
            if rule:
                self.report.dropped_rows[rule] += 1
            else:
                if self.options.environment == "terminus_functional":
                    row["metadata"].update(task_dir=trajectory.task_dir,
                                           prefix_keystrokes=[k for keys in typed[:index] for k in keys],
                                           remaining_keystrokes=[k for keys in typed[index + 1:] for k in keys])
                rows.append(row)
            messages.append({"role": "assistant", "content": turn.response})
        return rows

    def _rule(self, trajectory: Trajectory, index: int, turn: Turn, messages: list[dict], leaked: bool):
        if index >= trajectory.cut:
            return "context_summarized", None
        parsed = parse_action(turn.response)
        if parsed is None:
            return "invalid_action", None
        if CONFIRMATION in turn.prompt and turn.prompt.startswith("Current terminal state:"):
            return "confirmation", None
        if leaked:
            return "infra_observation", None
        text, action = parsed
        lens = [len(k) for k in keystrokes(action)]
        if sum(lens) > self.options.max_keystroke_chars:
            return "long_keystrokes", None
        key = hashlib.sha256(json.dumps(messages, ensure_ascii=False).encode()).hexdigest()
        if key in self.seen:
            return "repeated_prompt", None
        self.seen.add(key)
        return None, {
            "responses_create_params": {"input": [dict(m) for m in messages]},
            "expected_answer": text,
            "uuid": f"{trajectory.uid}-{index + 1}",
            "metadata": {"harness": HARNESS, "category": "first_round" if len(messages) == 1 else "others",
                         "source_trajectory_uid": trajectory.uid, "pivot_agent_turn_index": index,
                         "task": trajectory.task, "run_id": trajectory.run_id, "trial_name": trajectory.trial_name,
                         "episode": f"episode-{index}", "num_commands": len(action["commands"]),
                         "keystroke_lens": lens, "total_keystroke_len": sum(lens),
                         "task_complete": bool(action.get("task_complete", False)),
                         "turns_from": trajectory.turns_from},
            "agent_ref": {"type": "responses_api_agents",
                          "name": self.options.agent_name or ENVIRONMENT_AGENT_NAMES[self.options.environment]},
            **({"threshold": self.options.threshold} if self.options.threshold is not None else {}),
        }


def val_path(out: str | Path) -> Path:
    """Where the validation rows of `out` go: F.jsonl -> F.val.jsonl."""
    out = Path(out)
    return out.with_name(out.name.removesuffix(".jsonl") + ".val.jsonl")


def build_pivots(jobs: list[str], options: PivotOptions) -> tuple[list[dict], list[dict], PivotReport]:
    """(train rows, val rows, report) from the Terminus-2 trials under `jobs`; CorpusError for what a user fixes."""
    report = PivotReport(jobs=[str(job) for job in jobs], options=dict(vars(options),
                         infra_patterns=[*INFRA_PATTERNS, *options.infra_patterns]))
    trials = [trial for job in jobs for trial in find_trials(job)]
    report.trials = len(trials)
    eligible: dict[str, list[Trajectory]] = {}
    for trial in trials:
        try:
            trajectory = read_trajectory(trial, options)
        except _Drop as drop:
            report.dropped_trajectories[drop.reason] += 1
            continue
        eligible.setdefault(trajectory.task, []).append(trajectory)
    if report.dropped_trajectories["other_agent"] == len(trials):
        raise CorpusError(f"{', '.join(report.jobs)}: {len(trials)} trial(s), none by Terminus-2; pivot rows are "
                          "Terminus-2 JSON actions: collect with --agent terminus-2 (eval.run, eval.scripted_teacher)")
    chosen = []
    for group in eligible.values():
        group.sort(key=lambda t: _rank(t.uid, options.seed))
        keep = group[:options.max_per_task] if options.max_per_task else group
        report.dropped_trajectories["over_task_cap"] += len(group) - len(keep)
        chosen += keep
    if not chosen:
        reasons = ", ".join(f"{rule} {n}" for rule, n in report.dropped_trajectories.items() if n)
        raise CorpusError(f"{', '.join(report.jobs)}: no trajectory to build rows from ({len(trials)} trials: "
                          f"{reasons}); --min_reward {options.min_reward} keeps the trials whose verifier reward is "
                          "at least it")
    chosen.sort(key=lambda t: str(t.trial_dir))
    report.kept_trajectories = len(chosen)
    rows = _Rows(options, report)
    records = []
    for trajectory in chosen:
        report.turns_from[trajectory.turns_from] += 1
        records += [{"group": trajectory.uid, "row": row} for row in rows.of(trajectory)]
    train, val = split_by_group(records, options.val_fraction, options.seed)
    report.rows, report.train_rows, report.val_rows = len(records), len(train), len(val)
    report.tasks = len({r["row"]["metadata"]["task"] for r in records})
    report.train_trajectories = len({r["group"] for r in train})
    report.val_trajectories = len({r["group"] for r in val})
    return [r["row"] for r in train], [r["row"] for r in val], report


def write_rows(path: str | Path, rows: list[dict]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with open(partial, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    partial.replace(path)


def summary_lines(report: PivotReport) -> list[str]:
    """The summary `python -m trainers.data pivots` prints."""
    d = report.as_dict()
    o = report.options
    trajectories = ", ".join(f"{rule} {n}" for rule, n in d["trajectories"]["dropped"].items() if n) or "none"
    sources = ", ".join(f"{record} {n}" for record, n in d["trajectories"]["turns_from"].items() if n)
    rules = ", ".join(f"{rule} {n}" for rule, n in d["rows"]["dropped"].items())
    lines = [f"pivots: {report.trials} trials read from {len(report.jobs)} path(s); {report.kept_trajectories} "
             f"trajectories kept (min_reward {o['min_reward']}, at most {o['max_per_task'] or 'all'} per task), "
             f"dropped: {trajectories}",
             f"  turns read from: {sources}",
             f"  rows: {report.turns} agent turns -> {report.rows} rows of {report.tasks} tasks; dropped: {rules} "
             f"(max_keystroke_chars {o['max_keystroke_chars']})",
             f"  train: {report.train_rows} rows ({report.train_trajectories} trajectories) -> "
             f"{report.files.get('train')}"]
    if report.files.get("val"):
        lines.append(f"  val:   {report.val_rows} rows ({report.val_trajectories} trajectories, val_fraction "
                     f"{o['val_fraction']}) -> {report.files['val']}")
    return lines
