"""Replaced-token detection (ELECTRA, Clark et al. 2020), `--objective electra`: a small generator learns MLM on
the masked positions, its samples replace those tokens, and the model (the discriminator) learns to tell, for
every token, whether it is the original. Every token teaches the discriminator, not only the masked 15-40%.

The loss is the generator's MLM loss plus 50 x the discriminator's (the paper's weight: the binary loss is
much smaller). The generator is a quarter of the model's width (hidden size, heads, FFN), as the paper
recommends; only the discriminator is saved (a `MiniBertModel`: an encoder to fine-tune), the generator lives
in the checkpoints so that a resumed run is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.modeling_minibert import MiniBertForMaskedLM, MiniBertModel
from modeling_minibert.training.pretraining.objectives.base import Curve, Objective, SparseMLMOutput
from modeling_minibert.utils.logging import quiet_transformers

RTD_WEIGHT = 50.0
GENERATOR_FRACTION = 4  # the generator's hidden size, heads and FFN are the model's divided by this


@dataclass
class ReplacedTokenDetectionOutput(SparseMLMOutput):
    """loss: mlm_loss + 50 x rtd_loss. logits (M, V) / masked_positions (M,): the generator's MLM, as a sparse
    MLM head returns them. rtd_logits (B, T): the discriminator's "replaced" score per token; replaced (B, T):
    the truth (1.0 where the token differs from the original); rtd_mask (B, T): the tokens scored (not padding)."""

    rtd_loss: torch.Tensor | None = None
    rtd_logits: torch.Tensor | None = None
    replaced: torch.Tensor | None = None
    rtd_mask: torch.Tensor | None = None


class GeneratorAndDiscriminator(nn.Module):
    """The module ELECTRA trains: the generator (a small masked LM) and the discriminator (the encoder to keep)
    with its one-logit replaced-token head."""

    def __init__(self, generator: MiniBertForMaskedLM, discriminator: MiniBertModel):
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator
        self.rtd_head = nn.Linear(discriminator.config.hidden_size, 1)

    def forward(
        self, input_ids, attention_mask, token_type_ids, labels, sparse_prediction: bool = True, **kwargs
    ) -> ReplacedTokenDetectionOutput:
        # The generator scores the M masked rows only: logits (M, V), their flat positions in B * T (M,).
        # masked_positions and batch_plan (`plan_batch`), when the collator made them, spare both models a host sync.
        plan = kwargs.get("batch_plan")
        generated = self.generator(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            labels=labels,
            sparse_prediction=True,
            masked_positions=kwargs.get("masked_positions"),
            batch_plan=plan,
        )
        positions = generated.masked_positions
        with torch.no_grad():  # a sample, not a gradient path: the generator learns from its MLM loss alone
            uniform = torch.rand_like(generated.logits, dtype=torch.float32).clamp_(1e-9, 1.0)
            sampled = (generated.logits.float() - torch.log(-torch.log(uniform))).argmax(-1)  # Gumbel-max: (M,)
            # A compiled step's padding rows (label -100) write back the token that is there.
            flat = input_ids.flatten()
            sampled = torch.where(
                labels.flatten().index_select(0, positions) != -100, sampled, flat.index_select(0, positions)
            )
            corrupted = flat.index_put((positions,), sampled).view_as(input_ids)  # (B, T)
            original = torch.where(labels != -100, labels, input_ids)
            replaced = (corrupted != original).float()
        hidden = self.discriminator(
            input_ids=corrupted, attention_mask=attention_mask, token_type_ids=token_type_ids, batch_plan=plan
        ).last_hidden_state  # (B, T, H)
        rtd_logits = self.rtd_head(hidden).squeeze(-1)  # (B, T)
        mask = attention_mask.bool()
        # The mean over real tokens as a weighted sum: boolean indexing would make the host wait for the device.
        weights = mask.float()
        rtd_loss = (
            nn.functional.binary_cross_entropy_with_logits(
                rtd_logits.float(), replaced, weight=weights, reduction="sum"
            )
            / weights.sum()
        )
        return ReplacedTokenDetectionOutput(
            loss=generated.loss + RTD_WEIGHT * rtd_loss,
            mlm_loss=generated.loss,
            logits=generated.logits,
            masked_positions=positions,
            rtd_loss=rtd_loss,
            rtd_logits=rtd_logits,
            replaced=replaced,
            rtd_mask=mask,
        )


def generator_config(config: MiniBertConfig) -> MiniBertConfig:
    heads = max(1, config.num_attention_heads // GENERATOR_FRACTION)
    return MiniBertConfig(
        **{
            **config.to_dict(),
            "num_attention_heads": heads,
            "hidden_size": max(heads, config.hidden_size // GENERATOR_FRACTION // heads * heads),
            "intermediate_size": max(1, config.intermediate_size // GENERATOR_FRACTION),
        }
    )


class ReplacedTokenDetection(Objective):
    name = "electra"
    description = "replaced-token detection (ELECTRA) with a generator a quarter of the model's width"
    model_class = MiniBertModel
    card_task = "feature-extraction"
    saved_prefix = "discriminator."
    stat_keys = (*Objective.stat_keys, "rtd_loss", "rtd_correct", "rtd_tokens")
    curves = (
        *Objective.curves[:2],
        Curve("loss", "rtd_loss", "train replaced-token loss"),
        Curve("loss", "eval_rtd_loss", "held-out replaced-token loss", eval=True),
        Objective.curves[2],
        Curve("accuracy", "mlm_accuracy", "train generator MLM accuracy"),
        Curve("accuracy", "rtd_accuracy", "train replaced-token accuracy"),
        Curve("accuracy", "eval_mlm_accuracy", "held-out generator MLM accuracy", eval=True),
        Curve("accuracy", "eval_rtd_accuracy", "held-out replaced-token accuracy", eval=True),
    )

    def check_source(self, source: Path, weights: set[str]) -> list[str]:
        return [
            f"model_name_or_path={source}: its encoder is continued as the discriminator; the generator and "
            "the replaced-token head start from random weights"
        ]

    def build_model(self, config: MiniBertConfig, source: Path | None) -> torch.nn.Module:
        if source is None:
            discriminator = MiniBertModel(config, add_pooling_layer=False)
        else:
            with quiet_transformers():
                discriminator = MiniBertModel.from_pretrained(source, config=config, add_pooling_layer=False)
        return GeneratorAndDiscriminator(MiniBertForMaskedLM(generator_config(config)), discriminator)

    def saved_model(self, model: GeneratorAndDiscriminator) -> MiniBertModel:
        return model.discriminator

    def statistics(self, outputs: ReplacedTokenDetectionOutput, batch: dict) -> torch.Tensor:
        mask = outputs.rtd_mask
        tokens = mask.sum().float()
        correct = (((outputs.rtd_logits > 0) == outputs.replaced.bool()) & mask).sum().float()
        rtd = torch.stack([outputs.rtd_loss.detach().float() * tokens, correct, tokens])
        return torch.cat([super().statistics(outputs, batch), rtd])

    def train_metrics(self, sums: dict[str, float]) -> dict:
        return {**super().train_metrics(sums), **self.head_metrics(sums, "rtd", "rtd_tokens")}

    def eval_metrics(self, sums: dict[str, float]) -> dict:
        results = {**super().eval_metrics(sums), **self.head_metrics(sums, "rtd", "rtd_tokens", prefix="eval_")}
        return {**results, "eval_loss": results["eval_mlm_loss"] + RTD_WEIGHT * results["eval_rtd_loss"]}
