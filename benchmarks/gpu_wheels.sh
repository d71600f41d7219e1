#!/usr/bin/env bash
# The wheels the GPU check (benchmarks/gpu_check.sh) needs and the GPU machine lacks, downloaded where pip reaches an
# index (the machine reaches none): datasets, which fine-tuning and `--dataset_name` read data with, and the two of
# its requirements the machine's image does not have (dill, multiprocess; pyarrow, pandas, xxhash, fsspec and
# huggingface_hub are there). For the machine's Python (3.12, x86-64 Linux) by default. From the repository root:
#
#     bash benchmarks/gpu_wheels.sh                               # into .whl/, which the check installs from
#     GPU_WHEELS_PYTHON=3.11 bash benchmarks/gpu_wheels.sh DIR    # for another Python (the CPU rehearsal's)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.whl}
PY=${GPU_WHEELS_PYTHON:-3.12}
WHEELS=(datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19)
mkdir -p "$DEST"
"${PIP_PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform any -d "$DEST" "${WHEELS[@]}"
ls "$DEST"
