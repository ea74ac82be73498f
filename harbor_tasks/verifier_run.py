"""A task's tests run in a started local sandbox as Harbor runs them, with the tamper evidence, to a verdict.
Runs in: any Python >= 3.11, standard library only; RL episodes (episodes/local.py) and the functional pivot reward.

    watch = VerifierWatch(box.root, box.command_path(), box.command_sessions)  # once built, before any agent command
    ... the agent's commands ...
    verdict, output = run_tests(box, watch, task / "tests", timeout_sec, internet_declared)
A sandbox that fails on the way raises (SandboxError, OSError) for the caller to name as infrastructure.
"""

from __future__ import annotations

from pathlib import Path

from harbor_tasks.evidence import TESTS_DIR, VerifierWatch
from harbor_tasks.verdict import VERIFIER_DIR, Verdict, judge_verifier_run
from sandbox.errors import SandboxError, SandboxExecTimeoutError


def run_tests(box, watch: VerifierWatch, tests: Path, timeout_sec: float,
              internet_declared: bool) -> tuple[Verdict, str]:
    """(the verdict, what the tests printed) of `tests` (a host folder with test.sh) run in `box` (a started
    BlockingSandbox): what the agent did to the verifier's paths recorded, the folders made fresh, the tests
    uploaded and run as the task's default user, the reward read from the host."""
    timed_out, output = False, ""
    try:
        watch.check_paths()
        # as Harbor does: the harness's steps as root, the tests as the task's default user (its final USER)
        box.exec(f"rm -rf {VERIFIER_DIR} {TESTS_DIR} && mkdir -p {VERIFIER_DIR} {TESTS_DIR} && "
                 f"chmod 777 {VERIFIER_DIR}", timeout_sec=30, user="root")
        box.upload_dir(tests, TESTS_DIR)
        watch.expect_tests([tests])
        box.exec(f"[ -x {TESTS_DIR}/test.sh ] || chmod +x {TESTS_DIR}/test.sh", timeout_sec=30, user="root")
        watch.before_verifier()
        mark = box.network_mark()
        try:
            # as Harbor runs it: the script itself (its shebang's interpreter, not a bash looked up on PATH)
            output = box.exec(f"{TESTS_DIR}/test.sh 2>&1", timeout_sec=timeout_sec, until_exit=True).stdout
        except SandboxExecTimeoutError:
            timed_out = True
        reward_json, reward_txt = watch.after_verifier()
        verifier_names = box.names_asked(mark, commands_only=True)
        agent_names = box.names_asked(0, until=mark)
    except (SandboxError, OSError):
        watch.abandon()
        raise
    # the sandbox has no network, so a task that declares internet and an agent that asked for names is the
    # missing network's
    verdict = judge_verifier_run(reward_json, reward_txt, output, timed_out=timed_out,
                                 verifier_names=verifier_names, agent_names=agent_names,
                                 internet_allowed=internet_declared, tamper=watch.tamper,
                                 absent_tools=watch.absent_tools)
    return verdict, output
