"""Verifier for access-log-report: report.txt for the shipped log, report.sh on a hidden log."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

APP = sys.argv[1]
HERE = os.path.dirname(os.path.abspath(__file__))
LINE = re.compile(r'^(\S+) \S+ \S+ \[[^\]]+\] "(\S+) (\S+) [^"]*" (\d{3}) (\S+)')


def reference(path):
    ips, errs, total, nbytes, n5 = Counter(), Counter(), 0, 0, 0
    for line in open(path):
        m = LINE.match(line)
        if not m:
            continue
        ip, _, url, st, size = m.groups()
        total += 1
        ips[ip] += 1
        nbytes += 0 if size == "-" else int(size)
        if st.startswith("5"):
            n5 += 1
            errs[url.split("?")[0]] += 1
    top = lambda c: [f"{n} {k}" for k, n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:3]]
    return "\n".join([f"total_requests {total}", f"unique_ips {len(ips)}", "top_ips", *top(ips),
                      f"errors_5xx {n5}", "top_error_paths", *top(errs), f"bytes_total {nbytes}"]) + "\n"


def main():
    log = os.path.join(HERE, "access.log")
    want = reference(log)
    got = open(os.path.join(APP, "report.txt")).read()
    assert got.strip() == want.strip(), f"report.txt:\n{got}\n---want---\n{want}"
    script = os.path.join(APP, "report.sh")
    assert os.access(script, os.X_OK), "report.sh is not executable"
    with tempfile.TemporaryDirectory() as tmp:
        for src in (os.path.join(HERE, "hidden_access.log"),):
            dst = os.path.join(tmp, "x.log")
            shutil.copy(src, dst)
            r = subprocess.run([script, dst], capture_output=True, text=True, timeout=30, cwd=tmp)
            assert r.returncode == 0, r.stderr
            assert r.stdout.strip() == reference(dst).strip(), f"hidden log:\n{r.stdout}\n---want---\n{reference(dst)}"
        small = os.path.join(tmp, "small.log")
        with open(small, "w") as f:
            f.write('1.2.3.4 - - [01/Jan/2024:00:00:00 +0000] "GET /a?x=1 HTTP/1.1" 503 10 "-" "c"\n')
            f.write('1.2.3.5 - - [01/Jan/2024:00:00:01 +0000] "GET /b HTTP/1.1" 304 - "-" "c"\n')
        r = subprocess.run([script, small], capture_output=True, text=True, timeout=30, cwd=tmp)
        assert r.stdout.strip() == reference(small).strip(), f"small log:\n{r.stdout}\n---want---\n{reference(small)}"
        with open(small, "w") as f:  # no 5xx at all
            f.write('9.9.9.9 - - [01/Jan/2024:00:00:00 +0000] "GET / HTTP/1.1" 200 5 "-" "c"\n')
        r = subprocess.run([script, small], capture_output=True, text=True, timeout=30, cwd=tmp)
        assert r.stdout.strip() == reference(small).strip(), f"no-5xx log:\n{r.stdout}\n---want---\n{reference(small)}"
    print("all checks passed")


if __name__ == "__main__":
    main()
