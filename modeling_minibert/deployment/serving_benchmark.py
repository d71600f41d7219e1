"""`minibert benchmark-deploy`: every serving path this machine can run, measured on the user's own texts, and the
fastest kept as a ready folder.

    benchmark_deploy("runs/sentiment", "texts.txt", "runs/sentiment-serving")
    classify = load_serving("runs/sentiment-serving")         # a text-classification pipeline
    classify("a fine film")                                    # [{'label': 'positive', 'score': 0.93}]

Which path is fastest depends on the CPU (AMX, AVX-512 BF16 and VNNI, AVX2 only) and on how requests arrive, so it
is measured, not guessed. Each path (`serving_paths.SERVING_PATHS`) is written from the model folder once, then
measured in interleaved rounds: single requests (each text alone: latency p50 and p95) and mixed batches
(`batch_size` texts in the file's order, padded per batch: real tokens per second). Every path's predictions on the
texts are compared with float32's (agreement), and with labels when a labelled file is given (accuracy). The
choice: among the paths whose agreement is at least `min_agreement` (and whose accuracy is within `max_accuracy_drop`
of float32's), the lowest median p50 (`objective="latency"`) or the most tokens/s (`"throughput"`).

`output_dir` receives the chosen path's folder with `serving.json` (the path, the thread count, the table), a card
(`README.md`: what was chosen and why) and the plot `serving_benchmark.png`. Needs the [serve] extra (onnxruntime,
matplotlib); OpenVINO's paths run where the [openvino] extra is installed, and are listed as unavailable elsewhere.
"""

from __future__ import annotations

import csv
import itertools
import os
import shutil
import statistics
import tempfile
import time
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from modeling_minibert.deployment.serving_paths import (
    REFERENCE,
    SERVING_FILE,
    SERVING_PATHS,
    check_threads,
    serving_path,
)
from modeling_minibert.utils.commands import CommandLine, check_list_option
from modeling_minibert.utils.files import check_output_dir, staged_folder, write_json
from modeling_minibert.utils.logging import checks_unsaid, quiet_libraries, quiet_transformers, say_checked
from modeling_minibert.utils.measured import cpu_name
from modeling_minibert.utils.signals import handled, stop_at_once

OBJECTIVES = ("latency", "throughput")
PLOT_FILE = "serving_benchmark.png"
MAX_TEXTS = 2000  # read from the texts file: enough for stable medians, a bounded measurement
MAX_LINE_CHARS = 100_000  # a longer line is no request text: refused before tokenizing
# Bounds of the measurement's options: beyond them a run would never end, or measure nothing a user serves.
MAX_SECONDS = 600.0  # per path, round and kind of measurement
MAX_ROUNDS = 100
MAX_BATCH_SIZE = 4096


def text_line(path: str | os.PathLike, number: int, raw: bytes) -> str:
    """Line `number` of `path`, decoded and checked: UTF-8 text (no NUL or other control character), no longer
    than MAX_LINE_CHARS; ValueError naming the file and line otherwise."""
    if len(raw) > 4 * MAX_LINE_CHARS or len(raw.decode("utf-8", "replace")) > MAX_LINE_CHARS:
        raise ValueError(f"{path} line {number} has more than {MAX_LINE_CHARS:,} characters (the limit)")
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} line {number} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    control = next((ch for ch in line.rstrip("\r\n") if unicodedata.category(ch) == "Cc" and ch != "\t"), None)
    if control is not None:
        raise ValueError(f"{path} line {number} is not text: it holds the control character U+{ord(control):04X}")
    return line


def read_texts(path: str | os.PathLike, limit: int = MAX_TEXTS) -> list[str]:
    """The first `limit` non-empty lines of `path` (UTF-8 text); ValueError when there are none or one is too long
    or not text. Read a bounded line at a time: a file without line ends (/dev/zero) is refused at its limit."""
    texts = []
    with open(path, "rb") as lines:
        for number in itertools.count(1):
            raw = lines.readline(4 * MAX_LINE_CHARS + 1)
            if not raw:
                break
            line = text_line(path, number, raw)
            if line.strip():
                texts.append(line.strip())
            if len(texts) == limit:
                break
    if not texts:
        raise ValueError(f"{path} holds no text (one request text per line)")
    return texts


def read_labelled(path: str | os.PathLike, label2id: dict[str, int]) -> tuple[list[str], np.ndarray]:
    """(texts, label ids) from a CSV file with `text` and `label` columns whose labels are the model's; ValueError
    naming the file (and the row: rows count from 1 after the header) otherwise."""
    try:
        with open(path, encoding="utf-8", newline="") as file:
            rows = list(csv.DictReader(file))
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from None
    except csv.Error as err:
        raise ValueError(f"{path} is not a CSV file: {err}") from None
    if not rows or not {"text", "label"} <= set(rows[0]):
        raise ValueError(f"{path} must be a CSV file with text and label columns")
    for number, row in enumerate(rows, 1):
        if not (row["text"] or "").strip():
            raise ValueError(f"{path} row {number} has no text")
        text_line(path, number, row["text"].encode("utf-8"))
    unknown = sorted({row["label"] or "" for row in rows} - set(label2id))
    if unknown:
        raise ValueError(
            f"{path} has labels the model does not know: {', '.join(unknown[:5])} (the model's: {', '.join(label2id)})"
        )
    return [row["text"] for row in rows], np.array([label2id[row["label"]] for row in rows])


@dataclass
class Encoded:
    """The texts tokenized once: each alone (batch 1, no padding) and in mixed batches (padded per batch)."""

    singles: list[tuple[np.ndarray, np.ndarray, np.ndarray]]
    batches: list[tuple[np.ndarray, np.ndarray, np.ndarray]]


def encode(tokenizer, texts: list[str], max_length: int, batch_size: int) -> Encoded:
    def arrays(chunk: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        out = tokenizer(chunk, padding=True, truncation=True, max_length=max_length, return_tensors="np")
        ids = out["input_ids"].astype(np.int64)
        types = out.get("token_type_ids", np.zeros_like(ids)).astype(np.int64)
        return ids, out["attention_mask"].astype(np.int64), types

    return Encoded(
        [arrays([t]) for t in texts], [arrays(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)]
    )


def timed(run, inputs: list[tuple], seconds: float) -> list[float]:
    """Seconds per call of `run` over `inputs` in turn (from the start again if time is left), for at least
    `seconds` and at least once each; two warm-up calls first (kernels are picked, buffers allocated)."""
    for args in inputs[:2]:
        run(*args)
    durations, start, k = [], time.perf_counter(), 0
    while k < len(inputs) or time.perf_counter() - start < seconds:
        args = inputs[k % len(inputs)]
        tic = time.perf_counter()
        run(*args)
        durations.append(time.perf_counter() - tic)
        k += 1
    return durations


def measure(run, encoded: Encoded, seconds: float) -> dict[str, float]:
    single = timed(run, encoded.singles, seconds)
    mixed = timed(run, encoded.batches, seconds)
    tokens = sum(int(b[1].sum()) for b in encoded.batches)
    rounds = len(mixed) / len(encoded.batches)  # the batches went round this many times
    return {
        "p50_ms": 1000 * float(np.percentile(single, 50)),
        "p95_ms": 1000 * float(np.percentile(single, 95)),
        "tokens_per_second": tokens * rounds / sum(mixed),
    }


def predictions(run, encoded: Encoded) -> np.ndarray:
    return np.concatenate([run(*batch) for batch in encoded.batches]).argmax(-1)


def choose(table: dict[str, dict], objective: str, min_agreement: float, max_accuracy_drop: float) -> tuple[str, str]:
    """(the chosen path, why): the best by `objective` among the paths whose predictions hold."""
    reference = table[REFERENCE]
    eligible = {
        name: row
        for name, row in table.items()
        if row["agreement"] >= min_agreement
        and ("accuracy" not in row or row["accuracy"] >= reference["accuracy"] - max_accuracy_drop)
    }
    if objective == "latency":
        best = min(eligible, key=lambda name: eligible[name]["p50_ms"])
        measure_said = f"the lowest median latency of one request ({eligible[best]['p50_ms']:.2f} ms)"
    else:
        best = max(eligible, key=lambda name: eligible[name]["tokens_per_second"])
        measure_said = f"the most tokens per second on mixed batches ({eligible[best]['tokens_per_second']:,.0f})"
    left_out = sorted(set(table) - set(eligible))
    held = f"; left out for their predictions: {', '.join(left_out)}" if left_out else ""
    return best, f"{best}: {measure_said} among the paths whose predictions agree with float32's{held}"


def medians(rounds: list[dict[str, dict]]) -> dict[str, dict]:
    """Per path: the median of each measure across rounds, and its range."""
    table = {}
    for name in rounds[0]:
        row = {}
        for key in rounds[0][name]:
            values = [r[name][key] for r in rounds]
            row[key], row[f"{key}_range"] = statistics.median(values), [min(values), max(values)]
        table[name] = row
    return table


def markdown(table: dict[str, dict], chosen: str) -> str:
    lines = [
        "| path | batch 1 p50 (ms) | p95 (ms) | mixed batches (tokens/s) | agreement with fp32 | accuracy |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, row in table.items():
        mark = "**" if name == chosen else ""
        accuracy = f"{row['accuracy']:.4f}" if "accuracy" in row else "-"
        lines.append(
            f"| {mark}{name}{mark} | {row['p50_ms']:.2f} ({row['p50_ms_range'][0]:.2f}–"
            f"{row['p50_ms_range'][1]:.2f}) | {row['p95_ms']:.2f} | {row['tokens_per_second']:,.0f} | "
            f"{row['agreement']:.4f} | {accuracy} |"
        )
    return "\n".join(lines)


def plot(table: dict[str, dict], chosen: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(table)
    colors = ["tab:orange" if name == chosen else "tab:blue" for name in names]
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 0.45 * len(names) + 1.6), sharey=True)
    p50 = [table[n]["p50_ms"] for n in names]
    left.barh(names, p50, color=colors)
    left.errorbar(
        p50,
        names,
        xerr=[[0] * len(names), [table[n]["p95_ms"] - table[n]["p50_ms"] for n in names]],
        fmt="none",
        ecolor="black",
        capsize=3,
    )
    left.set_xlabel("one request: latency p50, whisker to p95 (ms)")
    right.barh(names, [table[n]["tokens_per_second"] for n in names], color=colors)
    right.set_xlabel("mixed batches: real tokens per second")
    left.invert_yaxis()
    figure.suptitle(f"serving paths on this CPU (chosen: {chosen})")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def card(info: dict) -> str:
    return f"""# Serving folder: {info["path"]}

Chosen by `minibert benchmark-deploy` on {info["cpu"]} ({info["threads"]} thread(s)), from {info["texts"]} texts of
`{info["texts_file"]}`, objective {info["objective"]}.

Why: {info["why"]}.

```python
from modeling_minibert.deployment import load_serving

classify = load_serving("this folder"{info["allow"]})
classify("a text to classify")
```
{info["native"]}
Measured (medians of {info["rounds"]} interleaved rounds, ranges in brackets):

{info["markdown"]}

The numbers hold for this machine and these texts: another CPU, or requests of other lengths, may favour another
path. Rerun `minibert benchmark-deploy` there.
"""


def native_note(path) -> dict[str, str]:
    """What the card says of a folder that holds native code: that it is, and how it is loaded elsewhere."""
    if not path.native:
        return {"allow": "", "native": ""}
    return {
        "allow": ", allow_compiled=True",
        "native": (
            "\nThis folder holds native code (`model.pt2`, a shared library compiled by AOTInductor for this CPU and "
            "torch), which runs as soon as it is loaded. It loads without `allow_compiled` only for the user who "
            "compiled it, on the machine where they did; anyone else passes `allow_compiled=True`, and should do so "
            "only if they trust whoever wrote the folder.\n"
        ),
    }


def check_options(
    objective: str,
    rounds: int,
    batch_size: int,
    seconds: float,
    threads: int | None,
    min_agreement: float,
    max_accuracy_drop: float = 0.0,
) -> None:
    """Every option finite and within its bounds, in one line naming it, before any work (a measurement of
    `seconds=inf` would never end)."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective={objective!r} must be one of {', '.join(OBJECTIVES)}")
    for name, value, whole, low, high in (
        ("rounds", rounds, True, 1, MAX_ROUNDS),
        ("batch_size", batch_size, True, 1, MAX_BATCH_SIZE),
        ("seconds", seconds, False, 0, MAX_SECONDS),
        ("min_agreement", min_agreement, False, 0, 1),
        ("max_accuracy_drop", max_accuracy_drop, False, 0, 1),
    ):
        number = (int,) if whole else (int, float)
        if isinstance(value, bool) or not isinstance(value, number) or not low <= value <= high:
            kind = "a whole number" if whole else "a number"
            raise ValueError(f"{name}={value!r} must be {kind} at least {low:g} and at most {high:g}")
    check_threads(threads)


# The libraries that write and open the serving paths.
PATH_LOGGERS = ("torch", "onnxscript", "onnxruntime", "onnx", "openvino")


def measure_paths(
    folder: Path,
    paths: dict,
    work: Path,
    threads: int | None,
    encoded: Encoded,
    labelled: tuple[Encoded, np.ndarray] | None,
    rounds: int,
    seconds: float,
) -> tuple[dict, dict]:
    """Write each path into `work` (paths that share their files, once), then measure them in interleaved rounds:
    (the table: medians, ranges, agreement with float32 and accuracy on `labelled`; path -> its folder)."""
    from tqdm.auto import tqdm

    runs, folders, written, quality = {}, {}, {}, {}
    for name, path in tqdm(paths.items(), desc="writing the paths"):
        # Each path's own checks and the libraries' warnings (deprecations, skipped registrations) stay unsaid:
        # what tells whether a path holds is its agreement with float32, in the table and the line after it.
        with checks_unsaid(), quiet_transformers(), quiet_libraries(*PATH_LOGGERS):
            if path.write not in written:
                written[path.write] = work / name
                path.write(folder, work / name)
            folders[name] = written[path.write]
            runs[name] = path.open(folders[name], threads)
        quality[name] = {"predictions": predictions(runs[name], encoded)}
        if labelled:
            quality[name]["accuracy"] = float((predictions(runs[name], labelled[0]) == labelled[1]).mean())
    measured = [
        {name: measure(runs[name], encoded, seconds) for name in tqdm(runs, desc=f"round {r + 1}/{rounds}")}
        for r in range(rounds)
    ]
    table = medians(measured)
    for name, row in table.items():
        row["agreement"] = float((quality[name]["predictions"] == quality[REFERENCE]["predictions"]).mean())
        if labelled:
            row["accuracy"] = quality[name]["accuracy"]
    return table, folders


def check_model(folder: Path):
    """The model folder's config, refusing one that is no saved sequence classifier."""
    from modeling_minibert.checks_minibert import check_model_folder
    from modeling_minibert.configuration_minibert import MiniBertConfig

    check_model_folder(folder, {})
    config = MiniBertConfig.from_pretrained(folder)
    head = (config.architectures or ["MiniBertModel"])[0]
    if head != "MiniBertForSequenceClassification":
        raise ValueError(
            f"{folder} holds a {head}; benchmark-deploy serves sequence classifiers "
            "(MiniBertForSequenceClassification, from `minibert finetune` or `minibert distill`)"
        )
    return config


def paths_to_measure(paths: list[str] | None) -> dict:
    """Name -> serving path of `paths` (float32's, the reference, always first), or of every path this machine can
    run; an unknown or impossible one is refused in one line, before any work."""
    if paths:
        names = list(dict.fromkeys([REFERENCE, *paths]))
    else:
        names = [n for n, p in SERVING_PATHS.items() if n == REFERENCE or not p.missing()]
    return {name: serving_path(name) for name in names}


def check_output_folders(output_dir, work_dir, overwrite_output_dir: bool, inputs: dict) -> Path:
    """The output folder, checked (and `work_dir`, which keeps the paths' folders: apart from the inputs and from
    the output)."""
    beside = {"work_dir": work_dir}
    output = check_output_dir(output_dir, overwrite_output_dir, inputs=inputs, beside=beside, job="benchmark-deploy")
    if work_dir is not None:
        beside = {"output_dir": output}
        check_output_dir(work_dir, inputs=inputs, beside=beside, job="benchmark-deploy", what="work_dir")
    return output


def benchmark_deploy(
    model_name_or_path: str | os.PathLike,
    texts_file: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    labelled_file: str | os.PathLike | None = None,
    paths: list[str] | None = None,
    objective: str = "latency",
    threads: int | None = None,
    rounds: int = 3,
    seconds: float = 2.0,
    batch_size: int = 32,
    min_agreement: float = 0.99,
    max_accuracy_drop: float = 0.005,
    work_dir: str | os.PathLike | None = None,
    overwrite_output_dir: bool = False,
) -> dict:
    """Measure every serving path (or `paths`) on the texts of `texts_file`, keep the fastest by `objective` in
    `output_dir` (see the module's docstring), and return what `serving.json` holds. `work_dir`: a new folder
    that keeps every path's folder (default: a temporary one, removed)."""
    from transformers import AutoTokenizer

    folder = Path(model_name_or_path)
    check_list_option("paths", paths)
    check_options(objective, rounds, batch_size, seconds, threads, min_agreement, max_accuracy_drop)
    config = check_model(folder)
    chosen_paths = paths_to_measure(paths)
    texts = read_texts(texts_file)
    labelled = read_labelled(labelled_file, config.label2id) if labelled_file else None
    inputs = {"model_name_or_path": folder, "texts_file": texts_file, "labelled_file": labelled_file}
    output = check_output_folders(output_dir, work_dir, overwrite_output_dir, inputs)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    max_length = min(config.max_position_embeddings, tokenizer.model_max_length)
    encoded = encode(tokenizer, texts, max_length, batch_size)
    scored = (encode(tokenizer, labelled[0], max_length, batch_size), labelled[1]) if labelled else None
    # SIGTERM as SIGINT does: the temporary folder is removed on the way out (Python's default leaves it).
    with (
        handled(stop_at_once(f"nothing was written to {output}")),
        tempfile.TemporaryDirectory(prefix="minibert-serving-") as temporary,
    ):
        work = Path(work_dir or temporary)
        table, folders = measure_paths(folder, chosen_paths, work, threads, encoded, scored, rounds, seconds)
        chosen, why = choose(table, objective, min_agreement, max_accuracy_drop)
        held = table[chosen]
        accuracy = f", accuracy {held['accuracy']:.4f}" if "accuracy" in held else ""
        say_checked(
            f"{chosen} predicts as float32 on {held['agreement']:.1%} of the {len(texts):,} texts (at least "
            f"{min_agreement:.0%} needed){accuracy}"
        )
        info = {
            "path": chosen,
            "why": why,
            "objective": objective,
            "threads": threads,
            "cpu": cpu_name(),
            "texts_file": str(texts_file),
            "texts": len(texts),
            "rounds": rounds,
            "seconds": seconds,
            "batch_size": batch_size,
            "table": table,
            "unavailable": {n: p.missing() for n, p in SERVING_PATHS.items() if n not in table and p.missing()},
        }
        keep_chosen(output, folders[chosen], info, chosen_paths[chosen])
    print(markdown(table, chosen))
    for name, reason in info["unavailable"].items():
        print(f"not measured: {name} ({reason})")
    if chosen_paths[chosen].native:
        print(
            f"{chosen} is native code compiled for this CPU: {output} loads with load_serving here; elsewhere "
            "(another user or machine) only with load_serving(folder, allow_compiled=True)"
        )
    return info


def keep_chosen(output: Path, folder: Path, info: dict, path) -> None:
    """`output` made whole at once: the chosen `path`'s `folder`, beside it `serving.json` (`info`, to which the
    list of the folder's files is added), its card and its plot."""
    table, chosen = info["table"], info["path"]
    with staged_folder(output) as staging:
        shutil.copytree(folder, staging, dirs_exist_ok=True)
        # The files its path reads, for whoever publishes or copies the folder to check it is whole.
        info["files"] = sorted(p.relative_to(staging).as_posix() for p in staging.rglob("*") if p.is_file())
        write_json(staging / SERVING_FILE, info)
        (staging / "README.md").write_text(
            card({**info, **native_note(path), "markdown": markdown(table, chosen)}), encoding="utf-8"
        )
        plot(table, chosen, staging / PLOT_FILE)


@dataclass(kw_only=True)
class BenchmarkDeployArguments:
    """`minibert benchmark-deploy`'s options; `benchmark_deploy` takes the same names as keywords."""

    model_name_or_path: str = field(metadata={"help": "a fine-tuned Mini-BERT sequence classifier's folder"})
    texts_file: str = field(metadata={"help": "request texts, one per line (the first 2,000 are read)"})
    output_dir: str = field(
        metadata={"help": "the ready folder to write: the fastest path's files, serving.json, a card and the plot"}
    )
    labelled_file: str | None = field(
        default=None,
        metadata={
            "help": "a CSV file with text and label columns: each path's accuracy, which must stay within "
            "--max_accuracy_drop of float32's"
        },
    )
    paths: list[str] | None = field(
        default=None,
        metadata={
            "help": f"the paths to measure (default: every one this machine can run): {', '.join(SERVING_PATHS)}"
        },
    )
    objective: str = field(
        default="latency",
        metadata={
            "choices": OBJECTIVES,
            "help": "latency: the lowest median time of one request; throughput: the most "
            "tokens per second on mixed batches",
        },
    )
    threads: int | None = field(
        default=None, metadata={"help": "threads each path runs on (default: torch's, one per core)"}
    )
    rounds: int = field(default=3, metadata={"help": "interleaved rounds of measurement (medians are reported)"})
    seconds: float = field(default=2.0, metadata={"help": "seconds per path, round and kind of measurement"})
    batch_size: int = field(default=32, metadata={"help": "texts per mixed batch"})
    min_agreement: float = field(
        default=0.99, metadata={"help": "the least share of predictions a path must share with float32 to be chosen"}
    )
    max_accuracy_drop: float = field(
        default=0.005,
        metadata={"help": "with --labelled_file: the most accuracy a path may lose against float32 to be chosen"},
    )
    work_dir: str | None = field(
        default=None,
        metadata={"help": "a new folder to keep every path's folder in (default: a temporary one, removed)"},
    )
    overwrite_output_dir: bool = field(default=False, metadata={"help": "replace a non-empty output folder"})


COMMAND_LINE = CommandLine(
    arguments=(BenchmarkDeployArguments,),
    help="measure every serving path on this machine and keep the fastest as a ready folder",
    description="Write every serving path of the classifier in --model_name_or_path (PyTorch fp32, bf16, int8; "
    "onnxruntime fp32, int8; OpenVINO), measure each on --texts_file (one request at a time, and mixed batches), "
    "and write the fastest whose predictions hold to --output_dir, ready for load_serving().",
    report=lambda info, options: f"chose {info['path']}: wrote {options['output_dir']}",
)


__all__ = ["BenchmarkDeployArguments", "benchmark_deploy", "read_texts"]
