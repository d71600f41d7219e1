"""Try a pretrained model: the most likely fillers of its `[MASK]` tokens; `minibert fill-mask`.

    from modeling_minibert.fill_mask import fill_mask
    fill_mask("minibert-pretrained", "the [MASK] rose by 5%")   # [{"token_str": "price", "score": 0.1, ...}, ...]
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import transformers
from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, pipeline

import modeling_minibert  # noqa: F401  (registers Mini-BERT with the Auto classes)
from modeling_minibert.configuration_minibert import read_config_json

VOCABULARY_FILES = ("tokenizer.json", "vocab.txt")


def fill_mask(model_dir: str | os.PathLike, text: str, top_k: int = 5) -> list[dict] | list[list[dict]]:
    """transformers' fill-mask pipeline on a saved model folder: for each [MASK], the `top_k` predictions
    (dicts with token_str, score, sequence), best first; a list of such lists when the text has several masks.

    Refused, each with one line, before any prediction: a folder that is not a saved model, `top_k` outside
    [1, vocab_size], a tokenizer whose vocabulary lacks the mask token, and weights without a masked-LM head (a
    fine-tuned classifier, say), which transformers would fill with a random head and only warn.
    """
    folder = Path(model_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no saved model in {folder} (config.json not found)")
    if top_k < 1:
        raise ValueError(f"top_k={top_k} must be at least 1")
    read_config_json(folder)  # a config.json that is not JSON, named with its position
    config = AutoConfig.from_pretrained(folder)
    if top_k > config.vocab_size:
        raise ValueError(f"top_k={top_k} exceeds the vocabulary size ({config.vocab_size})")
    tokenizer = _load_tokenizer(folder)
    _check_mask_token(tokenizer, folder)
    if tokenizer.mask_token not in text:
        raise ValueError(f"the text must contain {tokenizer.mask_token}, got {text!r}")
    model, loading = AutoModelForMaskedLM.from_pretrained(folder, output_loading_info=True)
    missing_head = sorted(key for key in loading["missing_keys"] if key.startswith("cls."))
    if missing_head:
        architecture = (config.architectures or ["an unknown head"])[0]
        raise ValueError(
            f"{folder} holds no masked-LM head ({architecture} weights lack {', '.join(missing_head)}); "
            "fill-mask needs a pretrained (MLM) model, not a fine-tuned one"
        )
    return pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=top_k)(text)


def _load_tokenizer(folder: Path):
    """The folder's tokenizer, refusing one without a vocabulary: from tokenizer_config.json alone transformers
    builds a tokenizer of the special tokens only, which turns every word into [UNK] without a word of warning."""
    vocabularies = [name for name in VOCABULARY_FILES if (folder / name).is_file()]
    if not vocabularies:
        raise FileNotFoundError(f"no tokenizer vocabulary in {folder} (neither {' nor '.join(VOCABULARY_FILES)})")
    try:
        return AutoTokenizer.from_pretrained(folder)
    except Exception as err:  # json's, tokenizers' and transformers' own error types for a broken file
        raise ValueError(f"cannot load the tokenizer in {folder} ({', '.join(vocabularies)}): {err}") from err


def _check_mask_token(tokenizer, folder: Path) -> None:
    """The mask token must be in the vocabulary the model was trained with. A BERT tokenizer whose vocab.txt
    lacks it appends it as an extra id, and predicting at that id scores a token the model never saw."""
    mask, mask_id = tokenizer.mask_token, tokenizer.mask_token_id
    if mask is None or mask_id is None:
        raise ValueError(f"the tokenizer in {folder} has no mask token; fill-mask needs one such as [MASK]")
    if mask_id >= tokenizer.vocab_size:
        raise ValueError(
            f"the vocabulary in {folder} lacks {mask} (the tokenizer added it as id {mask_id}, after its "
            f"{tokenizer.vocab_size} entries); use the vocabulary the model was trained with"
        )


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fill-mask",
        help="print a model's top predictions for each [MASK] in a text",
        description="Print the most likely tokens for each [MASK] in TEXT, with the model saved in FOLDER.",
    )
    parser.add_argument("folder", help="a saved model folder (e.g. the output of `minibert pretrain`)")
    parser.add_argument("text", help='text with [MASK] tokens, e.g. "the [MASK] rose by 5%%"')
    parser.add_argument("--top-k", "--top_k", type=int, default=5, help="predictions per mask (default 5)")
    parser.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    # The pretraining heads (pooler, NSP) that a masked-LM model leaves unused are expected: no load report.
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    results = fill_mask(args.folder, args.text, args.top_k)
    per_mask = results if results and isinstance(results[0], list) else [results]
    for i, predictions in enumerate(per_mask, 1):
        if len(per_mask) > 1:
            print(f"[MASK] #{i}:")
        for p in predictions:
            print(f"{p['score']:7.4f}  {p['token_str']:<15}  {p['sequence']}")
    return 0
