"""What a model folder holds, and what of it is published: the one place that knows which files are the model,
the tokenizer, training state or pickles, and which files a model repository consists of.

Publishing is an allow-list, not a deny-list. `published_files` takes from a folder the files a model repository of
its format consists of (`REPOSITORY_FILES`; the folders its `modules.json` names; in the Mini-BERT format, the source
files its `auto_map` names; pickles only when asked) and leaves out the rest, which the command names in one line.
Checkpoints, training state and hidden files are never uploaded at all, asked or not. `minibert push` uploads the
published files; a BERT-format copy (`convert-bert --to_bert`, `push --format bert`) takes those of the BERT format
beside the config and weights it rewrites.
"""

from __future__ import annotations

import glob
import json
import shutil
from fnmatch import fnmatchcase
from pathlib import Path

from transformers.dynamic_module_utils import get_relative_imports

from modeling_minibert.utils.files import check_links
from modeling_minibert.utils.outputs import (
    ALL_RESULTS_FILE,
    CARD_FILE,
    DISTILLATION_ARGS_FILE,
    LEARNING_RATE_SEARCH_FILE,
    METRICS_FILE,
    QUANTIZED_INFO_FILE,
    QUANTIZED_WEIGHTS_FILE,
    SENTENCE_BERT_CONFIG_FILE,
    SENTENCE_TRANSFORMERS_MODULES_FILE,
    SERVING_FILE,
    TEACHER_DIR,
    TEACHER_LOGITS_FILE,
    TEACHER_LOGITS_INFO_FILE,
    TRAINER_STATE_FILE,
)

# What `push --format` publishes: the folder's Mini-BERT model (remote code), or its transformers BERT format.
FORMATS = ("minibert", "bert")
TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)


def copy_tokenizer_files(source: Path, output: Path) -> None:
    """Copy the tokenizer files `source` holds (TOKENIZER_FILES) into `output`."""
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, output / name)


# The files a model repository consists of, whatever its format, by kind. Patterns over folder-relative paths,
# matched folder by folder (`matches`): `*` never crosses a "/", so "*.onnx" is a file at the top and "onnx/*.onnx"
# one in onnx/.
REPOSITORY_FILES = {
    "model": ("config.json", "model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json"),
    "tokenizer": TOKENIZER_FILES,
    "card": (CARD_FILE, ".gitattributes"),
    # A job's results and history, as Trainer's own push publishes them: results files, plots (training curves,
    # confusion matrix, learning-rate search), TensorBoard events,
    # the job's arguments (JSON, never the pickled training_args.bin). `pretraining_args.json` and QA's
    # `eval_predictions.json` are named in training/, above this layer.
    "results": (
        ALL_RESULTS_FILE,
        "*_results.json",
        TRAINER_STATE_FILE,
        METRICS_FILE,
        "metrics.json",
        "*.png",
        LEARNING_RATE_SEARCH_FILE,
        "eval_predictions.json",
        "pretraining_args.json",
        DISTILLATION_ARGS_FILE,
        "runs/*/events.out.tfevents.*",
    ),
    # sentence-transformers: the module list and the Transformer module's options (each later module's folder is
    # taken from modules.json: `MODULE_FILES`).
    "sentence-transformers": (
        SENTENCE_TRANSFORMERS_MODULES_FILE,
        SENTENCE_BERT_CONFIG_FILE,
        "config_sentence_transformers.json",
    ),
    # export-onnx's graphs (model.onnx, the int8 model_quantized.onnx; onnx/ in the transformers.js layout), with
    # their external data when a graph is over 2 GB.
    "onnx": ("*.onnx", "*.onnx_data", "onnx/*.onnx", "onnx/*.onnx_data"),
}
# Inside a module folder that modules.json names (1_Pooling, 2_Dense): the module's config and weights.
MODULE_FILES = ("*.json", "*.safetensors", *TOKENIZER_FILES)
# The files each sentence-transformers module needs in its folder (Normalize has none, and no folder).
MODULE_NEEDS = {
    "Transformer": ("config.json",),
    "Pooling": ("config.json",),
    "Dense": ("config.json", "model.safetensors"),
}
# What a BERT-format copy writes itself (the converted config and weights, the card rebuilt for the format)
# instead of taking the source's file.
BERT_FORMAT_REWRITES = (
    "config.json",
    "model.safetensors",
    "model-*-of-*.safetensors",
    "model.safetensors.index.json",
    CARD_FILE,
)
PICKLE_PATTERNS = ["*.bin", "*.pt", "*.pth", "*.pkl", "*.pickle", "*.ckpt"]
# Training state, by file name, wherever it lies: Trainer's (`training_args.bin`, which can even hold
# `hub_token`; optimizer.pt, scheduler.pt, scaler.pt, rng_state*.pth) and accelerate's `save_state`
# (optimizer.bin, scheduler.bin, sampler.bin, random_states_*.pkl, custom_checkpoint_*.pkl). Pickles, not part
# of the model, never needed to load it: never uploaded.
TRAINING_STATE_PATTERNS = [
    "training_args.bin",
    "optimizer.*",
    "scheduler.*",
    "scaler.pt",
    "sampler*.bin",
    "rng_state*.pth",
    "random_states_*.pkl",
    "custom_checkpoint_*.pkl",
    TEACHER_LOGITS_FILE,
    TEACHER_LOGITS_INFO_FILE,  # `minibert distill`'s cache of its teacher's outputs
]
# Folders never uploaded, at any depth: checkpoints (Trainer's `checkpoint-N`, older runs' `checkpoints/`, as
# Trainer's own push skips them) and hidden ones (version control, caches, save staging, locks).
# `minibert distill --finetune_teacher` keeps the fine-tuned teacher in `teacher/`: another model, not this one.
IGNORED_FOLDERS = ["checkpoint-*", "checkpoints", TEACHER_DIR, ".*"]


def matches(path: str, pattern: str) -> bool:
    """fnmatch folder by folder: `*` stays within one name (plain `fnmatch("2_Dense/model.safetensors",
    "*.safetensors")` is true, which once took a module's weights for the model's own)."""
    names, wanted = path.split("/"), pattern.split("/")
    return len(names) == len(wanted) and all(fnmatchcase(name, part) for name, part in zip(names, wanted))


def never_uploaded(path: str) -> bool:
    """Whether a folder-relative path is a checkpoint, training state or hidden, at any depth."""
    *folders, name = path.split("/")
    if any(fnmatchcase(part, pattern) for part in folders for pattern in IGNORED_FOLDERS):
        return True
    hidden = name.startswith(".") and name != ".gitattributes"
    return hidden or any(fnmatchcase(name, pattern) for pattern in TRAINING_STATE_PATTERNS)


def uploaded(path: str) -> bool:
    return not never_uploaded(path)


def files_to_upload(folder: Path) -> list[str]:
    """Relative paths of the folder's files but checkpoints, training state and hidden files and folders: what any
    upload may choose from (`published_files` chooses).

    Links to folders are not entered; a link to a file is listed (`check_uploaded_links` refuses one that leads out).
    """
    paths = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return [path for path in paths if uploaded(path)]


def check_uploaded_links(folder: Path) -> None:
    """Refuse a link that would publish what it points to: one that leads out of the folder, or to a file or
    folder inside that is never uploaded itself (hidden, a checkpoint, training state)."""
    check_links(folder, copied=uploaded, allowed=uploaded)


def _read_json(path: Path) -> object:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def model_code_files(folder: Path) -> list[str]:
    """The source files `trust_remote_code` runs for this folder: the modules named by config.json's and
    tokenizer_config.json's `auto_map` and config.json's `custom_pipelines`, and the files they import relatively
    (found as transformers finds them). Only files of the folder itself: `repo--module.Class` names another repo's."""
    references: list[object] = []
    for name in ("config.json", "tokenizer_config.json"):
        data = _read_json(folder / name)
        data = data if isinstance(data, dict) else {}
        auto_map = data.get("auto_map") if isinstance(data.get("auto_map"), dict) else {}
        for value in auto_map.values():
            references += value if isinstance(value, list) else [value]
        pipelines = data.get("custom_pipelines") if isinstance(data.get("custom_pipelines"), dict) else {}
        references += [task.get("impl") for task in pipelines.values() if isinstance(task, dict)]
    todo = [
        f"{ref.rsplit('.', 1)[0]}.py" for ref in references if isinstance(ref, str) and "." in ref and "--" not in ref
    ]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name in found or "/" in name or not (folder / name).is_file():
            continue
        found.add(name)
        todo += [f"{module}.py" for module in get_relative_imports(folder / name)]
    return sorted(found)


def sentence_transformers_modules(folder: Path) -> list[tuple[int, str, str]]:
    """(index, class name, folder-relative path) of each module the folder's modules.json lists; [] without one.
    A list that is not sentence-transformers' is a one-line ValueError naming it."""
    path = folder / SENTENCE_TRANSFORMERS_MODULES_FILE
    if not path.is_file():
        return []
    try:
        listing = json.loads(path.read_text(encoding="utf-8"))
        return [
            (i, str(module["type"]).rsplit(".", 1)[-1], str(module["path"]).strip("/"))
            for i, module in enumerate(listing)
        ]
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{path} is not a sentence-transformers module list: {err!r}") from None


def check_referenced_files(folder: Path) -> None:
    """Refuse a folder whose own metadata names a file that is not there: a module folder of modules.json (or the
    config or weights its module needs), one line naming it. What a published copy would lack, its users would too."""
    for index, kind, path in sentence_transformers_modules(folder):
        where = f"{folder / SENTENCE_TRANSFORMERS_MODULES_FILE} names module {index} ({kind}) at {path or '.'}"
        if path and (".." in path.split("/") or Path(path).is_absolute()):
            raise ValueError(f"{where}, which is outside the folder")
        needs = MODULE_NEEDS.get(kind, ())
        if path and not (folder / path).is_dir() and kind != "Normalize":  # Normalize has no files, and no folder
            raise ValueError(f"{where}, which does not exist")
        for name in needs:
            if not (folder / path / name).is_file():
                raise ValueError(f"{where}, which holds no {name}")


def check_not_quantized(folder: Path) -> None:
    """Refuse an int8 folder (`deployment.quantization.quantize`): its `model.int8.safetensors` is read by this
    package's `load_quantized` only, so neither transformers nor a BERT tool could load it from anywhere.

    Refused rather than published loadably: the loadable form would be float weights again (dequantized: neither
    the int8 model nor smaller), a different model from the one in the folder; a transformers user wants the float
    model it came from (and quantizes it as they like), or an int8 graph their runtime runs (export-onnx)."""
    if (folder / SERVING_FILE).is_file():
        return  # a serving folder: `load_serving` reads its int8 weights (publishable.check_publishable checks them)
    if (folder / QUANTIZED_WEIGHTS_FILE).is_file() and not (folder / "model.safetensors").is_file():
        info = _read_json(folder / QUANTIZED_INFO_FILE)
        source = info.get("source") if isinstance(info, dict) and isinstance(info.get("source"), str) else None
        raise ValueError(
            f"{folder} is an int8 folder ({QUANTIZED_WEIGHTS_FILE}), which only modeling_minibert's load_quantized "
            "reads: transformers cannot load it; push the float model it was quantized from"
            + (f" ({source})" if source else "")
            + ", or `minibert export-onnx --quantize int8` of it for an int8 "
            "model that onnxruntime and optimum run"
        )


def published_files(folder: Path, format: str, allow_pickle: bool = False) -> tuple[list[str], list[str]]:
    """(published, left out): the folder-relative paths of the files a model repository of `format` takes from
    `folder`, and its other files. Checkpoints, training state and hidden files are in neither (never uploaded),
    nor, in BERT format, the model's code files (the format's own classes replace them).

    Every format: `REPOSITORY_FILES` and the config and weights of the module folders modules.json names. The
    Mini-BERT format adds the source files its `auto_map` names (`model_code_files`) and, with `allow_pickle`,
    pickle files; the BERT format has neither (no code; only safetensors are written).
    """
    patterns = [pattern for kind in REPOSITORY_FILES.values() for pattern in kind]
    patterns += [
        f"{glob.escape(path)}/{name}"
        for _, _, path in sentence_transformers_modules(folder)
        if path
        for name in MODULE_FILES
    ]
    code = model_code_files(folder)
    if format == "minibert":
        patterns += [glob.escape(name) for name in code]
    published, left_out = [], []
    for path in files_to_upload(folder):
        if format == "bert" and path in code:
            continue  # transformers' own BERT classes stand in for the model's code: replaced, not left out
        pickle = (
            allow_pickle and format == "minibert" and any(fnmatchcase(path.split("/")[-1], p) for p in PICKLE_PATTERNS)
        )
        (published if pickle or any(matches(path, p) for p in patterns) else left_out).append(path)
    return published, left_out


def left_out_line(left_out: list[str], format: str, shown: int = 8) -> str:
    """The one line that names what a `format` repository leaves out of the folder."""
    names = ", ".join(left_out[:shown]) + (f" and {len(left_out) - shown} more" if len(left_out) > shown else "")
    kind = "Mini-BERT" if format == "minibert" else "BERT-format"
    return f"left out {len(left_out)} file(s) that a {kind} model repository does not hold: {names}"
