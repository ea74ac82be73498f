#!/usr/bin/env bash
# Creates .venv-harbor: Harbor (pinned) in its own Python >= 3.12 venv. Idempotent; called by the
# Makefile (make harbor / make test). This repo is NOT installed into it: run Harbor with
# PYTHONPATH=<repo root> so that `--env harbor_plugins.local_sandbox:LocalSandboxEnvironment` imports
# (harbor_plugins/ runs in this venv; the sandbox/ package it drives is standard library only).
#   HARBOR_VERSION  Harbor release to pin (default: the one the tests were verified with)
#   HARBOR_PYTHON   interpreter for the venv (default: python3.12/3.13 on PATH, else pyenv's 3.12.x)
#   HARBOR_VENV     venv path (default: .venv-harbor in the repo root)
set -euo pipefail
cd "$(dirname "$0")/.."
HARBOR_VERSION="${HARBOR_VERSION:-0.25.0}"
VENV="${HARBOR_VENV:-.venv-harbor}"
STAMP="$VENV/.installed-harbor-$HARBOR_VERSION"

# The local sandbox's host tools, Debian packages (installed when missing and this is root with apt-get):
#   tmux        Terminus-2 drives a tmux session inside the sandbox, which runs on the host's userland
#   passt       pasta, and slirp4netns: user-mode networking for tasks that allow internet (--ek network=...)
#   skopeo, umoci   image archives, OCI layouts and pulls as the sandbox's root file system (--ek images=/pull=)
#   mmdebstrap  builds the Debian root file systems the tests run tasks in
#   gcc         builds the sandbox's compiled entry helper (sandbox/enter.c; without it commands enter by enter.py)
missing=()
for pair in tmux:tmux pasta:passt slirp4netns:slirp4netns skopeo:skopeo umoci:umoci mmdebstrap:mmdebstrap \
            cc:gcc cc:libc6-dev; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup_harbor.sh: installing ${missing[*]} (the local sandbox's tools)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
      "${missing[@]}" >/dev/null
  else
    echo "setup_harbor.sh: warning: missing ${missing[*]}: terminus-2 evals in --env local need tmux; networking," \
      "images and their tests need the rest (apt-get install ${missing[*]}); those tests skip" >&2
  fi
fi

if [ -f "$STAMP" ] && [ -x "$VENV/bin/harbor" ]; then
  exit 0
fi

find_python() {
  if [ -n "${HARBOR_PYTHON:-}" ]; then echo "$HARBOR_PYTHON"; return; fi
  for c in python3.12 python3.13 python3; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$c"; return
    fi
  done
  if command -v pyenv >/dev/null 2>&1; then
    for p in "$(pyenv root)"/versions/3.12*/bin/python3.12 "$(pyenv root)"/versions/3.13*/bin/python3.13; do
      if [ -x "$p" ]; then echo "$p"; return; fi
    done
  fi
  echo "setup_harbor.sh: Harbor needs Python >= 3.12; none found (set HARBOR_PYTHON)" >&2
  exit 1
}

if [ ! -x "$VENV/bin/python" ]; then
  PY="$(find_python)"
  echo "setup_harbor.sh: creating $VENV with $PY"
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "harbor==$HARBOR_VERSION"
# smoke: Harbor imports offline and our environment class loads from the repo root
LITELLM_LOCAL_MODEL_COST_MAP=True PYTHONPATH="$PWD" "$VENV/bin/python" -c \
  'import harbor, harbor_plugins.local_sandbox; from importlib.metadata import version; print("harbor", version("harbor"), "ok")'
for tool in unshare nsenter prlimit setpriv; do
  command -v "$tool" >/dev/null 2>&1 || echo "setup_harbor.sh: warning: '$tool' (util-linux) missing; --env local will not start" >&2
done
rm -f "$VENV"/.installed-harbor-*
touch "$STAMP"
