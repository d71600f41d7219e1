"""bf16 autocast where it pays: `teacher_mixed_precision` (a frozen teacher's forward, in general distillation and in
task distillation's fine-tuning and labelling) and `minibert pretrain --mixed_precision auto`.

Under autocast a model computes its matrix products in bfloat16 and keeps float32 weights, so it costs little
accuracy and, where the hardware multiplies bf16 fast, saves much of the time. torch and transformers say
whether bf16 *can* run (`torch.cuda.is_bf16_supported`, TrainingArguments' checks), not whether it is *fast*: on a
CPU without AVX-512 BF16 or AMX autocast emulates it, slower than float32, and on one with AVX-512 BF16 but no bf16
matrix units it can still be slower (0.73x float32 on such a Xeon) or twice as fast (a Zen 4 EPYC). `auto` asks the
second question, and on a CPU that has the instructions answers it by measuring (`bf16_pays`, remembered per machine
by `measured`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import torch

from modeling_minibert.utils.measured import fastest

TEACHER_PRECISIONS = ("auto", "bf16", "no")  # `teacher_mixed_precision`
TEACHER_PRECISION_HELP = (
    "bf16 (under bfloat16 autocast), no (float32), or auto (bf16 where it is faster: a CUDA GPU that supports it, a "
    "CPU with AVX-512 BF16 or AMX where a short measurement, remembered per machine, finds it faster than float32)"
)


def teacher_precision_field(what: str) -> Any:
    """The `teacher_mixed_precision` option of a job with a frozen teacher (task distillation, general
    distillation): one declaration, default auto. `what`: what the option governs in that job, for its help."""
    return dataclasses.field(
        default="auto", metadata={"help": f"{what}: {TEACHER_PRECISION_HELP}", "choices": list(TEACHER_PRECISIONS)}
    )


# `bf16_pays`' workload: a transformer block's feed-forward at an encoder's width (between Mini-BERT's 192 and
# BERT-base's 768), forward and backward, on a batch of 1,024 tokens: matrix products, as the runs it decides for.
PROBE_WIDTH, PROBE_TOKENS = 384, 1024


@functools.cache  # asked at every step
def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 natively: a CPU with AVX-512 BF16 or AMX, or a CUDA GPU that supports
    it. Elsewhere autocast would emulate bf16, slower than float32."""
    if device.type == "cpu":
        capabilities = torch.cpu.get_capabilities()
        return bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16"))
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


@functools.cache  # asked at every step; measured at most once per machine (`measured.fastest`)
def bf16_pays(device: torch.device) -> bool:
    """Whether bf16 autocast is faster than float32 on `device`: on CUDA where the GPU supports bf16; on a CPU
    with AVX-512 BF16 or AMX (`native_bf16`) where a short measurement says so; never elsewhere (emulated)."""
    if device.type != "cpu":
        return native_bf16(device)
    if not native_bf16(device):
        return False
    torch.manual_seed(0)
    block = torch.nn.Sequential(
        torch.nn.Linear(PROBE_WIDTH, 4 * PROBE_WIDTH), torch.nn.GELU(), torch.nn.Linear(4 * PROBE_WIDTH, PROBE_WIDTH)
    )
    x = torch.randn(PROBE_TOKENS, PROBE_WIDTH)

    def step(bf16: bool) -> None:
        with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
            out = block(x)
        out.float().square().mean().backward()

    choice = fastest("bf16 autocast", {"float32": lambda: step(False), "bf16": lambda: step(True)})
    return choice == "bf16"


def default_device() -> torch.device:
    """The device a run will use: the accelerator when there is one (as Accelerate and Trainer pick it), else CPU."""
    return torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")


def teacher_autocast(mode: str, device: torch.device) -> bool:
    """Whether the teacher runs under bf16 autocast on `device`: `mode` 'bf16' always, 'no' never, 'auto' where
    it is faster there (`bf16_pays`)."""
    return mode == "bf16" or (mode == "auto" and bf16_pays(device))


def resolved_mixed_precision(mode: str, device: torch.device) -> str:
    """Accelerate's `mixed_precision` for a run's `mode`: 'auto' is 'bf16' where it is faster on `device`
    (`bf16_pays`), else 'no'; any other value is Accelerate's own."""
    if mode != "auto":
        return mode
    return "bf16" if bf16_pays(device) else "no"


def check_teacher_precision(mode: str) -> None:
    if mode not in TEACHER_PRECISIONS:
        raise ValueError(f"teacher_mixed_precision={mode!r} must be one of {list(TEACHER_PRECISIONS)}")


def precision_line(mode: str, device: torch.device) -> str:
    """One line saying how the teacher runs, for the job's log."""
    precision = "bf16 autocast" if teacher_autocast(mode, device) else "float32"
    return f"the teacher runs in {precision} on {device.type} (teacher_mixed_precision={mode})"


__all__ = [
    "TEACHER_PRECISIONS",
    "TEACHER_PRECISION_HELP",
    "bf16_pays",
    "check_teacher_precision",
    "default_device",
    "native_bf16",
    "precision_line",
    "resolved_mixed_precision",
    "teacher_autocast",
    "teacher_precision_field",
]
