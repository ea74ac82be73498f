#!/bin/bash
cd "$(dirname "$0")/.." && python3 tools/validate_config.py conf/app.ini && echo "starting on port $(sed -n 's/^listen_port *= *//p' conf/app.ini)"
