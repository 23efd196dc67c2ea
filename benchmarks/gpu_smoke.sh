#!/usr/bin/env bash
# The cuda target on a machine with an NVIDIA GPU, in one command, from the repository root:
#
#   bash benchmarks/gpu_smoke.sh            # everything below; a log in gpu_smoke.log
#
# 1. installs gradc in place (no dependencies fetched: cuda-bindings, nvidia-cuda-nvrtc, numpy,
#    onnx, onnxruntime, torch are expected on the machine);
# 2. runs every kernel case and a Trainer on the GPU against the reference (compile times,
#    step times, bit-exactness: benchmarks/cuda_smoke.py);
# 3. runs the target-parametrized tests with the GPU among their targets (GRADC_TEST_CUDA=only:
#    "cuda" replaces the host harness "cuda-host"; the other targets run as in CI);
# 4. runs the cases under compute-sanitizer: memcheck (out-of-bounds and misaligned accesses),
#    racecheck (shared-memory hazards) and synccheck, if compute-sanitizer is installed.
#
# Exit status: 0 when every step passed. Device time matters: steps 2-4 share one CUBIN cache
# (GRADC_SMOKE_CACHE, default .gpu-smoke-cache), so kernels are compiled once.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CACHE=${GRADC_SMOKE_CACHE:-$PWD/.gpu-smoke-cache}
LOG=${GRADC_SMOKE_LOG:-$PWD/gpu_smoke.log}
export XDG_CACHE_HOME=$CACHE
status=0
exec > >(tee "$LOG") 2>&1

echo "== 1. install"
$PY -m pip install -q --no-deps --no-build-isolation -e . || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
# gradc needs numpy, onnx, onnxruntime, networkx, tqdm; the tests also pytest and hypothesis
$PY - <<'PY' || exit 1
import importlib.util, sys
need = ["numpy", "onnx", "onnxruntime", "networkx", "tqdm", "cuda.bindings", "gradc"]
tests = ["pytest", "hypothesis"]
missing = [m for m in need + tests if importlib.util.find_spec(m) is None]
print("missing modules:", ", ".join(missing) or "none")
import importlib.metadata as md
versions = []
for dist in ("numpy", "onnx", "onnxruntime", "onnxruntime-gpu", "torch", "cuda-bindings"):
    try:
        versions.append(f"{dist} {md.version(dist)}")
    except md.PackageNotFoundError:
        pass
print("versions:", ", ".join(versions))
sys.exit(1 if set(missing) & set(need) else 0)
PY
HAVE_PYTEST=$($PY -c "import pytest, hypothesis" 2>/dev/null && echo 1 || echo 0)

echo "== 2. every case on the GPU"
$PY benchmarks/cuda_smoke.py --cache "$CACHE/gradc" || status=1

echo "== 3. target-parametrized tests with cuda among the targets"
if [ "$HAVE_PYTEST" = 1 ]; then
  GRADC_TEST_CUDA=only $PY -m pytest -q -p no:cacheprovider \
    tests/test_cuda_kernels.py tests/test_cuda_runtime.py tests/test_cuda_nvrtc.py \
    tests/test_cuda_golden.py tests/test_cuda_nan.py tests/test_onnx_where_types.py \
    tests/test_cuda_training.py tests/test_batch_norm.py tests/test_batch_norm_grad.py \
    tests/test_average_pooling.py tests/test_adam.py tests/test_dropout.py tests/test_rng.py \
    tests/test_elementwise_math.py tests/test_elementwise_math_c.py \
    tests/test_elementwise_math_grad.py tests/test_reduce.py tests/test_softmax.py \
    tests/test_movement.py tests/test_optimizers.py tests/test_losses.py \
    tests/test_injection.py tests/test_cuda_products.py tests/test_cuda_transformers.py \
    tests/test_cuda_split.py tests/test_cuda_launches.py \
    tests/test_gather.py tests/test_normalization.py tests/test_gelu.py || status=1
else
  echo "pytest or hypothesis missing: the tests are skipped (steps 2 and 4 still run)"; status=1
fi

echo "== 4. compute-sanitizer"
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -z "$SAN" ]; then
  echo "compute-sanitizer: not found (skipped)"
else
  for tool in memcheck racecheck synccheck; do
    echo "-- $tool"
    "$SAN" --tool "$tool" --error-exitcode 99 --print-limit 20 \
      $PY benchmarks/cuda_smoke.py --repeat 1 --cache "$CACHE/gradc" || status=1
  done
fi

echo "== gpu_smoke: $([ $status = 0 ] && echo PASSED || echo FAILED) (log: $LOG)"
exit $status
