#!/bin/bash
# CI entry point
cd "$(dirname "$0")"
python3 -m unittest discover -s tests -v
