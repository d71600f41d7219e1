"""The output folder every job writes, in one place: its file names, its results files, its lock, and how a
checkpoint in it is recognised as complete.

    OUTPUT/
      config.json, model.safetensors, tokenizer files     the model (written once the run is done)
      all_results.json, {train,eval,test}_results.json     final metrics, as `Trainer.save_metrics` writes them
      trainer_state.json or metrics.jsonl                  the history of the run
      training_curves.png, README.md (the model card)
      checkpoint-N/                                        resumable state after step N (model/: see CHECKPOINT_MODEL_DIR)
      .minibert.lock                                       held while a run writes here

A new results or layout file is a name here plus the line of the job that writes it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import time
import warnings
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import modeling_minibert.utils.files as files
from modeling_minibert.utils.files import check_unlocked, lock_holder, write_json  # noqa: F401 - the lock, as jobs know it

CARD_FILE = "README.md"
ALL_RESULTS_FILE = "all_results.json"
METRICS_FILE = "metrics.jsonl"
TRAINER_STATE_FILE = "trainer_state.json"
CURVES_FILE = "training_curves.png"
LEARNING_RATE_SEARCH_FILE = "learning_rate_search.json"  # with learning_rates: each candidate's validation score
LEARNING_RATE_PLOT_FILE = "learning_rate_search.png"
SEARCH_RUN_PREFIX = (
    "run-"  # OUTPUT/run-I: candidate I's checkpoints while a search runs (Trainer's hyperparameter_search names)
)
CONFUSION_FILE = "confusion_matrix.png"
CHECKPOINT_PREFIX = "checkpoint-"
# Inside a pretraining checkpoint whose trained module is more than the model it saves (ELECTRA's generator and
# discriminator): the saved model alone, `from_pretrained(checkpoint, subfolder=CHECKPOINT_MODEL_DIR)`.
CHECKPOINT_MODEL_DIR = "model"
LOCK_FILE = files.LOCK_FILE  # held while a run writes here (files.check_unlocked reads it)
# Distillation's own leftovers in its output folder: the fine-tuned teacher and the teacher's cached logits.
# Needed to rerun cheaply, never part of the published model.
TEACHER_DIR = "teacher"
TEACHER_LOGITS_FILE = "teacher_logits.safetensors"
TEACHER_LOGITS_INFO_FILE = "teacher_logits.json"
TEACHER_INFO_FILE = "distill_teacher.json"  # inside TEACHER_DIR: what the fine-tuned teacher was trained from
DISTILLATION_ARGS_FILE = "distillation_args.json"
# An int8 model folder (modeling_minibert/deployment/quantization.py): its weights, and how they were quantized. Not
# model.safetensors, so that from_pretrained refuses the folder instead of loading int8 values as floats.
QUANTIZED_WEIGHTS_FILE = "model.int8.safetensors"
QUANTIZED_INFO_FILE = "quantization.json"
# A model compiled ahead of time for this CPU (modeling_minibert/deployment/compiled.py): AOTInductor's package, native
# code, and what it was compiled with (torch's version, the CPU capability).
COMPILED_PACKAGE_FILE = "model.pt2"
COMPILED_BUILD_FILE = "compiled.json"
# A ready serving folder (modeling_minibert/deployment/serving_benchmark.py): which path it holds, the files that path
# reads ("files"), what was measured.
SERVING_FILE = "serving.json"
# The sentence-transformers files beside a model (modeling_minibert/sharing/sentence_transformers_format.py): the
# module list, the Transformer module's options; each later module in its own folder named "<index>_<Name>"
# (1_Pooling, 2_Dense).
SENTENCE_TRANSFORMERS_MODULES_FILE = "modules.json"
SENTENCE_BERT_CONFIG_FILE = "sentence_bert_config.json"


def results_file(split: str) -> str:
    """`train_results.json`, `eval_results.json`, `test_results.json`: Trainer's names."""
    return f"{split}_results.json"


def write_results(folder: str | os.PathLike, results: dict[str, dict]) -> dict:
    """Write each split's metrics to `{split}_results.json` and all of them to `all_results.json` (what
    `Trainer.save_metrics` writes, for every job alike); return the merged metrics. Empty splits are skipped."""
    folder = Path(folder)
    merged: dict = {}
    for split, metrics in results.items():
        if metrics:
            write_json(folder / results_file(split), metrics)
            merged.update(metrics)
    write_json(folder / ALL_RESULTS_FILE, merged)
    return merged


# --- the lock: one run at a time per folder ---------------------------------------------------------------------


def acquire_lock(out: Path, job: str = "minibert") -> Path:
    """Create `out/.minibert.lock` naming this process and job (and `out` if need be); take over a dead run's lock.

    The first write into the folder: a folder that cannot be written is reported here, in one line.
    """
    lock = out / LOCK_FILE
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OSError(err.errno, f"cannot write to output_dir {out}: {err.strerror or err}") from err
    record = json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "job": job, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    )
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            check_unlocked(out, job)  # raises if the holder lives
            warnings.warn(
                f"taking over the lock of a {job} run that is gone: {lock} ({files.read_lock(lock)})", stacklevel=2
            )
            lock.unlink(missing_ok=True)
            continue
        except OSError as err:
            raise OSError(err.errno, f"cannot write to output_dir {out}: {err.strerror or err}") from err
        with os.fdopen(fd, "w") as f:
            f.write(record)
        return lock
    raise FileExistsError(f"output_dir {out} is in use by another {job} run that started just now")


def release_lock(out: Path) -> None:
    lock = out / LOCK_FILE
    if files.read_lock(lock).get("pid") == os.getpid():
        lock.unlink(missing_ok=True)


@contextmanager
def locked(out: Path, job: str = "minibert") -> Iterator[Path]:
    """Hold the folder's lock for the body; released however the body ends."""
    lock = acquire_lock(out, job)
    try:
        yield lock
    finally:
        release_lock(out)


# --- checkpoints: which are complete ------------------------------------------------------------------------------


def checkpoint_folders(out: Path) -> list[tuple[int, Path]]:
    """The checkpoint-N folders in `out` (complete or not) with their N, oldest first."""
    if not out.is_dir():
        return []
    pattern = re.compile(rf"{CHECKPOINT_PREFIX}(\d+)")
    found = [(int(m.group(1)), p) for p in out.iterdir() if (m := pattern.fullmatch(p.name)) and p.is_dir()]
    return sorted(found, key=lambda item: item[0])


def latest_checkpoint(out: Path, problem: Callable[[Path], str | None]) -> Path | None:
    """The newest checkpoint for which `problem` finds nothing; newer broken ones are passed over, each with a
    one-line warning."""
    for _, folder in reversed(checkpoint_folders(out)):
        found = problem(folder)
        if found is None:
            return folder
        warnings.warn(
            f"skipping the unfinished checkpoint {folder} ({found}); falling back to the one before", stacklevel=2
        )
    return None


def safetensors_problem(path: Path) -> str | None:
    """None if `path` is as long as its safetensors header says (8-byte length, JSON header, then the data)."""
    from modeling_minibert.checks_minibert import read_safetensors_header  # the one header reader (imports torch)

    try:
        read_safetensors_header(path)
    except FileNotFoundError:
        return f"no {path.name}"
    except (OSError, ValueError) as err:
        return str(err).replace(str(path), path.name, 1)
    return None


def torch_file_problem(path: Path) -> str | None:
    """None if `path`, a torch.save file (a zip archive), is whole: its directory (at the end) reads, and every
    entry lies inside the file."""
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            if any(info.header_offset + info.compress_size > size for info in archive.infolist()):
                return f"{path.name} is cut short ({size} bytes)"
    except FileNotFoundError:
        return f"no {path.name}"
    except (OSError, zipfile.BadZipFile) as err:
        return f"{path.name} unreadable: {err}"
    return None


def trainer_checkpoint_problem(folder: Path) -> str | None:
    """Why Trainer could not resume exactly from `folder`, or None if it is complete.

    Complete means: trainer_state.json (Trainer's last write) parses and its global_step is the folder's N, and
    the weights, optimizer and scheduler it restores are whole. Checked by size from the files' own tables (the
    safetensors header, the zip directory torch.save writes), without loading the tensors: a file cut short by a
    kill or a full disk fails these checks. transformers has no such check (its get_last_checkpoint only looks
    for the folder name), hence this one.
    """
    try:
        state = json.loads((folder / TRAINER_STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no trainer_state.json"
    except (OSError, ValueError) as err:
        return f"trainer_state.json unreadable: {err}"
    step = folder.name.rsplit("-", 1)[-1]
    if not isinstance(state, dict) or str(state.get("global_step")) != step:
        return f"trainer_state.json has global_step {state.get('global_step') if isinstance(state, dict) else None}, not {step}"
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            return f"{index.name} unreadable: {err}"
    else:
        shards = ["model.safetensors"]
    for name in shards:
        problem = safetensors_problem(folder / name)
        if problem is not None:
            return problem
    for name in ("optimizer.pt", "scheduler.pt"):
        problem = torch_file_problem(folder / name)
        if problem is not None:
            return problem
    if (folder / "rng_state.pth").exists():
        return torch_file_problem(folder / "rng_state.pth")
    return None
