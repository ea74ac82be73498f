"""Verifier for make-build-c: clean rebuild with the original flags, then run on fresh inputs."""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

APP = sys.argv[1]


def run(cmd, cwd, inp=None):
    return subprocess.run(cmd, cwd=cwd, input=inp, capture_output=True, text=True, timeout=60)


def main():
    mk = open(os.path.join(APP, "Makefile")).read()
    assert "-Wall" in mk and "-Werror" in mk, "warning flags removed"
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "p")
        shutil.copytree(APP, src, ignore=shutil.ignore_patterns("build"))
        r = run(["make", "clean"], src)
        r = run(["make"], src)
        assert r.returncode == 0, f"make failed:\n{r.stdout}\n{r.stderr}"
        r = run(["make", "test"], src)
        assert r.returncode == 0 and "n=5 mean=3.000 stddev=1.414 median=3.000" in r.stdout, r.stdout + r.stderr
        for xs in ([2.5], [10, -4, 7, 7, 1.25, 3], [float(i) for i in range(1, 1001)], []):
            r = run(["./build/numstat"], src, " ".join(map(str, xs)) + "\n")
            assert r.returncode == 0, r.stderr
            if xs:
                want = (f"n={len(xs)} mean={statistics.fmean(xs):.3f} stddev={statistics.pstdev(xs):.3f} "
                        f"median={statistics.median(xs):.3f}")
            else:
                want = "n=0 mean=0.000 stddev=0.000 median=0.000"
            assert r.stdout.strip() == want, f"{r.stdout.strip()!r} != {want!r}"
    print("all checks passed")


if __name__ == "__main__":
    main()
