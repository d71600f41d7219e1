"""Convert between folders saved by transformers' BERT classes and Mini-BERT folders, in both directions.

Mini-BERT keeps BERT's parameter names, so a conversion is a config translation plus a check that every weight
the target needs is there: nothing is invented, and leftovers other than known BERT artefacts are an error.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import BertConfig

from . import modeling_minibert
from .configuration_minibert import MiniBertConfig, read_config_json
from .files import check_links, check_output_dir, staged_folder
from .modeling_minibert import check_weights_fit_config

# Fields with the same meaning in BertConfig and MiniBertConfig.
SHARED_CONFIG_FIELDS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_act",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "initializer_range",
    "layer_norm_eps",
    "pad_token_id",
    "classifier_dropout",
    "tie_word_embeddings",
    "id2label",
    "label2id",
    "problem_type",
)
# Head suffixes shared by both families ("Model", "ForMaskedLM", ...), from the one list of heads.
HEADS = tuple(target.split(".")[-1].removeprefix("MiniBert") for target in modeling_minibert.AUTO_MAP.values())
TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
# Every file a conversion reads from its source folder: a link among them must not lead out of it.
SOURCE_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", *TOKENIZER_FILES)
# Present in some BERT checkpoints, absent from Mini-BERT by design: a buffer older transformers saved, and the
# decoder bias, which BERT ties to `cls.predictions.bias` (Mini-BERT adds that bias directly).
BERT_ONLY_KEYS = ("bert.embeddings.position_ids", "embeddings.position_ids", "cls.predictions.decoder.bias")


def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {folder} does not exist")
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: {folder} is not a saved model folder")
    check_links(folder, copied=lambda name: name in SOURCE_FILES)  # vocab.txt -> ~/.ssh/id_rsa is not copied
    return read_config_json(folder)


def _read_weights(folder: Path, allow_pickle: bool) -> dict[str, torch.Tensor]:
    safetensors_path = folder / "model.safetensors"
    if safetensors_path.is_file():
        try:
            return load_file(safetensors_path)
        except Exception as err:  # safetensors raises its own error types for truncated / corrupted files
            raise ValueError(f"{safetensors_path} is not a readable safetensors file: {err}") from err
    pickle_path = folder / "pytorch_model.bin"
    if pickle_path.is_file():
        if not allow_pickle:
            raise ValueError(
                f"{pickle_path} is a pickle file, which can run arbitrary code when loaded; "
                "pass allow_pickle=True (--allow-pickle) if you trust it"
            )
        return torch.load(pickle_path, map_location="cpu", weights_only=True)
    raise FileNotFoundError(f"no model.safetensors in {folder}")


def _check_sizes(config: MiniBertConfig, folder: Path) -> None:
    """Compare the config's sizes with the safetensors header before the target model is built: a config saying
    vocab_size=10000000 would otherwise allocate gigabytes first. (Pickled weights are checked once loaded.)"""
    if (folder / "model.safetensors").is_file():
        check_weights_fit_config(config, [folder / "model.safetensors"], folder)


def _head_of(architectures: list[str] | None, prefix: str, folder: Path) -> str:
    """'BertForMaskedLM' -> 'ForMaskedLM' (the head suffix shared by both families)."""
    architecture = (architectures or [f"{prefix}Model"])[0]
    head = architecture[len(prefix) :] if architecture.startswith(prefix) else None
    if head not in HEADS:
        raise ValueError(
            f"{folder / 'config.json'}: architecture {architecture!r} has no counterpart; "
            f"supported: {', '.join(prefix + h for h in HEADS)}"
        )
    return head


def _match_state_dict(model: torch.nn.Module, weights: dict[str, torch.Tensor], source: Path) -> dict:
    """Keep the weights the target uses; fail on missing or unknown ones, naming them."""
    tied = set(model.get_expanded_tied_weights_keys(all_submodels=True)) if hasattr(
        model, "get_expanded_tied_weights_keys"
    ) else set()
    needed = set(model.state_dict()) - tied
    # BERT's decoder bias is its output bias (one tensor, saved under either name); Mini-BERT keeps one name.
    if "cls.predictions.decoder.bias" in weights and "cls.predictions.bias" not in weights:
        weights["cls.predictions.bias"] = weights["cls.predictions.decoder.bias"]
    if "cls.predictions.decoder.bias" in needed and "cls.predictions.bias" in weights:
        weights.setdefault("cls.predictions.decoder.bias", weights["cls.predictions.bias"])
    missing = sorted(needed - set(weights))
    if missing:
        raise ValueError(f"{source} lacks weights the target needs: {', '.join(missing)}")
    unknown = sorted(set(weights) - set(model.state_dict()) - set(BERT_ONLY_KEYS))
    if unknown:
        raise ValueError(f"{source} has weights the target has no place for: {', '.join(unknown)}")
    target = model.state_dict()
    for key in sorted(needed):  # a config that disagrees with its weights, named instead of a load traceback
        if weights[key].shape != target[key].shape:
            raise ValueError(
                f"{source}: {key} has shape {list(weights[key].shape)} but its config.json implies "
                f"{list(target[key].shape)}"
            )
    return {key: weights[key] for key in needed}


def _copy_tokenizer_files(src: Path, dst: Path) -> None:
    for name in TOKENIZER_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, dst / name)


def _fill_and_write(
    model: torch.nn.Module, head: str, src: Path, out: Path, overwrite: bool, allow_pickle: bool
) -> Path:
    """Load the source weights into the freshly built target `model`, then write it and the tokenizer files."""
    weights = _read_weights(src, allow_pickle)
    if head == "Model":
        # A bare model saves its keys without the `bert.` prefix, in both families.
        weights = {key.removeprefix("bert."): value for key, value in weights.items()}
    state = _match_state_dict(model, weights, src)
    if "cls.predictions.decoder.bias" in model.state_dict():  # BERT keeps a (tied) copy of the output bias
        state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    model.load_state_dict(state, strict=False)
    model.tie_weights()

    with staged_folder(out) as staging:
        model.save_pretrained(staging)
        _copy_tokenizer_files(src, staging)
    return out


def convert_bert_to_minibert(
    src: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False, allow_pickle: bool = False
) -> Path:
    """Turn a folder saved by a transformers `Bert*` class into a Mini-BERT folder with the matching head.

    The head comes from the source config's `architectures`; tokenizer files are copied along. Returns `out`.
    """
    src, out = Path(src), Path(out)
    source_config = _read_config(src)
    check_output_dir(out, overwrite)
    if source_config.get("model_type") != "bert":
        raise ValueError(
            f"{src / 'config.json'} has model_type {source_config.get('model_type')!r}, expected 'bert'"
        )
    head = _head_of(source_config.get("architectures"), "Bert", src)
    bert_config = BertConfig.from_dict(source_config)
    if bert_config.is_decoder or bert_config.add_cross_attention:
        raise ValueError(f"{src / 'config.json'} describes a BERT decoder; Mini-BERT is an encoder only")
    config = MiniBertConfig(**{name: getattr(bert_config, name) for name in SHARED_CONFIG_FIELDS})
    _check_sizes(config, src)
    model = getattr(modeling_minibert, f"MiniBert{head}")(config)
    return _fill_and_write(model, head, src, out, overwrite, allow_pickle)


def convert_minibert_to_bert(
    src: str | os.PathLike, out: str | os.PathLike, *, overwrite: bool = False, allow_pickle: bool = False
) -> Path:
    """Turn a Mini-BERT folder into one that transformers' `Bert*` classes load (no remote code). Returns `out`."""
    import transformers

    src, out = Path(src), Path(out)
    source_config = _read_config(src)
    check_output_dir(out, overwrite)
    if source_config.get("model_type") != MiniBertConfig.model_type:
        raise ValueError(
            f"{src / 'config.json'} has model_type {source_config.get('model_type')!r}, expected 'minibert'"
        )
    config = MiniBertConfig.from_dict(source_config)
    # The Mini-BERT-only shapes. (An untied MLM decoder is not among them: BertConfig has tie_word_embeddings.)
    for field, bert_value in (("layer_norm_position", "post"), ("final_layer_norm", False), ("mlm_head_transform", True)):
        if getattr(config, field) != bert_value:
            raise ValueError(
                f"{src / 'config.json'}: {field}={getattr(config, field)!r} has no BERT equivalent "
                f"(BERT needs {field}={bert_value!r})"
            )
    head = _head_of(source_config.get("architectures"), "MiniBert", src)
    _check_sizes(config, src)
    bert_config = BertConfig(**{name: getattr(config, name) for name in SHARED_CONFIG_FIELDS})
    model = getattr(transformers, f"Bert{head}")(bert_config)
    return _fill_and_write(model, head, src, out, overwrite, allow_pickle)


def _run_cli(args: argparse.Namespace) -> None:
    convert = convert_minibert_to_bert if args.to_bert else convert_bert_to_minibert
    out = convert(args.src, args.out, overwrite=args.overwrite, allow_pickle=args.allow_pickle)
    print(f"wrote {out}")


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "convert-bert",
        help="convert a transformers BERT folder to Mini-BERT (or back with --to-bert)",
        description="Convert a folder saved by transformers' Bert* classes into a Mini-BERT folder with the same "
        "head and tokenizer files; with --to-bert, the other way.",
    )
    parser.add_argument("src", help="folder saved with save_pretrained")
    parser.add_argument("out", help="output folder (must be empty unless --overwrite_output_dir)")
    parser.add_argument("--to-bert", "--to_bert", action="store_true", help="convert a Mini-BERT folder to transformers' BERT")
    parser.add_argument(
        "--overwrite_output_dir", "--overwrite-output-dir", dest="overwrite", action="store_true",
        help="replace an existing output folder",
    )
    parser.add_argument("--allow-pickle", "--allow_pickle", action="store_true", help="accept pytorch_model.bin (pickle) weights")
    parser.set_defaults(func=_run_cli)
