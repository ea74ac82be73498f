#!/bin/bash
find "$(dirname "$0")/../logs" -name '*.log' -mtime +7 -delete 2>/dev/null || true
