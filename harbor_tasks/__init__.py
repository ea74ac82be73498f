"""Harbor task folders and verifier verdicts, each read in one place (folder, verdict); suites, solutions, generators.
Runs in: any Python >= 3.11, standard library only: the training venv and the Harbor venv alike.
"""

from harbor_tasks.folder import TaskFolder, TaskFolderError, is_task, read_config, task_folders, task_seeds
from harbor_tasks.verdict import (
                                  AGENT_FAILURE,
                                  INFRA_FAILURE,
                                  INFRA_KINDS,
                                  PASS_THRESHOLD,
                                  SCORED,
                                  Verdict,
                                  judge_verifier_run,
                                  passed,
                                  reward_of,
)

__all__ = ["AGENT_FAILURE", "INFRA_FAILURE", "INFRA_KINDS", "PASS_THRESHOLD", "SCORED", "TaskFolder", "TaskFolderError",
           "Verdict", "is_task", "judge_verifier_run", "passed", "read_config", "reward_of", "task_folders",
           "task_seeds"]
