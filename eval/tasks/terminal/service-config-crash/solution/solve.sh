#!/bin/bash
set -euo pipefail
cd "${APP_DIR:-/app}/service"
sed -i -e 's/^\[sever\]/[server]/' -e 's/^workers = four/workers = 4/' \
       -e 's#^data_file = data/inventory.jsn$#data_file = data/inventory.json#' config.ini
./start.sh
for _ in $(seq 100); do [ -S run/inventory.sock ] && break; sleep 0.1; done
python3 - <<'PY'
import socket
s = socket.socket(socket.AF_UNIX); s.connect("run/inventory.sock")
s.sendall(b"GET /health HTTP/1.0\r\n\r\n"); print(s.recv(4096).decode())
PY
