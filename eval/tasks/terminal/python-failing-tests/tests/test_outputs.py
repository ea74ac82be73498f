"""Verifier for python-failing-tests: the shipped tests (pristine copy) and hidden ones, on the agent's package."""
import os
import shutil
import subprocess
import sys
import tempfile

APP = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(os.path.join(APP, "invtools"), os.path.join(tmp, "invtools"))
        os.mkdir(os.path.join(tmp, "tests"))
        for name in ("test_invtools.py", "test_hidden.py"):
            shutil.copy(os.path.join(HERE, name), os.path.join(tmp, "tests", name))
        r = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", "tests", "-v"],
                           cwd=tmp, capture_output=True, text=True, timeout=60)
        print(r.stderr[-3000:])
        assert r.returncode == 0, "unit tests fail"
        assert "Ran 8 tests" in r.stderr, "not all tests ran"
    print("all checks passed")


if __name__ == "__main__":
    main()
