"""The base of every pretraining objective, and the first of them: masked language modelling alone (`mlm`).

An `Objective` says everything the loop, the plots and the summary need to know about what is trained:

    setup      what it takes from the run's arguments (`from_arguments`: a teacher is loaded and checked there,
               before the corpus is read), the recipe it trains best with where the caller left a field unset
               (`recipe`: vocabulary size, masking rate, steps) and the vocabulary a new model gets
               (`make_tokenizer`; the base trains a WordPiece vocabulary on the training documents)
    model      which model it trains (`build_model`; a second model beside it, a generator or a teacher, is
               built here too and lives inside the module it returns), which one is saved (`saved_model`,
               `saved_state`) and the pipeline tag of its card (`card_task`)
    batch      what the model is given from a collated batch (`model_inputs`: drops, adds or renames fields)
    numbers    the sums it counts per batch (`stat_keys`, `statistics`) and the metrics made of them, in
               training (`train_metrics`, the keys of metrics.jsonl) and on the held-out set (`eval_metrics`, the
               keys of eval_results.json)
    curves     what `training_curves.png` plots (`curves`)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import ModelOutput

from modeling_minibert.checks_minibert import IGNORE_INDEX, read_safetensors_header
from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.modeling_minibert import MiniBertForMaskedLM
from modeling_minibert.utils.logging import quiet_transformers

NSP_HEAD_KEY = "cls.seq_relationship.weight"
MLM_HEAD_KEY = "cls.predictions.bias"  # present in every Mini-BERT / BERT checkpoint with an MLM head


@dataclass
class SparseMLMOutput(ModelOutput):
    """What an objective's module returns when it trains a masked LM beside its own losses: loss (the total),
    mlm_loss, and the sparse MLM head's logits (M, V) with the flat indices of the M masked positions. The
    objectives that train more (electra, general_distillation) extend it with their own losses."""

    loss: torch.Tensor | None = None
    mlm_loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    masked_positions: torch.Tensor | None = None


@dataclass(frozen=True)
class Curve:
    """One line of `training_curves.png`: the `key` of training (`eval=False`) or held-out records."""

    panel: str  # "loss" or "accuracy"
    key: str
    label: str
    eval: bool = False


class Objective:
    """MLM: predict the masked tokens (BERT's 80/10/10 masking is the collator's). The base of the others."""

    name: ClassVar[str] = "mlm"
    description: ClassVar[str] = "masked language modelling alone (a model without the NSP head)"
    model_class: ClassVar[type[PreTrainedModel]] = MiniBertForMaskedLM
    card_task: ClassVar[str] = "fill-mask"  # the pipeline tag of the saved model's card
    saved_prefix: ClassVar[str] = ""  # where `saved_model` sits in the trained module ("": the module itself)
    # The recipe's fields that `PretrainingArguments` leaves unset (None) for the objective to fill. 40% masking,
    # not BERT's 15% (Wettig et al. 2023): more predictions per step; 4,000 steps: the default run's time.
    # Measured: lab/README.md#the-recipe, docs/pretraining.md#what-to-expect
    # float32: the default run's model is too narrow (192) for bf16 matrix products to pay on a CPU.
    recipe: ClassVar[dict] = {"vocab_size": 8192, "mlm_probability": 0.40, "max_steps": 4000, "mixed_precision": "no"}
    # A dataclass of the objective's own fields, which `PretrainingArguments` (and so `minibert pretrain`) adds.
    arguments: ClassVar[type | None] = None
    # The chance that a training example's second segment is another document's text: NSP's 50%; without NSP none,
    # so every example is contiguous text (RoBERTa's finding: NSP's random halves cost MLM more than NSP gives).
    random_next: ClassVar[float] = 0.0
    # Summed over a micro-batch: examples, loss x examples, MLM loss x masked tokens, correct and masked tokens.
    stat_keys: ClassVar[tuple[str, ...]] = ("examples", "loss", "mlm_loss", "mlm_correct", "mlm_count")
    curves: ClassVar[tuple[Curve, ...]] = (
        Curve("loss", "loss", "train loss"),
        Curve("loss", "mlm_loss", "train MLM loss"),
        Curve("loss", "eval_mlm_loss", "held-out MLM loss", eval=True),
        Curve("accuracy", "mlm_accuracy", "train MLM accuracy"),
        Curve("accuracy", "eval_mlm_accuracy", "held-out MLM accuracy", eval=True),
    )

    # --- setup ------------------------------------------------------------------------------------------------
    @classmethod
    def given_arguments(cls, args) -> list[str]:
        """`name=value` of each of the objective's own fields (`arguments`) that `args` sets (not its default)."""
        fields = dataclasses.fields(cls.arguments) if cls.arguments else ()
        return [f"{f.name}={getattr(args, f.name)}" for f in fields if getattr(args, f.name) != f.default]

    @classmethod
    def check_arguments(cls, args) -> None:
        """ValueError, one line, for `PretrainingArguments` this objective cannot train with."""

    @classmethod
    def from_arguments(cls, args, config: MiniBertConfig) -> Objective:
        """The objective for a run of `args` (`PretrainingArguments`) training a model shaped by `config`."""
        return cls()

    def make_tokenizer(self, args, documents: list[str]) -> PreTrainedTokenizerBase:
        """A new model's vocabulary, made from the training `documents` (the main process, at the run's start)."""
        from tokenization import train_tokenizer

        print(f"training a {args.vocab_size:,}-token WordPiece vocabulary on {len(documents):,} documents")
        return train_tokenizer(
            train_data=documents,
            vocab_size=args.vocab_size,
            disable_tqdm=args.disable_tqdm,
            model_max_length=args.max_seq_length,
        )

    # --- the model --------------------------------------------------------------------------------------------
    def check_source(self, source: Path, weights: set[str]) -> list[str]:
        """Raise ValueError if the saved model `source` (whose weight names are `weights`) cannot be trained with
        this objective; return notes (one line each) about what starts from scratch."""
        if MLM_HEAD_KEY in weights:
            return []
        return [
            f"model_name_or_path={source} has no MLM head (a fine-tuned model?): its encoder is continued, "
            "its MLM head starts from random weights"
        ]

    def build_model(self, config: MiniBertConfig, source: Path | None) -> torch.nn.Module:
        """The module the loop trains, new from `config` or loaded from `source` (with `config`'s sizes)."""
        if source is None:
            return self.model_class(config)
        with quiet_transformers():  # what the weights leave out is said in one line by `check_source`
            return self.model_class.from_pretrained(source, config=config)

    def saved_model(self, model: torch.nn.Module) -> PreTrainedModel:
        """What `save_pretrained` writes at the end and into each checkpoint (an objective training two models
        returns the one that is published)."""
        return model

    def saved_state(self, state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """`saved_model`'s weights out of the trained module's (gathered) state dict: those under `saved_prefix`."""
        prefix = self.saved_prefix
        return {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}

    def set_vocabulary(self, tokenizer, documents: list[str]) -> None:
        """Told the run's tokenizer and training documents before `build_model` (an objective with a teacher maps
        its ids, and may read the teacher on the text to start the student)."""

    # --- the batch --------------------------------------------------------------------------------------------
    def model_inputs(self, batch: dict, evaluating: bool = False) -> dict:
        """The model's keyword arguments for a collated batch. In evaluation only the masked rows are scored
        (as in training): (M, V) logits instead of (B, T, V)."""
        inputs = {k: v for k, v in batch.items() if k != "next_sentence_label"}
        return {**inputs, "sparse_prediction": True} if evaluating else inputs

    # --- the numbers ------------------------------------------------------------------------------------------
    def statistics(self, outputs, batch: dict) -> torch.Tensor:
        """The sums of `stat_keys` over one micro-batch, as one tensor (no host sync: counted and summed on the
        device, and the batch size made there rather than copied in)."""
        predicted, targets = masked_predictions(outputs, batch["labels"])
        count = (targets != IGNORE_INDEX).sum().float()  # a compiled step's padding rows (`plan_batch`) score nothing
        n = torch.full((), float(batch["input_ids"].shape[0]), device=targets.device)
        return torch.stack(
            [
                n,
                outputs.loss.detach().float() * n,
                mlm_loss_of(outputs).detach().float() * count,
                (predicted == targets).sum().float(),
                count,  # a prediction is never -100: padding rows are never right
            ]
        )

    def train_metrics(self, sums: dict[str, float]) -> dict:
        return {
            "loss": sums["loss"] / sums["examples"],
            "mlm_loss": sums["mlm_loss"] / max(sums["mlm_count"], 1),
            "mlm_accuracy": sums["mlm_correct"] / max(sums["mlm_count"], 1),
        }

    @staticmethod
    def head_metrics(sums: dict[str, float], head: str, count: str, prefix: str = "") -> dict:
        """`{head}_loss` and `{head}_accuracy` of a second head (NSP, replaced tokens), per `count` (its examples
        or tokens), from the sums `{head}_loss` (loss x count) and `{head}_correct`."""
        return {
            f"{prefix}{head}_loss": sums[f"{head}_loss"] / sums[count],
            f"{prefix}{head}_accuracy": sums[f"{head}_correct"] / sums[count],
        }

    def eval_metrics(self, sums: dict[str, float]) -> dict:
        """Held-out metrics: MLM loss and accuracy over the masked tokens, and perplexity (run_mlm.py's name)."""
        mlm_loss = sums["mlm_loss"] / max(sums["mlm_count"], 1)
        return {
            "eval_loss": mlm_loss,
            "eval_mlm_loss": mlm_loss,
            "eval_mlm_accuracy": sums["mlm_correct"] / max(sums["mlm_count"], 1),
            "perplexity": math.exp(min(mlm_loss, 50.0)),
        }


def weight_names(source: Path) -> set[str]:
    """The weight names in `source/model.safetensors`, read from its header (nothing is loaded) by the one
    header reader, which also names a truncated file in one line."""
    return set(read_safetensors_header(source / "model.safetensors")) - {"__metadata__"}


def masked_predictions(outputs, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's MLM predictions and their targets, side by side, one per scored row: targets are -100 where a
    row scores nothing (count and compare where they are not).

    With `masked_positions` the model scored only those rows (sparse prediction, padded to a fixed count in a
    compiled step); else it scored every token, and the targets are the labels of all B x T positions (not
    selected: boolean indexing would make the host wait for the device).
    """
    logits = outputs.prediction_logits if hasattr(outputs, "prediction_logits") else outputs.logits
    positions = outputs.get("masked_positions")
    if positions is not None:
        return logits.argmax(-1), labels.flatten().index_select(0, positions)
    return logits.argmax(-1).flatten(), labels.flatten()


def mlm_loss_of(outputs) -> torch.Tensor:
    """The MLM part of the loss (the whole loss of an MLM-only model)."""
    return outputs.get("mlm_loss") if outputs.get("mlm_loss") is not None else outputs.loss
