"""WordPiece tokenization for Mini-BERT: train a vocabulary, get a tokenizer every transformers tool accepts.

from tokenization import train_tokenizer, load_tokenizer, tokenizer_summary
tokenizer = train_tokenizer(train_file=["corpus.txt"], vocab_size=8192, output_dir="my-tokenizer")  # the CLI flags
tokenizer = train_tokenizer(train_data=texts, vocab_size=2000, disable_tqdm=True)  # texts in memory
tokenizer = load_tokenizer("my-tokenizer")   # or transformers.AutoTokenizer.from_pretrained("my-tokenizer")
"""

from tokenization.summary import tokenizer_summary
from tokenization.training import train_tokenizer
from tokenization.wordpiece import (
    SPECIAL_TOKEN_IDS,
    SPECIAL_TOKENS,
    BertTokenizerFast,
    load_tokenizer,
    make_tokenizer,
    save_tokenizer,
)

__all__ = [
    "SPECIAL_TOKENS",
    "SPECIAL_TOKEN_IDS",
    "BertTokenizerFast",
    "load_tokenizer",
    "make_tokenizer",
    "save_tokenizer",
    "tokenizer_summary",
    "train_tokenizer",
]
