#!/bin/bash
# Build-time setup (Dockerfile RUN / local sandbox): create /app/repo with a secret committed in history.
set -euo pipefail
cd "${APP_DIR:-/app}"
export GIT_AUTHOR_NAME="Dana Dev" GIT_AUTHOR_EMAIL="dana@example.com"
export GIT_COMMITTER_NAME="Dana Dev" GIT_COMMITTER_EMAIL="dana@example.com"
export GIT_CONFIG_NOSYSTEM=1
rm -rf repo && mkdir repo && cd repo
git init -q -b main
git config user.name "Dana Dev"
git config user.email "dana@example.com"
c() { GIT_AUTHOR_DATE="2024-04-0$1T10:00:00Z" GIT_COMMITTER_DATE="2024-04-0$1T10:00:00Z" git commit -q -m "$2"; }
printf 'import config\n\ndef main():\n    print("hello", config.load()["name"])\n' > app.py
printf '# demo app\n' > README.md
git add -A && c 1 "init: app skeleton"
mkdir -p config
printf 'import os\n\ndef load():\n    return {"name": os.environ.get("APP_NAME", "demo")}\n' > config.py
printf 'API_KEY=sk-live-9f8e7d6c5b4a\nDB_PASSWORD=hunter2\n' > config/secrets.env
printf 'name: demo\n' > config/app.yaml
git add -A && c 2 "add config loader"
printf 'import config\n\nFEATURE_X = True\n\ndef main():\n    print("hello", config.load()["name"], FEATURE_X)\n' > app.py
git add -A && c 3 "feature flag for X"
printf 'API_KEY=sk-live-9f8e7d6c5b4a\nDB_PASSWORD=hunter3\n' > config/secrets.env
printf '# demo app\n\nRun `python3 -c "import app; app.main()"`.\n' > README.md
git add -A && c 4 "docs: usage; rotate db password"
printf 'name: demo\nlevel: info\n' > config/app.yaml
git add -A && c 5 "config: log level"
git tag v1.0
