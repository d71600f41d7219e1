"""TinyBERT's data augmentation for task distillation: words replaced by a masked language model's predictions.

Jiao et al. (2020, "TinyBERT") build the transfer set from each training sentence and N augmented copies: every
word is, with probability p, replaced by one of the K words a masked language model finds most likely in its
place (p = 0.4, K = 15, N = 20 in the paper). The teacher labels the copies, so a replacement that flips the meaning
("good" -> "bad") teaches the right thing. What differs here, and why:

- the masked LM is the student's own MLM head (the pretraining folder distillation starts from): no second model
  to download, and a student from general distillation shares the teacher's WordPiece pieces;
- all chosen words of a copy are masked at once, one forward per copy: TinyBERT masks one word per forward, a
  forward per word of every copy, too slow on a CPU for a 45-minute recipe;
- words of several pieces, which a masked position cannot predict, TinyBERT replaces by GloVe neighbours; we ship
  no GloVe, so with `neighbours` they get the whole-word pieces nearest (cosine) to the mean of their pieces' rows
  in the model's own input embeddings (for a general-distilled student, the teacher's rows on its directions),
  when they are a word and its `##` continuations (a word with punctuation attached, "end.", is kept); without it
  they are kept;
- replacements are whole-word pieces (no `##` continuation, no special token or `[unused]` slot, not one of the
  word's own pieces; a neighbour a word of two letters or more), sampled uniformly among the K.

Written by hand: nlpaug (1.1.11, from 2022) has a contextual word augmenter over a fill-mask model, but it returns
new strings, so the tags of token classification could not follow their words, and its last release (2022) predates
transformers 5.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import torch
from tqdm.auto import tqdm

from modeling_minibert.checks_minibert import read_safetensors_header

# The MLM head's own weights: a folder without them would predict from a randomly initialised head.
MLM_HEAD_KEY = "cls.predictions.bias"


def check_mlm_head(name_or_path: str | os.PathLike, option: str) -> None:
    """ValueError (one line naming `option`) for a local model folder whose weights hold no masked-LM head."""
    folder = Path(name_or_path)
    weights = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if weights and not any(MLM_HEAD_KEY in read_safetensors_header(w) for w in weights):
        raise ValueError(
            f"{option}={name_or_path} has no masked-LM head ({MLM_HEAD_KEY}): augmentation='mlm' needs a "
            "pretraining folder (minibert pretrain's output), not a fine-tuned classifier"
        )


def replaceable_ids(tokenizer, words_only: bool = False) -> torch.Tensor:
    """(V,) bool: the pieces a word may become: whole-word pieces, not special tokens nor BERT's `[unused...]`
    slots; with `words_only`, only pieces of two letters or more (what an embedding neighbour may be: the rows of
    rare single characters sit close to anything)."""
    allowed = torch.ones(len(tokenizer), dtype=torch.bool)
    for token, index in tokenizer.get_vocab().items():
        if token.startswith("##") or index in tokenizer.all_special_ids or token.startswith("[unused"):
            allowed[index] = False
        elif words_only and not (len(token) > 1 and token.isalpha()):
            allowed[index] = False
    return allowed


@torch.inference_mode()
def mlm_augment(
    examples: Sequence[Sequence[str]],
    model: torch.nn.Module,
    tokenizer,
    copies: int,
    probability: float,
    top_k: int,
    seed: int,
    max_length: int,
    batch_size: int = 64,
    show_progress: bool = True,
    neighbours: bool = False,
) -> list[list[str]]:
    """`copies` augmented copies of each example (a list of words), copy-major: copy 1 of every example, then copy
    2, ... Each one-piece word within `max_length` is replaced with chance `probability` by one of the model's
    `top_k` most likely whole-word pieces at its masked position; with `neighbours`, each word of several pieces
    likewise by one of the `top_k` whole-word pieces nearest its embedding (`nearest_pieces`); every other word is
    kept. `neighbours` draws its own random numbers after the masked-LM ones: without it the copies are the same."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    allowed = replaceable_ids(tokenizer)
    if top_k > int(allowed.sum()):
        raise ValueError(f"augment_top_k={top_k} exceeds the {int(allowed.sum())} whole-word pieces of the vocabulary")
    embeddings = model.get_input_embeddings().weight.detach().float() if neighbours else None
    words_only = replaceable_ids(tokenizer, words_only=True) if neighbours else None
    if neighbours and top_k > int(words_only.sum()):
        raise ValueError(
            f"augment_top_k={top_k} exceeds the {int(words_only.sum())} whole-word pieces of two letters or "
            "more that augment_neighbours draws from"
        )
    jobs = [(copy, i) for copy in range(copies) for i in range(len(examples))]
    out: list[list[str]] = [list(examples[i]) for _, i in jobs]
    order = sorted(range(len(jobs)), key=lambda j: len(examples[jobs[j][1]]))  # similar lengths share a batch
    for start in tqdm(range(0, len(order), batch_size), desc="augmenting", disable=not show_progress):
        rows = order[start : start + batch_size]
        batch = tokenizer(
            [out[j] for j in rows],
            is_split_into_words=True,
            truncation=True,
            max_length=max_length,
            padding=True,
            return_tensors="pt",
        )
        chosen, several = choose_positions(batch, rows, out, tokenizer, probability, generator, neighbours, max_length)
        if chosen:
            ids = batch["input_ids"].clone()
            for row, position, _ in chosen:
                ids[row, position] = tokenizer.mask_token_id
            hidden = model.base_model(input_ids=ids, attention_mask=batch["attention_mask"]).last_hidden_state
            # the MLM head (BERT's name, `cls`) at the M masked positions only: (M, V), not (B, T, V)
            scores = model.cls(hidden[[r for r, _, _ in chosen], [p for _, p, _ in chosen]])
            scores[:, ~allowed] = float("-inf")
            replace(out, rows, chosen, scores.topk(top_k, dim=-1).indices, tokenizer, generator)
        if several:
            pieces = [batch["input_ids"][row, positions] for row, positions, _ in several]
            replace(out, rows, several, nearest_pieces(embeddings, pieces, words_only, top_k), tokenizer, generator)
    return out


def replace(
    out: list[list[str]],
    rows: list[int],
    chosen: list[tuple],
    candidates: torch.Tensor,
    tokenizer,
    generator: torch.Generator,
) -> None:
    """Each chosen (row in batch, position(s), word index) becomes one of its row of `candidates` (N, K), drawn
    uniformly."""
    picks = candidates[
        torch.arange(len(chosen)), torch.randint(candidates.shape[1], (len(chosen),), generator=generator)
    ]
    for (row, _, word), piece in zip(chosen, picks.tolist()):
        out[rows[row]][word] = tokenizer.convert_ids_to_tokens(piece)


def nearest_pieces(
    embeddings: torch.Tensor, words: list[torch.Tensor], allowed: torch.Tensor, top_k: int
) -> torch.Tensor:
    """(N, top_k) ids of the allowed pieces nearest (cosine) to each word's mean piece embedding, its own pieces
    left out. `embeddings`: (V, H) input embeddings; `words`: each word's piece ids."""
    unit = torch.nn.functional.normalize(embeddings, dim=-1)
    means = torch.nn.functional.normalize(torch.stack([embeddings[ids].mean(0) for ids in words]), dim=-1)
    scores = means @ unit.T  # (N, V)
    scores[:, ~allowed] = float("-inf")
    for n, ids in enumerate(words):
        scores[n, ids] = float("-inf")
    return scores.topk(top_k, dim=-1).indices


def choose_positions(
    batch,
    rows: list[int],
    words: list[list[str]],
    tokenizer,
    probability: float,
    generator: torch.Generator,
    several_pieces: bool = False,
    max_length: int | None = None,
) -> tuple[list[tuple[int, int, int]], list[tuple[int, list[int], int]]]:
    """The words to replace, each drawn with chance `probability`: (row in batch, token position, word index) of
    one-piece known words, and with `several_pieces` (row, token positions, word index) of words of several pieces
    that are one word and its `##` continuations (not the last word of a row `max_length` long: truncation may have
    cut it)."""
    chosen, several = [], []
    for b in range(len(rows)):
        word_ids = batch.word_ids(b)
        pieces: dict[int, list[int]] = {}
        for position, word in enumerate(word_ids):
            if word is not None:
                pieces.setdefault(word, []).append(position)
        draws = torch.rand(len(pieces), generator=generator).tolist()
        cut = int(batch["attention_mask"][b].sum()) == max_length  # a full row may end inside a word
        tokens = tokenizer.convert_ids_to_tokens(batch["input_ids"][b].tolist()) if several_pieces else []
        # a word and its `##` continuations only: "essayist", not "medium." or "counter-revolutions", whose
        # punctuation pieces would pull the mean embedding towards punctuation
        one_word = lambda positions: all(tokens[p].startswith("##") for p in positions[1:])  # noqa: E731
        for (word, positions), draw in zip(sorted(pieces.items()), draws):
            if draw >= probability:
                continue
            if len(positions) == 1 and batch["input_ids"][b, positions[0]] != tokenizer.unk_token_id:
                chosen.append((b, positions[0], word))
            elif several_pieces and len(positions) > 1 and not (cut and word == max(pieces)) and one_word(positions):
                several.append((b, positions, word))
    return chosen, several


__all__ = ["check_mlm_head", "mlm_augment", "nearest_pieces", "replaceable_ids"]
