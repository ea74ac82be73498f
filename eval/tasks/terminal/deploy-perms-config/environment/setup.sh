#!/bin/bash
# Build-time setup (Dockerfile RUN / local sandbox): the broken modes the task starts from.
set -e
cd "${APP_DIR:-/app}/deploy"
chmod 0644 bin/*.sh tools/*.py
chmod 0777 secrets conf
chmod 0644 secrets/*
chmod 0666 conf/logging.ini
chmod 0600 conf/app.ini
