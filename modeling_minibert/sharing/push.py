"""Share a trained folder on the Hugging Face Hub: `push_to_hub` and `minibert push`.

    push_to_hub("runs/mlm", "me/minibert-mlm")
    # or: minibert push --model_name_or_path runs/mlm --hub_model_id me/minibert-mlm

A saved Mini-BERT folder (`save_pretrained` output) already holds everything a user without this package
needs: safetensors weights, a config whose `auto_map` names the classes, the configuration and modeling
source files, and the tokenizer files. A job's output folder (pretraining or fine-tuning, Trainer's layout)
adds results files, plots and `checkpoint-N/` folders. `push_to_hub` uploads the files a model repository of
the format consists of (`folder.published_files`, an allow-list: model, code named by `auto_map`, tokenizer,
card, results, plots, sentence-transformers modules, ONNX graphs) with `huggingface_hub.HfApi`, and says in one
line what it left out; checkpoints and training state (optimizer, scheduler, RNG states, `training_args.bin`)
are never uploaded, and any other pickle file is refused unless asked.

The model card (`model_card.write_model_card` at the end of a job) is refreshed at push.

The token is looked up like huggingface_hub does (argument, `HF_TOKEN`, `hf auth login`) and never appears
in an uploaded file or file name, the card, the repository id, revision or commit message, a log line or an
exception message.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx2  # huggingface_hub's HTTP client: its errors are the Hub's and the network's
from huggingface_hub import CommitInfo, CommitOperationAdd, HfApi, get_token
from huggingface_hub.errors import LocalTokenNotFoundError
from huggingface_hub.utils import filter_repo_objects, validate_repo_id
from transformers import TrainerCallback
from transformers.dynamic_module_utils import custom_object_save

from modeling_minibert.sharing.folder import (
    FORMATS,
    PICKLE_PATTERNS,
    check_not_quantized,
    check_referenced_files,
    check_uploaded_links,
    files_to_upload,
    left_out_line,
    published_files,
)
from modeling_minibert.sharing.model_card import parameter_count, refresh_model_card
from modeling_minibert.sharing.publishable import check_contents, check_publishable
from modeling_minibert.utils.commands import CommandLine
from modeling_minibert.utils.logging import say_checked
from modeling_minibert.utils.outputs import CARD_FILE, safetensors_problem

logger = logging.getLogger(__name__)

REDACTED = "hf_***"
OS_ERROR_FIELDS = ("errno", "strerror", "filename", "filename2")  # an OSError keeps these outside args and __dict__


def check_weights_readable(folder: Path, paths: list[str]) -> None:
    """Refuse a safetensors file cut short or with a broken header, naming it, before anything is uploaded."""
    for path in paths:
        if path.endswith(".safetensors"):
            problem = safetensors_problem(folder / path)
            if problem is not None:
                raise ValueError(f"{folder / path} is not a readable safetensors file: {problem}")
    parameter_count(folder)  # the model's headers parse (the card counts its parameters from them)


# ---------------------------------------------------------------------------------------------
# Keeping the token secret.
# ---------------------------------------------------------------------------------------------


def _without_token(value: object, token: str) -> object:
    """A copy of `value` with `token` replaced, for the values an error carries: strings, lists of them (notes), and
    httpx requests and responses (their headers hold `Authorization: Bearer <token>`). Other values as they are."""
    if isinstance(value, str):
        return value.replace(token, REDACTED)
    if isinstance(value, list):
        return [_without_token(item, token) for item in value]
    if isinstance(value, httpx2.Request):
        headers = {name: _without_token(text, token) for name, text in value.headers.items()}
        return httpx2.Request(value.method, _without_token(str(value.url), token), headers=headers)
    if isinstance(value, httpx2.Response):
        request = _requests_of(value)
        try:
            content = value.content
        except httpx2.ResponseNotRead:  # a streamed body nobody read: nothing to show either
            content = b""
        return httpx2.Response(
            value.status_code,
            headers=value.headers,
            content=content,
            request=_without_token(request[0], token) if request else None,
        )
    return value


def _carries_token(err: BaseException, token: str) -> bool:
    """Whether `token` is in `err` or the errors it was raised from: messages, notes, attributes, request headers."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        values = [*err.args, *vars(err).values(), *(getattr(err, name, None) for name in OS_ERROR_FIELDS)]
        if any(token in str(value) for value in values if isinstance(value, (str, list))):
            return True
        if any(
            token in text for request in _requests_of(err) for text in (*request.headers.values(), str(request.url))
        ):
            return True
        err = err.__cause__ or err.__context__
    return False


def _token_free_copy(err: BaseException, token: str) -> BaseException:
    """A new error of `err`'s type, with its message and attributes, `token` replaced (`err` itself is untouched).

    Made without calling `__init__`: httpx's and huggingface_hub's errors take their request and response as
    keyword arguments. The errors it was raised from are not kept: their messages and requests hold the token.
    """
    cls = type(err)
    args = tuple(_without_token(arg, token) for arg in err.args)
    clean = cls.__new__(cls, *args)
    clean.args = args
    for name, value in vars(err).items():
        setattr(clean, name, _without_token(value, token))
    for name in OS_ERROR_FIELDS if isinstance(err, OSError) else ():
        if getattr(err, name) is not None:  # a None set here would still change how the error prints
            setattr(clean, name, _without_token(getattr(err, name), token))
    return clean


def _requests_of(err: BaseException | httpx2.Response) -> list:
    """The HTTP requests an httpx-style error (or response) carries (`.request`/`.response` raise when unset)."""

    def attribute(owner: object, name: str) -> object:
        try:
            return getattr(owner, name, None)
        except Exception:
            return None

    requests = []
    for owner in (err, attribute(err, "response")):
        request = attribute(owner, "request") if owner is not None else None
        if request is not None and hasattr(request, "headers") and request not in requests:
            requests.append(request)
    return requests


def _call_without_leaking(token: str | None, call: Callable[[], CommitInfo]) -> CommitInfo:
    """`call()`; an error that carries `token` anywhere is replaced by a token-free copy, raised from None.

    Raised outside the `except` block, so that the copy has no `__context__` either: the original error (and the
    request inside it, with its Authorization header) is not reachable from what the caller gets.
    """
    try:
        return call()
    except BaseException as err:
        if not token or not _carries_token(err, token):
            raise
        clean = _token_free_copy(err, token)
    raise clean from None


def _check_no_token(folder: Path, paths: list[str], token: str, shown: Callable[[str], Path | str]) -> None:
    """Refuse, naming it, a file of `folder` to upload whose name or content holds `token`. `shown(path)` is the
    file as the user knows it (a BERT-format push reads from a temporary copy, not theirs)."""
    needle = token.encode()
    for rel in paths:
        if token in rel:
            raise ValueError(
                f"a file name in {shown('')} contains your Hub token: it would be published "
                f"({rel.replace(token, REDACTED)}); rename it before pushing"
            )
        with open(folder / rel, "rb") as f:
            tail = b""
            while chunk := f.read(1 << 20):
                if needle in tail + chunk:
                    raise ValueError(f"{shown(rel)} contains your Hub token: remove it before pushing")
                tail = chunk[-len(needle) :]


# ---------------------------------------------------------------------------------------------
# Push.
# ---------------------------------------------------------------------------------------------


def push_to_hub(
    model_name_or_path: str | os.PathLike,
    hub_model_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    commit_message: str | None = None,
    token: str | None = None,
    allow_pickle: bool = False,
    endpoint: str | None = None,
    license: str | None = None,
    format: str = "minibert",
    allow_compiled: bool = False,
) -> CommitInfo:
    """Upload a saved model folder or a job's output folder to the Hub repository `hub_model_id`, with a model card.

    Args:
        model_name_or_path: a `save_pretrained` folder (config.json, model.safetensors, source files, tokenizer files), or
            a job's output folder: its results files and plots go too; `checkpoint-*/` folders (at any depth)
            and training state (optimizer, scheduler, RNG states, `training_args.bin`) never do. What a model
            repository does not hold (scripts, notes, caches) is left out, and named in one logged line.
        hub_model_id: "namespace/name" (or "name", under the token's account); created if missing.
        private: create the repository private (no effect if it exists).
        revision: branch to commit to; created from `main` if new. Tags and commit ids are refused.
        commit_message: defaults to "Upload <name> with minibert push".
        token: defaults to `HF_TOKEN` or the token saved by `hf auth login`.
        allow_pickle: upload other `*.bin`, `*.pt`, `*.pth`, `*.pkl`, `*.pickle`, `*.ckpt` files too (they can
            run code when loaded). Checkpoints and training state are never uploaded, whatever this says.
        endpoint: Hub URL; defaults to `HF_ENDPOINT` or huggingface.co.
        license: the card's license (default: the card's own, else "apache-2.0").
        allow_compiled: publish a compiled model (`model.pt2`, native code that runs when loaded); without it such
            a folder is refused.
        format: "minibert" (the folder's model as it is, with the code its `auto_map` names) or "bert": transformers'
            BERT format (`bert_format.write_bert_format`: a Mini-BERT folder converted, a BERT one without code or
            `auto_map`; loaded back with transformers, and SentenceTransformer for an embedding folder, before the
            upload). Only the rewritten config, weights and card are written (to a temporary folder); the other
            files are uploaded from the folder itself, which is left as it is.

    Returns:
        The `CommitInfo` (a str: the commit URL; `.oid` is the commit id).

    Raises:
        FileNotFoundError: `folder` or its config.json is missing.
        ValueError: bad hub_model_id or revision, pickle files without `allow_pickle`, the token inside a file or in
            its name, a link that leads out of the folder (or to a file never uploaded), a safetensors file cut short
            or unreadable, an int8 folder (which transformers cannot load), a module folder that modules.json names
            missing, a BERT-format copy that transformers (or SentenceTransformer) does not load whole.
        LocalTokenNotFoundError: no token anywhere.
        huggingface_hub errors (RepositoryNotFoundError, HfHubHTTPError, ...) from the Hub; one that carries the
            token (in its message or its request's headers) is replaced by a token-free copy of the same type.
    """
    token = token or get_token()
    if format not in FORMATS:
        raise ValueError(f"format={format!r} is not one of {', '.join(map(repr, FORMATS))}")
    folder = Path(model_name_or_path)
    with tempfile.TemporaryDirectory(prefix="minibert-push-") as scratch:
        # Everything below may quote its arguments in an error: a token pasted into the wrong one stays hidden.
        return _call_without_leaking(
            token,
            lambda: _push(
                folder,
                Path(scratch),
                format,
                hub_model_id,
                private,
                revision,
                commit_message,
                token,
                allow_pickle,
                endpoint,
                license,
                allow_compiled,
            ),
        )


def _push(
    folder: Path,
    scratch: Path,
    format: str,
    repo_id: str,
    private: bool,
    revision: str | None,
    commit_message: str | None,
    token: str | None,
    allow_pickle: bool,
    endpoint: str | None,
    license: str | None,
    allow_compiled: bool = False,
) -> CommitInfo:
    # Every local check comes first: a refused push leaves the folder untouched and the Hub unasked.
    if not folder.is_dir():
        raise FileNotFoundError(f"No such folder: {folder}")
    if not (folder / "config.json").is_file():
        raise FileNotFoundError(f"{folder} has no config.json: push a folder written by save_pretrained")
    for name, value in (("hub_model_id", repo_id), ("revision", revision), ("commit_message", commit_message)):
        if token and value and token in value:
            raise ValueError(f"{name} contains your Hub token: it would be published")
    validate_repo_id(repo_id)
    if revision is not None and (not revision or re.fullmatch(r"[0-9a-f]{40}", revision)):
        raise ValueError(f"revision={revision!r} must be a branch name (commits go on branches)")
    if revision is not None and re.search(r"[`\s\\\"]", revision):  # it is quoted in the card's code
        raise ValueError(f"revision={revision!r} must be a branch name without quotes, backticks or spaces")
    folder, paths, left_out, shown = _files_to_push(folder, scratch, format, allow_pickle, allow_compiled)
    if not token:
        raise LocalTokenNotFoundError(
            "No Hugging Face token found: pass token=..., set the HF_TOKEN environment variable or run `hf auth login`"
        )
    _check_no_token(folder, paths, token, shown)
    for path in paths:  # each file is what its name says (a blob named like a results file is not one)
        check_contents(folder, path, shown(path))

    api = HfApi(endpoint=endpoint, token=token)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True).repo_id
    if revision is not None:
        refs = api.list_repo_refs(repo_id)
        if revision in {t.name for t in refs.tags}:
            raise ValueError(f"revision={revision!r} is a tag of {repo_id}: push to a branch")
        if revision not in {b.name for b in refs.branches}:
            api.create_branch(repo_id, branch=revision)
            logger.info("created branch %s of %s from main", revision, repo_id)
    refresh_model_card(folder, repo_id, revision, license)
    paths.append(CARD_FILE)
    _check_no_token(folder, [CARD_FILE], token, lambda rel: f"the model card written for {repo_id}")
    say_checked(
        f"the {len(paths)} files before the upload: each is what its name says, none holds the token or "
        "leads out of the folder"
    )
    if left_out:
        logger.warning(left_out_line(left_out, format).replace(token, REDACTED))
    # Each file read from where it is (a BERT-format push: the user's own file, through its link), never copied.
    info = api.create_commit(
        repo_id=repo_id,
        operations=[CommitOperationAdd(path_in_repo=path, path_or_fileobj=str(folder / path)) for path in paths],
        revision=revision,
        commit_message=commit_message or f"Upload {repo_id.split('/')[-1]} with minibert push",
    )
    logger.info("pushed %d files from %s to %s", len(paths), str(folder).replace(token, REDACTED), info.commit_url)
    return info


def _files_to_push(
    folder: Path, scratch: Path, format: str, allow_pickle: bool, allow_compiled: bool = False
) -> tuple[Path, list[str], list[str], Callable[[str], Path | str]]:
    """The folder to upload from, its files to upload (but the card, written later), the files left out, and how to
    name a file to the user. In BERT format the folder is written into `scratch`: only what the format rewrites,
    every other file a link to the user's own (read through it at upload: never copied)."""
    check_not_quantized(folder)  # a repository nobody can load is not published
    check_referenced_files(folder)  # nor one that lacks a file its own modules.json names
    check_uploaded_links(folder)
    check_weights_readable(folder, files_to_upload(folder))
    if format == "bert":
        from modeling_minibert.sharing.bert_format import (
            check_loads_as_bert,
            write_bert_format,
        )

        source, view = folder, scratch / folder.name
        left_out = write_bert_format(source, view, allow_pickle=allow_pickle, link=True)
        say_checked(check_loads_as_bert(view, source))

        def shown(rel: str) -> Path | str:
            return source / rel if not rel or (view / rel).is_symlink() else f"{source / rel} (its BERT-format copy)"

        paths = [path for path in files_to_upload(view) if path != CARD_FILE]
        return view, paths + check_publishable(view, paths, allow_compiled), left_out, shown
    pickles = list(filter_repo_objects(files_to_upload(folder), allow_patterns=PICKLE_PATTERNS))
    if pickles and not allow_pickle:
        raise ValueError(
            f"{folder} holds pickle files ({', '.join(pickles)}), which run arbitrary code when loaded: "
            "save the weights as safetensors, delete these files, or pass allow_pickle=True (--allow-pickle). "
            "(Checkpoints and training state are never uploaded: they need no flag.)"
        )
    paths, left_out = published_files(folder, format, allow_pickle)
    paths = [path for path in paths if path != CARD_FILE]
    extra = check_publishable(folder, paths, allow_compiled)  # what the folder's kind needs to load, published too
    return folder, paths + extra, [path for path in left_out if path not in extra], lambda rel: folder / rel


class PushCustomCodeCallback(TrainerCallback):
    """Make every commit of `Trainer(push_to_hub=True)` loadable with `trust_remote_code`, not only the last.

    Trainer pushes its `output_dir`, into which it copies only config, weights and tokenizer from each
    checkpoint: the configuration and modeling source files that `save_pretrained` adds for
    `trust_remote_code` would reach the Hub with the final push only, so a checkpoint commit pinned with
    `revision=` would not load without this package. This callback puts them in `output_dir` before training.

        Trainer(model, args, ..., callbacks=[PushCustomCodeCallback()])
    """

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if args.push_to_hub and state.is_world_process_zero and getattr(model, "_auto_class", None) is not None:
            os.makedirs(args.output_dir, exist_ok=True)
            custom_object_save(model, args.output_dir)  # the model's module and the files it imports


@dataclass(kw_only=True)
class PushArguments:
    """`minibert push`'s options; `push_to_hub` takes the same names as keywords."""

    model_name_or_path: str = field(
        metadata={"help": "the folder to upload: saved with save_pretrained, or a job's output folder"}
    )
    hub_model_id: str = field(metadata={"help": '"namespace/name" of the Hub repository; created if missing'})
    private: bool = field(default=False, metadata={"help": "create the repository private"})
    revision: str | None = field(default=None, metadata={"help": "branch to push to (created from main if new)"})
    commit_message: str | None = field(default=None, metadata={"help": "commit message"})
    allow_pickle: bool = field(
        default=False,
        metadata={
            "help": "also upload pickle files (*.bin, *.pt, ...) other than checkpoints and training state (never uploaded)"
        },
    )
    allow_compiled: bool = field(
        default=False,
        metadata={
            "help": "publish a compiled model (model.pt2 of a benchmark-deploy folder: native code, which runs when loaded)"
        },
    )
    license: str | None = field(
        default=None, metadata={"help": 'license in the model card (default: the card\'s own, else "apache-2.0")'}
    )
    token: str | None = field(
        default=None,
        metadata={
            "help": "Hub token (prefer HF_TOKEN: a command-line token is visible to other users of this machine)"
        },
    )
    format: str = field(
        default="minibert",
        metadata={
            "choices": FORMATS,
            "help": "minibert: the folder as it is (loads with trust_remote_code); bert: converted to transformers' BERT "
            "format first (no code files, loads anywhere BERT does)",
        },
    )


COMMAND_LINE = CommandLine(
    arguments=(PushArguments,),
    help="upload a saved model folder to the Hugging Face Hub",
    description=(
        "Upload --model_name_or_path (a save_pretrained folder or a job's output folder) to the Hub repository "
        "--hub_model_id, with its model card: model, tokenizer, card, results and plots; never checkpoint-*/ "
        "folders or training state (optimizer, scheduler, RNG states, training_args.bin). The Hub is HF_ENDPOINT "
        "(default huggingface.co); the token is --token, HF_TOKEN or `hf auth login`'s."
    ),
    report=lambda info, options: info.commit_url,
    positionals="FOLDER REPO_ID are now --model_name_or_path FOLDER --hub_model_id REPO_ID",
    # The Hub's answer or the network error (already free of the token) is the useful part; a traceback is not.
    failures=(httpx2.HTTPError, LocalTokenNotFoundError),
)
