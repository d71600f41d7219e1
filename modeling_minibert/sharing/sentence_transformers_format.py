"""The sentence-transformers format: the files that make a saved model folder a `SentenceTransformer(folder)`
(modules.json, 1_Pooling/config.json, sentence_bert_config.json), read and written, and the mean pooling they
declare.

    write_sentence_transformers_files(folder)   Transformer -> mean Pooling -> [Dense] -> [Normalize]
    module_folders(folder), module_types(folder)  what a folder's modules.json lists
    mean_pooling(last_hidden_state, attention_mask)  what its Pooling module computes

Light on purpose (torch and JSON): a plain install writes the files; sentence-transformers itself is only needed by
whoever loads the folder with it. Serving encodes with them (`deployment.sentence_embeddings.encode`), distillation
trains a student to them (`training.distillation.embedding`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from modeling_minibert.utils.files import write_json
from modeling_minibert.utils.outputs import SENTENCE_BERT_CONFIG_FILE, SENTENCE_TRANSFORMERS_MODULES_FILE

# sentence-transformers' module classes by the names its modules.json has always used (still read by 6.x).
MODULE_TYPES = {
    "Transformer": "sentence_transformers.models.Transformer",
    "Pooling": "sentence_transformers.models.Pooling",
    "Dense": "sentence_transformers.models.Dense",
    "Normalize": "sentence_transformers.models.Normalize",
}


def mean_pooling(last_hidden_state: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean of each row's real-token states: (B, T, H), (B, T) -> (B, H). Padding positions are left out
    (Mini-BERT's unpadded path gives them zeros, BERT a padding token's state: either way they must not count)."""
    mask = attention_mask.to(last_hidden_state.dtype).unsqueeze(-1)  # (B, T, 1)
    # sentence-transformers clamps the count the same way, so an all-padding row gives zeros, not NaN.
    return (last_hidden_state * mask).sum(1) / mask.sum(1).clamp(min=1e-9)


def module_types(folder: str | os.PathLike) -> list[str]:
    """The class names of the sentence-transformers modules a folder lists ("Transformer", "Pooling", ...)."""
    return [kind for kind, _ in module_folders(folder)]


def module_folders(folder: str | os.PathLike) -> list[tuple[str, str]]:
    """(class name, folder inside `folder`) of each sentence-transformers module the folder lists, in order
    (("Transformer", ""), ("Pooling", "1_Pooling"), ...); FileNotFoundError / ValueError in one line for a folder
    without a module list, or one that is not a list of modules."""
    path = Path(folder) / SENTENCE_TRANSFORMERS_MODULES_FILE
    try:
        modules = json.loads(path.read_text(encoding="utf-8"))
        return [(str(module["type"]).rsplit(".", 1)[-1], str(module.get("path", ""))) for module in modules]
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{folder} has no {SENTENCE_TRANSFORMERS_MODULES_FILE}: not a sentence-transformers folder"
        ) from None
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise ValueError(f"{path} is not a sentence-transformers module list: {err}") from None


def write_sentence_transformers_files(
    folder: str | os.PathLike,
    *,
    normalize: bool = True,
    dense_dir: str | None = None,
    max_seq_length: int | None = None,
) -> list[str]:
    """Make a saved model folder (Mini-BERT or BERT format: config.json + weights + tokenizer) a
    sentence-transformers model: Transformer -> mean Pooling -> [Dense] -> [Normalize]. Returns the module list.

    `dense_dir`: the folder (inside `folder`) where a `sentence_transformers.models.Dense` was saved, for an
    embedding projected to another width (a distilled student in its teacher's space). `max_seq_length`: the
    tokens each input is cut to (default: the model's position limit).
    """
    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    limit = config.get("max_position_embeddings", 512)
    if max_seq_length is not None and not 1 <= max_seq_length <= limit:
        raise ValueError(f"max_seq_length={max_seq_length} must be between 1 and the model's {limit} positions")
    if dense_dir is not None and not (folder / dense_dir / "config.json").is_file():
        raise FileNotFoundError(f"{folder / dense_dir} holds no Dense module (config.json)")
    modules = [("Transformer", ""), ("Pooling", "1_Pooling")] + ([("Dense", dense_dir)] if dense_dir else [])
    (folder / "1_Pooling").mkdir(exist_ok=True)
    write_json(folder / "1_Pooling" / "config.json", pooling_config(config["hidden_size"]))
    if normalize:
        modules.append(("Normalize", f"{len(modules)}_Normalize"))  # a module without files: no folder needed
    write_json(folder / SENTENCE_BERT_CONFIG_FILE, {"max_seq_length": max_seq_length or limit, "do_lower_case": False})
    listing = [
        {"idx": i, "name": str(i), "path": path, "type": MODULE_TYPES[kind]} for i, (kind, path) in enumerate(modules)
    ]
    write_json(folder / SENTENCE_TRANSFORMERS_MODULES_FILE, listing)
    return [kind for kind, _ in modules]


def pooling_config(width: int) -> dict:
    """1_Pooling/config.json for mean pooling over `width`-wide token states."""
    modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    return {
        "word_embedding_dimension": width,
        **{f"pooling_mode_{m}": m == "mean_tokens" for m in modes},
        "include_prompt": True,
    }


__all__ = [
    "MODULE_TYPES",
    "mean_pooling",
    "module_folders",
    "module_types",
    "pooling_config",
    "write_sentence_transformers_files",
]
