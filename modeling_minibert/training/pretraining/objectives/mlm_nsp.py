"""BERT's objective (`mlm_nsp`, the default): masked language modelling plus next sentence prediction."""

from __future__ import annotations

from pathlib import Path

import torch

from modeling_minibert.modeling_minibert import MiniBertForPreTraining
from modeling_minibert.training.pretraining.objectives.base import NSP_HEAD_KEY, Curve, Objective


class MaskedLMWithNSP(Objective):
    """BERT's objective: MLM plus next sentence prediction on the [CLS] token of each sentence pair."""

    name = "mlm_nsp"
    description = "masked language modelling and next sentence prediction (BERT)"
    model_class = MiniBertForPreTraining
    random_next = 0.5
    stat_keys = (*Objective.stat_keys, "nsp_loss", "nsp_correct")
    curves = (
        *Objective.curves[:2],
        Curve("loss", "nsp_loss", "train NSP loss"),
        Objective.curves[2],
        Curve("loss", "eval_nsp_loss", "held-out NSP loss", eval=True),
        Objective.curves[3],
        Curve("accuracy", "nsp_accuracy", "train NSP accuracy"),
        Objective.curves[4],
        Curve("accuracy", "eval_nsp_accuracy", "held-out NSP accuracy", eval=True),
    )

    def check_source(self, source: Path, weights: set[str]) -> list[str]:
        if NSP_HEAD_KEY not in weights:
            raise ValueError(
                f"model_name_or_path={source} has no NSP head ({NSP_HEAD_KEY}); pass --objective mlm to train MLM only"
            )
        return super().check_source(source, weights)

    def model_inputs(self, batch: dict, evaluating: bool = False) -> dict:
        inputs = super().model_inputs(batch, evaluating)
        return {**inputs, "next_sentence_label": batch["next_sentence_label"]}

    def statistics(self, outputs, batch: dict) -> torch.Tensor:
        labels = batch["next_sentence_label"]
        nsp = torch.stack(
            [
                outputs.next_sentence_loss.detach().float() * labels.numel(),
                (outputs.seq_relationship_logits.argmax(-1) == labels).sum().float(),
            ]
        )
        return torch.cat([super().statistics(outputs, batch), nsp])

    def train_metrics(self, sums: dict[str, float]) -> dict:
        return {**super().train_metrics(sums), **self.head_metrics(sums, "nsp", "examples")}

    def eval_metrics(self, sums: dict[str, float]) -> dict:
        results = {**super().eval_metrics(sums), **self.head_metrics(sums, "nsp", "examples", prefix="eval_")}
        # eval_loss is the model's loss: MLM + NSP.
        return {**results, "eval_loss": results["eval_mlm_loss"] + results["eval_nsp_loss"]}
