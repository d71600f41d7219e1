#!/usr/bin/env bash
# The GPU check, in one go: a fresh GPU machine runs it in under 8 minutes with its own PyTorch, transformers and
# Accelerate, offline. From the repository root:
#
#     bash benchmarks/gpu_wheels.sh        # beforehand, where pip reaches an index: wheels for what the machine lacks
#     bash benchmarks/gpu_check.sh         # on the GPU machine, the wheels folder (.whl/) carried with the tree
#
# Parts, each with a time limit, in this order whatever the others did. A part passes only when it ran and exited 0:
# one skipped (something missing, the budget spent) or cut by its limit has not passed, and the check fails.
#   versions        the machine's Python, torch, CUDA, the cards, and every library the parts need (versions.json)
#   pytest          `pytest -m gpu tests/cross_cutting/test_gpu.py`: every head on CUDA against the CPU, bf16 autocast training
#                   against float32, the attention backends and kernels against each other, a pretraining run that
#                   saves, resumes and reloads, the training step in one compiled graph (pytest_gpu.xml)
#   speed           benchmarks/gpu_speed.py: training tokens/s on full-length and mixed-length batches and
#                   inference, Mini-BERT beside transformers' BERT at the Mini-BERT and BERT-base sizes, MFU from
#                   the FLOPs each step needs over the datasheet and the measured matmul peaks, the 8 x 64 eager
#                   step (gpu_speed.json, written after each measurement; gpu_speed.png)
#   single          `accelerate launch` of one process (no DDP: Accelerate wraps a single process in nothing), 40
#                   steps with gradient accumulation, then resumed from its step-20 checkpoint (single_resume)
#   fsdp            the same under FSDP2 (the docs' fsdp.yaml) with one process, and fsdp_resume
#   ddp             DDP with 2 processes and fsdp with 2, each resumed: only where the machine has 2 GPUs or more
#                   (on a CPU, the dry run's 2 processes over gloo)
#   data_wait       `minibert pretrain` on the device, data collated in the training process and in 2 workers: the
#                   share of step time spent waiting for batches (data_wait_workers_N)
#   compile         last, with its own limit: the 8 x 64 step in one graph with CUDA graphs (torch.compile
#                   reduce-overhead), added to gpu_speed.json
# The pretraining parts' numbers, and whether each resumed run continued its uninterrupted run's curve, go to
# runs.json as each part ends. $OUT (default runs/gpu_check/) receives at most 8 files and no folder:
# gpu_check.log (all the output), summary.txt (rewritten after every part), versions.json, pytest_gpu.xml,
# gpu_speed.json, gpu_speed.png, runs.json. The runs' own folders are in $GPU_CHECK_WORK (default: a temporary one).
#
# Environment:
#   OUT              where the results go
#   PYTHON           the interpreter with the machine's torch, transformers and Accelerate (default: python3)
#   MINIBERT_WHEELS  a folder of wheels (default .whl/) installed before anything runs, without their dependencies
#                    and without an index, with `pip install --target` into $GPU_CHECK_WORK/site, which PYTHONPATH
#                    then puts before the machine's own packages (the machine's venv stays as it is)
#   GPU_CHECK_QUICK  1: tiny sizes and short runs (the dry run on a CPU; MINIBERT_GPU_TESTS_ON_CPU=1 then runs the
#                    gpu tests on the CPU)
#   GPU_CHECK_BUDGET seconds for the whole check (default 420); each part gets at most what is left, and the compile
#                    part its own GPU_CHECK_COMPILE_LIMIT (default 90) within it
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PYTHON=${PYTHON:-python3}
QUICK=${GPU_CHECK_QUICK:-0}
BUDGET=${GPU_CHECK_BUDGET:-420}
COMPILE_LIMIT=${GPU_CHECK_COMPILE_LIMIT:-90}
WHEELS=${MINIBERT_WHEELS:-.whl}
WORK=${GPU_CHECK_WORK:-$(mktemp -d)}
mkdir -p "$WORK"
exec > >(tee -a "$OUT/gpu_check.log") 2>&1
# The working tree is the package (nothing to build); offline, so that no library waits on the network.
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false HF_HOME="$WORK/hf_home" PYTHONUNBUFFERED=1
START=$SECONDS
SUMMARY=()
FAILED=0
RUNS="$WORK/runs"
mkdir -p "$RUNS"

# write_summary [tables]: summary.txt as it stands, after every part (a check cut short still says how far it got);
# with `tables`, at the end, followed by the tables of gpu_speed.json and runs.json.
write_summary() {
    {
        echo "gpu_check: $((SECONDS - START)) s so far (budget $BUDGET s), device ${DEVICE:-unknown}"
        printf '%s\n' "${SUMMARY[@]}"
        [[ ${1:-} == tables ]] && "$PYTHON" -m benchmarks.gpu_check_report --out "$OUT" 2>&1
    } >"$OUT/summary.txt.tmp"
    mv "$OUT/summary.txt.tmp" "$OUT/summary.txt"
}

# verdict NAME TEXT FAIL: record a part's outcome (FAIL 1: the check has not passed).
verdict() {
    echo "== $1: $2"
    SUMMARY+=("$1: $2")
    (($3)) && FAILED=1
    write_summary
}

# part NAME LIMIT COMMAND...: run COMMAND for at most LIMIT seconds (less if the budget runs short), record its exit.
part() {
    local name=$1 limit=$2
    shift 2
    local left=$((BUDGET - (SECONDS - START)))
    ((limit > left)) && limit=$left
    if ((limit < 10)); then
        verdict "$name" "skipped, the budget of $BUDGET s is spent (not passed)" 1
        return 1
    fi
    echo "== $name (at most $limit s): $*"
    local began=$SECONDS rc
    timeout --kill-after=10 "$limit" "$@"
    rc=$?
    if ((rc == 0)); then
        verdict "$name" "passed in $((SECONDS - began)) s" 0
    elif ((rc == 124 || rc == 137)); then
        verdict "$name" "timed out after $limit s (not passed)" 1
    else
        verdict "$name" "failed (exit $rc) in $((SECONDS - began)) s" 1
    fi
    return $rc
}

# skip NAME WHY: a part that cannot run here; it has not passed.
skip() { verdict "$1" "skipped: $2 (not passed)" 1; }

echo "== gpu_check in $REPO at $(date -u '+%Y-%m-%d %H:%M UTC'), results in $OUT, runs in $WORK"
command -v nvidia-smi >/dev/null && nvidia-smi

if compgen -G "$WHEELS/*.whl" >/dev/null; then
    # Into a folder of their own, not a venv: a venv made from the machine's Python would not see the torch,
    # transformers and Accelerate installed in the machine's own venv.
    echo "== installing the wheels in $WHEELS into $WORK/site (no index, no dependencies)"
    if "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/site" \
        "$WHEELS"/*.whl; then
        export PYTHONPATH="$PYTHONPATH:$WORK/site"
    else
        echo "== the wheels did not install: the parts that need them fail, saying which module is missing"
    fi
fi

# One process finds the versions and what the parts below need to know (every process here spends seconds
# importing torch and transformers): the device, and whether pytest and pretraining import, in $WORK/probe.
echo "== versions"
"$PYTHON" - "$OUT/versions.json" "$WORK/probe" <<'EOF'
import importlib, json, platform, sys
found = {"python": platform.python_version()}
for name in ("torch", "transformers", "accelerate", "tokenizers", "safetensors", "huggingface_hub", "datasets",
             "dill", "multiprocess", "pyarrow", "numpy", "pytest", "matplotlib", "flash_attn", "triton", "tqdm"):
    try:
        module = importlib.import_module(name)
        found[name] = getattr(module, "__version__", "installed")
        found[f"{name}_from"] = str(getattr(module, "__file__", ""))
    except Exception as err:  # missing, or broken on this machine
        found[name] = f"missing ({type(err).__name__})"
try:
    import torch
    found["cuda_available"] = torch.cuda.is_available()
    found["torch_cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        found["device"] = torch.cuda.get_device_name()
        found["gpus"] = torch.cuda.device_count()
        found["capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
        found["bf16_supported"] = torch.cuda.is_bf16_supported()
except Exception as err:
    found["torch_error"] = repr(err)
print(json.dumps({k: v for k, v in found.items() if not k.endswith("_from")}, indent=2))
json.dump(found, open(sys.argv[1], "w"), indent=2)
major = str(found.get("transformers", "")).split(".")[0]
if not major.isdigit() or int(major) < 5:
    print(f"WARNING: transformers {found.get('transformers')}: Mini-BERT needs transformers 5.x; put wheels of "
          "transformers>=5, huggingface_hub>=1 and tokenizers>=0.21 in .whl/ and run again")
try:
    importlib.import_module("modeling_minibert.training.pretraining")
    no_pretraining = ""
except Exception as err:  # the parts that need it are skipped, saying this
    no_pretraining = f"{type(err).__name__}: {err}".splitlines()[0]
with open(sys.argv[2], "w") as probe:  # a value a line: CUDA (0/1), the GPU count, pytest (0/1), why no pretraining
    print(int(found.get("cuda_available") is True), found.get("gpus", 0), int("missing" not in found["pytest"]),
          no_pretraining, sep="\n", file=probe)
EOF
CUDA=0 GPUS=0 HAS_PYTEST=0 NO_PRETRAINING="the versions step did not finish"
[[ -f $WORK/probe ]] && { read -r CUDA; read -r GPUS; read -r HAS_PYTEST; read -r NO_PRETRAINING; } <"$WORK/probe"
DEVICE=cpu
PRECISION=no
if ((CUDA)); then
    DEVICE=cuda
    PRECISION=bf16
fi
echo "== device: $DEVICE ($GPUS GPU(s))"
write_summary

# --- pytest -m gpu -------------------------------------------------------------------------------------------------
if ((HAS_PYTEST)); then
    # -o addopts= : the suite's own options need pytest-xdist and pytest-timeout, which a GPU machine may not have.
    part pytest 180 "$PYTHON" -m pytest -o addopts= -p no:cacheprovider -m gpu tests/cross_cutting/test_gpu.py -rs -v \
        --durations=10 --junitxml="$OUT/pytest_gpu.xml"
else
    skip pytest "no pytest here (put its wheels in $WHEELS)"
fi

# --- the speed benchmark -------------------------------------------------------------------------------------------
SPEED=(--output "$OUT/gpu_speed.json" --device "$DEVICE")
((QUICK)) && SPEED+=(--sizes tiny --steps 2 --rounds 1 --step_repeats 3 --step_size tiny)
part speed 180 "$PYTHON" -m benchmarks.gpu_speed "${SPEED[@]}" --parts training inference step

# --- pretraining runs: one process, FSDP, DDP, the data wait -------------------------------------------------------
STEPS=200
LOG=10
((QUICK)) && STEPS=8 LOG=2
MODEL=(--vocab_size 2000 --max_seq_length 64)
((QUICK)) && MODEL=(--vocab_size 500 --max_seq_length 32
    --config_overrides hidden_size=32,num_hidden_layers=2,num_attention_heads=2,intermediate_size=64)
PRETRAIN=(pretrain --train_file examples/pretraining.txt --report_to none
    --disable_tqdm true --logging_steps "$LOG" --mixed_precision "$PRECISION" "${MODEL[@]}")
COMMON=(--max_steps 40 --save_steps 20 --eval_steps 20 --gradient_accumulation_steps 2)
((QUICK)) && COMMON=(--max_steps 8 --save_steps 4 --eval_steps 4 --gradient_accumulation_steps 2)
MIDDLE=${COMMON[3]}  # the checkpoint a run is resumed from: its middle one
PORT=29517

# config NAME PROCESSES TYPE: an `accelerate launch` config file of TYPE (NO, MULTI_GPU or FSDP) for PROCESSES.
config() {
    local file="$WORK/$1.yaml"
    {
        # No use_cpu on a CPU: Accelerate's CPU launch starts one process; the loop picks the CPU (gloo) itself.
        printf "distributed_type: %s\nnum_machines: 1\nnum_processes: %s\nmixed_precision: '%s'\n" "$3" "$2" "$PRECISION"
        if [[ $3 == FSDP ]]; then
            printf "fsdp_config:\n  fsdp_version: 2\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n"
            printf "  fsdp_transformer_layer_cls_to_wrap: MiniBertLayer\n  fsdp_reshard_after_forward: true\n"
            printf "  fsdp_state_dict_type: SHARDED_STATE_DICT\n"
        fi
    } >"$file.tmp" && mv "$file.tmp" "$file"
    echo "$file"
}

# launched NAME CONFIG: the run NAME with `accelerate launch --config_file CONFIG`, then resumed from its middle
# checkpoint in a copy (NAME_resume), then its curve compared (NAME_resume_same_curve); each recorded in runs.json.
launched() {
    local name=$1 file=$2 folder="$RUNS/$1"
    PORT=$((PORT + 1))
    local launch=("$PYTHON" -m accelerate.commands.launch --config_file "$file" --main_process_port "$PORT" -m modeling_minibert.cli)
    part "$name" 60 "${launch[@]}" "${PRETRAIN[@]}" "${COMMON[@]}" --output_dir "$folder"
    [[ -d $folder ]] && "$PYTHON" -m benchmarks.gpu_check_report --out "$OUT" --record "$folder"
    if [[ -d "$folder/checkpoint-$MIDDLE" ]]; then
        cp -r "$folder" "$folder-resumed"
        part "${name}_resume" 60 "${launch[@]}" "${PRETRAIN[@]}" "${COMMON[@]}" --output_dir "$folder-resumed" \
            --resume_from_checkpoint "$folder-resumed/checkpoint-$MIDDLE" &&
            part "${name}_resume_same_curve" 20 "$PYTHON" -m benchmarks.gpu_check_report --out "$OUT" --record "$folder-resumed" \
                --resumes "$folder"
    else
        skip "${name}_resume" "$name left no checkpoint-$MIDDLE"
    fi
}

if [[ -z $NO_PRETRAINING ]]; then
    launched single "$(config single 1 NO)"
    launched fsdp "$(config fsdp 1 FSDP)"
    if ((GPUS >= 2 || !CUDA)); then
        launched ddp "$(config ddp 2 MULTI_GPU)"
        ((CUDA)) && launched fsdp_2 "$(config fsdp_2 2 FSDP)"
    else
        echo "== ddp: not run, the machine has $GPUS GPU (DDP needs 2)"
    fi
    for workers in 0 2; do
        name="data_wait_workers_$workers"
        part "$name" 45 "$PYTHON" -m modeling_minibert.cli "${PRETRAIN[@]}" --max_steps "$STEPS" --save_steps "$STEPS" \
            --eval_steps "$STEPS" --dataloader_num_workers "$workers" --output_dir "$RUNS/$name"
        [[ -d $RUNS/$name ]] && "$PYTHON" -m benchmarks.gpu_check_report --out "$OUT" --record "$RUNS/$name"
    done
else
    for name in single single_resume fsdp fsdp_resume data_wait_workers_0 data_wait_workers_2; do
        skip "$name" "pretraining does not import here: $NO_PRETRAINING"
    done
fi

# --- last: the compiled step, the riskiest part, with its own limit --------------------------------------------------
COMPILE=(--output "$OUT/gpu_speed.json" --device "$DEVICE" --parts compile --append)
((QUICK)) && COMPILE+=(--step_repeats 3 --step_size tiny)
((QUICK && !CUDA)) && COMPILE+=(--compile_backend aot_eager)  # a dry run: no C++ builds on the CPU
part compile "$COMPILE_LIMIT" "$PYTHON" -m benchmarks.gpu_speed "${COMPILE[@]}"

write_summary tables
cat "$OUT/summary.txt"
files=$(find "$OUT" -mindepth 1 | wc -l)
((files > 8)) && echo "WARNING: $OUT holds $files entries; only 8 files come back from a GPU machine"
exit $FAILED
