"""Convert between folders saved by transformers' BERT classes and Mini-BERT folders, in both directions.

Mini-BERT keeps BERT's parameter names, so a conversion is a config translation plus a check that every weight
the target needs is there: nothing is invented, and leftovers other than known BERT artefacts are an error.

To BERT (`--to_bert`), any Mini-BERT folder or job output folder becomes a BERT-format folder: `model_type: bert`,
transformers' own `Bert*` architecture, no source files or `auto_map` (it loads anywhere without remote code),
with the files of a BERT-format repository kept (tokenizer, label maps, results, plots, sentence-transformers
modules: `folder.published_files`) and the card rewritten for the format. Before it is called done, the copy is
loaded back as its users will load it (`check_loads_as_bert`: transformers' own class, AutoTokenizer,
SentenceTransformer for an embedding folder). Loading it back into the unpadded Mini-BERT needs no conversion:
`MiniBert*.from_pretrained(bert_folder)`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import BertConfig

from modeling_minibert import modeling_minibert
from modeling_minibert.checks_minibert import (
    check_weights_fit_config,
    read_safetensors_header,
)
from modeling_minibert.configuration_minibert import (
    BERT_FIELDS,
    MiniBertConfig,
    minibert_dict_from_bert,
    read_config_json,
)
from modeling_minibert.sharing.folder import (
    BERT_FORMAT_REWRITES,
    TOKENIZER_FILES,
    check_not_quantized,
    check_referenced_files,
    check_uploaded_links,
    copy_tokenizer_files,
    left_out_line,
    matches,
    published_files,
    sentence_transformers_modules,
)
from modeling_minibert.utils.commands import CommandLine
from modeling_minibert.utils.files import (
    check_links,
    check_output_dir,
    staged_folder,
    write_json,
)
from modeling_minibert.utils.logging import quiet_transformers, say_checked, transformers_bars_off
from modeling_minibert.utils.outputs import CARD_FILE, check_unlocked

logger = logging.getLogger(__name__)

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
# Config entries that name code files: a BERT-format folder has none, so it names none.
CODE_ENTRIES = ("auto_map", "custom_pipelines")


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
    tied = (
        set(model.get_expanded_tied_weights_keys(all_submodels=True))
        if hasattr(model, "get_expanded_tied_weights_keys")
        else set()
    )
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


def _filled(model_class: type, config, head: str, weights: dict[str, torch.Tensor], src: Path) -> torch.nn.Module:
    """A `model_class` model of `config` holding the source `weights`. A bare encoder saved without a pooler (ELECTRA's
    discriminator: `pretrain --objective electra`) is built without one, in both families: nothing is invented."""
    if head == "Model":
        # A bare model saves its keys without the `bert.` prefix, in both families.
        weights = {key.removeprefix("bert."): value for key, value in weights.items()}
    pooled = head != "Model" or "pooler.dense.weight" in weights
    model = model_class(config) if pooled else model_class(config, add_pooling_layer=False)
    state = _match_state_dict(model, weights, src)
    if "cls.predictions.decoder.bias" in model.state_dict():  # BERT keeps a (tied) copy of the output bias
        state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    model.load_state_dict(state, strict=False)
    model.tie_weights()
    return model


def convert_bert_to_minibert(
    model_name_or_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    overwrite_output_dir: bool = False,
    allow_pickle: bool = False,
) -> Path:
    """Turn a folder saved by a transformers `Bert*` class into a Mini-BERT folder with the matching head.

    The head comes from the source config's `architectures`; tokenizer files are copied along. Returns `out`.
    (To run a BERT checkpoint as Mini-BERT, no conversion is needed: `MiniBert*.from_pretrained(src)`.)
    """
    src, out = Path(model_name_or_path), Path(output_dir)
    source_config = _read_config(src)
    check_output_dir(out, overwrite_output_dir, inputs={"model_name_or_path": src}, job="convert-bert")
    if source_config.get("model_type") != "bert":
        raise ValueError(
            f"{src / 'config.json'} has model_type {source_config.get('model_type')!r}, expected 'bert'"
            + (
                " (a Mini-BERT folder converts to BERT with --to_bert)"
                if source_config.get("model_type") == "minibert"
                else ""
            )
        )
    head = _head_of(source_config.get("architectures"), "Bert", src)
    config = MiniBertConfig.from_dict(minibert_dict_from_bert(source_config, str(src / "config.json")))
    _check_sizes(config, src)
    model = _filled(getattr(modeling_minibert, f"MiniBert{head}"), config, head, _read_weights(src, allow_pickle), src)
    with staged_folder(out) as staging, transformers_bars_off():  # no bar for a single file
        model.save_pretrained(staging)
        copy_tokenizer_files(src, staging)
    say_checked(
        f"every weight of {src} has its place in MiniBert{head}, with the shape its config.json gives "
        "(none missing, none left over)"
    )
    return out


def bert_config_of(config: MiniBertConfig, source: Path) -> BertConfig:
    """The transformers BertConfig of a Mini-BERT config; a Mini-BERT-only shape is a one-line ValueError naming
    the field."""
    for name, bert_value in BERT_VALUES:
        if getattr(config, name) != bert_value:
            raise ValueError(
                f"{source}: {name}={getattr(config, name)!r} has no BERT equivalent (BERT needs {name}={bert_value!r})"
            )
    return BertConfig(**{name: getattr(config, name) for name in BERT_FIELDS})


def _bert_model(src: Path, source_config: dict, allow_pickle: bool) -> torch.nn.Module:
    """transformers' `Bert*` model of the Mini-BERT folder `src`, its weights loaded; what BERT cannot hold is a
    one-line ValueError naming it."""
    import transformers

    config = MiniBertConfig.from_dict(source_config)
    bert_config = bert_config_of(config, src / "config.json")
    head = _head_of(source_config.get("architectures"), "MiniBert", src)
    _check_sizes(config, src)
    return _filled(getattr(transformers, f"Bert{head}"), bert_config, head, _read_weights(src, allow_pickle), src)


def _without_code_entries(path: Path, target: Path) -> bool:
    """Write the JSON file `path` to `target` without `CODE_ENTRIES`, if it has any; whether it had."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # not there, or not JSON: left as it is, for the load check to name
        return False
    if not isinstance(data, dict) or not any(key in data for key in CODE_ENTRIES):
        return False
    write_json(target, {key: value for key, value in data.items() if key not in CODE_ENTRIES})
    return True


def write_bert_format(src: Path, target: Path, *, allow_pickle: bool = False, link: bool = False) -> list[str]:
    """Write into the empty folder `target` the BERT-format copy of `src`, a Mini-BERT folder or job output folder
    (converted) or a BERT one (its config, and tokenizer config, without the entries that name code). Returns the
    files of `src` left out (`folder.published_files`: what a BERT-format repository does not hold).

    Only what the conversion rewrites is written (config, weights; the card, copied to be rebuilt by
    `refresh_model_card`); every other file is `src`'s own, copied, or with `link` linked: a push reads it from
    where it is, so a large file is never copied. Every refusal is one line, before anything is written.
    """
    source_config = _read_config(src)
    check_not_quantized(src)
    check_referenced_files(src)  # modules.json's module folders: what the copy would lack, its users would too
    check_uploaded_links(src)  # a link among the kept files that leads out of the folder is refused, naming it
    model_type = source_config.get("model_type")
    if model_type not in (MiniBertConfig.model_type, "bert"):
        raise ValueError(
            f"{src / 'config.json'} has model_type {model_type!r}: only a Mini-BERT or BERT folder has a BERT format"
        )
    model = _bert_model(src, source_config, allow_pickle) if model_type == MiniBertConfig.model_type else None
    published, left_out = published_files(src, "bert")
    rewritten = BERT_FORMAT_REWRITES if model is not None else ("config.json", CARD_FILE)
    kept = [path for path in published if not any(matches(path, pattern) for pattern in rewritten)]
    target.mkdir(parents=True, exist_ok=True)
    if model is not None:
        with quiet_transformers():  # no "Writing model shards" bar for a single file
            model.save_pretrained(target)
    elif not _without_code_entries(src / "config.json", target / "config.json"):
        kept.append("config.json")
    if "tokenizer_config.json" in kept and _without_code_entries(
        src / "tokenizer_config.json", target / "tokenizer_config.json"
    ):
        kept.remove("tokenizer_config.json")
    for path in kept:
        (target / path).parent.mkdir(parents=True, exist_ok=True)
        if link:
            os.symlink((src / path).absolute(), target / path)
        else:
            shutil.copy2(src / path, target / path)
    if (src / CARD_FILE).is_file():
        shutil.copy2(src / CARD_FILE, target / CARD_FILE)  # a copy: the card is rewritten in place
    return left_out


def check_loads_as_bert(folder: Path, source: Path) -> str:
    """Load the BERT-format `folder` (written from `source`) as its users will, before it is called done: the
    transformers class its config names, through AutoConfig (no remote code: the folder has none), with every
    weight in place; its tokenizer with AutoTokenizer; with a modules.json, SentenceTransformer (where installed)
    encoding a text with every module. A failure is a one-line ValueError naming `source`; success, the line
    that says what loaded it."""
    import transformers

    config = transformers.AutoConfig.from_pretrained(folder, trust_remote_code=False)
    architecture = (config.architectures or ["BertModel"])[0]
    model_class = getattr(transformers, architecture, None)
    if model_class is None or not architecture.startswith("Bert"):
        raise ValueError(
            f"{source}: its BERT-format config names {architecture!r}, which is not a transformers BERT class"
        )
    weights = [path for path in ("model.safetensors", "model.safetensors.index.json") if (folder / path).is_file()]
    loaded = []
    if weights:
        index = folder / "model.safetensors.index.json"
        keys = (
            json.loads(index.read_text())["weight_map"]
            if index.is_file()
            else read_safetensors_header(folder / "model.safetensors")
        )
        extra = {} if architecture != "BertModel" or "pooler.dense.weight" in keys else {"add_pooling_layer": False}
        try:
            with quiet_transformers():
                _, info = model_class.from_pretrained(folder, config=config, output_loading_info=True, **extra)
        except Exception as err:  # transformers' own errors (shapes, a file it cannot read), whatever their type
            raise ValueError(
                f"{source}: transformers' {architecture} cannot load its BERT-format copy: {_first_line(err)}"
            ) from None
        problems = [
            f"{kind.replace('_', ' ')} {', '.join(sorted(map(str, info[kind])))}"
            for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")
            if info.get(kind)
        ]
        if problems:
            raise ValueError(
                f"{source}: transformers' {architecture} does not load its BERT-format copy whole: "
                + "; ".join(problems)
            )
        loaded.append(f"transformers' {architecture} (every weight in place)")
    elif not list(folder.glob("*.onnx")) + list(folder.glob("onnx/*.onnx")):
        raise FileNotFoundError(f"no model.safetensors in {source}")
    if any((folder / name).is_file() for name in TOKENIZER_FILES):
        try:
            with quiet_transformers():
                transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
        except Exception as err:  # any tokenizer error: the folder is not usable as it is
            raise ValueError(f"{source}: AutoTokenizer cannot load its BERT-format copy: {_first_line(err)}") from None
        loaded.append("AutoTokenizer")
    if sentence_transformers_modules(folder) and _check_sentence_transformers(folder, source):
        loaded.append("SentenceTransformer (every module, encoding a text)")
    said = " and ".join([", ".join(loaded[:-1]), loaded[-1]] if len(loaded) > 1 else loaded) or "nothing (no weights)"
    return f"the BERT-format folder loads without remote code in {said}"


def _check_sentence_transformers(folder: Path, source: Path) -> bool:
    """Whether SentenceTransformer loaded the folder (False where it is not installed); ValueError if it cannot."""
    check_referenced_files(folder)
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError:  # a plain install (the train extra brings it): the module files were checked above
        return False
    try:
        with quiet_transformers():
            model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
            model.encode(["a"])
    except Exception as err:  # sentence-transformers' and transformers' own errors, whatever their type
        raise ValueError(
            f"{source}: SentenceTransformer cannot load its BERT-format copy: {_first_line(err)}"
        ) from None
    if len(model) != len(sentence_transformers_modules(folder)):
        raise ValueError(f"{source}: SentenceTransformer loads {len(model)} of the modules its modules.json lists")
    return True


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0]


def convert_minibert_to_bert(
    model_name_or_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    overwrite_output_dir: bool = False,
    allow_pickle: bool = False,
) -> Path:
    """Turn a Mini-BERT folder or job output folder into a BERT-format folder that transformers' `Bert*` classes,
    `AutoModel*`, `AutoTokenizer`, `pipeline` and (an embedding folder) `SentenceTransformer` load without remote
    code; with the files of a BERT-format repository kept (tokenizer, label maps, results, plots, modules), and the
    card saying which format it is. Loaded back so before it is put in place. Returns `out`."""
    from modeling_minibert.sharing.model_card import refresh_model_card

    src, out = Path(model_name_or_path), Path(output_dir)
    source_config = _read_config(src)
    check_output_dir(out, overwrite_output_dir, inputs={"model_name_or_path": src}, job="convert-bert")
    check_unlocked(src, "convert-bert")  # a run still writing the folder: its model is not final yet
    if source_config.get("model_type") != MiniBertConfig.model_type:
        raise ValueError(
            f"{src / 'config.json'} has model_type {source_config.get('model_type')!r}, expected 'minibert'"
        )
    with staged_folder(out) as staging:
        write_bert_format(src, staging, allow_pickle=allow_pickle)
        refresh_model_card(staging, out.name)
        say_checked(check_loads_as_bert(staging, src))
    return out


@dataclass(kw_only=True)
class ConvertBertArguments:
    """`minibert convert-bert`'s options, named as in transformers' example scripts; `convert_bert` takes the same."""

    model_name_or_path: str = field(
        metadata={"help": "the folder to convert (saved with save_pretrained, or a job's output)"}
    )
    output_dir: str = field(
        metadata={"help": "where to write the converted folder (must be empty unless --overwrite_output_dir)"}
    )
    to_bert: bool = field(
        default=False,
        metadata={
            "help": "Mini-BERT (or a job's output folder) -> BERT format, loadable without remote code (default: "
            "BERT -> Mini-BERT)"
        },
    )
    overwrite_output_dir: bool = field(default=False, metadata={"help": "replace an existing output folder"})
    allow_pickle: bool = field(default=False, metadata={"help": "accept pytorch_model.bin (pickle) weights"})


def convert_bert(
    *,
    model_name_or_path: str | os.PathLike,
    output_dir: str | os.PathLike,
    to_bert: bool = False,
    overwrite_output_dir: bool = False,
    allow_pickle: bool = False,
) -> Path:
    """The `convert-bert` job: BERT -> Mini-BERT, or with `to_bert` a Mini-BERT or job folder -> BERT format (and a
    one-line word on the files a BERT-format folder does not hold, left out)."""
    convert = convert_minibert_to_bert if to_bert else convert_bert_to_minibert
    out = convert(model_name_or_path, output_dir, overwrite_output_dir=overwrite_output_dir, allow_pickle=allow_pickle)
    left_out = published_files(Path(model_name_or_path), "bert")[1] if to_bert else []
    if left_out:
        logger.warning(left_out_line(left_out, "bert"))
    return out


COMMAND_LINE = CommandLine(
    arguments=(ConvertBertArguments,),
    help="convert a transformers BERT folder to Mini-BERT (or a Mini-BERT / job folder to BERT with --to_bert)",
    description="Convert a folder saved by transformers' Bert* classes into a Mini-BERT folder with the same "
    "head and tokenizer files; with --to_bert, a Mini-BERT folder or job output folder into BERT format "
    "(model_type bert, no code files; tokenizer, labels, results, plots, sentence-transformers modules and card "
    "kept), loaded back with transformers (and SentenceTransformer) before it is put in place.",
    report=lambda path, options: f"wrote {path}",
)
