"""Sentence embeddings: mean pooling over a Mini-BERT's (or any BERT's) last hidden state, and the
sentence-transformers files that let `SentenceTransformer(folder)` load the folder and encode the same way.

    write_sentence_transformers_files(folder)      modules.json, 1_Pooling/config.json, sentence_bert_config.json
                                                    (`sharing.sentence_transformers_format`, named here too)
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

from collections.abc import Callable, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

# The format's own names, named here too (`__all__`) as before they moved to sharing.
from modeling_minibert.sharing.sentence_transformers_format import (
    MODULE_TYPES,
    mean_pooling,
    module_folders,
    module_types,
    pooling_config,
    write_sentence_transformers_files,
)


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
        return encode(
            model,
            tokenizer,
            [texts],
            batch_size=batch_size,
            max_length=max_length,
            projection=projection,
            normalize=normalize,
        )[0]
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


__all__ = [
    "MODULE_TYPES",
    "encode",
    "mean_pooling",
    "model_max_length",
    "module_folders",
    "module_types",
    "pooling_config",
    "write_sentence_transformers_files",
]
