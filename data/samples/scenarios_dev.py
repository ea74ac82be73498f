"""Hand-written scenarios about a developer's tools: a C build, an editable install, git, a tz bug, a venv.
Runs in: any Python >= 3.11, standard library only (`python data/make_samples.py`).
A missing `-lm`, a setuptools flat-layout error, moving commits and dropping a secret, naive datetimes,
a venv left behind by a Python upgrade.
"""

from datetime import datetime, timezone

from .scenario import Round, S, Scenario, bash, edit, read
from .synthetic_text import WORDS, hexid, journal, ls_la, pad_block, pytest_log


def sc_make(rng, long=False):
    proj = rng.choice(["libgeom", "tinystat", "rasterkit", "dsp-lite"])
    host = f"build-{rng.randint(1, 8)}"
    cwd = f"/home/ci/src/{proj}"
    objs = ["vec", "mat", "stats", "interp", "fft", "io"]
    cc = "\n".join(f"cc -O2 -g -Wall -Wextra -std=c11 -Iinclude -c src/{o}.c -o build/{o}.o" for o in objs)
    if long:
        cc = pad_block(rng, "verbose compile (V=1)", 520) + "\n" + cc
    err = "\n".join([f"cc -o build/{proj} build/main.o " + " ".join(f"build/{o}.o" for o in objs),
                     f"/usr/bin/ld: build/stats.o: in function `stddev':",
                     f"{cwd}/src/stats.c:{rng.randint(40, 90)}: undefined reference to `sqrt'",
                     f"/usr/bin/ld: build/interp.o: in function `cubic_eval':",
                     f"{cwd}/src/interp.c:{rng.randint(20, 70)}: undefined reference to `pow'",
                     f"/usr/bin/ld: build/fft.o: in function `fft_twiddle':",
                     f"{cwd}/src/fft.c:{rng.randint(20, 70)}: undefined reference to `cos'",
                     f"/usr/bin/ld: {cwd}/src/fft.c:{rng.randint(20, 70)}: undefined reference to `sin'",
                     "collect2: error: ld returned 1 exit status",
                     f"make: *** [Makefile:24: build/{proj}] Error 1"])
    mk = f"""CC      ?= cc
CFLAGS  ?= -O2 -g -Wall -Wextra -std=c11
CPPFLAGS = -Iinclude
LDFLAGS ?=
SRC     := $(wildcard src/*.c)
OBJ     := $(patsubst src/%.c,build/%.o,$(SRC))
BIN     := build/{proj}

.PHONY: all clean test
all: $(BIN)

build:
\tmkdir -p build

build/%.o: src/%.c | build
\t$(CC) $(CFLAGS) $(CPPFLAGS) -c $< -o $@

$(BIN): $(OBJ)
\t$(CC) $(LDFLAGS) -o $@ $^

test: $(BIN)
\t./tests/run.sh $(BIN)

clean:
\trm -rf build
"""
    tests = "\n".join(f"[ RUN  ] {t}\n[  OK  ] {t} ({rng.randint(0, 40)} ms)" for t in
                      ["vec_dot", "vec_norm", "mat_mul", "mat_inv", "stats_mean", "stats_stddev", "interp_linear",
                       "interp_cubic", "fft_roundtrip", "fft_parseval", "io_csv_roundtrip"])
    steps = [
        S("A C project that stopped linking. Reproduce the failure first.",
          "Run a clean build and capture the output.",
          bash("make clean && make -j4 2>&1 | tail -n 80" if not long else "make clean && make -j4 V=1 2>&1",
               "rm -rf build\nmkdir -p build\n" + f"cc -O2 -g -Wall -Wextra -std=c11 -Iinclude -c src/main.c -o build/main.o\n" + cc + "\n" + err, rc=2, dur=15.0)),
        S("All compile steps succeed; the link fails with undefined references to sqrt, pow, cos and sin. Those live in libm, "
          "and the link command doesn't have -lm.",
          "Look at the Makefile's link rule.",
          read("Makefile", mk), bash("git log --oneline -5 -- Makefile",
                                     f"{hexid(rng)} build: honour LDFLAGS from the environment\n{hexid(rng)} build: out-of-tree objects in build/\n{hexid(rng)} add fft module\n{hexid(rng)} initial import")),
        S("The recent 'honour LDFLAGS' commit replaced the hard-coded link line and dropped the libraries. Libraries belong in LDLIBS, after the objects "
          "(with --as-needed, -lm before the objects gets discarded).",
          "Add LDLIBS = -lm and put $(LDLIBS) after $^ in the link rule, then rebuild and run the tests.",
          edit("Makefile", "LDFLAGS ?=\n", "LDFLAGS ?=\nLDLIBS  += -lm\n"),
          edit("Makefile", "\t$(CC) $(LDFLAGS) -o $@ $^\n", "\t$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)\n"),
          bash("make -j4 2>&1 | tail -n 3 && make test", f"cc -o build/{proj} build/main.o " + " ".join(f"build/{o}.o" for o in objs) + " -lm\n./tests/run.sh build/" + proj + "\n" + tests + "\n11 tests, 0 failures", dur=10.0)),
    ]
    return Scenario("make-link-error", "Fix a failing C build", host, cwd, [
        Round(f"CI for {proj} fails at the link step since yesterday's Makefile change. Fix the build without changing any C sources.",
              steps, "The link failed with undefined references to sqrt/pow/cos/sin because the commit that started honouring LDFLAGS removed -lm from the link line. I added `LDLIBS += -lm` and put $(LDLIBS) after the objects in the link rule (libraries must come after the objects that use them). The build links again and all 11 tests pass."),
    ], "single", "Makefile")


def sc_packaging(rng, long=False):
    pkg = rng.choice(["reportgen", "invoicer", "tilecache", "metricsd"])
    host = f"dev-{rng.choice(WORDS)}"
    cwd = f"/home/dev/{pkg}"
    pip_err = f"""Obtaining file://{cwd}
  Installing build dependencies ... done
  Checking if build backend supports build_editable ... done
  Getting requirements to build editable ... error
  error: subprocess-exited-with-error

  \u00d7 Getting requirements to build editable did not run successfully.
  \u2502 exit code: 1
  \u2570\u2500> [14 lines of output]
      error: Multiple top-level packages discovered in a flat-layout: ['{pkg}', 'migrations', 'scripts'].

      To avoid accidental inclusion of unwanted files or directories,
      setuptools will not proceed with this build.

      If you are trying to create a single distribution with multiple packages
      on purpose, you should not rely on automatic discovery.
      Instead, consider the following options:

      1. set up custom discovery (`find` directive with `include` or `exclude`)
      2. use a `src-layout`
      3. explicitly set `py_modules` or `packages` with a list of names

      To find more information, look for "package discovery" on setuptools docs.
      [end of output]

  note: This error originates from a subprocess, and is likely not a problem with pip.
error: subprocess-exited-with-error

\u00d7 Getting requirements to build editable did not run successfully.
\u2502 exit code: 1
\u2570\u2500> See above for output.

note: This error originates from a subprocess, and is likely not a problem with pip."""
    pyproject = f"""[build-system]
requires = ["setuptools>=68", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "{pkg}"
version = "0.{rng.randint(2, 9)}.{rng.randint(0, 9)}"
description = "Internal {pkg} tool"
requires-python = ">=3.10"
dependencies = ["click>=8", "jinja2>=3.1", "sqlalchemy>=2.0", "pyyaml>=6"]

[project.optional-dependencies]
test = ["pytest>=8", "pytest-cov"]

[project.scripts]
{pkg} = "{pkg}.main:cli"
"""
    ok = "\n".join([f"Obtaining file://{cwd}", "  Installing build dependencies ... done",
                    "  Checking if build backend supports build_editable ... done",
                    "  Getting requirements to build editable ... done",
                    "  Preparing editable metadata (pyproject.toml) ... done",
                    "Requirement already satisfied: click>=8 in ./.venv/lib/python3.11/site-packages (8.1.7)",
                    "Requirement already satisfied: jinja2>=3.1 in ./.venv/lib/python3.11/site-packages (3.1.4)",
                    "Requirement already satisfied: sqlalchemy>=2.0 in ./.venv/lib/python3.11/site-packages (2.0.31)",
                    "Requirement already satisfied: pyyaml>=6 in ./.venv/lib/python3.11/site-packages (6.0.1)",
                    "Building wheels for collected packages: " + pkg,
                    f"  Building editable for {pkg} (pyproject.toml) ... done",
                    f"  Created wheel for {pkg}: filename={pkg}-0.4.1-0.editable-py3-none-any.whl size=3312 sha256={hexid(rng, 64)}",
                    f"Successfully built {pkg}", f"Installing collected packages: {pkg}",
                    f"Successfully installed {pkg}-0.4.1"])
    steps = [
        S("Reproduce the install failure in the project's virtualenv.", "Run pip install -e . and look at the tree.",
          bash(".venv/bin/pip install -e '.[test]'", pip_err, rc=1, dur=10.0),
          bash("ls -la", ls_la(rng, [(".git", "d", 4096), (".venv", "d", 4096), ("README.md", "f", 1840), (pkg, "d", 4096),
                                     ("migrations", "d", 4096), ("pyproject.toml", "f", 612), ("scripts", "d", 4096), ("tests", "d", 4096)], owner="dev", group="dev"))),
        S("setuptools' automatic discovery finds three top-level packages (the app plus migrations/ and scripts/) and refuses to guess. "
          "Only the app package should be shipped.",
          "Read pyproject.toml and add an explicit packages.find include.",
          read("pyproject.toml", pyproject),
          edit("pyproject.toml", "[project.scripts]", f"[tool.setuptools.packages.find]\ninclude = [\"{pkg}*\"]\n\n[project.scripts]"),
          bash(".venv/bin/pip install -e '.[test]' 2>&1 | tail -n 15", ok, dur=10.0)),
        S("The install works now. Check that the console script entry point is valid.", "Run the CLI.",
          bash(f".venv/bin/{pkg} --version", f"Traceback (most recent call last):\n  File \"{cwd}/.venv/bin/{pkg}\", line 5, in <module>\n    from {pkg}.main import cli\nModuleNotFoundError: No module named '{pkg}.main'", rc=1),
          bash(f"ls {pkg}/ && grep -n 'def cli\\|@click.group' -r {pkg}/", f"__init__.py  __main__.py  cli.py  db.py  render.py  templates\n{pkg}/cli.py:14:@click.group()\n{pkg}/cli.py:16:def cli(ctx, config):")),
        S(f"The entry point names {pkg}.main but the click group lives in {pkg}/cli.py.", "Fix the script target, reinstall, run the CLI and the tests.",
          edit("pyproject.toml", f'{pkg} = "{pkg}.main:cli"', f'{pkg} = "{pkg}.cli:cli"'),
          bash(f".venv/bin/pip install -q -e '.[test]' && .venv/bin/{pkg} --version && .venv/bin/pytest -q",
               f"{pkg}, version 0.4.1\n" + pytest_log(rng, cwd, [("tests/test_cli.py", 5), ("tests/test_db.py", 7), ("tests/test_render.py", 9)], {}), dur=12.0)),
    ]
    return Scenario("pip-flat-layout", "Fix an editable install", host, cwd, [
        Round(f"`pip install -e .` fails for {pkg} after we added the migrations/ and scripts/ folders. Make it installable again and make sure the `{pkg}` command works.",
              steps, f"setuptools refused to build because automatic discovery found three top-level packages ({pkg}, migrations, scripts). I added `[tool.setuptools.packages.find] include = [\"{pkg}*\"]` so only the application package is shipped. The console script also pointed at a module that doesn't exist ({pkg}.main); it now points at {pkg}.cli:cli. The editable install succeeds, `{pkg} --version` works, and the test suite passes."),
    ], "single", "pyproject.toml")


def sc_git(rng, long=False):
    host = f"ws-{rng.choice(WORDS)}"
    repo = rng.choice(["billing-service", "edge-proxy", "search-api"])
    cwd = f"/home/dev/{repo}"
    h = [hexid(rng) for _ in range(8)]
    log = "\n".join([f"* {h[0]} (HEAD -> main) rate-limit: add per-tenant buckets",
                     f"* {h[1]} rate-limit: config loader + local .env",
                     f"* {h[2]} rate-limit: token bucket core",
                     f"* {h[3]} (origin/main, origin/HEAD) Merge pull request #{rng.randint(300, 900)} from team/fix-timeouts",
                     "|\\", f"| * {h[4]} http: lower upstream timeout to 5s", "|/",
                     f"* {h[5]} deps: bump sqlalchemy to 2.0.31", f"* {h[6]} ci: cache pip downloads"])
    show = f"""commit {h[1]}{hexid(rng, 33)}
Author: Dev User <dev@example.internal>
Date:   Tue Jun 11 16:{rng.randint(10, 59)}:02 2024 +0200

    rate-limit: config loader + local .env

 config/.env              |  6 ++++++
 src/ratelimit/config.py  | 48 ++++++++++++++++++++++++++++++++++++++++++++++++
 tests/test_rl_config.py  | 31 +++++++++++++++++++++++++++++++
 3 files changed, 85 insertions(+)"""
    nh = [hexid(rng) for _ in range(3)]
    steps = [
        S("Inspect the history to see exactly which commits are local-only.", "Show status and the graph.",
          bash("git status -sb && git log --oneline --graph -n 9", f"## main...origin/main [ahead 3]\n{log}")),
        S("Three local commits on main are the rate-limit work; origin/main is clean. The middle one should contain the .env.", "Check that commit's files.",
          bash(f"git show --stat {h[1]}", show)),
        S("config/.env was committed in the middle commit. Plan: branch the current HEAD as feature/rate-limit, reset main to origin/main, then rebase the branch "
          "with that one commit marked 'edit' to drop the file. Nothing has been pushed, so rewriting is safe.",
          "Create the branch and move main back.",
          bash("git branch feature/rate-limit HEAD && git reset --keep origin/main && git switch feature/rate-limit && git log --oneline -4",
               f"Switched to branch 'feature/rate-limit'\n{h[0]} (HEAD -> feature/rate-limit) rate-limit: add per-tenant buckets\n{h[1]} rate-limit: config loader + local .env\n{h[2]} rate-limit: token bucket core\n{h[3]} (origin/main, origin/HEAD, main) Merge pull request from team/fix-timeouts")),
        S("Main is back at origin/main. Now edit the commit that added config/.env.", "Non-interactive rebase with the second pick turned into edit.",
          bash("GIT_SEQUENCE_EDITOR=\"sed -i '2s/^pick/edit/'\" git rebase -i origin/main",
               f"Stopped at {h[1]}...  rate-limit: config loader + local .env\nYou can amend the commit now, with\n\n  git commit --amend \n\nOnce you are satisfied with your changes, run\n\n  git rebase --continue"),
          bash("git rm --cached -q config/.env && printf 'config/.env\\n' >> .gitignore && git add .gitignore && git commit -q --amend --no-edit && git rebase --continue",
               "Successfully rebased and updated refs/heads/feature/rate-limit.", dur=2.0)),
        S("Verify that no commit reachable from a branch still contains config/.env and that the working copy still has the file locally.",
          "git log over all branches for that path, check the branch contents.",
          bash("git log --all --oneline -- config/.env | grep -v '^$' | wc -l; git log --oneline origin/main..feature/rate-limit --stat | head -20; ls -la config/.env",
               f"0\n{nh[0]} rate-limit: add per-tenant buckets\n src/ratelimit/buckets.py | 77 ++++++++++\n 1 file changed, 77 insertions(+)\n{nh[1]} rate-limit: config loader + local .env\n .gitignore               |  1 +\n src/ratelimit/config.py  | 48 ++++++\n tests/test_rl_config.py  | 31 ++++\n 3 files changed, 80 insertions(+)\n{nh[2]} rate-limit: token bucket core\n src/ratelimit/bucket.py  | 112 ++++++++++++\n tests/test_bucket.py     |  64 +++++++\n 2 files changed, 176 insertions(+)\n-rw-r--r-- 1 dev dev 212 Jun 11 16:20 config/.env")),
    ]
    return Scenario("git-move-commits", "Move commits off main and drop a secret", host, cwd, [
        Round("I committed three rate-limit commits straight to main (not pushed). One of them added config/.env with real credentials. Move the commits to a branch feature/rate-limit, make sure .env is not in any commit, and put main back to origin/main. Keep my local .env file.",
              steps, f"main is back at origin/main ({h[3]}). The three commits now live on feature/rate-limit ({nh[2]}, {nh[1]}, {nh[0]}); the middle one was amended during a rebase so it no longer contains config/.env, and .gitignore now lists config/.env. `git log --all -- config/.env` finds no commit on any branch. Your local config/.env is untouched. The old commits remain in the reflog until it expires; since nothing was pushed, the credentials never left this machine. Rotate them anyway if you want to be safe."),
    ], "single", "")


def sc_tz(rng, long=False):
    host = f"dev-{rng.choice(WORDS)}"
    cwd = "/home/dev/scheduler"
    tb = f"""    def test_next_run_crosses_dst():
        job = Job(cron="30 1 * * *", tz="Europe/Berlin")
        after = datetime(2024, 3, 30, 12, 0, tzinfo=timezone.utc)
>       assert job.next_run(after) == datetime(2024, 3, 31, 0, 30, tzinfo=timezone.utc)
E       AssertionError: assert datetime.datetime(2024, 3, 31, 1, 30) == datetime.datetime(2024, 3, 31, 0, 30, tzinfo=datetime.timezone.utc)
E        +  where datetime.datetime(2024, 3, 31, 1, 30) = <bound method Job.next_run of Job(cron='30 1 * * *', tz='Europe/Berlin')>(datetime.datetime(2024, 3, 30, 12, 0, tzinfo=datetime.timezone.utc))

tests/test_job.py:{rng.randint(40, 80)}: AssertionError"""
    src = '''from dataclasses import dataclass
from datetime import datetime, timedelta

from .cronexpr import CronExpr


@dataclass
class Job:
    cron: str
    tz: str = "UTC"

    def next_run(self, after: datetime) -> datetime:
        expr = CronExpr(self.cron)
        t = after.replace(tzinfo=None, second=0, microsecond=0) + timedelta(minutes=1)
        while not expr.matches(t):
            t += timedelta(minutes=1)
        return t
'''
    steps = [
        S("Run the failing tests to see the assertion.", "pytest -x on the test module.",
          bash(".venv/bin/pytest -q tests/test_job.py", pytest_log(rng, cwd, [("tests/test_job.py", 6)], {"tests/test_job.py::test_next_run_crosses_dst": "AssertionError"}, extra_fail_text=tb), rc=1, dur=4.0)),
        S("next_run returns a naive datetime at 01:30, wall time in the wrong zone: it drops tzinfo and never converts into the job's zone.", "Read scheduler/job.py.",
          read("scheduler/job.py", src)),
        S("Fix: convert `after` into the job's zone with zoneinfo, search in local wall time, then attach the zone and return UTC.",
          "Rewrite next_run and rerun the whole suite.",
          edit("scheduler/job.py", "from datetime import datetime, timedelta\n", "from datetime import datetime, timedelta, timezone\nfrom zoneinfo import ZoneInfo\n"),
          edit("scheduler/job.py", "        t = after.replace(tzinfo=None, second=0, microsecond=0) + timedelta(minutes=1)\n        while not expr.matches(t):\n            t += timedelta(minutes=1)\n        return t\n",
               "        zone = ZoneInfo(self.tz)\n        local = after.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)\n        t = local + timedelta(minutes=1)\n        while not expr.matches(t):\n            t += timedelta(minutes=1)\n        return t.replace(tzinfo=zone).astimezone(timezone.utc)\n"),
          bash(".venv/bin/pytest -q", pytest_log(rng, cwd, [("tests/test_cronexpr.py", 14), ("tests/test_job.py", 6), ("tests/test_runner.py", 5)], {}), dur=5.0)),
    ]
    return Scenario("tz-naive-datetime", "Fix a timezone bug", host, cwd, [
        Round("tests/test_job.py::test_next_run_crosses_dst fails. Fix the scheduler (not the test).", steps,
              "Job.next_run stripped tzinfo from the input and searched in naive time, so it ignored the job's timezone and returned a naive datetime. It now converts the input to the job's zone (zoneinfo), searches in local wall-clock time, and returns an aware UTC datetime. All 25 tests pass, including the DST test."),
    ], "single", "scheduler/job.py")


def sc_venv(rng, long=False):
    tool = rng.choice(["exporter", "billing-sync", "mailq"])
    host = f"ops-{rng.randint(1, 9)}"
    reqs = ["requests==2.32.3", "PyYAML==6.0.1", "click==8.1.7", "prometheus-client==0.20.0", "SQLAlchemy==2.0.31", "psycopg[binary]==3.1.19"]
    coll = "\n".join(f"Collecting {r}\n  Using cached {r.split('==')[0].replace('[binary]', '').lower().replace('-', '_')}-{r.split('==')[1]}-py3-none-any.whl ({rng.randint(50, 900)} kB)" for r in reqs)
    steps = [
        S("Reproduce: run the tool's entry point.", "Call the binary and look at its shebang.",
          bash(f"/opt/{tool}/venv/bin/{tool} --help; head -1 /opt/{tool}/venv/bin/{tool}; ls -la /opt/{tool}/venv/bin/ | grep python",
               f"bash: /opt/{tool}/venv/bin/{tool}: /opt/{tool}/venv/bin/python3.10: bad interpreter: No such file or directory\n#!/opt/{tool}/venv/bin/python3.10\nlrwxrwxrwx 1 root root   16 Feb  3  2023 python -> python3.10\nlrwxrwxrwx 1 root root   16 Feb  3  2023 python3 -> python3.10\nlrwxrwxrwx 1 root root   24 Feb  3  2023 python3.10 -> /usr/bin/python3.10", rc=126)),
        S("The OS upgrade replaced python3.10 with 3.12, so the venv's interpreter symlink dangles. venvs aren't portable across Python versions; rebuild it from requirements.txt.",
          "Move the old venv aside, create a new one, install requirements.",
          bash(f"cd /opt/{tool} && python3 --version && mv venv venv.py310.bak && python3 -m venv venv && venv/bin/pip install -q --upgrade pip && venv/bin/pip install -r requirements.txt -e . 2>&1 | tail -n 20",
               "Python 3.12.3\n" + coll + f"\nBuilding wheels for collected packages: {tool}\nSuccessfully built {tool}\nInstalling collected packages: " + ", ".join(r.split('==')[0] for r in reqs) + f", {tool}\nSuccessfully installed " + " ".join(r.replace("==", "-").replace("[binary]", "") for r in reqs) + f" {tool}-1.3.0", dur=45.0)),
        S("Rebuilt. Run the tool and the timer-driven service once.", "--help, then start the oneshot service and read its log.",
          bash(f"/opt/{tool}/venv/bin/{tool} --help | head -4 && systemctl start {tool}.service && journalctl -u {tool} -n 3 --no-pager",
               f"Usage: {tool} [OPTIONS] COMMAND [ARGS]...\n\n  {tool} maintenance commands.\n\n" +
               journal(rng, host, tool, tool, rng.randint(1000, 9000), [f"Starting {tool}.service...", f"INFO run complete: {rng.randint(10, 900)} records", f"Stopped {tool}.service."], datetime(2024, 6, 12, 11, 0, tzinfo=timezone.utc)), dur=5.0)),
    ]
    return Scenario("venv-bad-interpreter", "Rebuild a virtualenv after a Python upgrade", host, f"/opt/{tool}", [
        Round(f"After the OS upgrade, /opt/{tool} fails with 'bad interpreter'. Get it working again.", steps,
              f"The venv in /opt/{tool} pointed at /usr/bin/python3.10, which the upgrade removed (the system now has 3.12). A venv is tied to the interpreter it was made with, so I moved the old one to venv.py310.bak and built a new venv with python3.12 from requirements.txt, plus the package itself in editable mode. The CLI runs and the {tool}.service oneshot completes. You can delete venv.py310.bak once you are happy."),
    ], "single", "")
