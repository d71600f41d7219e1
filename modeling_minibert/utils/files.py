"""Writing outputs safely: every file and folder a job writes appears whole or not at all.

Readers (a resumed run, a user, `minibert push`) must never see half a file. So writers stage their output
beside its final place and rename it in (`os.replace` is atomic within a filesystem):

    write_bytes / write_text / write_json      one file
    staged_folder        a whole folder (a fine-tuned model, a converted checkpoint)
    staged_files         files that a library writes by name beside others (an ONNX export and its weights)
    check_output_dir             refuse, before any work, a folder that already holds something, that is (or is
                                 inside, or holds) what the job reads or its work folder, or that a run is writing
    check_unlocked               refuse a folder whose run lock (`.minibert.lock`) a living process holds
    check_links                  refuse, before any work, a link that copying a folder would follow out of it

Staged files and folders get the permissions a plain `open()` / `mkdir()` would give: they are created with
mode 0o666 / 0o777 and the process umask does the rest (never read by setting it: that is process-wide, and
racy with threads). Their hidden names carry the host and pid of the writer, so a later `staged_folder` /
`staged_files` for the same output removes what a killed process left behind (`sweep_stale`).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import stat
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

STAGING_KINDS = ("partial", "previous")  # a folder being written; an old output being replaced
# Held while a run writes into its output folder (utils/outputs.py takes and releases it): every writer honours it.
LOCK_FILE = ".minibert.lock"


def _writer_tag() -> str:
    """host-pid-random: whose staging this is (so a dead writer's can be swept) and unique among its own."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"


def process_alive(host: str | None, pid: object) -> bool:
    """Whether process `pid` on `host` may still run (another host's cannot be checked: assumed alive)."""
    if host != socket.gethostname():
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    except (ValueError, TypeError, OverflowError):
        return False
    return True


# --- the run lock: one run at a time per folder (taken and released by outputs.locked) ------------------------------


def read_lock(lock: Path) -> dict:
    """The holder a run lock names ({} when it cannot be read)."""
    try:
        holder = json.loads(lock.read_text())
    except (OSError, ValueError):
        return {}  # being written, or torn by a kill: treated as held by nobody alive
    return holder if isinstance(holder, dict) else {}


def _alive(holder: dict) -> bool:
    return bool(holder) and process_alive(holder.get("host"), holder.get("pid"))


def lock_holder(out: Path) -> dict:
    """What the folder's lock says of its holder ({} without a readable lock)."""
    return read_lock(out / LOCK_FILE)


def check_unlocked(out: Path, job: str = "minibert") -> None:
    """Refuse, before any work, a folder that a living run is writing to."""
    lock = out / LOCK_FILE
    if lock.is_file():
        holder = read_lock(lock)
        if _alive(holder):
            raise FileExistsError(
                f"output_dir {out} is in use by another {holder.get('job', job)} run (pid {holder.get('pid')} on host "
                f"{holder.get('host')}, since {holder.get('started')}); wait for it to end, or choose another "
                f"folder (if that process is gone, delete {lock})"
            )


def temp_file_beside(path: str | os.PathLike) -> tuple[int, Path]:
    """Create a new hidden file beside `path`, open for writing: (descriptor, its path).

    Made with mode 0o666, as `open()` makes files, so the umask gives it the usual permissions (`mkstemp`'s
    files are private, 0600).
    """
    path = Path(path)
    while True:
        tmp = path.with_name(f".{path.name}.{_writer_tag()}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666), tmp
        except FileExistsError:  # a random name taken: draw another
            continue


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place."""
    fd, tmp = temp_file_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike, text: str) -> None:
    """`write_bytes` of `text` in UTF-8."""
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | os.PathLike, payload: Any) -> None:
    """`write_text` of `payload` as indented JSON (values JSON cannot hold are written as strings)."""
    write_text(path, json.dumps(payload, indent=2, default=str) + "\n")


def _staging_pattern(output: Path) -> re.Pattern:
    kinds = "|".join(STAGING_KINDS)
    return re.compile(rf"\.{re.escape(output.name)}\.(?P<kind>{kinds})-(?P<host>.+)-(?P<pid>\d+)-[0-9a-f]{{8}}")


def sweep_stale(output: str | os.PathLike) -> None:
    """Remove the staging folders beside `output` that processes now dead left behind (killed mid-write).

    A dead writer's `previous` folder is the old output itself when it died between the two renames of
    `staged_folder`: it is put back if nothing took its place, removed otherwise.
    """
    output = Path(output)
    pattern = _staging_pattern(output)
    try:
        siblings = list(output.parent.iterdir())
    except OSError:
        return  # nothing there yet, or unreadable: the write itself will say so
    for path in siblings:
        found = pattern.fullmatch(path.name)
        if found is None or process_alive(found["host"], found["pid"]):
            continue
        if found["kind"] == "previous" and not output.exists():
            os.replace(path, output)
        elif path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _make_staging(output: Path) -> Path:
    """A new empty hidden folder beside `output`, with the permissions `mkdir` gives (`mkdtemp`'s are 0700)."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        sweep_stale(output)
        while True:
            staging = output.with_name(f".{output.name}.partial-{_writer_tag()}")
            try:
                staging.mkdir(0o777)
                return staging
            except FileExistsError:  # a random name taken: draw another
                continue
    except OSError as err:  # named as the user gave it, not as the hidden staging folder
        raise OSError(f"cannot write {output}: {err.strerror or err}") from None


def plain_permissions(folder: Path) -> None:
    """Give every file under `folder` the mode a plain `open()` would, as `folder` (made by `mkdir`) has.

    Some writers create their files private: transformers' `save_pretrained` writes model.safetensors 0600.
    The umask is read off `folder`'s own mode instead of `os.umask`, which can only be read by changing it.
    """
    file_mode = stat.S_IMODE(folder.stat().st_mode) & 0o666
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(file_mode)


def check_not_taken(output: Path) -> None:
    """FileExistsError when another living process holds `output`'s run lock (this process may hold it)."""
    if lock_holder(output).get("pid") != os.getpid():
        check_unlocked(output)


@contextmanager
def staged_folder(output: str | os.PathLike) -> Iterator[Path]:
    """Yield an empty hidden folder beside `output`; on success it replaces `output`, on failure it is removed.

    A folder already at `output` is swapped out and deleted only once the new one is in place.
    """
    output = Path(output)
    staging = _make_staging(output)
    try:
        yield staging
        plain_permissions(staging)
        previous = None
        if output.exists():
            check_not_taken(output)  # a run may have started writing there since the job checked the folder
            previous = output.with_name(f".{output.name}.previous-{_writer_tag()}")
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
    staging = _make_staging(output)
    try:
        yield staging
        plain_permissions(staging)
        for file in staging.iterdir():
            os.replace(file, output.parent / file.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_output_dir(
    output: str | os.PathLike,
    overwrite: bool = False,
    resume_hint: bool = False,
    *,
    inputs: Mapping[str, object] | None = None,
    beside: Mapping[str, object] | None = None,
    job: str = "minibert",
    what: str = "output_dir",
) -> Path:
    """Refuse, before any work, an output folder that would be clobbered; return it as a Path.

    The one check every job that writes a folder makes (`staged_folder` then replaces the folder whole):
    - the folder must not be, lie inside or hold one of `inputs` (option name -> what the job reads: a folder or
      file; values that are not local paths, such as Hub ids, are skipped), nor one of the other folders the job
      writes, `beside` (compared whether they exist yet or not): replacing it would delete what the job reads or
      keeps, and `overwrite` cannot make that right;
    - a run writing into it (its `.minibert.lock` held by a living process) is not disturbed, `overwrite` or not;
    - an existing non-empty folder is accepted only with `overwrite`. `resume_hint` adds
      `--resume_from_checkpoint` to the message, for jobs that can continue the run saved there.
    `what`: the option the folder was given as, for the messages (a work folder is checked the same way).
    """
    output = Path(output)
    if output.exists() and not output.is_dir():
        raise FileExistsError(f"{what} {output} exists and is not a folder")
    check_apart(output, inputs or {}, what)
    check_apart(output, beside or {}, what, existing=False)
    if output.is_dir():
        check_unlocked(output, job)
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        ways = "--overwrite_output_dir to replace it"
        if resume_hint:
            ways = "--resume_from_checkpoint to continue the run saved there, " + ways
        raise FileExistsError(f"{what} {output} is not empty; pass {ways}, or choose another folder")
    return output


def local_paths(inputs: Mapping[str, object], existing: bool = True) -> Iterator[tuple[str, Path]]:
    """(option name, path) for each value of `inputs` that is a path (present here, with `existing`; a list: each
    of its items)."""
    for name, value in inputs.items():
        for item in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(item, (str, os.PathLike)) and str(item) and (not existing or Path(item).exists()):
                yield name, Path(item)


def check_apart(output: Path, inputs: Mapping[str, object], what: str = "output_dir", existing: bool = True) -> None:
    """ValueError in one line when `output` is one of `inputs` (links resolved), lies inside one, or holds one;
    `existing`: only the inputs present here count."""
    place = output.resolve()
    for name, path in local_paths(inputs, existing):
        read = path.resolve()
        if place == read:
            how = "is"
        elif place.is_relative_to(read):
            how = "is inside"
        elif read.is_relative_to(place):
            how = "holds"
        else:
            continue
        raise ValueError(
            f"{what} {output} {how} {name}={path}: the output replaces its folder whole, so it must lie "
            "apart from what the job reads and works in; choose another folder"
        )


def cache_folder() -> Path:
    """This user's own folder for what the package remembers on this machine: `$MINIBERT_CACHE`, else `minibert/`
    under huggingface_hub's `HF_HOME` (by default ~/.cache/huggingface/minibert)."""
    if os.environ.get("MINIBERT_CACHE"):
        return Path(os.environ["MINIBERT_CACHE"])
    from huggingface_hub.constants import HF_HOME

    return Path(HF_HOME) / "minibert"


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/"))


def _everything(rel: str) -> bool:
    return True


def hub_cache_blobs(root: Path) -> Path | None:
    """The `blobs/` folder of a Hugging Face cache snapshot (`models--x/snapshots/REV/`): its files are links there."""
    blobs = root.parent.parent / "blobs"
    return blobs if root.parent.name == "snapshots" and blobs.is_dir() else None


def _link_problem(link: Path, root: Path, allowed: Callable[[str], bool]) -> str | None:
    """Why the link `link` under `root` (resolved) must not be followed, or None."""
    try:
        target = link.resolve()
    except (RuntimeError, OSError):  # a loop of links (RuntimeError before Python 3.13)
        return f"to {os.readlink(link)}, which never resolves (a loop of links)"
    if not target.exists():
        return f"to {os.readlink(link)}, which does not exist"
    blobs = hub_cache_blobs(root)
    if blobs is not None and target.is_file() and target.is_relative_to(blobs.resolve()):
        return None  # the cache's own layout: each snapshot file is a link to its content
    if not target.is_relative_to(root):
        return f"to {target}, outside the folder"
    inside = target.relative_to(root).as_posix() + ("/" if target.is_dir() else "")
    if inside in ("./", "") or not allowed(inside):
        return f"to {inside}, which is not copied itself (hidden, a checkpoint or training state)"
    return None


def check_links(
    folder: str | os.PathLike,
    copied: Callable[[str], bool] = _everything,
    allowed: Callable[[str], bool] = lambda rel: not _hidden(rel),
) -> None:
    """Refuse, before any work, a link in `folder` that copying (or publishing) the folder would follow out of it.

    A link to a file elsewhere would copy that file's content, whatever it is (`ln -s ~/.ssh/id_rsa vocab.txt`).
    Every link the copy takes (`copied(path)`, folder-relative, with a trailing "/" for a folder) must resolve
    inside the folder, to a path `allowed` accepts (by default: not hidden); links are never followed further. A
    Hugging Face cache snapshot (`.../snapshots/REV/`), whose files are links into its repository's `blobs/`, is
    accepted as it is. Raises ValueError naming the first link refused.
    """
    folder = Path(folder)
    root = folder.resolve()
    # followlinks=False (the default): a link to a folder is listed with the folders, never entered.
    for dirpath, dirnames, filenames in os.walk(folder):
        for name, suffix in [(d, "/") for d in dirnames] + [(f, "") for f in filenames]:
            link = Path(dirpath, name)
            if not link.is_symlink() or not copied(link.relative_to(folder).as_posix() + suffix):
                continue
            problem = _link_problem(link, root, allowed)
            if problem is not None:
                raise ValueError(
                    f"{link} is a link {problem}: refusing to copy what it points to "
                    "(replace the link with the file itself, or remove it)"
                )
        dirnames[:] = [d for d in dirnames if copied(Path(dirpath, d).relative_to(folder).as_posix() + "/")]
