"""Verifier for git-remove-secret."""
import os
import subprocess
import sys

APP = sys.argv[1]
REPO = os.path.join(APP, "repo")


def git(*args):
    r = subprocess.run(["git", "-c", "safe.directory=*", *args], cwd=REPO, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, f"git {args}: {r.stderr}"
    return r.stdout


def main():
    msgs = git("log", "--format=%s", "main").splitlines()
    want = ["chore: ignore secrets", "config: log level", "docs: usage; rotate db password",
            "feature flag for X", "add config loader", "init: app skeleton"]
    assert msgs == want, msgs
    assert git("rev-parse", "v1.0^{commit}") == git("rev-parse", "main~1"), "v1.0 must be the rewritten 5th commit"
    for rev in git("rev-list", "main", "v1.0").split():
        files = git("ls-tree", "-r", "--name-only", rev).split()
        assert "config/secrets.env" not in files, f"{rev} still contains the secret"
    files = sorted(git("ls-tree", "-r", "--name-only", "main").split())
    assert files == [".gitignore", "README.md", "app.py", "config.py", "config/app.yaml"], files
    assert "config/secrets.env" in git("show", "main:.gitignore").splitlines()
    assert git("diff", "--name-only", "main~1", "main").split() == [".gitignore"]
    assert git("show", "main~2:config/app.yaml") == "name: demo\n"
    assert git("show", "main~1:config/app.yaml") == "name: demo\nlevel: info\n"
    assert "FEATURE_X" in git("show", "main~3:app.py") and "FEATURE_X" not in git("show", "main~4:app.py")
    assert git("status", "--porcelain") == "", "working tree not clean"
    assert open(os.path.join(REPO, "config/secrets.env")).read() == \
        "API_KEY=sk-live-9f8e7d6c5b4a\nDB_PASSWORD=hunter3\n", "secrets.env missing from the working tree"
    # nothing reachable or stored still holds the secret blob
    objs = subprocess.run(["git", "-c", "safe.directory=*", "cat-file", "--batch-all-objects", "--batch"],
                          cwd=REPO, capture_output=True, timeout=30).stdout
    assert b"sk-live-9f8e7d6c5b4a" not in objs, "the secret is still stored in .git"
    print("all checks passed")


if __name__ == "__main__":
    main()
