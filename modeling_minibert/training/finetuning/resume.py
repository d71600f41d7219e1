"""What a Trainer run was started with, kept in each of its checkpoints, and the check a resume makes against it.

Trainer restores a checkpoint's optimizer, scheduler, RNG states and place in the data whatever options the
resumed command gives: a new learning rate would never be used (the old scheduler comes back), new data or
lengths would train the last third of a model on something else while its card names only the new one. So each
checkpoint-N/ holds `run_options.json` (`RecordRunOptions`), the options of the run that saved it, and a resume
refuses, in one line naming them, options that differ from it, unless `resume_with_changed_options`. What does
not change what is trained or how (logging, saving cadence, reporting, the Hub, data-loader workers, the
evaluation batch size, the test data) may change: `MAY_CHANGE`, listed in docs/finetuning.md.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from modeling_minibert.utils.files import write_json
from modeling_minibert.utils.outputs import CHECKPOINT_PREFIX

if TYPE_CHECKING:
    from modeling_minibert.training.finetuning.arguments import DataArguments

RUN_OPTIONS_FILE = "run_options.json"  # inside each checkpoint-N/ of a fine-tuning or distillation run
FLAG = "resume_with_changed_options"
MAY_CHANGE = frozenset(
    {
        # where the run is and how it was called
        "output_dir",
        "overwrite_output_dir",
        "resume_from_checkpoint",
        FLAG,
        "keep_checkpoints",
        # what it says while it runs
        "logging_steps",
        "logging_strategy",
        "logging_first_step",
        "logging_nan_inf_filter",
        "log_level",
        "log_level_replica",
        "log_on_each_node",
        "report_to",
        "run_name",
        "project",
        "trackio_space_id",
        "trackio_bucket_id",
        "trackio_static_space_id",
        "disable_tqdm",
        "skip_memory_metrics",
        "include_num_input_tokens_seen",
        # how often it saves, and where it publishes
        "save_steps",
        "save_strategy",
        "save_total_limit",
        "save_on_each_node",
        "save_only_model",
        "push_to_hub",
        "hub_model_id",
        "hub_strategy",
        "hub_token",
        "hub_private_repo",
        "hub_always_push",
        "hub_revision",
        # how its batches are loaded and evaluated, and the test data scored once at the end
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "dataloader_persistent_workers",
        "dataloader_prefetch_factor",
        "dataloader_multiprocessing_context",
        "per_device_eval_batch_size",
        "eval_accumulation_steps",
        "eval_do_concat_batches",
        "test_file",
        "test_split",
    }
)
# What names a file or folder the run reads: compared as the absolute path, wherever the command is run from.
PATH_OPTIONS = (
    "model_name_or_path",
    "tokenizer_name",
    "train_file",
    "validation_file",
    "dataset_name",
    "teacher_model_name_or_path",
    "transfer_file",
)


def _plain(value: Any) -> Any:
    """`value` as JSON holds it (an enum as its value, a local path made absolute by the caller)."""
    if isinstance(value, enum.Enum):
        value = value.value
    return json.loads(json.dumps(value, default=str))


def _absolute(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_absolute(item) for item in value]
    if isinstance(value, (str, os.PathLike)) and str(value) and Path(value).exists():
        return str(Path(value).resolve())
    return value


def training_defaults() -> dict[str, Any]:
    """TrainingArguments' own default of each of its fields that has one."""
    found = {}
    for f in dataclasses.fields(TrainingArguments):
        if f.init and f.default is not dataclasses.MISSING:
            found[f.name] = f.default
        elif f.init and f.default_factory is not dataclasses.MISSING:
            found[f.name] = f.default_factory()
    return found


def run_options(
    args: DataArguments, training: dict[str, Any], defaults: dict[str, Any], data: dict[str, Any]
) -> dict[str, Any]:
    """The options that make the run what it is: the job's `args` (a dataclass), its TrainingArguments options
    (`training`, given or defaulted: `defaults` over TrainingArguments' own), and a fingerprint of each split given
    in memory (`data`: role -> Dataset, or anything else); none of `MAY_CHANGE`."""
    resolved = {**training_defaults(), **defaults, **training}
    options = {**resolved, **{f.name: getattr(args, f.name) for f in dataclasses.fields(args)}}
    options.update(
        {f"{role}_data": getattr(value, "_fingerprint", type(value).__name__) for role, value in data.items()}
    )
    return {
        name: _plain(_absolute(value) if name in PATH_OPTIONS else value)
        for name, value in sorted(options.items())
        if name not in MAY_CHANGE
    }


def check_resume(checkpoint: str | None, options: dict[str, Any], allow_changes: bool) -> None:
    """Refuse, in one line naming each, options that differ from those `checkpoint` was saved with; nothing to
    check without a checkpoint, nor (with a warning) for one saved before the options were recorded."""
    if checkpoint is None:
        return
    path = Path(checkpoint) / RUN_OPTIONS_FILE
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        saved = None
    if not isinstance(saved, dict):
        warnings.warn(
            f"resume_from_checkpoint: {checkpoint} does not record the options it was trained with (no "
            f"readable {RUN_OPTIONS_FILE}): they are not checked against this run's",
            stacklevel=2,
        )
        return
    changed = [
        f"{name}={saved[name]!r} (now {options[name]!r})"
        for name in options
        if name in saved and saved[name] != options[name]
    ]
    if changed and not allow_changes:
        raise ValueError(
            f"cannot resume from {checkpoint}: it was trained with other options: {', '.join(changed)}; "
            f"resume with the options it started with, or pass --{FLAG} to continue with these"
        )
    if changed:
        warnings.warn(f"resuming from {checkpoint} with changed options ({FLAG}): {', '.join(changed)}", stacklevel=2)


class RecordRunOptions(TrainerCallback):
    """Write the run's options into each checkpoint Trainer saves (before any callback that stops the run there)."""

    def __init__(self, options: dict[str, Any] | None):
        self.options = options

    def on_save(self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any) -> None:
        checkpoint = Path(args.output_dir) / f"{CHECKPOINT_PREFIX}{state.global_step}"
        if self.options is not None and checkpoint.is_dir():
            write_json(checkpoint / RUN_OPTIONS_FILE, self.options)


__all__ = ["FLAG", "MAY_CHANGE", "RUN_OPTIONS_FILE", "RecordRunOptions", "check_resume", "run_options"]
