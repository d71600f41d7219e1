"""What a fine-tuning job loads before it trains: the starting model's config, its fast tokenizer, and the model
with a new head for the task, each refused in one line when it cannot be loaded. Distillation loads its student
(and its teacher's tokenizer) the same way.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import huggingface_hub
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase, set_seed

import modeling_minibert  # noqa: F401 - registers Mini-BERT with the Auto classes
from modeling_minibert.training.finetuning.arguments import TRAINING_DEFAULTS, ModelArguments
from modeling_minibert.utils.logging import quiet_transformers, say_missing_weights


def check_local(source: str | os.PathLike, what: str = "model folder") -> None:
    """FileNotFoundError in one line for a folder that is meant to be local and is not there: one that starts at
    the root, the home, `.` or `..`, whose first folder exists here (`runs/nosuch`), or any when the Hub is off
    (HF_HUB_OFFLINE). transformers would take such a name for a Hub id and retry the Hub for a minute before
    blaming the network. Other names are left to the Hub."""
    path = Path(source).expanduser()
    if path.exists():
        return
    text = str(source)
    local = path.is_absolute() or text.startswith((".", "~")) or (len(path.parts) > 1 and Path(path.parts[0]).is_dir())
    if local or huggingface_hub.is_offline_mode():
        raise FileNotFoundError(f"{what} {text} does not exist")


def load_fast_tokenizer(model: str | os.PathLike, tokenizer: str | os.PathLike | None) -> PreTrainedTokenizerBase:
    """The fast tokenizer of `model` (or of `tokenizer`, when given), whatever its kind (any model's folder or Hub
    id: a teacher's too); fine-tuning needs a fast one (word ids and offsets)."""
    source = str(tokenizer if tokenizer is not None else model)
    check_local(source, "tokenizer folder" if tokenizer is not None else "model folder")
    path = Path(source)
    if path.is_dir() and not any(
        (path / name).exists() for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt")
    ):
        raise FileNotFoundError(f"{path}: no tokenizer in this folder (pass --tokenizer_name)")
    try:
        tok = AutoTokenizer.from_pretrained(source)
    except OSError as err:
        raise FileNotFoundError(f"cannot load a tokenizer from {source!r}: {err}") from err
    if not tok.is_fast:
        raise ValueError(
            f"{source}: fine-tuning needs a fast tokenizer (word ids and offsets), got {type(tok).__name__}"
        )
    return tok


def load_config(model: str | os.PathLike):
    """The config of `model`, a folder or Hub id; FileNotFoundError in one line when there is none."""
    check_local(model)
    path = Path(model)
    if path.is_dir() and not (path / "config.json").exists():
        raise FileNotFoundError(f"{path}: no config.json in this folder (not a model folder)")
    try:
        return AutoConfig.from_pretrained(str(model))
    except OSError as err:
        raise FileNotFoundError(f"cannot load a model from {str(model)!r}: {err}") from err


def load_tokenizer_and_config(args: ModelArguments) -> tuple[PreTrainedTokenizerBase, Any]:
    """The starting model's tokenizer (or `tokenizer_name`'s) and config; the config first, as AutoTokenizer
    would warn past a bad one before our one-line refusal."""
    config = load_config(args.model_name_or_path)
    return load_fast_tokenizer(args.model_name_or_path, args.tokenizer_name), config


def load_model(auto_class: type, model: str | os.PathLike, seed: int, **config_overrides: Any) -> PreTrainedModel:
    """The model with a new head for the task. Seeded first, as the example scripts do: the new head's random
    init must be the same in every run with the same seed (and in the run a resumed run continues)."""
    check_local(model)
    check_head_size(model, config_overrides)
    set_seed(seed)
    try:
        # safetensors only: a repository or folder with pickle weights alone is refused, not unpickled (a teacher
        # that is only pickles is converted first, with --allow_pickle, by distill)
        with quiet_transformers():  # its load report lists the new head on every run: what matters is said below
            network, loading = auto_class.from_pretrained(
                str(model), use_safetensors=True, output_loading_info=True, **config_overrides
            )
    except OSError as err:
        raise FileNotFoundError(f"cannot load a model from {str(model)!r}: {err}") from err
    say_missing_weights(network, loading, model, new_head=True)
    return network


def check_head_size(model: str | os.PathLike, config_overrides: dict[str, Any]) -> None:
    """ValueError in one line when the model folder's own classifier head is for another number of labels than the
    run's (read from its safetensors header): transformers would print a page of load report, then a traceback."""
    from modeling_minibert.checks_minibert import read_safetensors_header

    weights = Path(model) / "model.safetensors"
    if "num_labels" not in config_overrides or not weights.is_file():
        return
    header = read_safetensors_header(weights)
    rows = next((entry["shape"][0] for name, entry in header.items() if name.endswith("classifier.weight")), None)
    wanted = config_overrides["num_labels"]
    if rows is not None and rows != wanted:
        theirs = ", ".join(map(str, load_config(model).id2label.values()))
        ours = ", ".join(map(str, config_overrides.get("id2label", {}).values()))
        raise ValueError(
            f"{model} holds a classifier head for {rows} labels ({theirs}); this run trains {wanted} "
            f"({ours}): start from the model it was fine-tuned from (its pretrained folder), whose head "
            "is made for the run"
        )


def check_max_length(requested: int | None, tokenizer: PreTrainedTokenizerBase, config) -> int:
    """Tokens per input: `requested`, checked against the model's positions, else the most the model and
    tokenizer take."""
    limit = getattr(config, "max_position_embeddings", None) or tokenizer.model_max_length
    if requested is None:
        return int(min(limit, tokenizer.model_max_length))
    if not 2 < requested <= limit:
        raise ValueError(
            f"max_seq_length={requested} must be above 2 and at most the model's max_position_embeddings={limit}"
        )
    return requested


def seed_of(training_options: dict[str, Any]) -> int:
    """The run's seed: its `seed` training option, else ours."""
    return training_options.get("seed", TRAINING_DEFAULTS["seed"])
