"""Verifier for deploy-perms-config: modes per POLICY.md, a config that validates, start.sh runs."""
import configparser
import os
import stat
import subprocess
import sys

APP = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
D = os.path.join(APP, "deploy")


def mode(p):
    return stat.S_IMODE(os.lstat(os.path.join(D, p)).st_mode)


def main():
    want = {"bin/start.sh": 0o755, "bin/stop.sh": 0o755, "bin/rotate-logs.sh": 0o755,
            "tools/validate_config.py": 0o755, "secrets": 0o700, "secrets/db.key": 0o600,
            "secrets/tls.pem": 0o600, "conf": 0o755, "conf/app.ini": 0o644, "conf/logging.ini": 0o644}
    for p, m in want.items():
        assert mode(p) == m, f"{p}: mode {oct(mode(p))} != {oct(m)}"
    for root, dirs, files in os.walk(D):
        for n in dirs + files:
            p = os.path.join(root, n)
            assert not os.lstat(p).st_mode & stat.S_IWOTH, f"{p} is world-writable"
    assert open(os.path.join(D, "secrets/db.key")).read() == "s3cr3t-db-password-4417\n", "secret changed"
    r = subprocess.run([sys.executable, os.path.join(HERE, "validate_config.py"), os.path.join(D, "conf/app.ini")],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    cp = configparser.ConfigParser()
    cp.read(os.path.join(D, "conf/app.ini"))
    assert cp["server"]["listen_port"] == "8080" and cp["server"]["host"] == "0.0.0.0"
    assert cp["server"]["log_level"] == "info", "log_level in production is info"
    assert dict(cp["database"]) == {"host": "db.internal", "port": "5432", "password_file": "secrets/db.key"}
    r = subprocess.run([os.path.join(D, "bin/start.sh")], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "starting on port 8080" in r.stdout, r.stdout + r.stderr
    print("all checks passed")


if __name__ == "__main__":
    main()
