"""Writing outputs safely: every file and folder a job writes appears whole or not at all.

Readers (a resumed run, a user, `minibert push`) must never see half a file. So writers stage their output
beside its final place and rename it in (`os.replace` is atomic within a filesystem):

    write_bytes / write_text / write_json      one file
    staged_folder        a whole folder (a fine-tuned model, a converted checkpoint)
    staged_files         files that a library writes by name beside others (an ONNX export and its weights)
    check_output_dir             refuse, before any work, a folder that already holds something

Staged files get the permissions a plain `open()` would give (`mkstemp` and `mkdtemp` make them private).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def umask() -> int:
    """The process's umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """`write_bytes` of `text` in UTF-8."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, payload: Any) -> None:
    """`write_text` of `payload` as indented JSON (values JSON cannot hold are written as strings)."""
    write_text(path, json.dumps(payload, indent=2, default=str) + "\n")


@contextmanager
def staged_folder(output: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty hidden folder beside `output`; on success it replaces `output`, on failure it is removed.

    A folder already at `output` is swapped out and deleted only once the new one is in place.
    """
    output = Path(output)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.partial-", dir=output.parent))
    except OSError as err:  # named as the user gave it, not as the hidden staging folder
        raise OSError(f"cannot write {output}: {err.strerror or err}") from None
    try:
        staging.chmod(0o777 & ~umask())
        yield staging
        previous = None
        if output.exists():
            previous = output.with_name(f".{output.name}.previous-{os.getpid()}")
            os.replace(output, previous)
        os.replace(staging, output)
        if previous is not None:
            shutil.rmtree(previous, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


@contextmanager
def staged_files(output: str | os.PathLike) -> Iterator[Path]:
    """Yield a hidden folder beside the file `output`; on success every file written into it is renamed into
    `output`'s folder (the file itself and any side files), on failure the folder is removed.

    Creating the folder is also the check, before any work, that the place can be written.
    """
    output = Path(output)
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=output.parent, prefix=f".{output.name}.partial-"))
    except OSError as err:
        raise OSError(f"cannot write {output}: {err.strerror or err}") from None
    try:
        yield staging
        for file in staging.iterdir():
            os.chmod(file, 0o666 & ~umask())
            os.replace(file, output.parent / file.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_output_dir(output: str | os.PathLike, overwrite: bool = False, resume_hint: bool = False) -> Path:
    """Refuse, before any work, an output folder that would be clobbered; return it as a Path.

    An existing non-empty folder is accepted only with `overwrite`. `resume_hint` adds `--resume_from_checkpoint`
    to the message, for jobs that can continue the run saved there.
    """
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise FileExistsError(f"output_dir {output} exists and is not a folder")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        ways = "--overwrite_output_dir to replace it"
        if resume_hint:
            ways = "--resume_from_checkpoint to continue the run saved there, " + ways
        raise FileExistsError(f"output_dir {output} is not empty; pass {ways}, or choose another folder")
    return output
