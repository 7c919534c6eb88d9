#!/bin/sh
# Set up a virtual environment in .venv (first run only), then lint, type-check, build the docs and test.
# PyTorch is used only as a reference in tests; it is installed when pip can get the CPU
# build without a multi-GB download (from a local wheel store), else those tests skip.
set -eu
cd "$(dirname "$0")"
[ -x .venv/bin/python ] || python3 -m venv .venv
pip() { .venv/bin/python -m pip -q --disable-pip-version-check "$@"; }
# Install once per pyproject.toml (the package itself is editable): later runs work offline.
# [dev] includes [gpu-check], the NVRTC wheels that tests/test_kernel_compile.py compiles the
# CUDA kernels with (no GPU needed; ~100 MB).
stamp=.venv/.installed-dev
if [ "$(cat "$stamp" 2>/dev/null)" != "$(cksum < pyproject.toml)" ]; then
    pip install -e '.[dev]'
    if pip install --no-index --no-deps torch==2.13.0 2>/dev/null; then
        pip install torch==2.13.0  # its small pure-Python dependencies
    else
        echo "note: no local PyTorch CPU wheel; the torch comparison tests will skip"
    fi
    cksum < pyproject.toml > "$stamp"
fi
.venv/bin/ruff check singa_lite tests benchmarks examples
.venv/bin/ruff format --check singa_lite tests benchmarks examples
.venv/bin/mypy singa_lite
# The documentation site (guides + API reference from the docstrings): a broken reference or a
# docstring that does not parse fails here. -E re-reads every page, so no warning is hidden by
# an earlier build.
.venv/bin/python -m sphinx -E -W --keep-going -q docs docs/_build/html
.venv/bin/python -m pytest "$@"
# The run above has the compiled CPU kernels on (backend/cpu_kernels, numba from [dev]); the
# tests of the ops they replace run again on the NumPy code alone, the kernels' reference and
# fallback. Only for a full run: arguments choose tests, and those run once.
if [ $# -eq 0 ]; then
    SINGA_LITE_CPU_KERNELS=0 .venv/bin/python -m pytest tests/ops/test_activation.py \
        tests/ops/test_fused.py tests/ops/test_normalization.py tests/ops/test_attention.py \
        tests/ops/test_elementwise.py tests/ops/test_pool.py tests/ops/test_depthwise.py \
        tests/ops/test_conv.py tests/ops/test_conv_engine.py tests/ops/test_recurrent.py \
        tests/ops/test_recurrent_peephole.py tests/ops/test_linalg.py \
        tests/torch_ref/test_torch_pool_norm.py tests/torch_ref/test_torch_elementwise.py \
        tests/torch_ref/test_torch_linalg_conv.py tests/torch_ref/test_torch_rnn_loss.py \
        tests/sonnx/test_import_plan.py tests/sonnx/test_import_fusion.py \
        tests/sonnx/test_import_models.py tests/test_layer.py tests/test_autograd.py \
        tests/test_model.py tests/test_modes.py \
        tests/test_opt.py tests/test_opt_step_options.py tests/test_layer_transformer.py
fi
