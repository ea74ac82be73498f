"""Verifier for service-config-crash: code untouched, and a fresh start of the service answers /health."""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

APP = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
SVC = os.path.join(APP, "service")


def get(sock_path, path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(sock_path)
    s.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def main():
    for name, orig in (("server.py", "server.py.orig"), ("data/inventory.json", "inventory.json.orig")):
        assert open(os.path.join(SVC, name), "rb").read() == open(os.path.join(HERE, orig), "rb").read(), \
            f"{name} was modified"
    # start the agent's configuration on a pristine copy of the service, in a short private dir
    tmp = tempfile.mkdtemp(prefix="svc")
    try:
        svc = os.path.join(tmp, "s")
        shutil.copytree(SVC, svc, ignore=shutil.ignore_patterns("run", "*.sock", "logs"))
        shutil.copy(os.path.join(HERE, "server.py.orig"), os.path.join(svc, "server.py"))
        proc = subprocess.Popen([sys.executable, "server.py", "config.ini"], cwd=svc,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            sock = os.path.join(svc, "run/inventory.sock")
            deadline = time.time() + 10
            while not os.path.exists(sock):
                assert proc.poll() is None, f"service exited: {proc.stderr.read().decode()[-1500:]}"
                assert time.time() < deadline, "socket never appeared"
                time.sleep(0.05)
            code, body = get(sock, "/health")
            assert code == 200 and body == {"status": "ok", "name": "inventory", "workers": 4, "items": 3}, body
            code, body = get(sock, "/items/B-200")
            assert code == 200 and body["name"] == "washer", body
        finally:
            proc.kill()
            proc.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("all checks passed")


if __name__ == "__main__":
    main()
