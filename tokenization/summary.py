"""How well a vocabulary covers a text: how often words are split, and how often they are lost to [UNK]."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice

import transformers

BATCH_TEXTS = 1000


def tokenizer_summary(tokenizer: transformers.PreTrainedTokenizerFast, texts: Iterable[str]) -> dict:
    """Coverage statistics of `tokenizer` on `texts` (encoded without special tokens).

    Returns a dict with:
      vocab_size        number of ids, special tokens included
      words             words after BERT pre-tokenisation (punctuation marks count as words)
      tokens            WordPiece tokens
      tokens_per_word   tokens / words
      split_word_share  share of words cut into more than one piece
      unk_rate          share of tokens that are [UNK]
    """
    backend = tokenizer.backend_tokenizer
    unk_id = tokenizer.unk_token_id
    words = tokens = split_words = unks = 0
    it = iter(texts)
    while batch := list(islice(it, BATCH_TEXTS)):
        for encoding in backend.encode_batch(batch, add_special_tokens=False):
            ids = encoding.ids
            tokens += len(ids)
            unks += ids.count(unk_id)
            # Consecutive pieces of one word share a word id; count words and the pieces each got.
            pieces_per_word: dict[int, int] = {}
            for word_id in encoding.word_ids:
                pieces_per_word[word_id] = pieces_per_word.get(word_id, 0) + 1
            words += len(pieces_per_word)
            split_words += sum(n > 1 for n in pieces_per_word.values())
    return {
        "vocab_size": len(tokenizer),
        "words": words,
        "tokens": tokens,
        "tokens_per_word": tokens / words if words else 0.0,
        "split_word_share": split_words / words if words else 0.0,
        "unk_rate": unks / tokens if tokens else 0.0,
    }


def format_summary(summary: dict) -> str:
    return (
        f"vocabulary size      {summary['vocab_size']}\n"
        f"words / tokens       {summary['words']} / {summary['tokens']} ({summary['tokens_per_word']:.3f} tokens per word)\n"
        f"words split (>1 pc)  {summary['split_word_share']:.2%}\n"
        f"[UNK] rate           {summary['unk_rate']:.3%}"
    )
