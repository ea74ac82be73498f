"""Preflight: for each task of a suite, whether it can run under the chosen environment, and why not, before any trial.
Runs in: the training venv (standard library only), in `python -m eval.run --suite DIR --dry_run [--env ...]`.

Verdicts: `runs`, `differs` (it runs, but not as its image would) or `cannot` (it would end in an infrastructure
failure), each with the reason. It reads the task folders without running anything; its shell reading is a
heuristic, and run-time checks in the local sandbox name what it misses. Rules: docs/evaluation.md, "Preflight".
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from harbor_tasks.folder import TaskFolder, TaskFolderError, read_config, task_folders
from harbor_tasks.verdict import VERIFIER_TOOLS
from sandbox import EnvironmentBuildError, dockerfile
from sandbox.core import DEFAULT_PATH
from sandbox.images import ImageStore, load_images_file
from sandbox.users import ROOT_SPECS

RUNS, DIFFERS, CANNOT = "runs", "differs", "cannot"
# commands that download when they run (the first word, and what must follow it)
NETWORK_COMMANDS = re.compile(
    r"(?:^|[\s;&|(`])(?:sudo\s+)?("
    r"curl\b|wget\b|apt-get\s+(?:-\S+\s+)*(?:update|install|upgrade|dist-upgrade)\b|apt\s+(?:update|install)\b|"
    r"apk\s+add\b|(?:dnf|yum|microdnf)\s+install\b|"
    r"(?:python3?\s+-m\s+)?pip3?\s+install\b(?!.*--no-index)|uv\s+(?:pip\s+install|sync|add|tool\s+install)\b|"
    r"uv\s+run\s+.*--with\b|uvx\b|npm\s+(?:install|ci|i)\b|npx\b|yarn\b|pnpm\s+(?:install|add)\b|bun\s+install\b|"
    r"git\s+clone\s+(?:\S+\s+)*(?:https?://|git://|ssh://|git@)|go\s+(?:get|install|mod\s+download)\b|"
    r"cargo\s+(?:install|fetch)\b|gem\s+install\b|conda\s+install\b)")
BUILTINS = frozenset("""cd echo printf export source . set unset test [ [[ ]] true false exit return local read shift
trap wait eval alias type hash ulimit umask pwd declare typeset let readonly getopts exec command builtin break
continue : mapfile readarray pushd popd dirs kill jobs fg bg disown times shopt enable caller compgen complete
if then else elif fi for in do done while until case esac function select time ! { } coproc""".split())
WRAPPERS = frozenset(("sudo", "nohup", "exec", "command", "env", "time", "xargs", "nice", "stdbuf"))
HARBOR_ENV_NEEDS = {  # what Harbor's own environments need on this host
    "docker": ("docker", None), "podman": ("podman", None), "daytona": (None, "DAYTONA_API_KEY"),
    "e2b": (None, "E2B_API_KEY"), "runloop": (None, "RUNLOOP_API_KEY"), "modal": (None, "MODAL_TOKEN_ID"),
}
COMPOSE_ENVS = ("docker", "daytona")


@dataclass
class TaskCheck:
    task: str
    verdict: str = RUNS
    userland: str = ""
    reasons: list[str] = field(default_factory=list)   # why it cannot run
    notes: list[str] = field(default_factory=list)     # how it differs, or what it needs

    def cannot(self, reason: str) -> None:
        self.verdict = CANNOT
        self.reasons.append(reason)

    def differs(self, note: str) -> None:
        if self.verdict == RUNS:
            self.verdict = DIFFERS
        self.notes.append(note)

    def as_dict(self) -> dict:
        return {"task": self.task, "verdict": self.verdict, "userland": self.userland, "reasons": self.reasons,
                "notes": self.notes}


# ---------------------------------------------------------------- reading shell

def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, line) with continuations joined, comments and heredoc bodies left out."""
    out, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        start, line = i + 1, lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i]
        i += 1
        heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if heredoc:
            end = heredoc.group(1)
            while i < len(lines) and lines[i].strip() != end:
                i += 1
            i += 1
        stripped = re.sub(r"(^|\s)#.*$", "", line).strip()
        if stripped and not stripped.startswith("#!"):
            out.append((start, stripped))
    return out


def network_lines(text: str) -> list[tuple[int, str]]:
    """The lines of a script (or RUN commands) that download: (line number, line)."""
    return [(n, line) for n, line in _logical_lines(text) if NETWORK_COMMANDS.search(line)]


def commands(text: str) -> list[str]:
    """The programs a script calls (first words of its simple commands; builtins, keywords, paths, variables,
    assignments and the script's own functions left out), in order, each once."""
    found: list[str] = []
    functions = set(re.findall(r"(?m)^\s*(?:function\s+)?([\w.-]+)\s*\(\)", text))
    for _, line in _logical_lines(text):
        try:
            lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            tokens = list(lexer)
        except ValueError:
            continue
        at_start, skip_next = True, False
        for tok in tokens:
            if skip_next:
                skip_next = False
                continue
            if tok in (";", "&&", "||", "|", "&", "(", ")", ";;", "|&") or tok in ("then", "do", "else", "elif",
                                                                                  "if", "while", "until", "!"):
                at_start = True
                continue
            if tok.startswith((">", "<")) or re.fullmatch(r"\d*[<>]&?\d*", tok):
                skip_next = not re.search(r"&\d", tok)
                continue
            if not at_start:
                continue
            if re.fullmatch(r"[A-Za-z_]\w*=.*", tok):
                continue  # an assignment before the command
            if tok in WRAPPERS:
                continue  # the wrapped command is next
            at_start = False
            if tok in BUILTINS or tok in functions or tok.startswith(("$", "-", "/", ".", "~", "{", "}")) or "/" in tok:
                continue
            if re.fullmatch(r"[\w.+-]+", tok) and tok not in found:
                found.append(tok)
    return found


def missing_commands(names: list[str], path: str = DEFAULT_PATH) -> list[str]:
    return [n for n in names if shutil.which(n, path=path) is None]


# ---------------------------------------------------------------- tasks

def task_dirs(suite_dir: Path) -> list[Path]:
    return task_folders(suite_dir)


def parse_env_kwargs(text: str | None) -> dict[str, str]:
    """`network=pasta images=FILE` -> {"network": "pasta", "images": "FILE"}; ValueError naming a bad word."""
    out = {}
    for word in shlex.split(text or ""):
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ValueError(f"--env_kwargs: {word!r} is not key=value (e.g. --env_kwargs \"network=pasta\")")
        out[key] = value
    return out


def check_task(task_dir: Path, env: str, env_kwargs: dict[str, str], store: ImageStore | None) -> TaskCheck:
    check = TaskCheck(task_dir.name)
    try:
        read_config(task_dir)
    except TaskFolderError as err:
        check.cannot(f"task.toml unreadable: {err}")
        return check
    task = TaskFolder.of(task_dir)
    image = task.docker_image
    allow_internet = task.allow_internet  # Harbor's rule: network_mode (public by default), else allow_internet
    df = task_dir / "environment" / "Dockerfile"
    compose = (task_dir / "environment" / "docker-compose.yaml").is_file() and not df.is_file()
    try:
        build = dockerfile.plan(df, task.build_args)
    except EnvironmentBuildError as err:  # a Dockerfile mistake (named by line), no regular file, or a giant
        check.cannot(str(err))
        return check
    base = build.base
    if env != "local":
        return _check_harbor_env(check, env, compose, image, df)
    if compose:
        check.cannot("multi-container (environment/docker-compose.yaml): needs --env docker or daytona")
        return check

    network = env_kwargs.get("network", "none")
    has_network = network in ("pasta", "slirp4netns") and allow_internet
    why_offline = ("the task does not allow internet" if not allow_internet
                   else "the sandbox has no network; --env_kwargs network=pasta gives it one")
    own_image = False
    if store is not None:
        if store.has(image):
            check.userland, own_image = f"image {image}", True
        elif store.has(base):
            check.userland = f"image {base} + the Dockerfile replayed"
        elif store.pull and (image or base):
            check.userland, own_image = f"image {image or base} (pulled with skopeo)", bool(image)
        else:
            check.cannot(f"no image for {image or base or 'this task'} in the images file")
            check.userland = "none"
    else:
        check.userland = "host userland" + (" + the Dockerfile replayed" if df.is_file() else "")
        if image or base:
            check.differs(f"the host userland stands in for {image or base}")

    # the build (replayed unless the task's own image is the root file system)
    if df.is_file() and not own_image:
        _check_replay(check, build, env_kwargs)
        runs = "\n".join(rest for op, rest in dockerfile.parse(df) if op == "RUN")
        downloads = network_lines(runs)
        if downloads and not has_network:
            check.cannot(f"needs network at build: RUN {downloads[0][1][:120]} ({why_offline})")
        elif store is None:
            lacking = missing_commands(commands(runs))
            if lacking and not downloads:
                check.cannot(f"the build calls {', '.join(lacking)}, not in the host userland")
    # the verifier
    for script in task.test_scripts():
        rel = script.relative_to(task_dir)
        try:
            text = task.read_text(rel.as_posix())
        except TaskFolderError as err:
            check.cannot(str(err))
            continue
        downloads = network_lines(text)
        if downloads and not has_network:
            n, line = downloads[0]
            check.cannot(f"needs network at test time: {rel}:{n} {line[:120]} ({why_offline})")
        if store is None:
            lacking = missing_commands(commands(text))
            # a tool called only after the first download may be what it installs (uv after curl | sh)
            before = missing_commands(commands("\n".join(
                line for n, line in _logical_lines(text) if not downloads or n <= downloads[0][0])))
            tools = [c for c in lacking if c in VERIFIER_TOOLS and c in before]
            if tools:
                check.cannot(f"its verifier's tools are missing from the host userland: {', '.join(tools)} "
                             f"({rel})")
            others = [c for c in lacking if c not in VERIFIER_TOOLS]
            if others:
                check.differs(f"{rel} calls {', '.join(others)}, not on the sandbox's PATH (installed by the task?)")
    if has_network:
        check.notes.append(f"network by {network}")
    return check


def _check_replay(check: TaskCheck, build: dockerfile.Build, env_kwargs: dict[str, str]) -> None:
    """What of the Dockerfile the sandbox does not obey, by line; build_args no ARG declares."""
    for item in build.not_obeyed:
        check.differs(f"environment/{item}")
    mode = env_kwargs.get("mode", "auto")
    if mode == "userns" or (mode == "auto" and os.geteuid() != 0):
        for step in build.steps:
            if step.op == "USER" and step.args[0] not in ROOT_SPECS:
                check.differs(f"environment/Dockerfile:{step.line}: USER {step.args[0]}: runs as root (as an ordinary "
                              "user the sandbox maps only root; as root it runs as that user)")
    if build.unused_args:
        check.notes.append(f"build_args {', '.join(build.unused_args)}: no ARG of the Dockerfile declares them")


def _check_harbor_env(check: TaskCheck, env: str, compose: bool, image: str | None, df: Path) -> TaskCheck:
    check.userland = f"Harbor's {env}: " + (f"image {image}" if image else "the Dockerfile built" if df.is_file()
                                             else "no image")
    if compose and env not in COMPOSE_ENVS:
        check.cannot(f"multi-container (docker-compose.yaml): Harbor runs those on {' or '.join(COMPOSE_ENVS)}")
    program, credential = HARBOR_ENV_NEEDS.get(env.split(":")[0], (None, None))
    if program and not shutil.which(program):
        check.cannot(f"{program} is not installed on this host")
    elif program == "docker" and not (os.environ.get("DOCKER_HOST") or Path("/var/run/docker.sock").exists()):
        check.cannot("no Docker engine here (no /var/run/docker.sock, DOCKER_HOST unset)")
    if credential and not os.environ.get(credential):
        check.cannot(f"${credential} is not set")
    if env not in HARBOR_ENV_NEEDS:
        check.notes.append("not checked: this environment's needs are Harbor's")
    return check


def preflight(suite_dir: str | Path, env: str = "local", env_kwargs: str | None = None) -> dict:
    """{"suite", "env", "env_kwargs", "tasks": [TaskCheck.as_dict()], "counts": {verdict: n}} (ValueError: bad options)."""
    suite_dir = Path(suite_dir)
    kwargs = parse_env_kwargs(env_kwargs)
    store = None
    if env == "local" and (kwargs.get("images") or kwargs.get("pull", "").lower() in ("1", "true", "yes", "on")):
        store = ImageStore(load_images_file(kwargs["images"]) if kwargs.get("images") else {},
                           cache_dir=kwargs.get("image_cache"),
                           pull=kwargs.get("pull", "").lower() in ("1", "true", "yes", "on"))
    checks = [check_task(d, env, kwargs, store).as_dict() for d in task_dirs(suite_dir)]
    counts = {v: sum(1 for c in checks if c["verdict"] == v) for v in (RUNS, DIFFERS, CANNOT)}
    return {"suite": str(suite_dir), "env": env, "env_kwargs": kwargs, "tasks": checks, "counts": counts}


def report_lines(report: dict) -> list[str]:
    """The preflight as text: a line per task, then a summary."""
    tasks = report["tasks"]
    width = max([len(t["task"]) for t in tasks] + [4])
    options = " ".join(f"{k}={v}" for k, v in report["env_kwargs"].items())
    lines = [f"preflight: {report['suite']} under --env {report['env']}" + (f" ({options})" if options else ""),
             f"{'task':<{width}}  {'verdict':<8} why"]
    for t in tasks:
        why = "; ".join(t["reasons"] + t["notes"]) or t["userland"]
        lines.append(f"{t['task']:<{width}}  {t['verdict']:<8} {why}")
    c = report["counts"]
    lines.append(f"preflight: {len(tasks)} tasks: {c[RUNS]} run, {c[DIFFERS]} run differently from their image, "
                 f"{c[CANNOT]} cannot run here")
    return lines
