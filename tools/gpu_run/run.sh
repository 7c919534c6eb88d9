#!/usr/bin/env bash
# singa_lite's GPU run: every GPU check in one time-boxed command, results under OUTDIR (7 files).
# From the repository root on a machine with an NVIDIA GPU and CuPy:
#     bash tools/gpu_run/run.sh OUTDIR
# Stages: env -> probe (one check per finding of the GPU notes) -> the GPU-parametrised tests ||
# onnx's node cases on CUDA (in parallel) -> benchmarks against PyTorch CUDA (training, eager and
# CUDA-graph replay), checkpoint I/O of a 400 MB GPU state, ONNX inference -> CuPy's kernel cache
# as a tarball -> summary.txt.
# CuPy's kernel cache lives in .gpu_cache/cupy (git-ignored): unpack the returned tarball there
# (tar -C .gpu_cache -xzf cupy_kernel_cache.tar.gz) and carry .gpu_cache to the next run, which then
# spends its minutes on tests instead of NVRTC compiles (a cold ResNet-20 first step: ~2.5 s, warm: 0.5 s).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-${OUT:-/tmp/gpu_out}}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
export SINGA_LITE_EXAMPLES=${SINGA_LITE_EXAMPLES:-5}
export CUPY_CACHE_DIR=$PWD/.gpu_cache/cupy
# The compiled CPU kernels would spend the run's minutes on Numba compiles in every worker; the
# CPU references the GPU tests compare with are the NumPy code either way.
export SINGA_LITE_CPU_KERNELS=${SINGA_LITE_CPU_KERNELS:-0}
mkdir -p "$CUPY_CACHE_DIR"
PY=python3
T0=$(date +%s); stamp() { echo "[$(( $(date +%s) - T0 ))s] $*"; }

stamp "env" | tee "$OUT/env.txt"
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c "import sys,numpy,cupy;print(sys.version);print('numpy',numpy.__version__,'cupy',cupy.__version__)"
  $PY -m pip list 2>/dev/null | grep -iE '^(cupy|numpy|onnx|onnxruntime|h5py|xxhash|torch|pytest|hypothesis|mpi4py|nvidia-nccl)'
  ls "$CUPY_CACHE_DIR" | wc -l | sed 's/^/kernel cache files at start: /'
} >> "$OUT/env.txt" 2>&1

stamp "probe"
timeout -k 5 80 $PY "$HERE/gpu_probe.py" --budget 70 > "$OUT/probe.txt" 2>&1; echo "probe exit $?" >> "$OUT/probe.txt"

stamp "pytest GPU subset || ONNX node cases on CUDA"
timeout -k 5 150 $PY "$HERE/onnx_node_cuda.py" --device CUDA --budget 140 > "$OUT/onnx_node_cuda.txt" 2>&1 &
NODE=$!
timeout -k 10 170 $PY -m pytest -o addopts="" -p no:cacheprovider -q -rfEs --tb=short \
    -n 10 --timeout=120 --maxfail=300 -k "gpu or nccl or cuda" tests > "$OUT/pytest_gpu.txt" 2>&1
echo "pytest exit $?" >> "$OUT/pytest_gpu.txt"
wait $NODE; echo "node exit $?" >> "$OUT/onnx_node_cuda.txt"

stamp "benchmarks"
{ timeout -k 5 100 $PY benchmarks/training.py --device gpu --steps 30 --min-seconds 2; echo "training exit $?"
  echo "-- the same with the CUDA RawKernels on (SINGA_LITE_RAW_KERNELS=1)"
  SINGA_LITE_RAW_KERNELS=1 timeout -k 5 50 $PY benchmarks/training.py --device gpu --steps 30 --min-seconds 2 --only mlp,cnn,resnet20,mobilenet
  echo "raw-kernels training exit $?"
  timeout -k 5 50 $PY benchmarks/checkpoint_io.py --device gpu --repeat 3; echo "checkpoint exit $?"
  timeout -k 5 50 $PY benchmarks/onnx_inference.py --device gpu --repeat 10; echo "onnx exit $?"
} > "$OUT/bench.txt" 2>&1

stamp "kernel cache"
tar -C "$PWD/.gpu_cache" -czf "$OUT/cupy_kernel_cache.tar.gz" cupy 2>/dev/null
[ "$(stat -c %s "$OUT/cupy_kernel_cache.tar.gz")" -gt 16000000 ] && rm -f "$OUT/cupy_kernel_cache.tar.gz" && echo "kernel cache > 16 MB: not returned" >> "$OUT/env.txt"

{ stamp "summary"
  head -3 "$OUT/env.txt" | tail -2
  echo "== probe"; grep -E '^(CHECK|verdict|  ATTENTION)' "$OUT/probe.txt" | cut -c1-240
  echo "== pytest (GPU subset)"
  grep -oE '(FAILED|ERROR) tests/[^ ]+' "$OUT/pytest_gpu.txt" | sort -u | head -80
  grep -E '^SKIPPED' "$OUT/pytest_gpu.txt" | cut -c1-200 | head -20
  tail -3 "$OUT/pytest_gpu.txt"
  echo "== ONNX node cases on CUDA"; grep -E '^(FAIL|UNEXPECTED|EXCLUDED)' "$OUT/onnx_node_cuda.txt" | cut -c1-160 | head -40; tail -3 "$OUT/onnx_node_cuda.txt"
  echo "== benchmarks"; cat "$OUT/bench.txt"
  stamp "done"
} > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
