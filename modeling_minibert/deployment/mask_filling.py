"""Try a pretrained model: the most likely fillers of its `[MASK]` tokens; `minibert fill-mask`.

from modeling_minibert.deployment import fill_mask
fill_mask("minibert-pretrained", "the [MASK] rose by 5%")   # [{"token_str": "price", "score": 0.1, ...}, ...]

minibert fill-mask --model_name_or_path minibert-pretrained --text "the [MASK] rose by 5%"
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from transformers import AutoConfig, AutoModelForMaskedLM, AutoTokenizer, pipeline

import modeling_minibert  # noqa: F401  (registers Mini-BERT with the Auto classes)
from modeling_minibert.checks_minibert import check_model_folder, check_tokenizer_fits
from modeling_minibert.configuration_minibert import MiniBertConfig, read_config_json
from modeling_minibert.utils.commands import CommandLine
from modeling_minibert.utils.logging import quiet_transformers

VOCABULARY_FILES = ("tokenizer.json", "vocab.txt")


def fill_mask(model_name_or_path: str | os.PathLike, text: str | list[str], top_k: int = 5) -> list:
    """transformers' fill-mask pipeline on a saved model folder: for each [MASK], the `top_k` predictions
    (dicts with token_str, score, sequence), best first; a list of such lists when the text has several masks.
    Given a list of texts (as pipelines take them), a list with one such result per text.

    Refused, each with one line, before any prediction: a folder that is not a saved model, `top_k` outside
    [1, vocab_size], a text without the mask token, a tokenizer whose vocabulary is not the model's (another size,
    no mask token, or another token on the mask's id), and weights without a masked-LM head (a fine-tuned
    classifier, say), which transformers would fill with a random head and only warn.
    """
    folder = Path(model_name_or_path)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"no saved model in {folder} (config.json not found)")
    if top_k < 1:
        raise ValueError(f"top_k={top_k} must be at least 1")
    texts = [text] if isinstance(text, str) else list(text)
    if not texts:
        raise ValueError("no text given: fill-mask needs at least one text with [MASK]")
    read_config_json(folder)  # a config.json that is not JSON, named with its position
    config = AutoConfig.from_pretrained(folder)
    if top_k > config.vocab_size:
        raise ValueError(f"top_k={top_k} exceeds the vocabulary size ({config.vocab_size})")
    if isinstance(config, MiniBertConfig):  # the weights first (a BERT folder is loaded by transformers' BERT)
        check_model_folder(folder, {"config": config})
    tokenizer = _load_tokenizer(folder)
    _check_mask_token(tokenizer, folder)
    check_tokenizer_fits(tokenizer, config, folder)  # then the tokenizer against them
    for one in texts:
        if not isinstance(one, str) or tokenizer.mask_token not in one:
            raise ValueError(f"the text must contain {tokenizer.mask_token}, got {one!r}")
    model = _load_masked_lm(folder, config)
    fill = pipeline("fill-mask", model=model, tokenizer=tokenizer, top_k=top_k)
    # The pipeline unwraps a list of one text into that text's result: keep one result per text for lists.
    results = fill(texts) if len(texts) > 1 else [fill(texts[0])]
    return results[0] if isinstance(text, str) else results


def _load_masked_lm(folder: Path, config):
    """The folder's masked-LM model; refused when the weights hold no MLM head."""
    with quiet_transformers():  # the pretraining heads a masked-LM model leaves unused are expected: no report
        model, loading = AutoModelForMaskedLM.from_pretrained(folder, output_loading_info=True)
    missing_head = sorted(key for key in loading["missing_keys"] if key.startswith("cls."))
    if missing_head:
        architecture = (config.architectures or ["an unknown head"])[0]
        raise ValueError(
            f"{folder} holds no masked-LM head ({architecture} weights lack {', '.join(missing_head)}); "
            "fill-mask needs a pretrained (MLM) model, not a fine-tuned one"
        )
    return model


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


@dataclass
class FillMaskArguments:
    """The options of `minibert fill-mask`, named as `fill_mask`'s keywords."""

    model_name_or_path: str = field(
        metadata={"help": "a saved model folder with a masked-LM head (e.g. minibert-pretrained)"}
    )
    text: list[str] = field(
        metadata={"help": 'one or more texts with [MASK] tokens, e.g. "the [MASK] rose by 5%%"', "nargs": "+"}
    )
    top_k: int = field(default=5, metadata={"help": "predictions per mask"})


def prediction_lines(results: list, options: dict) -> str:
    """What `minibert fill-mask` prints: per text (named first when there are several), per mask, one line per
    prediction (score, token, sequence)."""
    texts = options["text"]
    lines = []
    for text, per_text in zip(texts, results):
        per_mask = per_text if per_text and isinstance(per_text[0], list) else [per_text]
        if len(texts) > 1:
            lines.append(text)
        for i, predictions in enumerate(per_mask, 1):
            if len(per_mask) > 1:
                lines.append(f"[MASK] #{i}:")
            lines += [f"{p['score']:7.4f}  {p['token_str']:<15}  {p['sequence']}" for p in predictions]
    return "\n".join(lines)


COMMAND_LINE = CommandLine(
    arguments=(FillMaskArguments,),
    help="print a model's top predictions for each [MASK] in one or more texts",
    description="Print the most likely tokens for each [MASK] in each --text, with the model saved in "
    "--model_name_or_path.",
    report=prediction_lines,
    positionals="FOLDER TEXT... are now --model_name_or_path FOLDER --text TEXT...",
)
