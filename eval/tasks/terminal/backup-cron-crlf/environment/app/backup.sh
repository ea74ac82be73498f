#!/bin/bash
# Nightly backup of /app/data into $BACKUP_DIR (default: /app/backups) as data.tar.gz
set -euo pipefail
cd "$(dirname "$0")"
BACKUP_DIR="${BACKUP_DIR:-$PWD/backups}"
mkdir -p "$BACKUP_DIR"
tar -czf "$BACKUP_DIR/data.tar.gz" data
echo "$(date -u +%FT%TZ) backup ok: $(tar -tzf "$BACKUP_DIR/data.tar.gz" | wc -l) entries"
