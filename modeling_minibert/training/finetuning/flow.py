"""The flow every task shares: load the model and tokenizer, train with `Trainer`, save the output folder.

The output folder follows Trainer and the example scripts:

    OUTPUT/checkpoint-N/        Trainer's checkpoints while training (resume with resume_from_checkpoint)
    OUTPUT/config.json, model.safetensors, tokenizer files    the final model: the best evaluation's, or the last
    OUTPUT/all_results.json     train_*, eval_*, test_* metrics (plus train_ / eval_ / test_results.json)
    OUTPUT/trainer_state.json   the log history, the best step
    OUTPUT/README.md            the model card;  training_curves.png (and a confusion matrix for classification)
    OUTPUT/learning_rate_search.json, .png   with learning_rates: each rate's validation score (run-I/ while it runs)

The final folder is built in a hidden staging folder beside OUTPUT and replaces OUTPUT only when complete
(`files.staged_folder`); the checkpoints are dropped then, unless `keep_checkpoints` moves them along. If the run
fails, OUTPUT keeps its checkpoints, so `resume_from_checkpoint` can continue it.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from transformers import EarlyStoppingCallback, PreTrainedModel, PreTrainedTokenizerBase, Trainer, TrainerCallback
from transformers.trainer_utils import PredictionOutput

import modeling_minibert.utils.outputs as outputs
from modeling_minibert.sharing.model_card import write_model_card
from modeling_minibert.sharing.push import push_to_hub
from modeling_minibert.training.finetuning.arguments import (
    TRAINING_DEFAULTS,
    DataArguments,
    DataTrainingArguments,
    FinetuneArguments,
    FinetuneResult,
    check_learning_rates,
    check_training_options,
    default_schedule,
    evaluates,
    require,
    split_options,
    training_arguments,
)
from modeling_minibert.training.finetuning.data import DataSource, NamedDataset, load_data
from modeling_minibert.training.finetuning.finite import StopOnNonFinite, check_results
from modeling_minibert.training.finetuning.loading import load_config, load_model, seed_of
from modeling_minibert.training.finetuning.plots import plot_learning_rate_search, plot_training_curves
from modeling_minibert.training.finetuning.progress import use_progress_bars
from modeling_minibert.training.finetuning.resume import FLAG, RecordRunOptions, check_resume, run_options
from modeling_minibert.training.finetuning.signals import StopOnSignal, stop_signals
from modeling_minibert.training.finetuning.task import Prepared
from modeling_minibert.training.finetuning.tasks import load_task
from modeling_minibert.utils.files import check_output_dir, staged_folder, write_json
from modeling_minibert.utils.finite import NonFiniteError
from modeling_minibert.utils.logging import transformers_bars_off, unsaid
from modeling_minibert.utils.outputs import (
    CHECKPOINT_PREFIX,
    CURVES_FILE,
    LEARNING_RATE_PLOT_FILE,
    LEARNING_RATE_SEARCH_FILE,
    SEARCH_RUN_PREFIX,
    TRAINER_STATE_FILE,
    checkpoint_folders,
    trainer_checkpoint_problem,
    write_results,
)

logger = logging.getLogger(__name__)


def finetune(
    *,
    train_data: DataSource | None = None,
    validation_data: DataSource | None = None,
    test_data: DataSource | None = None,
    **options: Any,
) -> FinetuneResult:
    """Fine-tune a Mini-BERT checkpoint for one of `tasks.TASKS`; the one entry point of the job.

    Keyword options are the command line's flags: `FinetuneArguments` fields (`task`, `model_name_or_path`,
    `tokenizer_name`, `train_file` / `validation_file` / `test_file` or `dataset_name`, `text_column_name`,
    `label_column_name`, `labels` (comma-separated, or a list), `max_seq_length`, `overwrite_output_dir`,
    `keep_checkpoints`, the question-answering options, ...) and `TrainingArguments` fields (`output_dir`,
    `num_train_epochs`, ...; our defaults: `TRAINING_DEFAULTS`; also `group_by_length=True`). In-memory data
    (a `Dataset`, or anything `finetuning.data.load_data` reads) may replace the files: `train_data=`,
    `validation_data=`, `test_data=`. The best epoch is chosen on the validation data; the test data is scored
    once at the end. `resume_from_checkpoint` (a path, or True for the newest in `output_dir`) continues an
    interrupted run; `push_to_hub` with `hub_model_id` uploads the final folder.

        finetune(task="sequence-classification", model_name_or_path="runs/pretrained", train_file="train.csv",
                 validation_file="dev.csv", output_dir="runs/sentiment", num_train_epochs=3)

    Raises (before any training): ValueError for a bad option, DataError (a ValueError) for bad data (a missing
    column, an empty file, a label outside the label set, ...); FileNotFoundError for a missing file or model;
    FileExistsError for a non-empty `output_dir` without `overwrite_output_dir` or `resume_from_checkpoint`, or
    one another run is writing to; OSError when `output_dir` cannot be written.
    """
    args, training = split_options(FinetuneArguments, options)
    require(args, "task", "model_name_or_path")
    task = load_task(args.task)
    sources = data_sources(args, {"train": train_data, "validation": validation_data, "test": test_data})
    check_training_options(training, "validation" in sources)
    check_learning_rates(args.learning_rates, training, "validation" in sources)
    schedule = default_schedule(args, "num_train_epochs" in training, evaluates(training, "validation" in sources))
    options = run_options(args, training, TRAINING_DEFAULTS, in_memory(sources))
    load_config(args.model_name_or_path)  # a folder that holds no model is named as such, before the output's checks
    with run_folder(training.pop("output_dir"), args, training, "finetune", options) as output:
        splits = load_splits(sources, args, task.conll)
        setup = task.prepare(args, splits)
        network = load_model(task.auto_class, args.model_name_or_path, seed_of(training), **setup.model_options)
        return train_and_save(
            task.name,
            args.model_name_or_path,
            network,
            setup.tokenizer,
            setup.prepared,
            output,
            setup.labels,
            sources["train"],
            training,
            args.keep_checkpoints,
            setup.extra_outputs,
            learning_rates=args.learning_rates,
            run_record=options,
            **schedule,
        )


def data_sources(args: FinetuneArguments, given: dict[str, DataSource | None]) -> dict[str, DataSource]:
    """Each split's source: the in-memory data given, else its file, else `dataset_name` (its validation split
    when the dataset has one, its test split when `test_split` is named). Exactly one training source."""
    if sum(x is not None for x in (given["train"], args.train_file, args.dataset_name)) != 1:
        raise ValueError(
            "give exactly one of --train_file and --dataset_name (train_file, dataset_name or train_data in Python)"
        )
    from_dataset = {"train": args.dataset_name}
    if args.dataset_name is not None:
        from modeling_minibert.training.finetuning.data import dataset_splits

        from_dataset["validation"] = (
            args.dataset_name if args.validation_split in (dataset_splits(args.dataset_name) or []) else None
        )
        from_dataset["test"] = args.dataset_name if args.test_split else None
    sources = {
        role: next((s for s in (data, getattr(args, f"{role}_file"), from_dataset.get(role)) if s is not None), None)
        for role, data in given.items()
    }
    return {role: source for role, source in sources.items() if source is not None}


def load_splits(
    sources: dict[str, DataSource], args: DataTrainingArguments, conll: bool = False
) -> dict[str, NamedDataset]:
    """Each split read (a file, a `datasets` folder or name, or data in memory), named for its messages."""
    split_names = {"train": args.train_split, "validation": args.validation_split, "test": args.test_split or "test"}
    return {role: load_data(source, split=split_names[role], conll=conll) for role, source in sources.items()}


# The options of the Trainer jobs that name what they read: an output folder must lie apart from each.
INPUT_OPTIONS = (
    "model_name_or_path",
    "tokenizer_name",
    "train_file",
    "validation_file",
    "test_file",
    "dataset_name",
    "teacher_model_name_or_path",
    "transfer_file",
)


def in_memory(sources: dict[str, DataSource]) -> dict[str, Any]:
    """The splits given in memory (not as a file or a name), whose fingerprint the run's options record."""
    return {role: source for role, source in sources.items() if not isinstance(source, (str, os.PathLike))}


@contextmanager
def run_folder(
    output_dir: str | os.PathLike,
    args: DataArguments,
    training_options: dict[str, Any],
    job: str,
    options: dict[str, Any] | None = None,
) -> Iterator[Path]:
    """The checked output folder, locked for the whole run (`outputs.LOCK_FILE`): a second run into the same
    folder fails in one line instead of overwriting this one's checkpoints; a resume continues only the run its
    checkpoint was saved by (`options`: this run's, `resume.run_options`), and says which. SIGINT and SIGTERM stop
    the job keeping the step in progress (`signals`). A folder created here and left empty by a failure is
    removed. `args`: the job's dataclass (its `overwrite_output_dir`, its inputs)."""
    outputs.check_unlocked(Path(output_dir), job)
    # What is left is a killed run's lock: not content, so a folder holding only that is empty, as it was.
    if Path(output_dir).is_dir():
        (Path(output_dir) / outputs.LOCK_FILE).unlink(missing_ok=True)
    inputs = {name: getattr(args, name) for name in INPUT_OPTIONS if hasattr(args, name)}
    output = check_output(output_dir, args.overwrite_output_dir, training_options, inputs, job)
    resumed = training_options.get("resume_from_checkpoint")
    if options is not None:
        check_resume(resumed, options, getattr(args, FLAG, False))
    if resumed:
        print(f"resuming from {resumed}")
    created = not output.exists()
    try:
        with stop_signals(output), outputs.locked(output, job):
            yield output
    finally:
        if created and output.is_dir() and not any(output.iterdir()):
            output.rmdir()


def check_output(
    output_dir: str | os.PathLike,
    overwrite: bool,
    training_options: dict[str, Any],
    inputs: dict[str, Any] | None = None,
    job: str = "finetune",
) -> Path:
    """Fail before any work if the output folder would be clobbered (resuming continues the run saved there), is
    or holds what the job reads (`inputs`), or cannot be written, or if there is no checkpoint to resume from.

    `training_options["resume_from_checkpoint"]` is replaced (in place) by the checkpoint chosen, so the check and
    its warning about skipped unfinished checkpoints happen once, before the data is read."""
    resuming = bool(training_options.get("resume_from_checkpoint"))
    output = check_output_dir(output_dir, overwrite=overwrite or resuming, resume_hint=True, inputs=inputs, job=job)
    check_writable(output.absolute())
    if "resume_from_checkpoint" in training_options:
        training_options["resume_from_checkpoint"] = resume_checkpoint(
            output, training_options["resume_from_checkpoint"]
        )
    return output


def strip_prefix(metrics: dict[str, float], prefix: str) -> dict[str, float]:
    return {k.removeprefix(prefix): v for k, v in metrics.items()}


def dataset_name(source: DataSource) -> str | None:
    """How the model card names the training data: a file's or folder's name, a dataset name; None in memory."""
    if isinstance(source, (str, os.PathLike)):
        return Path(source).name or str(source)
    return None


def check_writable(output: Path) -> None:
    """Fail before any work if Trainer could not write its checkpoints into `output`, or the final folder could
    not be staged beside it. Probes with a temporary folder, so nothing is left behind either way."""
    places = [output, output.parent] if output.is_dir() else [next(p for p in output.parents if p.is_dir())]
    try:
        for place in places:
            tempfile.TemporaryDirectory(dir=place).cleanup()
    except OSError as err:
        raise OSError(f"output_dir {output} cannot be written: {err.strerror or err}") from None


def run_callbacks(
    early_stopping_patience: int, run_record: dict[str, Any] | None = None, resumable: bool = True
) -> list[TrainerCallback]:
    """Each checkpoint records the run's options (`run_record`); a stop signal ends the step in progress with a
    checkpoint; a NaN loss or weights stop the run before they are saved; so does validation that has stopped
    improving. In this order: the record is written before a signal's stop, whose checkpoint is checked for NaN."""
    return [
        RecordRunOptions(run_record),
        StopOnSignal(resumable),
        StopOnNonFinite(),
        *([EarlyStoppingCallback(early_stopping_patience)] if early_stopping_patience else []),
    ]


def train_and_save(
    task: str,
    model_source: str | os.PathLike,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prepared: Prepared,
    output: Path,
    labels: list[str] | None,
    train_data: DataSource,
    training_options: dict[str, Any],
    keep_checkpoints: bool = False,
    extra_outputs: Callable[[Trainer, Path, PredictionOutput | None], None] | None = None,
    trainer_class: type[Trainer] = Trainer,
    learning_rates: Sequence[float] | None = None,
    min_train_steps: int = 0,
    early_stopping_patience: int = 0,
    run_record: dict[str, Any] | None = None,
    **trainer_options: Any,
) -> FinetuneResult:
    """Train `model` with Trainer (checkpoints in `output`), score it, then save the output folder in one step.

    `trainer_class` and `trainer_options` are how a variant of fine-tuning (distillation) brings its own loss;
    `extra_outputs(trainer, staging, validation predictions)` writes a task's own files into the folder;
    `learning_rates` trains once at each and keeps the best on validation (`search_learning_rate`); the schedule
    takes at least `min_train_steps` optimizer steps (`training_arguments`) and stops after `early_stopping_patience`
    evaluations in a row without a better validation score (0: never; resumed, it counts on from the checkpoint);
    `run_record`, the run's options, goes into each checkpoint, for a resume to check."""
    options = {"restore_callback_states_from_checkpoint": bool(early_stopping_patience), **training_options}
    # The final folder is pushed once, complete, by push_to_hub: Trainer's own push would upload every
    # checkpoint as it is saved. The token stays out of the args Trainer pickles into its checkpoints.
    push, token = options.pop("push_to_hub", False), options.pop("hub_token", None)
    if push and not options.get("hub_model_id"):
        raise ValueError("push_to_hub needs hub_model_id (--hub_model_id NAMESPACE/NAME)")

    def build(folder: Path, network: PreTrainedModel, **overrides: Any) -> Trainer:
        return trainer_class(
            model=network,
            args=training_arguments(
                str(folder),
                prepared.validation is not None,
                prepared.metric,
                len(prepared.train),
                min_train_steps,
                **{**options, **overrides},
            ),
            data_collator=prepared.collator,
            train_dataset=prepared.train,
            eval_dataset=prepared.validation,
            processing_class=tokenizer,
            compute_metrics=prepared.metrics_for("validation") if prepared.validation is not None else None,
            preprocess_logits_for_metrics=prepared.preprocess_logits,
            callbacks=run_callbacks(early_stopping_patience, run_record, resumable=not learning_rates),
            **trainer_options,
        )

    search = None
    if learning_rates:
        trainer, results, validation, search = search_learning_rate(build, model, prepared, output, learning_rates)
    else:
        trainer = build(output, model)
        results, validation = train_and_score(trainer, prepared)
    score_test(trainer, prepared, results)
    args = trainer.args
    check_results(trainer.model, results, args, trainer.state.global_step)  # nothing non-finite is saved as a success
    write_output_folder(
        output, trainer, tokenizer, prepared, results, validation, search, extra_outputs, keep_checkpoints
    )
    card_and_push(output, task, model_source, train_data, args, push, token)
    return FinetuneResult(
        output,
        strip_prefix(results.get("eval", {}), "eval_"),
        strip_prefix(results["test"], "test_") if "test" in results else None,
        labels,
        strip_prefix(results["train"], "train_"),
    )


def card_and_push(output: Path, task: str, model_source, train_data: DataSource, args, push: bool, token) -> None:
    """The saved folder's model card, then, with `push`, the folder pushed as one commit to `args.hub_model_id`."""
    # Written once the folder has its final name: the card takes its title from the folder's name (in the staging
    # folder it would be the hidden ".NAME.partial-..."). write_text is atomic, so the card is whole or absent.
    write_model_card(
        output, task=load_task(task).pipeline_tag, base_model=str(model_source), dataset_name=dataset_name(train_data)
    )
    if push:
        push_to_hub(
            output, args.hub_model_id, token=token, private=bool(args.hub_private_repo), revision=args.hub_revision
        )


def write_output_folder(
    output: Path,
    trainer: Trainer,
    tokenizer: PreTrainedTokenizerBase,
    prepared: Prepared,
    results: dict[str, dict],
    validation: PredictionOutput | None,
    search: dict | None,
    extra_outputs: Callable[[Trainer, Path, PredictionOutput | None], None] | None,
    keep_checkpoints: bool,
) -> None:
    """The final folder, staged and renamed in: the task's own files, the model and its results, the learning-rate
    search's record and plot, the checkpoints if kept. Only now, after training: a run killed while training
    leaves OUTPUT with its checkpoints and nothing else, ready for resume_from_checkpoint."""
    args = trainer.args
    with staged_folder(output) as staging:
        if extra_outputs is not None:
            extra_outputs(trainer, staging, validation)
        save_folder_contents(
            trainer, tokenizer, results, (args.metric_for_best_model or prepared.metric).removeprefix("eval_"), staging
        )
        if search is not None:
            write_json(staging / LEARNING_RATE_SEARCH_FILE, search)
            plot_learning_rate_search(search, staging / LEARNING_RATE_PLOT_FILE)
        if keep_checkpoints:
            for _, checkpoint in checkpoint_folders(Path(args.output_dir)):
                os.replace(checkpoint, staging / checkpoint.name)


def search_learning_rate(
    build: Callable[..., Trainer],
    model: PreTrainedModel,
    prepared: Prepared,
    output: Path,
    learning_rates: Sequence[float],
) -> tuple[Trainer, dict[str, dict], PredictionOutput | None, dict[str, Any]]:
    """Train a copy of `model` at each learning rate (same seed, data and schedule), each with its checkpoints in
    OUTPUT/run-I, and keep the run whose final model (its best epoch) scores best on validation by
    metric_for_best_model, the measure that already picks the epoch; the test data is not read. Returns that
    run's trainer, results and validation predictions, and the search: {metric, greater_is_better, runs: [...],
    chosen learning rate}. The other runs' folders are removed as soon as they lose. A run whose loss or weights
    become non-finite (`NonFiniteError`) loses at once (its entry says `diverged` where it stopped); if every run
    does, the search raises NonFiniteError naming each.

    Written here, not with `Trainer.hyperparameter_search`: that needs an optuna / ray / wandb backend and reports
    only the best trial's hyperparameters, so its model would have to be trained again."""
    start = copy.deepcopy(model)  # every run starts from the same weights
    best: tuple[float, Trainer, dict, PredictionOutput | None] | None = None
    runs = []
    for i, rate in enumerate(learning_rates):
        folder = output / f"{SEARCH_RUN_PREFIX}{i}"
        trainer = build(folder, model if i == 0 else copy.deepcopy(start), learning_rate=float(rate))
        key = trainer.args.metric_for_best_model
        key = key if key.startswith("eval_") else f"eval_{key}"
        try:
            results, validation = train_and_score(trainer, prepared)
        except NonFiniteError as err:  # too high a rate is what a search finds out: this run loses
            problem = getattr(err, "problem", str(err))
            runs.append({"learning_rate": float(rate), "diverged": problem})
            logger.warning("learning rate %g: %s; it loses", rate, problem)
            shutil.rmtree(folder, ignore_errors=True)
            continue
        score = float(results["eval"][key])
        curve = [(e["step"], e[key]) for e in trainer.state.log_history if key in e]
        runs.append({"learning_rate": float(rate), key: score, "curve": curve})
        logger.info("learning rate %g: %s %.4f", rate, key, score)
        if best is None or (score > best[0] if trainer.args.greater_is_better else score < best[0]):
            if best is not None:
                shutil.rmtree(best[1].args.output_dir, ignore_errors=True)
            best = (score, trainer, results, validation)
        else:
            shutil.rmtree(trainer.args.output_dir, ignore_errors=True)
    if best is None:
        tried = "; ".join(f"{run['learning_rate']:g}: {run['diverged']}" for run in runs)
        raise NonFiniteError(
            f"learning_rates: every run became non-finite ({tried}): lower the learning rates; "
            "nothing was saved as the model"
        )
    score, trainer, results, validation = best
    results["train"]["train_learning_rate"] = trainer.args.learning_rate
    search = {
        "metric": key,
        "greater_is_better": bool(trainer.args.greater_is_better),
        "runs": runs,
        "chosen_learning_rate": trainer.args.learning_rate,
    }
    return trainer, results, validation, search


def train_and_score(trainer: Trainer, prepared: Prepared) -> tuple[dict[str, dict], PredictionOutput | None]:
    """Train (resuming from the checkpoint `check_output` chose), then score the final model on the validation
    data: {split: metrics} with Trainer's prefixes, and the validation predictions. The test data is scored by
    `score_test`, once the model is final."""
    use_progress_bars(trainer)
    # No "Writing model shards" bar inside Trainer's at every checkpoint; and no word on the filesystem when two
    # checkpoints are saved within a second (a small data set's epochs): Trainer then orders them by step, as
    # `resume_checkpoint` does.
    with transformers_bars_off(), unsaid("transformers.trainer_utils", "mtime may not be reliable"):
        train_metrics = trainer.train(resume_from_checkpoint=trainer.args.resume_from_checkpoint).metrics
    results = {"train": {**train_metrics, **sample_counts(prepared, "train")}}
    # One pass over the validation data with the final (best) model gives its scores and its predictions.
    validation = None
    if prepared.validation is not None:
        validation = trainer.predict(prepared.validation, metric_key_prefix="eval")
        results["eval"] = {**validation.metrics, **sample_counts(prepared, "validation", "eval")}
    return results, validation


def score_test(trainer: Trainer, prepared: Prepared, results: dict[str, dict]) -> None:
    """The test data's scores of the final model, added to `results` (once, after every choice is made)."""
    if prepared.test is not None:
        # Training is over: early stopping, which reads every evaluation, would find no validation score in these.
        trainer.remove_callback(EarlyStoppingCallback)
        trainer.compute_metrics = prepared.metrics_for("test")
        results["test"] = {
            **trainer.evaluate(prepared.test, metric_key_prefix="test"),
            **sample_counts(prepared, "test"),
        }


def sample_counts(prepared: Prepared, role: str, prefix: str | None = None) -> dict[str, int]:
    """A split's examples (`{prefix}_samples`, as Trainer names them) and, read in windows, its windows too."""
    prefix = prefix or role
    windows = {f"{prefix}_windows": len(getattr(prepared, role))} if prepared.owners.get(role) else {}
    return {f"{prefix}_samples": prepared.samples(role), **windows}


def save_folder_contents(
    trainer: Trainer, tokenizer: PreTrainedTokenizerBase, results: dict[str, dict], metric: str, staging: Path
) -> None:
    """The model, tokenizer, results files, trainer state and curves, into the staging folder (Trainer's own
    savers write to args.output_dir, where the checkpoints stay)."""
    # Pipelines truncate to model_max_length: it must not exceed the position table.
    limit = getattr(trainer.model.config, "max_position_embeddings", None)
    if limit is not None and tokenizer.model_max_length > limit:
        tokenizer.model_max_length = limit
    # Not trainer.save_model: it also pickles the arguments (training_args.bin).
    with transformers_bars_off():
        trainer.model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    # save_pretrained writes the weights through a private temporary file (0600) and the config with open()
    # (0666 less the umask): the weights get the config's mode, so whoever may read the model may load it.
    mode = (staging / "config.json").stat().st_mode & 0o777
    for weights in staging.glob("*.safetensors"):
        weights.chmod(mode)
    for split, metrics in results.items():
        trainer.log_metrics(split, metrics)
    write_results(staging, results)
    trainer.state.save_to_json(str(staging / TRAINER_STATE_FILE))
    plot_training_curves(trainer.state.log_history, metric, trainer.state.best_global_step, staging / CURVES_FILE)


def resume_checkpoint(output: Path, requested: str | bool | None) -> str | None:
    """The checkpoint to resume from: a path as given, or (True, "true", "last") the newest complete one in `output`.

    Trainer writes checkpoint-N in place, so a kill or a full disk during a save leaves an unfinished folder; it
    is skipped (with a one-line warning) for the one before. If every checkpoint-N is unfinished, the run was
    stopped inside its first save: it starts again from the beginning, which is where that save would resume.

    Raises:
        FileNotFoundError: no checkpoint-N folder in `output`, or `requested` is not a folder.
        ValueError: `requested` names a checkpoint that is unfinished.
    """
    if requested in (None, False, "", "false", "False"):
        return None
    if requested in (True, "true", "True", "last"):
        if not checkpoint_folders(output):
            raise FileNotFoundError(
                f"resume_from_checkpoint: no {CHECKPOINT_PREFIX}N folder in {output} to resume from"
            )
        found = outputs.latest_checkpoint(output, trainer_checkpoint_problem)
        if found is None:
            warnings.warn(
                f"resume_from_checkpoint: no finished {CHECKPOINT_PREFIX}N in {output}; starting from the beginning",
                stacklevel=2,
            )
        return str(found) if found is not None else None
    if not Path(requested).is_dir():
        raise FileNotFoundError(f"resume_from_checkpoint: {requested} is not a checkpoint folder")
    problem = trainer_checkpoint_problem(Path(requested))
    if problem is not None:
        raise ValueError(f"resume_from_checkpoint: {requested} is unfinished ({problem})")
    return str(requested)
