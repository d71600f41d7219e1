"""Train a WordPiece vocabulary with `tokenizers` and hand it back as a transformers fast tokenizer; `minibert train-tokenizer`."""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from tokenizers import trainers

from tokenization.corpus import Corpus
from tokenization.wordpiece import (
    CONTINUING_SUBWORD_PREFIX,
    SPECIAL_TOKEN_IDS,
    BertTokenizerFast,
    _files,
    build_backend,
    make_tokenizer,
    save_tokenizer,
)

logger = logging.getLogger(__name__)

MIN_VOCAB_SIZE = 16  # the special tokens plus room for a minimal alphabet
# The same bound as MiniBertConfig.vocab_size's (a model could not hold more ids). Written here again rather than
# imported: importing modeling_minibert loads torch, which training a tokenizer does not need. Above it, the Rust
# trainer tries to allocate tens of GB and aborts the process (exit 134) instead of raising.
MAX_VOCAB_SIZE = 2**20
MAX_ALPHABET = 1000  # as in tokenizers' BertWordPieceTokenizer: rarer characters become [UNK]


@dataclass(kw_only=True)
class TokenizerTrainingArguments:
    """`minibert train-tokenizer`'s flags and the keyword options of `train_tokenizer`, named as in transformers'
    example scripts and `TrainingArguments`."""

    train_file: list[str] | None = field(
        default=None, metadata={"help": "one or more UTF-8 text files to train on (required)"}
    )
    # Required on the command line, which has no other way to hand the tokenizer back; in Python, without it the
    # tokenizer is only returned.
    output_dir: str | None = field(
        default=None, metadata={"help": "folder to save the tokenizer in (with save_pretrained)", "required": True}
    )
    vocab_size: int = field(
        default=8192, metadata={"help": "most tokens in the vocabulary, special tokens included (default: 8192)"}
    )
    min_frequency: int = field(
        default=2, metadata={"help": "fewest occurrences of a pair for it to be merged (default: 2)"}
    )
    lowercase: bool = field(
        default=True, metadata={"help": "lowercase the text, as uncased BERT (the default; --no_lowercase keeps case)"}
    )
    strip_accents: bool | None = field(
        default=None,
        # nargs/const: a bare --strip_accents means true, as for the other booleans.
        metadata={"help": "strip accents [true|false] (default: when lowercasing)", "nargs": "?", "const": True},
    )
    limit_alphabet: int | None = field(
        default=None, metadata={"help": "most single characters to keep (default: min(1000, (vocab_size - 5) // 2))"}
    )
    model_max_length: int | None = field(
        default=None,
        metadata={"help": "longest sequence the model takes: its max_position_embeddings (default: no limit)"},
    )
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "replace a non-empty output folder (default: false)"}
    )
    disable_tqdm: bool = field(default=False, metadata={"help": "no progress bar (default: false)"})


def train_tokenizer(*, train_data: Iterable[str] | None = None, **options: Any) -> BertTokenizerFast:
    """Train a BERT WordPiece vocabulary and return it as a fast tokenizer; the one entry point of the job.

    Keyword options are `minibert train-tokenizer`'s flags (`TokenizerTrainingArguments` fields):
        train_file: UTF-8 text files to train on (a path, or a list of paths).
        output_dir: if given, the tokenizer is saved there with `save_pretrained` (atomically).
        vocab_size: most entries in the vocabulary (16 to 2**20), the 5 special tokens included ([PAD]=0,
            [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4). A corpus too small to fill it gives fewer, and a warning is
            logged (the model's `vocab_size` should be `len(tokenizer)`).
        lowercase, strip_accents: BERT normalisation; `strip_accents=None` follows `lowercase`.
        min_frequency: pairs seen fewer times are not merged.
        limit_alphabet: most characters kept as single tokens; default min(1000, (vocab_size - 5) // 2), so the
            alphabet and its "##" forms always fit in `vocab_size`.
        model_max_length: recorded in the tokenizer (truncation=True cuts there); set it to the model's
            max_position_embeddings.
        overwrite_output_dir: replace a non-empty `output_dir`.
        disable_tqdm: no progress bar.
    In-memory texts may replace the files, as in `finetune`: `train_data=` any iterable of strings. Files and
    re-iterable collections (lists, datasets columns) are read two or three times and give the same vocabulary
    in every process; a one-shot iterator (a generator) is read once, and is then not reproducible. Lines longer
    than 64 KB are fed in pieces cut at whitespace, so memory does not grow with them.

        train_tokenizer(train_file=["corpus.txt"], vocab_size=8192, output_dir="my-tokenizer")
        train_tokenizer(train_data=texts, vocab_size=2000, disable_tqdm=True)

    Raises:
        ValueError: an unknown option, neither or both of `train_file` and `train_data`, bad sizes, a file that
            is not UTF-8 (naming it), an empty corpus, or a corpus whose alphabet does not fit in `vocab_size`.
        TypeError: a text that is not a string, or `train_data` that is one string.
        FileNotFoundError / FileExistsError: missing input file / non-empty `output_dir` without
            `overwrite_output_dir`.
    """
    args = _arguments(options)
    if (args.train_file is None) == (train_data is None):
        raise ValueError(
            "--train_file is required: one or more UTF-8 text files to train on"
            " (in Python: train_file=, or train_data= texts)"
            if train_data is None
            else "give train_file or train_data, not both"
        )
    limit_alphabet = _checked_sizes(args.vocab_size, args.min_frequency, args.limit_alphabet, args.model_max_length)
    if args.output_dir is not None:
        # fail before training, not after; the output must not hold the files it is trained on
        _files().check_output_dir(
            args.output_dir, args.overwrite_output_dir, inputs={"train_file": args.train_file}, job="train-tokenizer"
        )
    corpus = Corpus(files=args.train_file, texts=train_data, show_progress=not args.disable_tqdm)
    tokenizer = _train(corpus, args, limit_alphabet)
    if args.output_dir is not None:
        save_tokenizer(tokenizer, args.output_dir, overwrite_output_dir=args.overwrite_output_dir)
    return tokenizer


def _train(corpus: Corpus, args: TokenizerTrainingArguments, limit_alphabet: int) -> BertTokenizerFast:
    """The vocabulary `args` ask for, trained on `corpus`, as a fast tokenizer."""
    vocab_size, lowercase, strip_accents = args.vocab_size, args.lowercase, args.strip_accents
    # tokenizers' trainer is not reproducible on its own (huggingface/tokenizers#1794): it numbers the "##x"
    # tokens in hash-map order and breaks merge ties by id, and when the corpus has more characters than
    # `limit_alphabet` it drops the rarest in hash-map order among equal counts. Rust's hash maps are seeded
    # per process, so two runs differ, most on small corpora, where ties are common. We fix what it would
    # leave to chance: which characters are kept (by count, then code point) and the ids of their "##"
    # forms (registered first, sorted). That costs one or two merge-free passes over the text first.
    initial_alphabet, first_pieces = [], []
    if corpus.reiterable:
        initial_alphabet, first_pieces = _alphabet(corpus, limit_alphabet, lowercase, strip_accents)
    backend = build_backend(None, lowercase, strip_accents)
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        min_frequency=args.min_frequency,
        special_tokens=list(SPECIAL_TOKEN_IDS) + first_pieces,
        # The chosen characters are forced in (an initial alphabet counts as most frequent) and the limit
        # then drops exactly the others.
        limit_alphabet=len(initial_alphabet) if initial_alphabet else limit_alphabet,
        initial_alphabet=initial_alphabet,
        continuing_subword_prefix=CONTINUING_SUBWORD_PREFIX,
        # Our tqdm bar shows the reading; the Rust bars would draw over it.
        show_progress=False,
    )
    desc = "reading corpus (merges)" if corpus.reiterable else "reading corpus"
    backend.train_from_iterator(corpus.batches(desc), trainer)

    vocab = backend.get_vocab()
    _check_trained(vocab, corpus, vocab_size, args.min_frequency, limit_alphabet)
    return make_tokenizer(vocab, lowercase, strip_accents, args.model_max_length)


def _arguments(options: dict[str, Any]) -> TokenizerTrainingArguments:
    """The keyword options as the job's dataclass; a name that is not one of its fields is a one-line ValueError
    (the dataclass's own TypeError would not say which names are valid)."""
    names = [f.name for f in dataclasses.fields(TokenizerTrainingArguments)]
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for train_tokenizer: its options are the command line's "
            f"flags, {names}, and train_data= for texts in memory"
        )
    return TokenizerTrainingArguments(**options)


def _checked_sizes(
    vocab_size: int, min_frequency: int, limit_alphabet: int | None, model_max_length: int | None
) -> int:
    """Refuse sizes out of range, before any work; return `limit_alphabet` (its default filled in)."""
    n_special = len(SPECIAL_TOKEN_IDS)
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size={vocab_size} is below the minimum of {MIN_VOCAB_SIZE}")
    if vocab_size > MAX_VOCAB_SIZE:
        raise ValueError(f"vocab_size={vocab_size} is above the maximum of {MAX_VOCAB_SIZE} (2**20)")
    if min_frequency < 1:
        raise ValueError(f"min_frequency={min_frequency} must be at least 1")
    if model_max_length is not None and model_max_length < 2:
        raise ValueError(f"model_max_length={model_max_length} must be at least 2 ([CLS] and [SEP])")
    if limit_alphabet is None:
        # Each kept character may also appear as its "##" continuation: 2 entries per character.
        return min(MAX_ALPHABET, (vocab_size - n_special) // 2)
    if not 1 <= limit_alphabet <= vocab_size - n_special:
        raise ValueError(
            f"limit_alphabet={limit_alphabet} must be between 1 and vocab_size - {n_special} = {vocab_size - n_special}"
        )
    return limit_alphabet


def _check_trained(
    vocab: dict[str, int], corpus: Corpus, vocab_size: int, min_frequency: int, limit_alphabet: int
) -> None:
    """Refuse a vocabulary that is empty or too large; say when it is smaller than asked."""
    if len(vocab) <= len(SPECIAL_TOKEN_IDS):
        raise ValueError(f"the corpus ({corpus.describe()}) contains no text to train on")
    if len(vocab) > vocab_size:
        raise ValueError(
            f"the trained vocabulary has {len(vocab)} entries, more than vocab_size={vocab_size}: the alphabet "
            f"(limit_alphabet={limit_alphabet} characters and their ## forms) does not fit; lower limit_alphabet"
        )
    if len(vocab) < vocab_size:
        # Not an error (the vocabulary is complete for this text), but the model's vocab_size should follow it.
        logger.warning(
            f"the vocabulary has {len(vocab):,} tokens, fewer than vocab_size={vocab_size:,}: every pair seen at "
            f"least min_frequency={min_frequency} times is merged; more text or a lower min_frequency gives more"
        )
    # The trainer puts special tokens first, in order; the model relies on it (pad_token_id=0).
    if any(vocab[token] != i for token, i in SPECIAL_TOKEN_IDS.items()):
        raise RuntimeError(
            f"tokenizers placed the special tokens at unexpected ids: {[vocab[t] for t in SPECIAL_TOKEN_IDS]}"
        )


def _alphabet(
    corpus: Corpus, limit_alphabet: int, lowercase: bool, strip_accents: bool | None
) -> tuple[list[str], list[str]]:
    """The characters training will keep and the "##" forms it will make of them, both in a fixed order.

    Returns (the characters, sorted, or [] when all of them fit in `limit_alphabet`; the "##x" tokens, sorted).
    """
    # A training pass with no room for merges: its vocabulary is every character seen, and "##x" for those
    # seen inside a word.
    backend = build_backend(None, lowercase, strip_accents)
    trainer = trainers.WordPieceTrainer(
        vocab_size=1, special_tokens=[], continuing_subword_prefix=CONTINUING_SUBWORD_PREFIX, show_progress=False
    )
    backend.train_from_iterator(corpus.batches("reading corpus (alphabet)"), trainer)
    vocab = backend.get_vocab(with_added_tokens=False)
    chars = {t for t in vocab if not t.startswith(CONTINUING_SUBWORD_PREFIX)}
    kept: list[str] = []
    if len(chars) > limit_alphabet:
        # Keep the most frequent characters, ties broken by code point rather than by hash order.
        counts: Counter[str] = Counter()
        normalizer = backend.normalizer
        for batch in corpus.batches("reading corpus (character counts)"):
            for text in batch:
                counts.update(normalizer.normalize_str(text))
        kept = sorted(sorted(chars, key=lambda c: (-counts[c], c))[:limit_alphabet])
        chars = set(kept)
    pieces = sorted(
        t for t in vocab if t.startswith(CONTINUING_SUBWORD_PREFIX) and t[len(CONTINUING_SUBWORD_PREFIX) :] in chars
    )
    return kept, pieces
