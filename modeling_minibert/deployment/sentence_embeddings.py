"""Sentence embeddings: mean pooling over a Mini-BERT's (or any BERT's) last hidden state, and the
sentence-transformers files that let `SentenceTransformer(folder)` load the folder and encode the same way.

    write_sentence_transformers_files(folder)      modules.json, 1_Pooling/config.json, sentence_bert_config.json
    encode(model, tokenizer, texts)                 the same embeddings without sentence-transformers

Light on purpose (torch and transformers only): a plain install writes the files and encodes; sentence-transformers
itself is only needed by whoever loads the folder with it.

trust_remote_code: `SentenceTransformer(folder, trust_remote_code=...)` hands the flag to transformers' AutoConfig,
AutoModel and AutoTokenizer, and ignores any value stored in the folder's files. A BERT-format folder
(`model_type: bert`) needs no flag. A Mini-BERT folder (`model_type: minibert`) loads without it in a process that
has imported `modeling_minibert` (the import registers the Auto classes); elsewhere it needs
`SentenceTransformer(folder, trust_remote_code=True)`, which runs the model code saved beside the weights.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

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


def model_max_length(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase) -> int:
    """The longest input both the model (its positions) and the tokenizer take."""
    positions = getattr(model.config, "max_position_embeddings", None) or tokenizer.model_max_length
    return int(min(positions, tokenizer.model_max_length))


@torch.inference_mode()
def encode(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: str | Sequence[str],
    *,
    batch_size: int = 64,
    max_length: int | None = None,
    projection: Callable[[torch.Tensor], torch.Tensor] | None = None,
    normalize: bool = False,
) -> torch.Tensor:
    """(N, D) float32 embeddings of `texts`, in their order: mean pooling over the last hidden state, then
    `projection` (a Dense module's layer) and L2 normalisation if asked, as the sentence-transformers modules do.

    Batches hold texts of similar length, each padded to its longest only, so short texts cost what they hold.
    No texts give a (0, D) tensor, as `SentenceTransformer.encode([])` gives an empty result rather than an error; one
    text given as a string gives its (D,) embedding, as `SentenceTransformer.encode("text")` does (a string is a
    sequence of characters, each of which was embedded).
    """
    if isinstance(texts, str):
        return encode(model, tokenizer, [texts], batch_size=batch_size, max_length=max_length, projection=projection,
                      normalize=normalize)[0]
    model.eval()
    if len(texts) == 0:  # the tokenizer fails on an empty batch (IndexError)
        empty = torch.zeros(0, model.config.hidden_size)
        return projection(empty) if projection is not None else empty
    length = min(max_length or model_max_length(model, tokenizer), model_max_length(model, tokenizer))
    ids = tokenizer(list(texts), truncation=True, max_length=length)["input_ids"]
    order = sorted(range(len(texts)), key=lambda i: len(ids[i]))
    rows: list[torch.Tensor] = [torch.empty(0)] * len(texts)
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        batch = tokenizer.pad({"input_ids": [ids[i] for i in chunk]}, return_tensors="pt")
        hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).last_hidden_state
        embeddings = mean_pooling(hidden.float(), batch["attention_mask"])
        if projection is not None:
            embeddings = projection(embeddings)
        if normalize:
            embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
        for row, i in enumerate(chunk):
            rows[i] = embeddings[row]
    return torch.stack(rows)


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
        raise FileNotFoundError(f"{folder} has no {SENTENCE_TRANSFORMERS_MODULES_FILE}: not a sentence-transformers folder") from None
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
    listing = [{"idx": i, "name": str(i), "path": path, "type": MODULE_TYPES[kind]} for i, (kind, path) in enumerate(modules)]
    write_json(folder / SENTENCE_TRANSFORMERS_MODULES_FILE, listing)
    return [kind for kind, _ in modules]


def pooling_config(width: int) -> dict:
    """1_Pooling/config.json for mean pooling over `width`-wide token states."""
    modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken")
    return {"word_embedding_dimension": width, **{f"pooling_mode_{m}": m == "mean_tokens" for m in modes}, "include_prompt": True}


__all__ = ["encode", "mean_pooling", "model_max_length", "module_folders", "module_types", "pooling_config", "write_sentence_transformers_files"]
