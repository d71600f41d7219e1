"""Pretraining objectives: what a run trains the model to do (`--objective`), one module each, named in the table
`OBJECTIVES`.

    base.py                   `Objective`, the base every objective extends, and itself `mlm`: masked LM alone
    mlm_nsp.py                `mlm_nsp`: BERT's masked LM + next sentence prediction (the default)
    electra.py                `electra`: replaced-token detection, with a small generator beside the model
    general_distillation.py   `general_distillation`: a teacher encoder's attention relations and hidden states
    teacher_init.py           how general distillation's student starts from its teacher (embeddings, layers)

The loop never names a loss or a head. A new objective is a module here (a subclass of `Objective`; its own
options a dataclass in it, `arguments`, which `PretrainingArguments` and `minibert pretrain --help` take from the
table) plus one line in `OBJECTIVES`.
"""

from __future__ import annotations

from pathlib import Path

from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.training.pretraining.objectives.base import NSP_HEAD_KEY, Objective, weight_names
from modeling_minibert.training.pretraining.objectives.electra import ReplacedTokenDetection
from modeling_minibert.training.pretraining.objectives.general_distillation import GeneralDistillation
from modeling_minibert.training.pretraining.objectives.mlm_nsp import MaskedLMWithNSP

OBJECTIVES: dict[str, type[Objective]] = {
    o.name: o for o in (MaskedLMWithNSP, Objective, ReplacedTokenDetection, GeneralDistillation)
}


def objective_name(args, source: Path | None) -> str:
    """The objective `args` name; unset: the one whose own options are given (a teacher: general distillation),
    else BERT's MLM + NSP, or MLM alone for a saved model without NSP head. ValueError for a name `OBJECTIVES`
    lacks."""
    name = args.objective or next((o.name for o in OBJECTIVES.values() if o.given_arguments(args)), None)
    if name is None:
        name = "mlm_nsp" if source is None or NSP_HEAD_KEY in weight_names(source) else "mlm"
    if name not in OBJECTIVES:
        raise ValueError(f"objective={name!r} is not one of {', '.join(OBJECTIVES)}")
    return name


def pick_objective(args, source: Path | None, config: MiniBertConfig) -> Objective:
    """The run's objective (`objective_name`), made from its arguments."""
    return OBJECTIVES[objective_name(args, source)].from_arguments(args, config)


__all__ = ["OBJECTIVES", "Objective", "objective_name", "pick_objective", "weight_names"]
