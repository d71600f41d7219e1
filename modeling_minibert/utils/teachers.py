"""What every teacher is checked for before it is loaded, whichever job reads it (task distillation, embedding
distillation, general distillation): weights that are not only pickles, unless the caller asks for them
(`allow_pickle`, as `convert-bert` and `push` ask), and a tokenizer whose ids all have an embedding.

    check_teacher_weights(name, allow_pickle, ...)   a folder (or a sentence-transformers module folder) that
                                                     holds only pickle weights: ValueError, one line
    teacher_load_options(allow_pickle)              `from_pretrained`'s options that keep a Hub id to safetensors
    check_teacher_tokenizer(name, tokens, vocab)     more token ids than embedding rows: ValueError, one line

transformers' `torch.load(weights_only=True)` stops a malicious pickle, but with a traceback, and only where
transformers loads it: sentence-transformers' Dense modules load their own. A pickle is refused here instead, by
its file name, before anything is read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

# The weight files transformers and sentence-transformers read in place of `model.safetensors`: pickles.
PICKLE_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt")
ALLOW_PICKLE_HELP = (
    "accept a teacher whose weights are only pickles (pytorch_model.bin), which can run arbitrary code when loaded; "
    "by default only safetensors are read"
)


def pickle_only_weights(folder: str | os.PathLike) -> list[str]:
    """The pickle weight files of `folder` when it holds no safetensors (sorted names), else []."""
    folder = Path(folder)
    if not folder.is_dir() or any(folder.glob("*.safetensors")):
        return []
    return sorted({p.name for pattern in PICKLE_WEIGHTS for p in folder.glob(pattern)})


def check_teacher_weights(
    name: str | os.PathLike,
    allow_pickle: bool,
    folders: tuple[str, ...] = ("",),
    what: str = "teacher_model_name_or_path",
) -> None:
    """ValueError in one line when the local teacher `name`, or one of its sub`folders` (a sentence-transformers
    module's, such as `2_Dense`), holds only pickle weights and `allow_pickle` is off. A Hub id is left to
    `teacher_load_options`."""
    if allow_pickle:
        return
    for sub in folders:
        pickles = pickle_only_weights(Path(name) / sub)
        if pickles:
            where = f"{what}={name}" + (f" ({sub})" if sub else "")
            raise ValueError(
                f"{where} holds only pickle weights ({', '.join(pickles)}), which can run arbitrary code when "
                "loaded; pass allow_pickle=True (--allow_pickle) if you trust them"
            )


def teacher_load_options(allow_pickle: bool) -> dict[str, Any]:
    """`from_pretrained` options for a teacher: safetensors only unless `allow_pickle` (then transformers' default,
    safetensors where there are some, else the pickle)."""
    return {"use_safetensors": None if allow_pickle else True}


def check_teacher_tokenizer(
    name: str | os.PathLike, tokens: int, vocab_size: int, what: str = "teacher_model_name_or_path"
) -> None:
    """ValueError in one line when the teacher's tokenizer has more ids (`tokens`) than its embeddings have rows:
    an id past them would fail as an IndexError in the middle of the run. Fewer is fine (BERT's own vocabularies
    leave rows unused)."""
    if tokens > vocab_size:
        raise ValueError(
            f"the tokenizer of {what}={name} has {tokens} tokens but its model has vocab_size={vocab_size} embedding "
            f"rows: ids {vocab_size} to {tokens - 1} have none"
        )


__all__ = [
    "ALLOW_PICKLE_HELP",
    "check_teacher_tokenizer",
    "check_teacher_weights",
    "pickle_only_weights",
    "teacher_load_options",
]
