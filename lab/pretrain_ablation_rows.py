"""The rows of the pretraining ablation (lab/pretrain_ablation.py): what each changes from the default
`minibert pretrain` recipe, and the `pretrain` keyword arguments that give every row the same number of examples."""

from __future__ import annotations

DEFAULT_BATCH = 32
WARMUP_FRACTION = 0.04

PRE_LN = "layer_norm_position=pre"  # MiniBertConfig's pre-LN variant (it adds the final LayerNorm itself)

# name -> (what changes, pretrain keyword arguments, extra switches). Steps are set from --steps (and the batch
# size, so that every row sees the same number of examples); warmup from WARMUP_FRACTION unless a row sets it.
ROWS: dict[str, tuple[str, dict, dict]] = {
    "default": ("default (40% masking, lr 1e-3, warmup 4%, linear to 0, batch 32, vocab 8192, dupe 5)", {}, {}),
    "mask_0.15": ("BERT's 15% masking (the v0.1 default)", {"mlm_probability": 0.15}, {}),
    "lr_5e-4": ("peak learning rate 5e-4", {"learning_rate": 5e-4}, {}),
    "lr_2e-3": ("peak learning rate 2e-3", {"learning_rate": 2e-3}, {}),
    "lr_4e-3": ("peak learning rate 4e-3", {"learning_rate": 4e-3}, {}),
    "warmup_10pct": ("warmup 10% of the steps", {}, {"warmup_fraction": 0.10}),
    "warmup_1pct": ("warmup 1% of the steps", {}, {"warmup_fraction": 0.01}),
    "cosine": ("cosine decay instead of linear", {"lr_scheduler_type": "cosine"}, {}),
    "beta2_0.98": ("AdamW beta2 0.98", {"adam_beta2": 0.98}, {}),
    "wd_0.1": ("weight decay 0.1", {"weight_decay": 0.1}, {}),
    "no_clip": ("no gradient clipping (max_grad_norm 1e9)", {"max_grad_norm": 1e9}, {}),
    "mask_0.20": ("masking rate 20% (scored at 15%)", {"mlm_probability": 0.20}, {}),
    "mask_0.30": ("masking rate 30% (scored at 15%)", {"mlm_probability": 0.30}, {}),
    "mask_0.40": ("masking rate 40% (scored at 15%)", {"mlm_probability": 0.40}, {}),
    "mask_0.50": ("masking rate 50% (scored at 15%)", {"mlm_probability": 0.50}, {}),
    "wwm": ("whole-word masking (scored with token masking)", {"whole_word_mask": True}, {}),
    "batch_16": ("batch 16, twice the steps", {"per_device_train_batch_size": 16}, {}),
    "batch_64": ("batch 64, half the steps", {"per_device_train_batch_size": 64}, {}),
    "batch_16_mask_0.30": (
        "batch 16, twice the steps, masking rate 30%",
        {"per_device_train_batch_size": 16, "mlm_probability": 0.30},
        {},
    ),
    "batch_64_lr_2e-3": (
        "batch 64, half the steps, lr 2e-3",
        {"per_device_train_batch_size": 64, "learning_rate": 2e-3},
        {},
    ),
    "seq_128": (
        "128-token sequences, batch 16 (same tokens per step; scored on the 64-token pairs)",
        {"max_seq_length": 128, "per_device_train_batch_size": 16, "config_overrides": "max_position_embeddings=128"},
        {"keep_steps": True},
    ),
    "vocab_4096": ("vocabulary 4,096 (a different, easier MLM task)", {"vocab_size": 4096}, {"vocab_changed": True}),
    "vocab_16384": (
        "vocabulary 16,384 (a different, harder MLM task)",
        {"vocab_size": 16384},
        {"vocab_changed": True},
    ),
    "dupe_1": ("dupe factor 1", {"dupe_factor": 1}, {}),
    "dupe_10": ("dupe factor 10", {"dupe_factor": 10}, {}),
    "lr_2e-3_warmup_10pct": (
        "peak learning rate 2e-3, warmup 10%",
        {"learning_rate": 2e-3},
        {"warmup_fraction": 0.10},
    ),
    "mask_0.15_lr_2e-3_warmup_10pct": (
        "15% masking, peak learning rate 2e-3, warmup 10%",
        {"mlm_probability": 0.15, "learning_rate": 2e-3},
        {"warmup_fraction": 0.10},
    ),
    "pre_ln": ("pre-LayerNorm blocks + final LayerNorm", {"config_overrides": PRE_LN}, {}),
    "pre_ln_lr_2e-3": ("pre-LayerNorm, lr 2e-3", {"learning_rate": 2e-3, "config_overrides": PRE_LN}, {}),
    "mask_0.15_pre_ln_lr_2e-3": (
        "15% masking, pre-LayerNorm, lr 2e-3",
        {"mlm_probability": 0.15, "learning_rate": 2e-3, "config_overrides": PRE_LN},
        {},
    ),
    "pre_ln_lr_4e-3": ("pre-LayerNorm, lr 4e-3", {"learning_rate": 4e-3, "config_overrides": PRE_LN}, {}),
    "pre_ln_lr_4e-3_warmup_10pct": (
        "pre-LayerNorm, lr 4e-3, warmup 10%",
        {"learning_rate": 4e-3, "config_overrides": PRE_LN},
        {"warmup_fraction": 0.10},
    ),
}


# Rows that change only numbers of the optimizer or schedule: every step does the default's work.
SAME_WORK = {
    "lr_5e-4",
    "lr_2e-3",
    "lr_4e-3",
    "lr_2e-3_warmup_10pct",
    "warmup_10pct",
    "warmup_1pct",
    "cosine",
    "beta2_0.98",
    "wd_0.1",
    "no_clip",
    "dupe_1",
    "dupe_10",
}


def run_kwargs(name: str, steps: int, output_dir: str, extra: dict | None = None) -> tuple[dict, dict]:
    """The `pretrain` keyword arguments of a row at a budget of `steps` default-sized batches."""
    _, overrides, switches = ROWS[name]
    kwargs = {**overrides, **(extra or {})}
    batch = batch_size(kwargs)
    if not switches.get("keep_steps"):
        steps = max(1, round(steps * DEFAULT_BATCH / batch))  # the same number of examples as the default
    kwargs.setdefault("max_steps", steps)
    kwargs.setdefault("warmup_steps", round(switches.get("warmup_fraction", WARMUP_FRACTION) * kwargs["max_steps"]))
    kwargs.update(
        output_dir=output_dir, overwrite_output_dir=True, disable_tqdm=True, save_total_limit=1, report_to=["none"]
    )
    return kwargs, switches


def batch_size(kwargs: dict) -> int:
    """A row's batch size."""
    return kwargs.get("per_device_train_batch_size", DEFAULT_BATCH)
