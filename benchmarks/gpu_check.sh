#!/usr/bin/env bash
# The GPU check (issue 48), in one go: a fresh GPU machine runs it in under 8 minutes with only its own PyTorch,
# transformers and Accelerate, and nothing to download. From the repository root:
#
#     bash benchmarks/gpu_check.sh
#
# Parts, each with a time limit, run in this order whatever the others did (the summary says which passed):
#   versions   the machine's Python, torch, CUDA, the card, and every library the parts need (versions.json)
#   pytest     `pytest -m gpu tests/test_gpu.py`: every head on CUDA against the CPU, bf16 autocast training against
#              float32, sdpa / eager / flash_attention_2 and the unpadded encoder, a pretraining run that saves,
#              resumes and reloads, torch.compile (pytest_gpu.txt, pytest_gpu.xml)
#   speed      benchmarks/gpu_speed.py: pretraining tokens/s and MFU, Mini-BERT beside transformers' BERT at the
#              Mini-BERT and BERT-base sizes, inference on mixed lengths, the 8 x 64 training step (gpu_speed.json, .png)
#   ddp, fsdp  `accelerate launch` with one process, DDP and FSDP (the docs' fsdp.yaml), 40 steps with gradient
#              accumulation (ddp, fsdp), then again from the step-20 checkpoint (ddp_resume, fsdp_resume): runs/
#   data_wait  `minibert pretrain` on the device, data collated in the training process and in 2 workers: the share
#              of step time spent waiting for batches (runs/data_wait_workers_N/)
# Everything goes into $OUT (default runs/gpu_check/): gpu_check.log holds all the output, summary.txt the outcome.
#
# Environment:
#   OUT              where the results go
#   PYTHON           the interpreter with the machine's torch, transformers and Accelerate (default: python3)
#   MINIBERT_WHEELS  a folder of wheels (default runs/gpu_wheels/, carried with the working tree) installed, without
#                    their dependencies and without an index, into a virtual environment over the machine's own
#                    packages before anything runs: for a machine whose transformers is older than 5.0 (which
#                    Mini-BERT needs), or which lacks pytest, datasets or matplotlib. Make it on a machine with an
#                    index: pip download --no-deps -d runs/gpu_wheels "transformers>=5,<6" "huggingface_hub>=1" ...
#   GPU_CHECK_QUICK  1: tiny sizes and short runs (the dry run on a CPU; the CUDA tests then skip, saying so, unless
#                    MINIBERT_GPU_TESTS_ON_CPU=1 runs them on the CPU)
#   GPU_CHECK_BUDGET seconds for the whole check (default 420); each part gets at most what is left
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PYTHON=${PYTHON:-python3}
QUICK=${GPU_CHECK_QUICK:-0}
BUDGET=${GPU_CHECK_BUDGET:-420}
WHEELS=${MINIBERT_WHEELS:-runs/gpu_wheels}
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
# The working tree is the package (nothing to build, and the machine's packages stay as they are); offline, so that
# no library waits on the network.
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false HF_HOME="$OUT/hf_home"
START=$SECONDS
SUMMARY=()
FAILED=0

# part NAME LIMIT COMMAND...: run COMMAND for at most LIMIT seconds (less if the budget runs short), record its exit.
part() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - (SECONDS - START)))
    ((limit > left)) && limit=$left
    if ((limit < 10)); then
        echo "== $name: skipped, the budget of $BUDGET s is spent"
        SUMMARY+=("$name: skipped (budget spent)")
        FAILED=1
        return
    fi
    echo "== $name (at most $limit s): $*"
    local began=$SECONDS rc
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
    local verdict="passed"
    ((rc == 124 || rc == 137)) && verdict="timed out after $limit s"
    ((rc != 0 && rc != 124 && rc != 137)) && verdict="failed (exit $rc)"
    ((rc != 0)) && FAILED=1
    echo "== $name: $verdict in $((SECONDS - began)) s"
    SUMMARY+=("$name: $verdict in $((SECONDS - began)) s")
}

# has MODULE: whether $PYTHON imports it.
has() { "$PYTHON" -c "import $1" >/dev/null 2>&1; }

echo "== gpu_check in $REPO at $(date -u '+%Y-%m-%d %H:%M UTC'), results in $OUT"
command -v nvidia-smi >/dev/null && nvidia-smi | tee "$OUT/nvidia-smi.txt"

if compgen -G "$WHEELS/*.whl" >/dev/null; then
    echo "== installing the wheels in $WHEELS into $OUT/venv (over the machine's packages, no index, no dependencies)"
    "$PYTHON" -m venv --system-site-packages "$OUT/venv" &&
        "$OUT/venv/bin/python" -m pip install --quiet --no-index --no-deps "$WHEELS"/*.whl &&
        PYTHON="$OUT/venv/bin/python"
fi

echo "== versions"
"$PYTHON" - "$OUT/versions.json" <<'EOF'
import importlib, json, platform, sys
found = {"python": platform.python_version()}
for name in ("torch", "transformers", "accelerate", "tokenizers", "safetensors", "huggingface_hub", "datasets",
             "numpy", "pytest", "matplotlib", "flash_attn", "triton", "tqdm"):
    try:
        found[name] = getattr(importlib.import_module(name), "__version__", "installed")
    except Exception as err:  # missing, or broken on this machine
        found[name] = f"missing ({type(err).__name__})"
try:
    import torch
    found["cuda_available"] = torch.cuda.is_available()
    found["torch_cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        found["device"] = torch.cuda.get_device_name()
        found["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        found["bf16_supported"] = torch.cuda.is_bf16_supported()
except Exception as err:
    found["torch_error"] = repr(err)
print(json.dumps(found, indent=2))
json.dump(found, open(sys.argv[1], "w"), indent=2)
major = str(found.get("transformers", "")).split(".")[0]
if not major.isdigit() or int(major) < 5:
    print(f"WARNING: transformers {found.get('transformers')}: Mini-BERT needs transformers 5.x; put wheels of "
          "transformers>=5, huggingface_hub>=1 and tokenizers>=0.21 in runs/gpu_wheels/ and run again")
EOF
CUDA=$("$PYTHON" -c "import torch; print(int(torch.cuda.is_available()))" 2>/dev/null || echo 0)
DEVICE=cpu
((CUDA)) && DEVICE=cuda
PRECISION=no
((CUDA)) && PRECISION=bf16
echo "== device: $DEVICE"

# --- pytest -m gpu -------------------------------------------------------------------------------------------------
if has pytest; then
    # -o addopts= : the suite's own options need pytest-xdist and pytest-timeout, which a GPU machine may not have.
    part pytest 180 "$PYTHON" -m pytest -o addopts= -p no:cacheprovider -m gpu tests/test_gpu.py -rs -v --durations=10 \
        --junitxml="$OUT/pytest_gpu.xml"
else
    echo "== pytest: skipped, no pytest here (put its wheels in $WHEELS)"
    SUMMARY+=("pytest: skipped (no pytest)")
    FAILED=1
fi

# --- the speed benchmark -------------------------------------------------------------------------------------------
SPEED=(--output "$OUT/gpu_speed.json")
((QUICK)) && SPEED+=(--device "$DEVICE" --sizes tiny --steps 2 --rounds 1 --step_repeats 3 --step_size tiny)
part speed 180 "$PYTHON" -m benchmarks.gpu_speed "${SPEED[@]}"

# --- pretraining runs: DDP, FSDP, the data wait ----------------------------------------------------------------
RUNS="$OUT/runs"
mkdir -p "$RUNS"
STEPS=200
((QUICK)) && STEPS=20
MODEL=()
((QUICK)) && MODEL=(--config_overrides hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64)
PRETRAIN=(pretrain --train_file examples/pretraining.txt --vocab_size 2000 --max_seq_length 64 --report_to none
    --disable_tqdm true --logging_steps 10 --mixed_precision "$PRECISION" "${MODEL[@]}")
if has datasets; then
    # One process each; gradient accumulation 2 and a resume from the middle checkpoint exercise no_sync and the
    # distributed checkpoint format.
    FSDP_YAML="$OUT/fsdp.yaml"
    cat >"$FSDP_YAML" <<EOF
distributed_type: FSDP
num_machines: 1
num_processes: 1
mixed_precision: '$PRECISION'
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: MiniBertLayer
  fsdp_reshard_after_forward: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
EOF
    # DDP with one process needs a config file: `accelerate launch --multi_gpu` refuses fewer than 2 processes.
    DDP_YAML="$OUT/ddp.yaml"
    printf "distributed_type: MULTI_GPU\nnum_machines: 1\nnum_processes: 1\nmixed_precision: '%s'\n" "$PRECISION" >"$DDP_YAML"
    COMMON=(--max_steps 40 --save_steps 20 --eval_steps 20 --gradient_accumulation_steps 2)
    DDP=(--config_file "$DDP_YAML" --main_process_port 29517)
    FSDP=(--config_file "$FSDP_YAML" --main_process_port 29518)
    for name in ddp fsdp; do
        declare -n options=${name^^}
        folder="$RUNS/$name"
        part "$name" 45 "$PYTHON" -m accelerate.commands.launch "${options[@]}" -m modeling_minibert.cli "${PRETRAIN[@]}" \
            "${COMMON[@]}" --output_dir "$folder"
        if [[ -d "$folder/checkpoint-20" ]]; then
            cp -r "$folder" "$folder-resumed"
            part "${name}_resume" 45 "$PYTHON" -m accelerate.commands.launch "${options[@]}" -m modeling_minibert.cli \
                "${PRETRAIN[@]}" "${COMMON[@]}" --output_dir "$folder-resumed" --resume_from_checkpoint "$folder-resumed/checkpoint-20"
        fi
        unset -n options
    done

    # Last: the least of the questions, if the budget allows.
    for workers in 0 2; do
        part "data_wait_workers_$workers" 45 "$PYTHON" -m modeling_minibert.cli "${PRETRAIN[@]}" --max_steps "$STEPS" \
            --save_steps "$STEPS" --eval_steps "$STEPS" --dataloader_num_workers "$workers" \
            --output_dir "$RUNS/data_wait_workers_$workers"
    done
else
    echo "== data_wait, ddp, fsdp: skipped, no datasets package here (pretraining builds its examples with it)"
    SUMMARY+=("data_wait, ddp, fsdp: skipped (no datasets)")
    FAILED=1
fi

# --- summary -------------------------------------------------------------------------------------------------------
{
    echo "gpu_check: $((SECONDS - START)) s in all (budget $BUDGET s), device $DEVICE"
    printf '%s\n' "${SUMMARY[@]}"
    "$PYTHON" - "$OUT" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
speed = out / "gpu_speed.json"
if speed.is_file():
    results = json.loads(speed.read_text())
    from benchmarks.gpu_speed import readme_table
    print(f"\n{results['device']['name']}, {results['precision']}:")
    print(readme_table(results))
    print(f"8 x 64 step: {results['step_8x64']['variants_milliseconds']} (goal {results['step_8x64']['goal_milliseconds']} ms)")
def records(folder):
    return [{k: v for k, v in json.loads(line).items() if k != "data_wait"}
            for line in (folder / "metrics.jsonl").read_text().splitlines()]
for folder in sorted((out / "runs").glob("*")):
    train = folder / "train_results.json"
    if train.is_file():
        numbers = json.loads(train.read_text())
        print(f"{folder.name}: {numbers.get('train_steps_per_second')} steps/s, data wait {numbers.get('train_data_wait')}")
    whole = folder.with_name(folder.name.removesuffix("-resumed"))
    if folder.name.endswith("-resumed") and (whole / "metrics.jsonl").is_file() and (folder / "metrics.jsonl").is_file():
        ours, theirs = records(folder), records(whole)
        worst = max((abs(a[k] - b[k]) / max(abs(b[k]), 1e-12) for a, b in zip(ours, theirs) for k in b
                     if k != "step" and isinstance(b[k], float)), default=float("nan"))
        same = len(ours) == len(theirs) and all(a["step"] == b["step"] for a, b in zip(ours, theirs))
        print(f"{folder.name}: the resumed curve {'matches' if same and worst <= 1e-4 else 'DIFFERS FROM'} the "
              f"uninterrupted run's (largest relative difference {worst:.1e}, goal 1e-4)")
EOF
} | tee "$OUT/summary.txt"
exit $FAILED
