"""How a frozen teacher's forward runs, in general distillation (`minibert pretrain --teacher_model_name_or_path`)
and in task distillation's labelling (`minibert distill`): `teacher_mixed_precision`.

A frozen teacher only predicts, so bfloat16 autocast costs it little accuracy and, where the hardware multiplies
bf16 natively, saves much of its time. Students train as their own run says (`mixed_precision` / `bf16`).
torch and transformers say whether bf16 *can* run (`torch.cuda.is_bf16_supported`, TrainingArguments' checks),
not whether it is *fast*: on a CPU without AVX-512 BF16 or AMX autocast emulates it, slower than float32.
"""

from __future__ import annotations

import functools

import torch

TEACHER_PRECISIONS = ("auto", "bf16", "no")  # `teacher_mixed_precision`
TEACHER_PRECISION_HELP = (
    "bf16 (under bfloat16 autocast), no (float32), or auto (bf16 where the device multiplies bfloat16 natively: a CPU "
    "with AVX-512 BF16 or AMX, a CUDA GPU that supports it)")


@functools.cache  # asked at every step
def native_bf16(device: torch.device) -> bool:
    """Whether `device` multiplies bfloat16 natively: a CPU with AVX-512 BF16 or AMX, or a CUDA GPU that supports
    it. Elsewhere autocast would emulate bf16, slower than float32."""
    if device.type == "cpu":
        capabilities = torch.cpu.get_capabilities()
        return bool(capabilities.get("avx512_bf16") or capabilities.get("amx_bf16"))
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


def teacher_autocast(mode: str, device: torch.device) -> bool:
    """Whether the teacher runs under bf16 autocast on `device`: `mode` 'bf16' always, 'no' never, 'auto' where the
    device multiplies bf16 natively (`native_bf16`)."""
    return mode == "bf16" or (mode == "auto" and native_bf16(device))


def check_teacher_precision(mode: str) -> None:
    if mode not in TEACHER_PRECISIONS:
        raise ValueError(f"teacher_mixed_precision={mode!r} must be one of {list(TEACHER_PRECISIONS)}")


def precision_line(mode: str, device: torch.device) -> str:
    """One line saying how the teacher runs, for the job's log."""
    precision = "bf16 autocast" if teacher_autocast(mode, device) else "float32"
    return f"the teacher runs in {precision} on {device.type} (teacher_mixed_precision={mode})"


__all__ = ["TEACHER_PRECISIONS", "TEACHER_PRECISION_HELP", "check_teacher_precision", "native_bf16",
           "precision_line", "teacher_autocast"]
