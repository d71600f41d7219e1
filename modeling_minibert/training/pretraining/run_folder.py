"""The run folder: what a pretraining run writes, in Trainer's layout (the names are `outputs.py`'s), and how a
run finds its way back into it.

    OUTPUT/
      config.json, model.safetensors, tokenizer files      the pretrained model (written at the end)
      all_results.json, train_results.json, eval_results.json    final metrics, as Trainer.save_metrics writes them
      metrics.jsonl                                        history: one record per logging or evaluation step
      training_curves.png, README.md (model card)
      pretraining_args.json                                marks the folder as a run, and which one (with the
                                                           number of processes it started with)
      checkpoint-N/                                        Accelerate state after step N (the newest few), with
                                                           config.json and the tokenizer: loads with from_pretrained
      .minibert.lock                                       held while a run is writing here

Faults a run survives: a kill at any point (checkpoints are written beside their place and renamed in, the
metrics log drops a torn last line), SIGINT or SIGTERM (the step is finished and checkpointed; before the first checkpoint, nothing is kept), a truncated or
corrupt newest checkpoint (the previous good one is used, with a warning), leftovers of interrupted saves (removed), a second run into the same folder (refused while
the first lives; a dead run's lock is taken over).
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import modeling_minibert.utils.outputs as outputs
from modeling_minibert.training.pretraining.session import TrainingInterrupted
from modeling_minibert.utils.files import check_apart, check_output_dir, plain_permissions, write_json, write_text

ARGS_FILE = "pretraining_args.json"
TENSORBOARD_DIR = "tensorboard"
JOB = "pretraining"
PROCESSES = "num_processes"  # pretraining_args.json: how many processes the run started with (not an argument)
CORPUS = "prepared_corpus"  # ... and the prepared corpus it reads (`preparation.py`'s folder name)
# A resume may change these as long as the global batch stays (`keep_global_batch`).
GLOBAL_BATCH = ("gradient_accumulation_steps", PROCESSES)
PROGRESS_FILE = "progress.json"  # inside each checkpoint: the step it was taken after, and its files' sizes
# Hidden leftovers of writes that a kill interrupted: never complete, never used.
WRITE_ERRORS = ("No space left", "Read-only file system", "Permission denied", "Disk quota")
LEFTOVER_PATTERNS = (".tmp-checkpoint-*", ".saving-*", ".*.tmp")
# What a run writes into its folder; `overwrite_output_dir` removes these (and nothing else) before starting.
RUN_FILES = (
    ARGS_FILE,
    outputs.METRICS_FILE,
    outputs.ALL_RESULTS_FILE,
    outputs.results_file("train"),
    outputs.results_file("eval"),
    outputs.CURVES_FILE,
    TENSORBOARD_DIR,
    outputs.CARD_FILE,
    "config.json",
    "model.safetensors",
    "generation_config.json",
    "configuration_minibert.py",
    "modeling_minibert.py",
    "checks_minibert.py",
    "question_answering_pipeline.py",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
)


def is_write_error(err: BaseException) -> bool:
    """A place that cannot be written (disk full, read-only, no permission), however the writer reports it."""
    if isinstance(err, FileExistsError):
        return False
    # safetensors reports a full disk as its own error type; the user needs one line either way.
    return isinstance(err, OSError) or any(s in str(err) for s in WRITE_ERRORS)


@contextmanager
def naming_write_errors(what: str) -> Iterator[None]:
    """Turn a failed write into one `OSError` line that names what could not be written."""
    try:
        yield
    except Exception as err:
        if not is_write_error(err):
            raise
        raise OSError(
            getattr(err, "errno", None) or errno.EIO, f"cannot write {what}: {getattr(err, 'strerror', None) or err}"
        ) from err


# --- checks and the start of a run -----------------------------------------------------------------------------


def check_run_folder(out: Path, args) -> tuple[bool, Path | None]:
    """Refuse a folder holding another run (unless resume/overwrite); refuse a resume whose arguments differ (the
    global batch's share-out among processes is `keep_global_batch`'s to check).

    Returns whether the folder holds this very run (to resume), and what to resume from: a checkpoint folder,
    LATEST (the newest that loads, found when loading: `state.load_checkpoint`), or None.
    """
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output_dir {out} exists and is not a folder")
    if out.is_dir():
        outputs.check_unlocked(out, JOB)
    contents = [p for p in out.iterdir() if p.name != outputs.LOCK_FILE] if out.is_dir() else []
    if not contents or args.overwrite_output_dir:
        if args.resume_from_checkpoint not in (None, "latest"):
            raise FileNotFoundError(
                f"no pretraining run to resume in {out} (resume_from_checkpoint={args.resume_from_checkpoint})"
            )
        return False, None  # a new run (resuming a run that never started starts it)
    if args.resume_from_checkpoint is None:
        check_output_dir(out, overwrite=False, resume_hint=True)  # raises: the folder holds something
    saved_file = out / ARGS_FILE
    if not saved_file.is_file():
        raise FileExistsError(f"output_dir {out} holds files but no pretraining run to resume (no {ARGS_FILE})")
    try:
        saved = json.loads(saved_file.read_text())
    except ValueError as err:
        raise ValueError(f"{saved_file} is not valid JSON ({err}); the run cannot be resumed") from None
    given = args.identity()
    differences = [
        f"{k}={saved.get(k)!r} (now {v!r})" for k, v in given.items() if saved.get(k) != v and k not in GLOBAL_BATCH
    ]
    if differences:
        raise ValueError(
            f"cannot resume the run in {out}: it was started with different arguments: " + ", ".join(differences)
        )
    if args.resume_from_checkpoint == "latest":
        return True, "latest"
    chosen = Path(args.resume_from_checkpoint)
    if not (chosen / PROGRESS_FILE).is_file():
        raise FileNotFoundError(f"resume_from_checkpoint={chosen} is not a checkpoint folder of a pretraining run")
    return True, chosen


def check_apart_from_inputs(out: Path, args) -> None:
    """A new run clears the folder of a run (`overwrite_output_dir`): never one it reads, lies in or holds."""
    if args.resume_from_checkpoint is None:
        check_apart(
            out,
            {
                "model_name_or_path": args.model_name_or_path,
                "tokenizer_name": args.tokenizer_name,
                "train_file": args.train_file,
                "dataset_name": args.dataset_name,
                "teacher_model_name_or_path": getattr(args, "teacher_model_name_or_path", None),
            },
        )


def keep_global_batch(out: Path, args, num_processes: int) -> int:
    """The gradient accumulation that keeps the global batch of the run saved in `out` with `num_processes`
    processes: the run's micro-batches per optimizer step (processes x gradient_accumulation_steps when it started)
    shared out among them. `args.gradient_accumulation_steps` is kept where it already does that; the run's own
    value is taken as "unchanged" and adapted (the caller says so); any other value, or a number of processes that
    does not divide the micro-batches, is refused in one line (ValueError) naming the values.

    A run folder written before the number of processes was recorded is taken to have had as many as now.
    """
    saved = json.loads((out / ARGS_FILE).read_text())  # read and checked by `check_run_folder`
    saved_processes = saved.get(PROCESSES, num_processes)
    saved_accumulation = saved.get("gradient_accumulation_steps", args.gradient_accumulation_steps)
    per_step = saved_processes * saved_accumulation
    given = args.gradient_accumulation_steps
    if given * num_processes == per_step:
        return given
    batch = args.per_device_train_batch_size
    started = (
        f"its global batch is {per_step * batch} examples ({saved_processes} process(es) x "
        f"gradient_accumulation_steps={saved_accumulation} x per_device_train_batch_size={batch})"
    )
    if per_step % num_processes:
        raise ValueError(
            f"cannot resume the run in {out} with {num_processes} processes: {started}, and "
            f"{num_processes} processes cannot share out its {per_step} micro-batches per step; "
            f"use a number of processes that divides {per_step}"
        )
    needed = per_step // num_processes
    if given != saved_accumulation:
        raise ValueError(
            f"cannot resume the run in {out} with gradient_accumulation_steps={given} on "
            f"{num_processes} process(es): {started}; pass {needed}, or leave it as the run started"
        )
    return needed


def clean_leftovers(out: Path) -> None:
    """Remove what interrupted saves left behind (staging folders and files); they were never complete."""
    for pattern in LEFTOVER_PATTERNS:
        for path in out.glob(pattern):
            if path.name == outputs.LOCK_FILE:
                continue
            shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


@contextmanager
def nothing_kept_before_a_checkpoint(out: Path, writer: bool = True) -> Iterator[None]:
    """A run stopped (SIGINT, SIGTERM: a `KeyboardInterrupt`) before its folder holds a checkpoint leaves nothing
    half-made: what appeared in `out` since the block began (its tokenizer, arguments, metrics log, tensorboard
    folder) is removed, and `out` itself if the run made it, so the same command starts afresh; the interruption
    then says so in one line. With a checkpoint (a later stop, or a resumed run) the folder is the run's to continue,
    and nothing is removed. `writer`: whether this process is the one that writes the folder (the main one)."""
    before = set(os.listdir(out)) if out.is_dir() else None
    try:
        yield
    except KeyboardInterrupt as err:
        if not writer or outputs.checkpoint_folders(out):
            raise
        for path in [out] if before is None else [out / name for name in set(os.listdir(out)) - before]:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        signum = getattr(err, "signum", signal.SIGINT)
        raise TrainingInterrupted(
            signum, f"stopped by {signal.Signals(signum).name} before the first checkpoint: nothing was kept in {out}"
        ) from None


def start_run_folder(out: Path, args, tokenizer, num_processes: int = 1, corpus: Path | None = None) -> None:
    """Clear what an overwritten run left, then record this run: its arguments (and `num_processes`, which a
    resume with another number keeps the global batch of; the prepared `corpus` it reads, which a resume must
    find the same) and its tokenizer."""
    for name in RUN_FILES:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    for _, path in outputs.checkpoint_folders(out):
        shutil.rmtree(path)
    save_folder_files(out, tokenizer.save_pretrained)
    corpus_record = {} if corpus is None else {CORPUS: corpus.name}
    write_json(out / ARGS_FILE, {**args.identity(), PROCESSES: num_processes, **corpus_record})


def check_corpus(out: Path, corpus: Path | None) -> None:
    """Refuse to resume a run on other text than it started with: the prepared corpus is named by the fingerprint
    of its source (files' paths, sizes and times) and tokenizer, so a changed file gives another name."""
    started_on = json.loads((out / ARGS_FILE).read_text()).get(CORPUS)
    if corpus is not None and started_on is not None and started_on != corpus.name:
        raise ValueError(
            f"cannot resume the run in {out}: its corpus has changed since it started (prepared as "
            f"{started_on}, now {corpus.name}: a training file's size or modification time differs); "
            f"restore the files, or start a new run"
        )


def save_folder_files(out: Path, save) -> None:
    """`save(staging)` (a `save_pretrained`), then each file renamed into `out`: no reader sees half a file.

    `files.staged_folder` replaces a whole folder; here the files join a folder that holds other things.
    """
    staging = out / f".saving-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with naming_write_errors(f"into {out}"):
            staging.mkdir()
            save(staging)
        plain_permissions(staging)  # some writers stage their files private (0600)
        for path in staging.iterdir():
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# --- checkpoints -----------------------------------------------------------------------------------------------


def checkpoint_problem(folder: Path) -> str | None:
    """Why a checkpoint cannot be used (no progress record, a file missing or of another size), or None."""
    try:
        progress = json.loads((folder / PROGRESS_FILE).read_text())
    except (OSError, ValueError) as err:
        return f"no readable {PROGRESS_FILE} ({err.__class__.__name__})"
    for name, size in progress.get("files", {}).items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, {size} were written"
    return None


def checkpoint_step(folder: Path) -> dict:
    return json.loads((folder / PROGRESS_FILE).read_text())


def save_checkpoint(accelerator, out: Path, step: int, keep: int, extra: dict | None = None, beside=None) -> Path:
    """`accelerator.save_state` into a hidden folder (and `beside(folder)` there, on the main process: what
    `from_pretrained` needs beside the weights), renamed into place once complete; keep the newest `keep`.

    The rename is atomic, so a run killed mid-save still has its previous checkpoint, whole. (Not
    `files.staged_folder`: every process of a distributed run writes its own files into the same staging
    folder, so its name must be known to all, not drawn by `mkdtemp`.) `progress.json`,
    written last, records the step and each file's size, so that a checkpoint damaged later is recognised.
    A write that fails (disk full, read-only) leaves the older checkpoints as they were.
    """
    final = out / f"{outputs.CHECKPOINT_PREFIX}{step}"
    tmp = out / f".tmp-{outputs.CHECKPOINT_PREFIX}{step}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    accelerator.wait_for_everyone()
    try:
        accelerator.save_state(str(tmp))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            if beside is not None:
                beside(tmp)
            files = {p.relative_to(tmp).as_posix(): p.stat().st_size for p in tmp.rglob("*") if p.is_file()}
            write_json(tmp / PROGRESS_FILE, {"step": step, **(extra or {}), "files": files})
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
            for _, old in outputs.checkpoint_folders(out)[:-keep]:
                shutil.rmtree(old)
    except BaseException as err:
        if accelerator.is_main_process:
            shutil.rmtree(tmp, ignore_errors=True)
        if is_write_error(err):
            kept = [p.name for _, p in outputs.checkpoint_folders(out)]
            raise OSError(
                getattr(err, "errno", None) or errno.EIO,
                f"cannot write {final.name} in {out}: {getattr(err, 'strerror', None) or err}; the checkpoints "
                f"already there are intact ({', '.join(kept) or 'none yet'})",
            ) from err
        raise
    accelerator.wait_for_everyone()
    return final


# --- the metrics history ---------------------------------------------------------------------------------------


class MetricsLog:
    """`metrics.jsonl`: one JSON record per logging or evaluation step, appended as training goes.

    A resumed run first drops the records written after its checkpoint (the killed run got further than the
    checkpoint it is resumed from), and a torn last line (a kill in the middle of an append), so that the file
    reads as one uninterrupted run.
    """

    def __init__(self, path: Path, keep_until: int, enabled: bool):
        self.path, self.enabled = path, enabled
        if enabled:
            kept = [r for r in self.read() if r["step"] <= keep_until] if keep_until else []
            write_text(path, "".join(json.dumps(r) + "\n" for r in kept))

    def write(self, record: dict) -> None:
        if self.enabled:
            with naming_write_errors(self.path), self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")

    def read(self) -> list[dict]:
        if not self.path.is_file():
            return []
        lines = self.path.read_text().splitlines(keepends=True)
        records = []
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except ValueError as err:
                if number == len(lines) and not line.endswith("\n"):
                    warnings.warn(
                        f"{self.path}: dropping the torn last line {number} (an interrupted write)", stacklevel=2
                    )
                    continue
                raise ValueError(f"{self.path}, line {number}: not a JSON record ({err})") from None
        return records


# --- curves ----------------------------------------------------------------------------------------------------


def plot_curves(records: list[dict], path: Path, curves) -> None:
    """The objective's `curves` against the step, a loss panel and an accuracy panel, as a PNG."""
    # A bare Figure renders without pyplot, so the caller's backend (a notebook's inline plots) is left alone.
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4))
    axes = dict(zip(("loss", "accuracy"), fig.subplots(1, 2)))
    for curve in curves:
        points = [(r["step"], r[curve.key]) for r in records if curve.key in r]
        if points:
            style = ("o-",) if curve.eval else ()
            faint = not curve.eval and curve.panel == "accuracy"  # noisy per-window accuracy behind the held-out
            axes[curve.panel].plot(*zip(*points), *style, label=curve.label, alpha=0.6 if faint else 1.0)
    axes["loss"].set(xlabel="optimizer step", ylabel="cross-entropy", title="Loss")
    axes["accuracy"].set(xlabel="optimizer step", ylabel="accuracy", title="Accuracy", ylim=(0, 1))
    for ax in axes.values():
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_folder_files(path.parent, lambda staging: fig.savefig(staging / path.name, dpi=110))
