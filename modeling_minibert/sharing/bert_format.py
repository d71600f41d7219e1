"""Convert between folders saved by transformers' BERT classes and Mini-BERT folders, in both directions.

Mini-BERT keeps BERT's parameter names, so a conversion is a config translation plus a check that every weight
the target needs is there: nothing is invented, and leftovers other than known BERT artefacts are an error.

To BERT (`--to_bert`), any Mini-BERT folder or job output folder becomes a BERT-format folder: `model_type: bert`,
transformers' own `Bert*` architecture, no source files or `auto_map` (it loads anywhere without remote code),
with the tokenizer, label maps, results and plots kept and the card rewritten for the format. Loading it back
into the unpadded Mini-BERT needs no conversion: `MiniBert*.from_pretrained(bert_folder)`.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import BertConfig

from modeling_minibert import modeling_minibert
from modeling_minibert.checks_minibert import check_weights_fit_config
from modeling_minibert.configuration_minibert import (
    BERT_FIELDS,
    MiniBertConfig,
    minibert_dict_from_bert,
    read_config_json,
)
from modeling_minibert.sharing.folder import TOKENIZER_FILES, kept_files
from modeling_minibert.utils.commands import CommandLine
from modeling_minibert.utils.files import check_links, check_output_dir, staged_folder
from modeling_minibert.utils.outputs import CARD_FILE, check_unlocked

# Head suffixes shared by both families ("Model", "ForMaskedLM", ...), from the one list of heads.
HEADS = tuple(target.split(".")[-1].removeprefix("MiniBert") for target in modeling_minibert.AUTO_MAP.values())
# Every file a conversion reads from its source folder: a link among them must not lead out of it.
SOURCE_FILES = ("config.json", "model.safetensors", "pytorch_model.bin", *TOKENIZER_FILES)
# Config fields with BERT's value in every Mini-BERT that BERT can hold; any other value has no BERT equivalent.
# (An untied MLM decoder is not among them: BertConfig has tie_word_embeddings.)
BERT_VALUES = (("layer_norm_position", "post"), ("final_layer_norm", False), ("mlm_head_transform", True))
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
    model: torch.nn.Module, head: str, src: Path, out: Path, allow_pickle: bool, kept: list[str] | None = None
) -> Path:
    """Load the source weights into the freshly built target `model`, then write it and the tokenizer files; with
    `kept` (to BERT), those files of `src` too, and the card rewritten for the BERT format."""
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
        if kept is not None:
            _write_bert_extras(src, staging, kept, out.name)
    return out


def _write_bert_extras(src: Path, staging: Path, kept: list[str], name: str) -> None:
    """Copy `kept` (folder-relative paths) from `src`, then the card, rebuilt for the BERT format (keeping the
    source card's task, base model, datasets and license, or a hand-written card's text)."""
    from modeling_minibert.sharing.model_card import refresh_model_card

    for path in kept:
        (staging / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src / path, staging / path)
    if (src / CARD_FILE).is_file():
        shutil.copy2(src / CARD_FILE, staging / CARD_FILE)
    refresh_model_card(staging, name)


def convert_bert_to_minibert(
    model_name_or_path: str | os.PathLike, output_dir: str | os.PathLike, *, overwrite_output_dir: bool = False,
    allow_pickle: bool = False,
) -> Path:
    """Turn a folder saved by a transformers `Bert*` class into a Mini-BERT folder with the matching head.

    The head comes from the source config's `architectures`; tokenizer files are copied along. Returns `out`.
    (To run a BERT checkpoint as Mini-BERT, no conversion is needed: `MiniBert*.from_pretrained(src)`.)
    """
    src, out = Path(model_name_or_path), Path(output_dir)
    source_config = _read_config(src)
    check_output_dir(out, overwrite_output_dir)
    if source_config.get("model_type") != "bert":
        raise ValueError(
            f"{src / 'config.json'} has model_type {source_config.get('model_type')!r}, expected 'bert'"
            + (" (a Mini-BERT folder converts to BERT with --to_bert)" if source_config.get("model_type") == "minibert" else "")
        )
    head = _head_of(source_config.get("architectures"), "Bert", src)
    config = MiniBertConfig.from_dict(minibert_dict_from_bert(source_config, str(src / "config.json")))
    _check_sizes(config, src)
    model = getattr(modeling_minibert, f"MiniBert{head}")(config)
    return _fill_and_write(model, head, src, out, allow_pickle)


def bert_config_of(config: MiniBertConfig, source: Path) -> BertConfig:
    """The transformers BertConfig of a Mini-BERT config; a Mini-BERT-only shape is a one-line ValueError naming
    the field."""
    for name, bert_value in BERT_VALUES:
        if getattr(config, name) != bert_value:
            raise ValueError(
                f"{source}: {name}={getattr(config, name)!r} has no BERT equivalent (BERT needs {name}={bert_value!r})"
            )
    return BertConfig(**{name: getattr(config, name) for name in BERT_FIELDS})


def convert_minibert_to_bert(
    model_name_or_path: str | os.PathLike, output_dir: str | os.PathLike, *, overwrite_output_dir: bool = False,
    allow_pickle: bool = False,
) -> Path:
    """Turn a Mini-BERT folder or job output folder into a BERT-format folder that transformers' `Bert*` classes,
    `AutoModel*`, `AutoTokenizer` and `pipeline` load without remote code; with the tokenizer, label maps,
    results and plots kept, and the card saying which format it is. Returns `out`."""
    import transformers

    src, out = Path(model_name_or_path), Path(output_dir)
    source_config = _read_config(src)
    check_output_dir(out, overwrite_output_dir)
    check_unlocked(src, "convert-bert")  # a run still writing the folder: its model is not final yet
    if source_config.get("model_type") != MiniBertConfig.model_type:
        raise ValueError(
            f"{src / 'config.json'} has model_type {source_config.get('model_type')!r}, expected 'minibert'"
        )
    config = MiniBertConfig.from_dict(source_config)
    bert_config = bert_config_of(config, src / "config.json")
    head = _head_of(source_config.get("architectures"), "MiniBert", src)
    _check_sizes(config, src)
    model = getattr(transformers, f"Bert{head}")(bert_config)
    return _fill_and_write(model, head, src, out, allow_pickle, kept_files(src))


@dataclass(kw_only=True)
class ConvertBertArguments:
    """`minibert convert-bert`'s options, named as in transformers' example scripts; `convert_bert` takes the same."""

    model_name_or_path: str = field(metadata={"help": "the folder to convert (saved with save_pretrained, or a job's output)"})
    output_dir: str = field(metadata={"help": "where to write the converted folder (must be empty unless --overwrite_output_dir)"})
    to_bert: bool = field(default=False, metadata={
        "help": "Mini-BERT (or a job's output folder) -> BERT format, loadable without remote code (default: "
                "BERT -> Mini-BERT)"})
    overwrite_output_dir: bool = field(default=False, metadata={"help": "replace an existing output folder"})
    allow_pickle: bool = field(default=False, metadata={"help": "accept pytorch_model.bin (pickle) weights"})


def convert_bert(
    *, model_name_or_path: str | os.PathLike, output_dir: str | os.PathLike, to_bert: bool = False,
    overwrite_output_dir: bool = False, allow_pickle: bool = False,
) -> Path:
    """The `convert-bert` job: BERT -> Mini-BERT, or with `to_bert` a Mini-BERT or job folder -> BERT format."""
    convert = convert_minibert_to_bert if to_bert else convert_bert_to_minibert
    return convert(model_name_or_path, output_dir, overwrite_output_dir=overwrite_output_dir, allow_pickle=allow_pickle)


COMMAND_LINE = CommandLine(
    arguments=(ConvertBertArguments,),
    help="convert a transformers BERT folder to Mini-BERT (or a Mini-BERT / job folder to BERT with --to_bert)",
    description="Convert a folder saved by transformers' Bert* classes into a Mini-BERT folder with the same "
    "head and tokenizer files; with --to_bert, a Mini-BERT folder or job output folder into BERT format "
    "(model_type bert, no code files; tokenizer, labels, results, plots and card kept).",
    report=lambda path, options: f"wrote {path}",
)
