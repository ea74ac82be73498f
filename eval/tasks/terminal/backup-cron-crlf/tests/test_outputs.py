"""Verifier for backup-cron-crlf."""
import os
import subprocess
import sys
import tarfile
import tempfile

APP = sys.argv[1]


def main():
    script = os.path.join(APP, "backup.sh")
    raw = open(script, "rb").read()
    assert b"\r" not in raw, "backup.sh still has CR characters"
    assert raw.startswith(b"#!/bin/bash\n"), "shebang changed"
    assert b'tar -czf "$BACKUP_DIR/data.tar.gz" data' in raw, "backup command changed"
    assert os.access(script, os.X_OK), "backup.sh is not executable"
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([script], env={**os.environ, "BACKUP_DIR": tmp}, capture_output=True, text=True,
                           timeout=30, cwd="/")
        assert r.returncode == 0, r.stderr
        with tarfile.open(os.path.join(tmp, "data.tar.gz")) as tf:
            names = set(tf.getnames())
        assert {"data/notes.txt", "data/projects/list.csv"} <= names, names
    lines = open(os.path.join(APP, "crontab.txt")).read().splitlines()
    assert "# m h dom mon dow command" in lines and 'MAILTO=""' in lines, "comment/MAILTO lines lost"
    jobs = [l for l in lines if l.strip() and not l.lstrip().startswith("#") and "=" not in l.split()[0]]
    assert len(jobs) == 1, jobs
    f = jobs[0].split()
    assert f[:5] == ["30", "2", "*", "*", "*"], f"schedule {f[:5]}"
    assert " ".join(f[5:]) == "/app/backup.sh >> /app/logs/backup.log 2>&1", " ".join(f[5:])
    print("all checks passed")


if __name__ == "__main__":
    main()
