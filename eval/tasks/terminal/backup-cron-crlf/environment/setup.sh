#!/bin/bash
# Build-time setup (Dockerfile RUN / local sandbox): the script arrives from a Windows editor with CRLF
# line endings and without its executable bit.
set -e
cd "${APP_DIR:-/app}"
sed -i 's/$/\r/' backup.sh
chmod 0644 backup.sh
