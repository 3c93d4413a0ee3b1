# Sourced by the GPU check scripts (gpu_checks.sh, gpu_generation.sh) on a lent machine with no network:
# installs the wheels that travel in .whl/ (if any) into /tmp/site, sets PYTHONPATH and the offline environment,
# and creates $OUT (the caller's default is given as $1).
OUT=${OUT:-$1}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD
fi
export HF_HUB_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TRL_EXPERIMENTAL_SILENCE=1 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
