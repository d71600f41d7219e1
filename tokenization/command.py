"""`minibert train-tokenizer`: `train_tokenizer`'s options as flags (`TokenizerTrainingArguments`), and what the
command prints. Apart from `training.py` because the command convention lives in `modeling_minibert`, which loads
torch: training a tokenizer in Python does not need it.
"""

from __future__ import annotations

from typing import Any

from modeling_minibert.utils.commands import CommandLine
from tokenization.corpus import Corpus
from tokenization.summary import format_summary, tokenizer_summary
from tokenization.training import TokenizerTrainingArguments
from tokenization.wordpiece import BertTokenizerFast


def saved_lines(tokenizer: BertTokenizerFast, options: dict[str, Any]) -> str:
    """What `minibert train-tokenizer` prints: where the vocabulary went, and how it cuts the training text."""
    texts = (line for batch in Corpus(files=options["train_file"], show_progress=False) for line in batch)
    return f"saved a {len(tokenizer):,}-token WordPiece vocabulary to {options['output_dir']}\n" + format_summary(
        tokenizer_summary(tokenizer, texts)
    )


COMMAND_LINE = CommandLine(
    arguments=(TokenizerTrainingArguments,),
    help="train a WordPiece vocabulary and save a fast tokenizer",
    description="Train a BERT WordPiece vocabulary on UTF-8 text files and save it with save_pretrained.",
    report=saved_lines,
)
