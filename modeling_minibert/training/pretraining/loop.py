"""Pretraining with a flat Accelerate loop; `minibert pretrain`.

    from modeling_minibert.training.pretraining import pretrain
    summary = pretrain(output_dir="minibert-pretrained")     # BBC News, a fresh WordPiece vocabulary, 64 tokens
    summary["eval_mlm_accuracy"], summary["eval_nsp_accuracy"]

The loop is flat and linear (nanoGPT-style): arguments, data, model, optimizer, loop, checkpoint, save. Accelerate
carries the devices, DDP/FSDP, mixed precision, checkpoint state and trackers; the objective (objectives.py)
says what the model is, what it is given and what is counted; the loop keeps the rest in view.

Reproducibility: the data order (one sequence of batches across epochs, each epoch's order seeded, `RunBatches`),
the MLM masks (seeded per batch, see `DataCollatorForPreTraining`) and the dropout noise (re-seeded per
micro-batch) are all functions of the seed and the position in training: the global step and the micro-batch's
place in it, not the number of processes. A run resumed from a checkpoint therefore produces exactly the losses of
an uninterrupted run (on CPU, where kernels are deterministic), and a run resumed with another number of processes
keeps its global batch through gradient accumulation (`run_folder.keep_global_batch`) and continues the same loss
curve, up to the order of floating-point sums.

Resuming with a larger `max_steps`: the learning-rate schedule is built for the new total at the checkpoint's
step, exactly as `Trainer` does when `max_steps` grows: the learning rate at step s is the one a run of the new
length would have had at s. With linear decay, a finished run (whose rate had reached 0) starts again at
peak x (new - s) / (new - warmup) and decays to 0 at the new end.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import warnings
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import DistributedType, set_seed
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

import modeling_minibert.training.pretraining.finite as finite
import modeling_minibert.training.pretraining.run_folder as run_folder
import modeling_minibert.utils.outputs as outputs
from modeling_minibert.checks_minibert import check_weights_fit_config
from modeling_minibert.training.pretraining.arguments import PretrainingArguments
from modeling_minibert.training.pretraining.corpus import corpus_source
from modeling_minibert.training.pretraining.data import (
    DATA_WAIT,
    DataCollatorForPreTraining,
    RunBatches,
    RunData,
    RunExamples,
    _batch_seed,
    run_data,
)
from modeling_minibert.training.pretraining.model import (
    build_config,
    check_model_source,
    fit_vocabulary,
    get_tokenizer,
    training_config,
)
from modeling_minibert.training.pretraining.objectives import Objective, pick_objective, weight_names
from modeling_minibert.training.pretraining.optimization import build_schedule, param_groups
from modeling_minibert.training.pretraining.run_folder import MetricsLog
from modeling_minibert.training.pretraining.session import (
    StopRequest,
    TrainingInterrupted,
    ignore_stop_signals,
    resolve_num_threads,
    run_settings,
    stop_requested,
)
from modeling_minibert.training.pretraining.state import (
    PretrainingRun,
    Training,
    load_checkpoint,
    save_run,
    save_run_checkpoint,
)
from modeling_minibert.training.pretraining.time_budget import TimeBudget
from modeling_minibert.utils.precision import default_device, resolved_mixed_precision

EVAL_MLM_PROBABILITY = 0.15


def pretrain(args: PretrainingArguments | None = None, **kwargs) -> dict:
    """Pretrain a Mini-BERT (by default MLM + NSP) and save it, with its tokenizer, results, curves and card, in
    `output_dir`.

    Pass a `PretrainingArguments` or its fields as keyword arguments (the `minibert pretrain` flags). Returns the
    run's results (the keys of `all_results.json`: train_loss, train_runtime, ..., eval_loss, eval_mlm_accuracy,
    eval_nsp_accuracy, perplexity) plus output_dir, global_step, steps_this_session and plot_file.

    Raises (before anything is written): FileNotFoundError for a missing file, ValueError for bad arguments, an
    empty file or a corpus too small for the held-out split, FileExistsError when `output_dir` already holds a
    run and neither `resume_from_checkpoint` nor `overwrite_output_dir` is set, or another run is writing there.
    OSError when the folder cannot be written (checkpoints already there stay intact). `TrainingInterrupted` (a
    KeyboardInterrupt) after SIGINT or SIGTERM, once the step in progress is checkpointed.
    """
    if args is None:
        args = PretrainingArguments(**kwargs)
    elif kwargs:
        args = dataclasses.replace(args, **kwargs)
    # Accelerate keeps one state per process and refuses a second run's other mixed_precision (a notebook that
    # pretrains twice); as transformers' TrainingArguments does for each Trainer, the run starts from a fresh one
    # (the process group, in PartialState, is kept).
    AcceleratorState._reset_state()
    accelerator = Accelerator(
        # With no GPU (or other accelerator), run on CPU; under a multi-process launcher (`accelerate launch
        # --multi_gpu`, torchrun) that means DDP over gloo. Accelerate only picks gloo when told `cpu`, and its
        # own `--cpu` flag starts a single process (huggingface/accelerate#2741).
        cpu=not torch.accelerator.is_available(),
        mixed_precision=resolved_mixed_precision(args.mixed_precision, default_device()),
        log_with=args.report_to or None,
        project_dir=args.output_dir,
    )
    local_processes = int(os.environ.get("LOCAL_WORLD_SIZE", accelerator.num_processes))
    num_threads, why = resolve_num_threads(args.num_threads, local_processes)
    with (
        run_settings(num_threads) as stop,
        run_folder.nothing_kept_before_a_checkpoint(Path(args.output_dir), accelerator.is_main_process),
    ):
        summary = prepare_and_train(args, accelerator, stop, f"{num_threads} thread(s) ({why})")
    if args.push_to_hub and accelerator.is_main_process:
        from modeling_minibert.sharing.push import push_to_hub

        # The token comes from the argument, else HF_TOKEN or the login; it is never written to the folder.
        commit = push_to_hub(args.output_dir, args.hub_model_id or Path(args.output_dir).name, token=args.hub_token)
        summary["hub_commit"] = str(commit)
    return summary


def with_the_runs_global_batch(args: PretrainingArguments, accelerator: Accelerator) -> PretrainingArguments:
    """`args` for a run resumed with another number of processes: as many micro-batches per step as before."""
    accumulation = run_folder.keep_global_batch(Path(args.output_dir), args, accelerator.num_processes)
    if accumulation != args.gradient_accumulation_steps and accelerator.is_main_process:
        warnings.warn(
            f"resuming with {accelerator.num_processes} process(es): gradient_accumulation_steps="
            f"{accumulation} (not {args.gradient_accumulation_steps}) keeps the run's global batch",
            stacklevel=4,
        )
    return dataclasses.replace(args, gradient_accumulation_steps=accumulation)


def prepare_and_train(args: PretrainingArguments, accelerator: Accelerator, stop: StopRequest, threads: str) -> dict:
    """Check everything, prepare (or find) the tokenizer and the data, then take the folder's lock and train."""
    out, is_main = Path(args.output_dir), accelerator.is_main_process
    # --- checks, before anything is written --------------------------------------------------------------------
    run_exists, resume_from = False, None
    if not args.preprocessing_only or args.resume_from_checkpoint:
        run_exists, resume_from = run_folder.check_run_folder(out, args)
    if run_exists:
        args = with_the_runs_global_batch(args, accelerator)
    warn_fsdp_not_applied(accelerator)
    source = check_model_source(args)
    run_folder.check_apart_from_inputs(out, args)
    config = build_config(args, source)
    objective = pick_objective(args, source, config)  # a teacher is checked and loaded here, before the corpus
    finite.check_teacher(objective)
    corpus = corpus_source(args.train_file, args.dataset_name, args.dataset_split, args.text_column_name)
    if source is not None:  # the sizes its config gives against its weights' headers: nothing is loaded yet
        check_weights_fit_config(config, sorted(source.glob("*.safetensors")), source)
        for note in objective.check_source(source, weight_names(source)):
            warnings.warn(note, stacklevel=3)

    # --- tokenizer and data: prepared by the first process (on each machine), found by the others -------------
    accelerator.wait_for_everyone()  # every process has checked the folder before the main one writes to it
    lock_held = False
    try:
        with accelerator.main_process_first(), accelerator.local_main_process_first():
            overwrite_cache = args.overwrite_cache and accelerator.is_local_main_process  # the others read it after
            tokenizer = get_tokenizer(args, out, corpus, source, objective, run_exists, overwrite_cache)
            fit_vocabulary(tokenizer, config, source)
            data = run_data(
                corpus,
                tokenizer,
                args.max_seq_length,
                args.seed,
                args.dupe_factor,
                objective.random_next,
                args.held_out_fraction,
                args.cache_dir,
                args.preprocessing_num_workers,
                overwrite_cache,
                show_progress=not args.disable_tqdm and accelerator.is_local_main_process,
                max_eval_samples=args.max_eval_samples,
            )
            if args.preprocessing_only:
                return prepared_summary(data)
            check_sizes(args, data.train_set, data.eval_set, accelerator.num_processes)
            if run_exists:
                run_folder.check_corpus(out, data.corpus.folder)
            objective.set_vocabulary(tokenizer, data.train_documents(corpus))
            if is_main:  # only now that every check has passed
                outputs.acquire_lock(out, run_folder.JOB)
                lock_held = True
                run_folder.clean_leftovers(out)
                if not run_exists:
                    run_folder.start_run_folder(out, args, tokenizer, accelerator.num_processes, data.corpus.folder)
        run = PretrainingRun(
            args,
            accelerator,
            objective,
            config,
            source,
            tokenizer,
            data.train_set,
            data.eval_set,
            (len(data.train_ids), len(data.held_out_ids)),
            resume_from,
            stop,
            threads,
        )
        return run_training(run)
    finally:
        if lock_held:
            outputs.release_lock(out)


def prepared_summary(data: RunData) -> dict:
    """`--preprocessing_only`'s results: where the prepared corpus is and what it holds."""
    info = data.corpus.info
    return {
        "prepared_corpus": str(data.corpus.folder),
        "documents": info["documents"],
        "sentences": info["sentences"],
        "tokens": info["tokens"],
        "train_samples": len(data.train_set),
        "eval_samples": len(data.eval_set),
    }


def run_training(run: PretrainingRun) -> dict:
    """The second half of `pretrain`, run while it holds the folder's lock: model, loop, checkpoints, save."""
    training = prepare_training(run)
    step, last_eval, seconds = training_loop(run, training)
    return save_run(run, training, step, last_eval, seconds)


def prepare_training(run: PretrainingRun) -> Training:
    """Model (the objective's), optimizer, the checkpoint's state, data loaders and the schedule for it."""
    args, accelerator = run.args, run.accelerator
    model, optimizer = model_and_optimizer(run)
    start_step, total_steps = 0, args.max_steps  # fitted to the time budget in the loop when --max_time is set
    if run.resume_from is not None:
        saved = load_checkpoint(accelerator, run.out, run.resume_from)
        start_step = saved.get("step", 0)
        if args.max_time and "total_steps" in saved:  # the time-fitted total, until this session refits it
            total_steps = min(args.max_steps, saved["total_steps"])
    total_steps = max(total_steps, start_step)
    collator, train_loader, eval_loader = data_loaders(run, start_step, total_steps)
    # A resumed run may have been given a new max_steps: the schedule is built for the total, at the start step.
    scheduler = build_schedule(optimizer, args, total_steps, start_step)
    metrics = MetricsLog(run.out / outputs.METRICS_FILE, keep_until=start_step, enabled=accelerator.is_main_process)
    if args.report_to:
        accelerator.init_trackers(run_folder.TENSORBOARD_DIR, config=tracker_config(args))
    return Training(model, optimizer, scheduler, collator, train_loader, eval_loader, start_step, total_steps, metrics)


def model_and_optimizer(run: PretrainingRun) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The objective's model from the seed (or its source) and its AdamW, prepared by Accelerate, compiled if asked."""
    args = run.args
    set_seed(args.seed)
    model = run.objective.build_model(training_config(run.config, args.pretraining_dropout), run.source)
    finite.check_start(model, run.source)
    # Fused AdamW is one kernel per step instead of a dozen passes over every parameter.
    optimizer = torch.optim.AdamW(
        param_groups(model, args.weight_decay),
        lr=args.learning_rate,
        betas=(args.adam_beta1, args.adam_beta2),
        eps=args.adam_epsilon,
        fused=True,
    )
    model, optimizer = run.accelerator.prepare(model, optimizer)
    if args.torch_compile:
        # In place (`nn.Module.compile`), after any DDP or FSDP wrapping, rather than through Accelerate's dynamo
        # plugin: the module keeps its class and its weights their names, so that the checkpoints Accelerate
        # writes still load with from_pretrained (torch.compile's wrapper prefixes every name with `_orig_mod.`).
        model.compile(backend=args.torch_compile_backend or "inductor", mode=args.torch_compile_mode)
    return model, optimizer


def data_loaders(
    run: PretrainingRun, start_step: int, total_steps: int
) -> tuple[DataCollatorForPreTraining, DataLoader, DataLoader]:
    """The training collator and loader, this process's share of the run's batches from `start_step` on, and the
    held-out loader."""
    args, accelerator = run.args, run.accelerator
    # A compiled step sees one shape: every batch padded to the sequence length (else each new length recompiles).
    length = args.max_seq_length if args.torch_compile else None
    collator = DataCollatorForPreTraining(
        run.tokenizer,
        args.mlm_probability,
        args.whole_word_mask,
        seed=args.seed,
        final_mlm_probability=args.final_mlm_probability,
        pad_to_length=length,
    )
    # Held-out MLM is always scored at BERT's 15% token masking, whatever the training masking: a run trained at 30%
    # or with whole-word masking is compared with the default on the very same masked tokens.
    eval_collator = DataCollatorForPreTraining(
        run.tokenizer, EVAL_MLM_PROBABILITY, whole_word_mask=False, seed=args.seed + 1, pad_to_length=length
    )
    # Not sharded: every process evaluates the whole (small) held-out set, so the numbers are exact on every
    # process without gathering, and FSDP's collectives see the same batches everywhere.
    eval_loader = DataLoader(run.eval_set, batch_size=args.per_device_eval_batch_size, collate_fn=eval_collator)
    # The run's micro-batches (the masking-rate schedule's position and length) count every process's.
    per_step = args.gradient_accumulation_steps * accelerator.num_processes
    collator.batches, collator.total_batches = start_step * per_step, total_steps * per_step
    # The training batches are not prepared by Accelerate (see `RunBatches`): the loop moves them to the device.
    sampler = RunBatches(
        len(run.train_set),
        args.per_device_train_batch_size,
        args.seed,
        accelerator.num_processes,
        accelerator.process_index,
        start=start_step * per_step,
        of=total_steps * per_step,
    )
    train_loader = DataLoader(
        RunExamples(run.train_set),
        sampler=sampler,
        batch_size=None,
        collate_fn=collator,
        num_workers=args.dataloader_num_workers,
        pin_memory=accelerator.device.type == "cuda",
        # Forked workers are the cheapest to start; the collator keeps no state, so they mask as the loop would.
        multiprocessing_context="fork" if args.dataloader_num_workers and os.name == "posix" else None,
        worker_init_fn=ignore_stop_signals,
    )
    return collator, train_loader, eval_loader


def training_loop(run: PretrainingRun, t: Training) -> tuple[int, dict | None, float]:
    """The loop: each step, then its logging, evaluation and checkpoint where their intervals fall (and at the end,
    or at a stop signal for the checkpoint). Returns the last step, the last evaluation and the seconds it took."""
    args, accelerator, objective, model = run.args, run.accelerator, run.objective, t.model
    step, total_steps, scheduler = t.start_step, t.total_steps, t.scheduler
    batches = iter(t.train_loader)
    window = torch.zeros(
        len(objective.stat_keys), device=accelerator.device
    )  # the objective's sums since the last log
    last_eval: dict | None = None
    budget = TimeBudget(args.max_time, step) if args.max_time else None
    progress = progress_bar(run, step, total_steps)
    model.train()
    started = time.perf_counter()
    t.data_wait.start()
    run.stop.deferring = True  # from here SIGINT/SIGTERM finish the step and checkpoint it
    while step < total_steps:
        train_step(run, t, batches, step, scheduler, window)
        step = done = step + 1
        progress.update(1)

        if budget is not None:  # stop when time runs out; fit the schedule to the steps that fit in it
            fitted = budget.fit(done, args.max_steps, accelerator)
            if fitted != total_steps:
                total_steps = progress.total = fitted
                processes = accelerator.num_processes
                t.collator.total_batches = t.sampler.of = fitted * args.gradient_accumulation_steps * processes
                scheduler = build_schedule(t.optimizer, args, total_steps, done)
        finished = done == total_steps
        if done % args.logging_steps == 0 or finished:
            record = log_window(run, t, done, scheduler, window)
            progress.set_postfix(loss=f"{record['loss']:.3f}")
        if done % args.eval_steps == 0 or finished:
            paused = t.data_wait.paused = time.perf_counter()
            last_eval = evaluate_and_log(run, t, done, progress)
            t.data_wait.resume()
            if budget is not None:
                budget.spent_on_eval(time.perf_counter() - paused)
        stopping = stop_requested(run.stop, accelerator)
        if done % args.save_steps == 0 or finished or stopping:  # the last one makes a finished run resumable
            paused = t.data_wait.paused = time.perf_counter()
            finite.check_weights(run, model, done)  # every checkpoint, and so the final model, is finite
            saved = save_run_checkpoint(run, t, done, total_steps)
            t.data_wait.resume()
            if budget is not None:
                budget.spent_on_save(time.perf_counter() - paused)
            if stopping:
                progress.close()
                raise TrainingInterrupted(
                    run.stop.signal,
                    f"stopped by {signal.Signals(run.stop.signal).name} after "
                    f"step {done}: saved {saved}; continue with --resume_from_checkpoint",
                )
    run.stop.deferring = False
    progress.close()
    seconds = time.perf_counter() - started
    if last_eval is None:  # resumed a finished run: evaluate what is there
        last_eval = {"step": step, **evaluate(model, t.eval_loader, accelerator, objective)}
    return step, last_eval, seconds


def train_step(
    run: PretrainingRun, t: Training, batches: Iterator, step: int, scheduler, window: torch.Tensor
) -> None:
    """Optimizer step `step` + 1 over `gradient_accumulation_steps` micro-batches, gradients all-reduced once; the
    objective's statistics of each micro-batch added to `window`."""
    args, accelerator, objective, model = run.args, run.accelerator, run.objective, t.model
    accum, processes, rank = args.gradient_accumulation_steps, accelerator.num_processes, accelerator.process_index
    for micro in range(accum):
        batch = t.data_wait.next(batches, accelerator.device)
        # Dropout noise as a function of (seed, step, the micro-batch's place in the global batch): a resumed
        # run replays it whatever else drew numbers, and one process draws what W processes drew together.
        torch.manual_seed(_batch_seed(args.seed, step, micro * processes + rank))
        with nullcontext() if micro == accum - 1 else accelerator.no_sync(model):  # all-reduce once per step
            result = model(**objective.model_inputs(batch))
            accelerator.backward(result.loss / accum)
        with torch.no_grad():
            window += objective.statistics(result, batch)
    accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
    t.optimizer.step()
    scheduler.step()
    t.optimizer.zero_grad(set_to_none=True)


def log_window(run: PretrainingRun, t: Training, done: int, scheduler, window: torch.Tensor) -> dict:
    """The training record of the steps since the last one (`window`'s sums over every process, then zeroed),
    checked finite, written to metrics.jsonl and the trackers; returned."""
    args, accelerator, objective = run.args, run.accelerator, run.objective
    sums = dict(zip(objective.stat_keys, accelerator.reduce(window, "sum").tolist()))
    record = {"step": done, **objective.train_metrics(sums), "learning_rate": scheduler.get_last_lr()[0]}
    if args.final_mlm_probability is not None:  # the step's last batch's
        record["mlm_probability"] = t.collator.rate(
            done * args.gradient_accumulation_steps * accelerator.num_processes - 1
        )
    record[DATA_WAIT] = t.data_wait.share(accelerator)
    finite.check_record(run, record)  # a NaN loss stops the run here, before it is logged or saved
    window.zero_()
    t.metrics.write(record)
    accelerator.log({f"train/{k}": v for k, v in record.items() if k != "step"}, step=done)
    return record


def evaluate_and_log(run: PretrainingRun, t: Training, done: int, progress) -> dict:
    """The held-out evaluation after step `done`, checked finite, written to metrics.jsonl, the trackers and a line
    above the progress bar; returned."""
    accelerator = run.accelerator
    result = {"step": done, **evaluate(t.model, t.eval_loader, accelerator, run.objective)}
    finite.check_record(run, result)
    t.metrics.write(result)
    accelerator.log({f"eval/{k[5:]}": v for k, v in result.items() if k != "step"}, step=done)
    if accelerator.is_main_process:  # tqdm.write keeps the progress bar below the line
        progress.write(f"step {done}: " + ", ".join(f"{k} {v:.3f}" for k, v in result.items() if k != "step"))
    return result


# --- pieces of the loop ----------------------------------------------------------------------------------------


def progress_bar(run: PretrainingRun, start_step: int, total_steps: int) -> tqdm:
    """The bar, after one line saying what is trained and with how many threads. Its rate and ETA average the
    whole session (`smoothing=0`), evaluations and checkpoints included, so the ETA is the time it will take."""
    if run.accelerator.is_main_process:
        train_docs, held_out_docs = run.documents
        print(
            f"pretraining ({run.objective.name}) on {len(run.train_set):,} examples from {train_docs:,} documents "
            f"(held out: {len(run.eval_set):,} from {held_out_docs:,}), {run.accelerator.num_processes} "
            f"process(es) x {run.args.gradient_accumulation_steps} micro-batch(es) of "
            f"{run.args.per_device_train_batch_size} a step{distribution(run.accelerator)}, {run.threads}, mixed "
            f"precision {run.accelerator.mixed_precision} "
            f"(mixed_precision={run.args.mixed_precision})"
            + (f"; resuming at step {start_step}" if start_step else "")
        )
    return tqdm(
        total=total_steps,
        initial=start_step,
        desc="pretraining",
        unit="step",
        smoothing=0,
        disable=run.args.disable_tqdm or not run.accelerator.is_local_main_process,
    )


def warn_fsdp_not_applied(accelerator: Accelerator) -> None:
    """Say in one line when an FSDP config (`accelerate launch --config_file fsdp.yaml`, `--use_fsdp`) is not
    applied: Accelerate shards with FSDP on GPUs (and other accelerators) only, and on CPU runs the config's
    processes as DDP over gloo (torch's FSDP2 itself runs on CPU; Accelerate does not route it there)."""
    fsdp_asked = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if fsdp_asked and accelerator.distributed_type != DistributedType.FSDP and accelerator.is_main_process:
        runs_as = "DDP over gloo" if accelerator.distributed_type == DistributedType.MULTI_CPU else "a single process"
        warnings.warn(
            f"an FSDP config on {accelerator.device.type}: Accelerate applies FSDP on GPUs only, so this run "
            f"is {runs_as} (the same steps, every process holding the whole model)",
            stacklevel=3,
        )


def distribution(accelerator: Accelerator) -> str:
    """How the processes share the work, for the run's first line: "" for one process on its own."""
    kind = accelerator.distributed_type
    if kind == DistributedType.NO:
        return ""
    names = {
        DistributedType.MULTI_CPU: "DDP over gloo",
        DistributedType.MULTI_GPU: "DDP",
        DistributedType.FSDP: "FSDP",
    }
    return f" ({names.get(kind, kind.value)})"


def check_sizes(args: PretrainingArguments, train_set, eval_set, num_processes: int) -> None:
    per_step = args.per_device_train_batch_size * num_processes
    if len(train_set) < per_step:
        raise ValueError(
            f"the corpus is too small: {len(train_set)} training example(s) of {args.max_seq_length} tokens, but one "
            f"batch needs per_device_train_batch_size x processes = {per_step}; add text or lower the batch size"
        )
    if len(eval_set) == 0:
        raise ValueError(
            "the corpus is too small: the held-out documents make no example; raise validation_split_percentage"
        )


@torch.no_grad()
def evaluate(model: torch.nn.Module, eval_loader: DataLoader, accelerator: Accelerator, objective: Objective) -> dict:
    """The objective's held-out metrics, from the same sums as in training, over the whole held-out set. Its
    masks are the same at every evaluation, so the numbers are comparable along the run."""
    model.eval()
    sums = torch.zeros(len(objective.stat_keys), device=accelerator.device)
    for batch in eval_loader:
        batch = {k: v.to(accelerator.device) for k, v in batch.items()}
        with accelerator.autocast():
            sums += objective.statistics(model(**objective.model_inputs(batch, evaluating=True)), batch)
    model.train()
    return objective.eval_metrics(dict(zip(objective.stat_keys, sums.tolist())))


def tracker_config(args: PretrainingArguments) -> dict:
    """TensorBoard hparams take scalars and strings only; the Hub token is never logged."""
    values = {k: v for k, v in dataclasses.asdict(args).items() if k != "hub_token"}
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in values.items()}
