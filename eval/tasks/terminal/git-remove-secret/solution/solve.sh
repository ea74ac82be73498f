#!/bin/bash
set -euo pipefail
cd "${APP_DIR:-/app}/repo"
export FILTER_BRANCH_SQUELCH_WARNING=1
cp config/secrets.env /tmp/secrets.env.keep.$$
git filter-branch -f --index-filter 'git rm -q --cached --ignore-unmatch config/secrets.env' \
    --tag-name-filter cat -- main v1.0
mv /tmp/secrets.env.keep.$$ config/secrets.env
echo "config/secrets.env" > .gitignore
git add .gitignore
git commit -q -m "chore: ignore secrets"
git for-each-ref --format='%(refname)' refs/original | xargs -r -n1 git update-ref -d
git reflog expire --expire=now --all
git gc -q --prune=now
git status --porcelain
