"""Environments from trajectories (Stage 1): trajectories rebuilt per second, and how faithful the rebuilt workspaces are.

    python bench/rebuild_trajectories.py [--per_family 2] [--out FILE]

Two corpora: the scripted teacher's Terminus-2 trajectories on deep tasks (`--per_family` of each deep family,
generated and collected as a user does: `harbor_tasks.generate`, `eval.scripted_teacher --collect`), and the public
sample rows the repo ships (data/sft/*.jsonl, data/harbor/sample-job). Each is rebuilt twice side by side: the replay
alone (`--no_check`) and with the check (each trajectory replayed in its rebuilt workspace in the local sandbox).
Reported: trajectories per second of each, files per task, fidelity (looking commands whose output comes back the
same), and where the source task is known, how many pass its tests after their own commands. Writes
bench/results/rebuild_trajectories.json. Timings are not asserted.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from chat_corpus.from_trajectories import rebuild  # noqa: E402
from harbor_tasks.families import select  # noqa: E402
from harbor_tasks.generate import generate  # noqa: E402

SAMPLES = [str(p) for p in sorted((REPO / "data" / "sft").glob("*.jsonl"))] + [str(REPO / "data/harbor/sample-job")]
KEYS = ("trajectories", "rebuilt", "skipped", "files_recovered_per_task", "files_truncated_per_task",
        "files_created_per_task", "files_missing_per_task", "commands_unparsed", "fidelity", "looks_compared",
        "check_infra_failures", "source_known", "own_commands_pass", "seconds", "trajectories_per_second")


def teacher_job(work: Path, per_family: int) -> Path:
    families = select(["deep"])
    generate(work / "tasks", 11, per_family * len(families), families)
    subprocess.run([sys.executable, "-m", "eval.scripted_teacher", "--tasks", str(work / "tasks"), "--collect",
                    str(work / "jobs"), "--concurrency", "4"], check=True, cwd=REPO, capture_output=True)
    [job] = [p for p in (work / "jobs").iterdir() if p.is_dir()]
    return job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per_family", type=int, default=2)
    parser.add_argument("--out", default=str(REPO / "bench/results/rebuild_trajectories.json"))
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-rebuild-") as tmp:
        work = Path(tmp)
        corpora = {"teacher_deep": [str(teacher_job(work, args.per_family))], "public_samples": SAMPLES}
        for name, paths in corpora.items():
            for checked in (False, True):
                report = rebuild(paths, work / f"{name}-{checked}", run_check=checked, progress=False)
                results[f"{name}{'_checked' if checked else '_replay_only'}"] = {k: report[k] for k in KEYS}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    for name, r in results.items():
        print(f"{name}: {r['rebuilt']}/{r['trajectories']} rebuilt, {r['trajectories_per_second']} per s; per task "
              f"{r['files_recovered_per_task']} recovered, {r['files_truncated_per_task']} truncated, "
              f"{r['files_missing_per_task']} missing; fidelity {r['fidelity']} ({r['looks_compared']} looks); "
              f"own commands pass {r['own_commands_pass']}/{r['source_known']}")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
