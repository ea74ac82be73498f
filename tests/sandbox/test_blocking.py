"""`BlockingSandbox` closed by one thread while others' calls run on it (an episode server's reaper or /close_session
under a running /bash): every call returns, none waits forever on the stopped event loop."""

from __future__ import annotations

import shutil
import sys
import threading
import time

import pytest

from sandbox import BlockingSandbox, SandboxConfig, SandboxError

needs_namespaces = pytest.mark.skipif(
    not sys.platform.startswith("linux") or any(shutil.which(t) is None for t in ("unshare", "nsenter", "prlimit", "setpriv")),
    reason="the local sandbox needs Linux namespaces and util-linux (unshare, nsenter, prlimit, setpriv)")


@needs_namespaces
def test_a_close_under_running_and_starting_calls_ends_every_call():
    """close() stopped the loop while calls still starting were pending on it: in about one round of 16 calls in
    three, some callers waited forever (an episode server's call threads, and the session's turn with them)."""
    for _ in range(8):
        box = BlockingSandbox(SandboxConfig())
        box.start()
        answers: list = []

        def call(delay: float) -> None:
            time.sleep(delay)  # calls running, starting and arriving as close() runs
            try:
                answers.append(box.exec("sleep 31391", timeout_sec=200).return_code)
            except SandboxError as err:
                answers.append(str(err))

        threads = [threading.Thread(target=call, args=(k * 0.025,), daemon=True) for k in range(16)]
        for thread in threads:
            thread.start()
        time.sleep(0.2)
        box.close()
        for thread in threads:
            thread.join(timeout=30)
        assert not [t for t in threads if t.is_alive()], f"calls still waiting after close(): {len(answers)}/16 ended"
        assert len(answers) == 16 and 0 not in answers  # none reports the killed command as done
