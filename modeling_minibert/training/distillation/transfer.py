"""The transfer set: what the teacher labels for the student. The training examples (with their labels), seeded
augmented copies of each (words dropped and swapped, or TinyBERT's masked-LM replacements), and unlabelled texts
from `transfer_file`s.
"""

from __future__ import annotations

import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from modeling_minibert.training.distillation.arguments import DistillationArguments
from modeling_minibert.training.finetuning.data import load_data, text_lines
from modeling_minibert.training.finetuning.task import Examples, Task

# Each unlabelled text is cut to this many characters per token the models read before it is tokenized: a fast
# tokenizer encodes a whole text before it truncates, and one 28 MB line took 128 s and 4.1 GB. The first N
# tokens of BBC News articles span 4.7 characters a token on average and 6.1 at most (all-MiniLM-L6-v2's
# WordPiece, N from 64 to 512): at 32 the cut keeps every token the models read, with room for long words, URLs
# and runs of spaces, and costs nothing (a text is read at most `max_seq_length` tokens far anyway).
CHARS_PER_TOKEN = 32


def cut_input(example: Any, tokens: int) -> Any:
    """A text cut to `tokens` * CHARS_PER_TOKEN characters; a word list to its first `tokens` words (each at least
    one token), each word cut the same way."""
    if isinstance(example, str):
        return example[: tokens * CHARS_PER_TOKEN]
    return [word[: tokens * CHARS_PER_TOKEN] for word in example[:tokens]]


def load_transfer_file(path: str | os.PathLike, task: Task, text_column: str, tokens: int | None = None) -> list[Any]:
    """Unlabelled inputs: a .txt file holds one example per line (words split on whitespace for token
    classification); CSV/JSON files give their text column. With `tokens` (the most either model reads), each
    is cut to what could be read (`cut_input`) before anything tokenizes it."""
    if Path(path).suffix.lower() != ".txt":
        if not Path(path).is_file():
            raise FileNotFoundError(f"transfer file {path} does not exist")
        inputs = task.load_examples(load_data(path), text_column, None).inputs
    else:
        lines = text_lines(path, "transfer file")
        if tokens is not None:  # before the split, which a long line of words makes costly too
            lines = [cut_input(line, tokens) for line in lines]
        inputs = [line.split() for line in lines] if task.conll else lines
    return inputs if tokens is None else [cut_input(x, tokens) for x in inputs]


def augment(words: Sequence[str], rng: random.Random, word_dropout: float, word_swap: float) -> list[int]:
    """Indices of `words` in a perturbed order: each word dropped with chance `word_dropout` (one always stays),
    then each neighbour pair swapped with chance `word_swap`. Indices, so that tags can follow their words."""
    kept = [i for i in range(len(words)) if rng.random() >= word_dropout] or [rng.randrange(len(words))]
    for i in range(len(kept) - 1):
        if rng.random() < word_swap:
            kept[i], kept[i + 1] = kept[i + 1], kept[i]
    return kept


def transfer_set(
    train: Examples,
    words_given: bool,
    extra_inputs: Sequence[Any],
    args: DistillationArguments,
    seed: int,
    student: tuple[PreTrainedTokenizerBase, int],
    show_progress: bool = False,
) -> Examples:
    """The training examples (with their labels), `augment_copies` augmented copies of each (labelled only by the
    teacher: dropping "not" may flip a sentiment), and the unlabelled extra inputs. `student`: its tokenizer and
    tokens per input, which augmentation='mlm' reads with."""
    inputs, labels = list(train.inputs), list(train.labels)
    if args.augmentation == "mlm":
        copies = mlm_copies(train.inputs, words_given, args, seed, student, show_progress)
        return Examples(inputs + copies + list(extra_inputs), labels + [None] * (len(copies) + len(extra_inputs)))
    rng = random.Random(seed)
    for _ in range(args.augment_copies):
        for example in train.inputs:
            words = example if words_given else example.split()
            if not words:
                continue
            new = [words[i] for i in augment(words, rng, args.word_dropout, args.word_swap)]
            inputs.append(new if words_given else " ".join(new))
            labels.append(None)
    return Examples(inputs + list(extra_inputs), labels + [None] * len(extra_inputs))


def mlm_copies(
    inputs: Sequence[Any],
    words_given: bool,
    args: DistillationArguments,
    seed: int,
    student: tuple[PreTrainedTokenizerBase, int],
    show_progress: bool,
) -> list[Any]:
    """TinyBERT's augmented copies (`augmentation.mlm_augment`) by the student's own masked-LM head, in the form
    the inputs came in (word lists or texts)."""
    from transformers import AutoModelForMaskedLM

    from modeling_minibert.training.distillation.augmentation import mlm_augment

    words = [list(x) if words_given else x.split() for x in inputs]
    words = [w for w in words if w]
    tokenizer, length = student
    model = AutoModelForMaskedLM.from_pretrained(args.model_name_or_path)
    copies = mlm_augment(
        words,
        model,
        tokenizer,
        args.augment_copies,
        args.augment_probability,
        args.augment_top_k,
        seed,
        length,
        show_progress=show_progress,
        neighbours=args.augment_neighbours,
    )
    return copies if words_given else [" ".join(c) for c in copies]
