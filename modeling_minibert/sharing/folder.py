"""What a model folder holds, and what of it is published: the one place that knows which files are the model,
the tokenizer, training state or pickles. `minibert push` uploads `files_to_upload`; a BERT-format copy
(`convert-bert --to_bert`, `push --format bert`) keeps `kept_files` beside the converted model.
"""

from __future__ import annotations

from fnmatch import fnmatchcase
from pathlib import Path

from modeling_minibert.utils.files import check_links
from modeling_minibert.utils.outputs import CARD_FILE, TEACHER_DIR, TEACHER_LOGITS_FILE, TEACHER_LOGITS_INFO_FILE

TOKENIZER_FILES = (
    "vocab.txt",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
)
# A Mini-BERT folder's own model files: rewritten (config, weights, card) or left out (the source files that
# trust_remote_code runs, which a BERT-format folder must not carry) in its BERT-format copy. Pickles are never
# copied either: only safetensors are written.
MODEL_FILES = ("config.json", "*.safetensors", "*.safetensors.index.json", "*.py", CARD_FILE)
PICKLE_PATTERNS = ["*.bin", "*.pt", "*.pth", "*.pkl", "*.pickle", "*.ckpt"]
# Training state, by file name, wherever it lies: Trainer's (`training_args.bin`, which can even hold
# `hub_token`; optimizer.pt, scheduler.pt, scaler.pt, rng_state*.pth) and accelerate's `save_state`
# (optimizer.bin, scheduler.bin, sampler.bin, random_states_*.pkl, custom_checkpoint_*.pkl). Pickles, not part
# of the model, never needed to load it: never uploaded.
TRAINING_STATE_PATTERNS = [
    "training_args.bin", "optimizer.*", "scheduler.*", "scaler.pt", "sampler*.bin", "rng_state*.pth",
    "random_states_*.pkl", "custom_checkpoint_*.pkl",
    TEACHER_LOGITS_FILE, TEACHER_LOGITS_INFO_FILE,  # `minibert distill`'s cache of its teacher's outputs
]
# Folders never uploaded, at any depth: checkpoints (Trainer's `checkpoint-N`, older runs' `checkpoints/`, as
# Trainer's own push skips them) and hidden ones (version control, caches, save staging, locks).
# `minibert distill --finetune_teacher` keeps the fine-tuned teacher in `teacher/`: another model, not this one.
IGNORED_FOLDERS = ["checkpoint-*", "checkpoints", TEACHER_DIR, ".*"]


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
    """Relative paths `push_to_hub` uploads: all but checkpoints, training state and hidden files and folders.

    Links to folders are not entered; a link to a file is listed (`check_uploaded_links` refuses one that leads out).
    """
    paths = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return [path for path in paths if uploaded(path)]


def check_uploaded_links(folder: Path) -> None:
    """Refuse a link that would publish what it points to: one that leads out of the folder, or to a file or
    folder inside that is never uploaded itself (hidden, a checkpoint, training state)."""
    check_links(folder, copied=uploaded, allowed=uploaded)


def kept_files(src: Path) -> list[str]:
    """What a BERT-format copy of `src` keeps besides the model: what `minibert push` would publish (tokenizer,
    results, plots, other files; never checkpoints, training state or hidden files) but the Mini-BERT model's
    own files and pickles."""
    check_uploaded_links(src)  # a link among them that leads out of the folder is refused, naming it
    replaced = (*MODEL_FILES, *PICKLE_PATTERNS)
    return [path for path in files_to_upload(src) if not any(fnmatchcase(path, pattern) for pattern in replaced)]
