"""The model a pretraining run trains and saves: where it comes from (a saved Mini-BERT, checked, or a new one),
its config (built, trained with, published), and its tokenizer, with the checks that the two fit.
"""

from __future__ import annotations

import json
from hashlib import sha256
from pathlib import Path

import torch
from transformers import PreTrainedTokenizerBase

from modeling_minibert.configuration_minibert import MiniBertConfig
from modeling_minibert.modeling_minibert import own_class
from modeling_minibert.training.pretraining.arguments import PretrainingArguments
from modeling_minibert.training.pretraining.corpus import CorpusSource, Documents, split_document_ids
from modeling_minibert.training.pretraining.objectives import Objective
from modeling_minibert.training.pretraining.preparation import default_cache_dir, tokenizer_fingerprint
from modeling_minibert.utils.files import staged_folder
from tokenization import load_tokenizer


def check_model_source(args: PretrainingArguments) -> Path | None:
    """The folder `model_name_or_path` names (a Mini-BERT or converted BERT folder), checked; None for a new model."""
    if args.tokenizer_name is not None and not Path(args.tokenizer_name).is_dir():
        raise FileNotFoundError(f"tokenizer folder not found: {args.tokenizer_name}")
    if args.model_name_or_path is None:
        return None
    source = Path(args.model_name_or_path)
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"model_name_or_path={source} is not a saved model folder (no config.json)")
    model_type = json.loads((source / "config.json").read_text()).get("model_type")
    if model_type != MiniBertConfig.model_type:
        raise ValueError(
            f"model_name_or_path={source} holds a {model_type!r} model, not a Mini-BERT; a transformers BERT folder "
            f"is first converted with `minibert convert-bert --model_name_or_path {source} --output_dir OUTPUT`"
        )
    if not (source / "model.safetensors").is_file():
        raise FileNotFoundError(f"model_name_or_path={source} holds no model.safetensors")
    return source


def build_config(args: PretrainingArguments, source: Path | None = None) -> MiniBertConfig:
    """The model's config: the saved model's, or the default Mini-BERT's, with `config_overrides`; checked
    against the run's sequence length."""
    if source is not None:
        config = MiniBertConfig.from_pretrained(source)
    else:
        config = MiniBertConfig()
    if args.config_overrides:
        try:
            config.update_from_string(args.config_overrides)
        except ValueError as err:
            raise ValueError(f"config_overrides={args.config_overrides!r}: {err}") from None
        config = MiniBertConfig(**config.to_dict())  # re-run the config's own checks on the new values
    if args.max_seq_length > config.max_position_embeddings:
        hint = "" if source else f"; raise it with config_overrides='max_position_embeddings={args.max_seq_length}'"
        raise ValueError(
            f"max_seq_length={args.max_seq_length} exceeds max_position_embeddings={config.max_position_embeddings}{hint}"
        )
    return config


def training_config(config: MiniBertConfig, dropout: float | None) -> MiniBertConfig:
    """The config the model trains with: a copy of `config` with the pretraining dropout (hidden and attention),
    so that `config` keeps the model's own values for the folders it is saved to."""
    if dropout is None:
        return config
    return MiniBertConfig(
        **{**config.to_dict(), "hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    )


def published_config(model: torch.nn.Module, config: MiniBertConfig) -> MiniBertConfig:
    """The config saved beside the weights: the trained model's, with the model's own dropout (fine-tuning
    wants it; pretraining's is a training setting) and its class named, as `save_pretrained` names it."""
    dropout = {
        "hidden_dropout_prob": config.hidden_dropout_prob,
        "attention_probs_dropout_prob": config.attention_probs_dropout_prob,
    }
    published = MiniBertConfig(**{**model.config.to_dict(), **dropout})
    published.architectures = [own_class(model).__name__]  # FSDP2's class is torch's subclass of it
    return published


def save_model(folder: Path, model, config: MiniBertConfig, state_dict: dict) -> None:
    """`model` with the weights `state_dict` and its published config, into `folder`."""
    model.save_pretrained(folder, state_dict=state_dict)
    published_config(model, config).save_pretrained(folder)


def get_tokenizer(
    args: PretrainingArguments,
    out: Path,
    source: CorpusSource,
    model_source: Path | None,
    objective: Objective,
    from_run_folder: bool,
    overwrite_cache: bool = False,
) -> PreTrainedTokenizerBase:
    """The run's saved tokenizer (resuming), else the given one, the model's own, or the objective's new one (a
    WordPiece vocabulary trained on the training documents, or a teacher's), made once per corpus and recipe and
    kept in the cache (`trained_tokenizer`; made again with `overwrite_cache`)."""
    if from_run_folder:
        return load_tokenizer(out)
    given = args.tokenizer_name or model_source
    if given is not None:
        tokenizer = load_tokenizer(given)
        tokenizer.model_max_length = args.max_seq_length
        return tokenizer
    return trained_tokenizer(args, source, objective, overwrite_cache)


def trained_tokenizer(
    args: PretrainingArguments, source: CorpusSource, objective: Objective, overwrite_cache: bool = False
) -> PreTrainedTokenizerBase:
    """The objective's new tokenizer for this corpus's training split: from `<cache>/tokenizers/`, where the first
    run that needed it put it (training is deterministic, so a process that makes it again gets the same one)."""
    teacher = getattr(getattr(objective, "teacher", None), "tokenizer", None)
    recipe = {
        "source": source.fingerprint(),
        "objective": objective.name,
        "vocab_size": args.vocab_size,
        "max_seq_length": args.max_seq_length,
        "seed": args.seed,
        "held_out": args.held_out_fraction,
        "teacher": None if teacher is None else tokenizer_fingerprint(teacher),
    }
    key = sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:20]
    folder = Path(args.cache_dir or default_cache_dir()) / "tokenizers" / key
    if (folder / "tokenizer.json").is_file() and not overwrite_cache:
        return load_tokenizer(folder)
    documents = Documents(source)
    train_ids, _ = split_document_ids(len(documents), args.held_out_fraction, args.seed)
    tokenizer = objective.make_tokenizer(args, Documents(source, train_ids))
    with staged_folder(folder) as staging:
        tokenizer.save_pretrained(staging)
    return tokenizer


def fit_vocabulary(tokenizer: PreTrainedTokenizerBase, config: MiniBertConfig, source: Path | None) -> None:
    """A new model takes the tokenizer's vocabulary; a saved one keeps its own, so the tokenizer must be the one
    its embeddings are indexed by: another vocabulary would train every row under another token's id."""
    if source is None:
        config.vocab_size = len(tokenizer)
        config.pad_token_id = tokenizer.pad_token_id
        return
    if len(tokenizer) > config.vocab_size:
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens but the model {source} only {config.vocab_size}")
    if any(source.glob("tokenizer*.json")) or (source / "vocab.txt").is_file():
        own = load_tokenizer(source).get_vocab()
        if tokenizer.get_vocab() != own:
            raise ValueError(
                f"tokenizer_name={tokenizer.name_or_path} has another vocabulary ({len(tokenizer)} tokens) than the "
                f"model {source} ({len(own)} tokens), whose embeddings are indexed by its own; leave tokenizer_name unset"
            )
