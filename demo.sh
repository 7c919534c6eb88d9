#!/bin/sh
# Set up a virtual environment in .venv (first run only) and run the demo:
# a small CNN trained on the embedded 8x8 digits, with a loss/accuracy plot in runs/demo/.
set -eu
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[demo]'
exec .venv/bin/python -m singa_lite.demo "$@"
