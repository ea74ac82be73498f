#!/bin/bash
set -euo pipefail
cd "${APP_DIR:-/app}/deploy"
chmod 0755 bin/*.sh tools/*.py conf
chmod 0700 secrets
chmod 0600 secrets/*
chmod 0644 conf/*
sed -i -e 's/^listen_prot = /listen_port = /' -e 's/^log_level = verbose$/log_level = info/' conf/app.ini
python3 tools/validate_config.py conf/app.ini
bin/start.sh
