#!/usr/bin/env bash
# Everything docs/gpu.md records, in one command on a machine with a CUDA GPU, CuPy,
# torch with CUDA, torchvision and transformers (no network needed):
#   1. the machine and the versions          -> LOGS/env.txt
#   2. gradcli installed from this checkout  -> LOGS/install.txt
#   3. the gpu-marked tests                   -> LOGS/pytest.txt
#   4. three real models exported there, then run on cuda:0 against PyTorch CUDA
#      and the cross-stream wait taken away   -> LOGS/export.txt, LOGS/models.txt, LOGS/profile.txt
#
#     bash scripts/gpu_check.sh LOGS [tests|models|all]
set -u
logs=${1:?usage: gpu_check.sh LOGS [tests|models|all]}
what=${2:-all}
mkdir -p "$logs"
export PYTHONUNBUFFERED=1
py=${PYTHON:-python3}
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $py --version
  $py -c "import cupy, torch, numpy; print('cupy', cupy.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda, 'numpy', numpy.__version__)"
} > "$logs/env.txt" 2>&1
$py -m pip install -q --no-deps --no-build-isolation -e . > "$logs/install.txt" 2>&1 || echo "install failed"
rc=0
if [ "$what" != models ]; then
  # the gpu-marked tests live in these modules; naming them keeps collection away from
  # the extras a GPU image may lack
  timeout 400 $py -m pytest -q -m gpu -rs -n "${JOBS:-8}" -p no:cacheprovider --tb=short \
    tests/test_gpu.py tests/test_devices.py tests/test_streams.py \
    > "$logs/pytest.txt" 2>&1 || rc=1
  tail -3 "$logs/pytest.txt"
fi
if [ "$what" != tests ]; then
  work=$(mktemp -d)
  $py scripts/gpu_models.py export --out "$work" > "$logs/export.txt" 2>&1 || { rc=1; tail -5 "$logs/export.txt"; }
  $py scripts/gpu_models.py run --dir "$work" --profile "$logs" > "$logs/models.txt" 2>&1 || rc=1
  $py scripts/gpu_models.py stream-control >> "$logs/models.txt" 2>&1 || rc=1
  tail -17 "$logs/models.txt"
fi
exit $rc
