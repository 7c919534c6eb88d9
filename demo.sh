#!/bin/sh
# Set up a virtual environment in .venv (first run only) and run the demo:
# a small CNN trained on the embedded 8x8 digits, with a loss/accuracy plot in runs/demo/.
set -eu
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || python3 -m venv .venv
# Install once per pyproject.toml (the package itself is editable): later runs work offline.
stamp=.venv/.installed-demo
if [ "$(cat "$stamp" 2>/dev/null)" != "$(cksum < pyproject.toml)" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[demo]'
    cksum < pyproject.toml > "$stamp"
fi
exec .venv/bin/python -m singa_lite.demo "$@"
