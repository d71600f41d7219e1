"""bf16 autocast where it pays: `teacher_mixed_precision` (a frozen teacher's forward, in general distillation and in
task distillation's fine-tuning and labelling) and `minibert pretrain --mixed_precision auto`.

Under autocast a model computes its matrix products in bfloat16 and keeps float32 weights, so it costs little
accuracy and, where the hardware multiplies bf16 natively, saves much of the time. torch and transformers say
whether bf16 *can* run (`torch.cuda.is_bf16_supported`, TrainingArguments' checks), not whether it is *fast*: on a
CPU without AVX-512 BF16 or AMX autocast emulates it, slower than float32. `auto` asks the second question.
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


def default_device() -> torch.device:
    """The device a run will use: the accelerator when there is one (as Accelerate and Trainer pick it), else CPU."""
    return torch.accelerator.current_accelerator() if torch.accelerator.is_available() else torch.device("cpu")


def teacher_autocast(mode: str, device: torch.device) -> bool:
    """Whether the teacher runs under bf16 autocast on `device`: `mode` 'bf16' always, 'no' never, 'auto' where the
    device multiplies bf16 natively (`native_bf16`)."""
    return mode == "bf16" or (mode == "auto" and native_bf16(device))


def resolved_mixed_precision(mode: str, device: torch.device) -> str:
    """Accelerate's `mixed_precision` for a run's `mode`: 'auto' is 'bf16' where `device` multiplies it natively,
    else 'no'; any other value is Accelerate's own."""
    if mode != "auto":
        return mode
    return "bf16" if native_bf16(device) else "no"


def check_teacher_precision(mode: str) -> None:
    if mode not in TEACHER_PRECISIONS:
        raise ValueError(f"teacher_mixed_precision={mode!r} must be one of {list(TEACHER_PRECISIONS)}")


def precision_line(mode: str, device: torch.device) -> str:
    """One line saying how the teacher runs, for the job's log."""
    precision = "bf16 autocast" if teacher_autocast(mode, device) else "float32"
    return f"the teacher runs in {precision} on {device.type} (teacher_mixed_precision={mode})"


__all__ = ["TEACHER_PRECISIONS", "TEACHER_PRECISION_HELP", "check_teacher_precision", "default_device", "native_bf16",
           "precision_line", "resolved_mixed_precision", "teacher_autocast"]
