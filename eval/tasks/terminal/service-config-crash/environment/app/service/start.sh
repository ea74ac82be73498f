#!/bin/bash
# start inventory-svc in the background; its pid goes to run/inventory.pid
cd "$(dirname "$0")"
mkdir -p run
nohup python3 server.py config.ini >> logs/stdout.log 2>&1 &
echo $! > run/inventory.pid
