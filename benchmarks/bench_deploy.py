r"""CPU deployment paths for a fine-tuned Mini-BERT classifier, side by side: speed, memory and accuracy.

Paths (PATHS): transformers' BERT with the same weights (sdpa), eager Mini-BERT fp32, Mini-BERT int8 (PyTorch,
`modeling_minibert.deployment.quantization`, its layers packed for the engine it picks on this CPU, and for fbgemm, torch's
default's choice, to show what the pick buys), eager Mini-BERT in bfloat16 (`dtype=torch.bfloat16`), onnxruntime
on the plain export (`minibert export-onnx`), on the optimized export (`--optimize`, padded and in length
buckets), on the int8 export (`--quantize int8`, in buckets), and on the fully fused graph of the BERT-format
copy (what optimum's exporter gives a BERT checkpoint; in buckets). `--paths` measures a subset.

Speed: real (non-pad) tokens/s at batch 1 (latency p50/p95, one snippet at a time) and on mixed-length 64x64
batches (lengths uniform in 8..64, as benchmarks/bench_model.py), on 1 and 2 threads. Each measurement runs in its
own process (so peak memory is its own: the resident-set peak while it runs, over the process's size before the
model was loaded), in interleaved rounds; the table gives medians across rounds, and each ratio's range across
rounds. Accuracy: a labelled test set through every path (default: the Rotten Tomatoes test split, by movie,
examples/rotten_tomatoes.py; --test_file: a CSV/JSON file with text and label columns), with the agreement of
its predictions with eager fp32; also the int8 variants the quantization choices rule out.

The model: any Mini-BERT sequence classifier whose labels are the test set's; the model and the data are checked
before any export. A Rotten Tomatoes classifier: pretrain, then fine-tune

    minibert pretrain --max_time 11 --output_dir runs/deploy/pretrained
    python -m benchmarks.finetune_rotten_tomatoes --model_name_or_path runs/deploy/pretrained \
        --output runs/deploy/rotten_tomatoes.json --output_dir runs/deploy/classifier
    python -m benchmarks.bench_deploy --model_name_or_path runs/deploy/classifier

Writes --output (default runs/benchmarks/deploy.json) and a plot beside it (.png); the exported and quantized
models go to --work_dir (default: beside --output, NAME-artifacts/), made once per model and reused. The
deployment table is `readme_table()` of the results.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.bench_model import peak_rss_bytes, reset_peak_rss, rss_bytes
from benchmarks.report import ROOT, command_line, default_output, markdown_table, write_results

REFERENCE = "onnxruntime fp32 (plain export)"
EAGER = "Mini-BERT fp32 (eager)"
# What optimum gives a BERT checkpoint: the BERT-format copy exported by torch's TorchScript exporter, whose graph
# onnxruntime's optimizer fuses completely (Attention, EmbedLayerNormalization), unlike Mini-BERT's own export.
FUSED = "onnxruntime fp32 (BERT copy, fully fused, length buckets)"
# name -> how it runs; one entry per path, in the table's order.
PATHS = {
    "transformers BERT (sdpa)": "bert",
    EAGER: "minibert",
    "Mini-BERT int8 (PyTorch)": "minibert-int8",
    "Mini-BERT int8 (PyTorch, fbgemm kernels)": "minibert-int8-fbgemm",
    "Mini-BERT bf16 (PyTorch)": "minibert-bf16",
    REFERENCE: "onnx-plain",
    "onnxruntime fp32 (optimized, padded)": "onnx-optimized-padded",
    "onnxruntime fp32 (optimized, length buckets)": "onnx-optimized",
    "onnxruntime int8 (optimized, length buckets)": "onnx-int8",
    FUSED: "onnx-bert-fused",
}
# Accuracy only: the quantization choices not taken, to show what they cost.
VARIANTS = {
    "Mini-BERT int8, per-tensor weights (PyTorch)": "minibert-int8-per-tensor",
    "onnxruntime int8-per-tensor": "onnx-int8-per-tensor",
    "onnxruntime int8-full-range": "onnx-int8-full-range",
}
ONNX_FILES = {
    "plain": ({}, "model.onnx"),
    "optimized": ({"optimize": True}, "model.optimized.onnx"),
    **{mode: ({"quantize": mode}, f"model.{mode}.onnx") for mode in ("int8", "int8-per-tensor", "int8-full-range")},
}
SEQ_LEN, BATCH_SIZE, MIN_LEN = 64, 64, 8


# -- the artifacts every path loads -------------------------------------------------------------------------------
def prepare(model: Path, work: Path) -> None:
    """The BERT copy, the PyTorch int8 folder and the ONNX files, made once (kept between runs)."""
    from modeling_minibert.deployment import export_onnx, quantize
    from modeling_minibert.sharing import convert_minibert_to_bert

    if not (work / "bert").exists():
        convert_minibert_to_bert(model, work / "bert")
    if not (work / "int8").exists():
        quantize(model, work / "int8")
    for mode, (kwargs, name) in ONNX_FILES.items():
        if not (work / name).exists():
            # Full-range int8 weights saturate on CPUs without VNNI and fail the export's check: written unchecked,
            # to measure what they cost.
            export_onnx(model, work / name, verify=mode != "int8-full-range", **kwargs)
    if not (work / "model.bert-fused.onnx").exists():
        export_bert_fused(work / "bert", work / "model.bert-fused.onnx")


def export_bert_fused(bert: Path, path: Path) -> None:
    """`bert` (transformers' BertForSequenceClassification, eager attention) through the TorchScript exporter and
    onnxruntime's BERT optimizer; fails unless every attention block fused into one Attention node."""
    import onnx
    import torch
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import BertForSequenceClassification

    from modeling_minibert.deployment.onnx_graph import INPUT_NAMES, _TupleOutputs, example_inputs

    model = BertForSequenceClassification.from_pretrained(bert, attn_implementation="eager").eval()
    raw = path.with_suffix(".raw.onnx")
    axes = {name: {0: "batch", 1: "sequence"} for name in INPUT_NAMES}
    torch.onnx.export(
        _TupleOutputs(model).eval(),
        example_inputs(model.config, 2, 16, None),
        raw,
        dynamo=False,
        input_names=list(INPUT_NAMES),
        output_names=["logits"],
        dynamic_axes=axes,
        opset_version=17,
    )
    config = model.config
    optimize_model(
        str(raw), model_type="bert", num_heads=config.num_attention_heads, hidden_size=config.hidden_size
    ).save_model_to_file(str(path))
    raw.unlink()
    fused = sum(node.op_type == "Attention" for node in onnx.load(str(path)).graph.node)
    if fused != config.num_hidden_layers:
        raise RuntimeError(f"{path}: {fused} Attention nodes for {config.num_hidden_layers} layers")


def load_path(kind: str, model: Path, work: Path, threads: int):
    """A function (input_ids, attention_mask, token_type_ids) as int64 numpy (B, T) -> logits numpy (B, C)."""
    import torch

    torch.set_num_threads(threads)  # this process's own setting: each measurement runs in a fresh process
    if kind.startswith("onnx"):
        from modeling_minibert.deployment import LengthBucketedSession
        from modeling_minibert.deployment.onnx_session import make_session

        name = (
            "model.bert-fused.onnx"
            if kind == "onnx-bert-fused"
            else ONNX_FILES["optimized" if kind == "onnx-optimized-padded" else kind.removeprefix("onnx-")][1]
        )
        if kind in ("onnx-plain", "onnx-optimized-padded"):
            session = make_session(work / name, threads)
            return lambda ids, mask, types: session.run(
                None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            )[0]
        bucketed = LengthBucketedSession(work / name, threads)
        return lambda ids, mask, types: bucketed.run(ids, mask, types)[0]
    net = torch_model(kind, model, work)

    def run(ids, mask, types):
        with torch.inference_mode():
            return (
                net(
                    input_ids=torch.from_numpy(ids),
                    attention_mask=torch.from_numpy(mask),
                    token_type_ids=torch.from_numpy(types),
                )
                .logits.float()
                .numpy()
            )

    return run


def torch_model(kind: str, model: Path, work: Path):
    import torch
    from transformers import BertForSequenceClassification

    from modeling_minibert import MiniBertForSequenceClassification
    from modeling_minibert.deployment import load_quantized
    from modeling_minibert.deployment.quantization import quantize_dynamic_int8

    if kind == "bert":
        return BertForSequenceClassification.from_pretrained(work / "bert", attn_implementation="sdpa").eval()
    if kind == "minibert-int8":
        return load_quantized(work / "int8")
    if kind == "minibert-int8-fbgemm":
        return load_quantized(work / "int8", engine="fbgemm")
    if kind == "minibert-bf16":
        return MiniBertForSequenceClassification.from_pretrained(model, dtype=torch.bfloat16).eval()
    fp32 = MiniBertForSequenceClassification.from_pretrained(model).eval()
    if kind == "minibert-int8-per-tensor":
        return quantize_dynamic_int8(fp32, per_channel=False)
    return fp32


# -- speed: one process per (path, threads, round) ----------------------------------------------------------------
def mixed_batches(count: int, batch_size: int, vocab_size: int, seed: int = 0) -> list[tuple]:
    """Random ids, lengths uniform in MIN_LEN..SEQ_LEN, two segments: (ids, mask, types) int64 numpy each."""
    import numpy as np

    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        lengths = rng.integers(MIN_LEN, SEQ_LEN + 1, batch_size)
        positions = np.arange(SEQ_LEN)[None]
        mask = (positions < lengths[:, None]).astype(np.int64)
        ids = rng.integers(5, vocab_size, (batch_size, SEQ_LEN)) * mask
        types = (positions >= (lengths // 2)[:, None]).astype(np.int64) * mask
        batches.append((ids, mask, types))
    return batches


def timed(run, batches: list[tuple], min_seconds: float) -> tuple[float, list[float]]:
    """Run the batches in turn (again from the start if needed) for at least `min_seconds`: (real tokens/s,
    seconds per call)."""
    for batch in batches[:2]:
        run(*batch)  # warm-up: first calls allocate and pick kernels
    seconds, tokens, start, k = [], 0, time.perf_counter(), 0
    while time.perf_counter() - start < min_seconds or k < len(batches):
        ids, mask, types = batches[k % len(batches)]
        tic = time.perf_counter()
        run(ids, mask, types)
        seconds.append(time.perf_counter() - tic)
        tokens += int(mask.sum())
        k += 1
    return tokens / sum(seconds), seconds


def measure(kind: str, model: Path, work: Path, threads: int, seconds: float) -> dict:
    """Batch-1 latency and tokens/s, mixed-batch tokens/s, and the memory the path adds."""
    import numpy as np

    from modeling_minibert import MiniBertConfig

    vocab_size = MiniBertConfig.from_pretrained(model).vocab_size
    baseline = rss_bytes()
    reset_peak_rss()
    run = load_path(kind, model, work, threads)
    snippets = [tuple(a[:, : int(b[1].sum())] for a in b) for b in mixed_batches(50, 1, vocab_size, seed=1)]
    single_rate, latencies = timed(run, snippets, seconds)
    mixed_rate, _ = timed(run, mixed_batches(4, BATCH_SIZE, vocab_size), seconds)
    return {
        "batch1_tokens_per_second": single_rate,
        "mixed_tokens_per_second": mixed_rate,
        "latency_p50_ms": 1000 * float(np.percentile(latencies, 50)),
        "latency_p95_ms": 1000 * float(np.percentile(latencies, 95)),
        "peak_memory_mb": (peak_rss_bytes() - baseline) / 2**20,
    }


def measure_in_subprocess(kind: str, model: Path, work: Path, threads: int, seconds: float) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    argv = [
        sys.executable,
        "-m",
        __spec__.name,
        "--model_name_or_path",
        str(model),
        "--work_dir",
        str(work),
        "--measure",
        kind,
        "--threads",
        str(threads),
        "--seconds",
        str(seconds),
    ]
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def speed(model: Path, work: Path, rounds: int, thread_counts: list[int], seconds: float, paths: dict) -> list[dict]:
    """Interleaved rounds: every path once per round and thread count, in a fresh process each."""
    from tqdm import tqdm

    runs = [(r, t, name) for r in range(rounds) for t in thread_counts for name in paths]
    measured = []
    for r, t, name in tqdm(runs, desc="speed"):
        measured.append(
            {"round": r, "threads": t, "path": name, **measure_in_subprocess(paths[name], model, work, t, seconds)}
        )
    return measured


def summarise(measured: list[dict], thread_counts: list[int], paths: dict) -> list[dict]:
    """Per path and thread count: medians across rounds, and ratios per round to the plain ONNX export and to
    eager Mini-BERT (median and range)."""
    rows = []
    for threads in thread_counts:
        by = {(m["path"], m["round"]): m for m in measured if m["threads"] == threads}
        rounds = sorted({r for _, r in by})
        for name in paths:
            mine = [by[name, r] for r in rounds]
            row = {"path": name, "threads": threads}
            for key in mine[0]:
                if key not in ("round", "threads", "path"):
                    row[key] = statistics.median(m[key] for m in mine)
            for label, ref in (("vs_onnx_plain", REFERENCE), ("vs_eager", EAGER)):
                ratios = [
                    by[name, r]["mixed_tokens_per_second"] / by[ref, r]["mixed_tokens_per_second"] for r in rounds
                ]
                row[label], row[label + "_range"] = statistics.median(ratios), [min(ratios), max(ratios)]
            rows.append(row)
    return rows


# -- accuracy: a labelled test set through every path -------------------------------------------------------------
def accuracy(model: Path, work: Path, paths: dict, test) -> dict:
    import numpy as np
    from transformers import AutoTokenizer

    from modeling_minibert import MiniBertConfig

    config = MiniBertConfig.from_pretrained(model)
    tokenizer = AutoTokenizer.from_pretrained(model)
    label_ids = np.array([config.label2id[label] for label in test["label"]])
    batches = []
    for start in range(0, len(test), BATCH_SIZE):
        enc = tokenizer(
            test["text"][start : start + BATCH_SIZE],
            truncation=True,
            padding=True,
            max_length=config.max_position_embeddings,
            return_tensors="np",
        )
        batches.append(tuple(enc[k].astype(np.int64) for k in ("input_ids", "attention_mask", "token_type_ids")))
    predictions = {}
    for name, kind in {**paths, **(VARIANTS if paths == PATHS else {})}.items():
        run = load_path(kind, model, work, threads=2)
        predictions[name] = np.concatenate([run(*batch).argmax(-1) for batch in batches])
    reference = predictions[EAGER]
    return {
        name: {"accuracy": float((p == label_ids).mean()), "agreement_with_fp32": float((p == reference).mean())}
        for name, p in predictions.items()
    } | {"test_size": len(test)}


# -- report -------------------------------------------------------------------------------------------------------
def measured_paths(results: dict) -> list[str]:
    """The paths a results file measured, in the table's order."""
    return list(dict.fromkeys(row["path"] for row in results["speed"]))


def accuracy_label(results: dict) -> str:
    """What the accuracy was measured on, for the table: RT (Rotten Tomatoes, the default) or the file's name."""
    data = results.get("test_data", "Rotten Tomatoes test split")
    return "RT" if data == "Rotten Tomatoes test split" else Path(data).name


def readme_table(results: dict) -> str:
    """The README's deployment table: per path, mixed-batch tokens/s on 1 and 2 threads with the ratios to the plain
    ONNX export and to eager fp32 Mini-BERT (range across rounds), batch-1 latency and memory on 1 thread, and
    accuracy on the test set (RT: Rotten Tomatoes)."""
    rows = {(r["path"], r["threads"]): r for r in results["speed"]}
    thread_counts = sorted({r["threads"] for r in results["speed"]})
    header = ["path"]
    for threads in thread_counts:
        header += [
            f"mixed tok/s, {threads} thread{'s' * (threads > 1)}",
            "× plain ONNX (range)",
            "× eager fp32 (range)",
        ]
    header += ["batch 1 p50 / p95 ms", "memory MB", f"{accuracy_label(results)} test accuracy"]
    lines = []
    for name in measured_paths(results):
        cells = [name]
        for threads in thread_counts:
            row = rows[name, threads]
            cells.append(f"{row['mixed_tokens_per_second']:,.0f}")
            for base in ("onnx_plain", "eager"):
                low, high = row[f"vs_{base}_range"]
                cells.append(f"**{row[f'vs_{base}']:.2f}** ({low:.2f}–{high:.2f})")
        one = rows[name, thread_counts[0]]
        cells += [
            f"{one['latency_p50_ms']:.1f} / {one['latency_p95_ms']:.1f}",
            f"{one['peak_memory_mb']:.0f}",
            f"{100 * results['accuracy'][name]['accuracy']:.1f}%",
        ]
        lines.append(cells)
    return markdown_table(header, lines, "l" + "r" * (len(header) - 1))


def plot(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9, 4.2))
    ax = figure.subplots()
    names = measured_paths(results)
    width = 0.4
    for k, threads in enumerate(sorted({r["threads"] for r in results["speed"]})):
        rows = {r["path"]: r for r in results["speed"] if r["threads"] == threads}
        bars = ax.barh(
            [i + (k - 0.5) * width for i in range(len(names))],
            [rows[n]["vs_onnx_plain"] for n in names],
            width,
            label=f"{threads} thread(s)",
        )
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.axvline(1.0, color="grey", linestyle="--", linewidth=1)
    labels = [f"{n}\n{accuracy_label(results)} acc {100 * results['accuracy'][n]['accuracy']:.1f}%" for n in names]
    ax.set_yticks(range(len(names)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("mixed 64x64 batches: real tokens/s over onnxruntime on the plain export (median of rounds)")
    ax.legend(fontsize=8)
    figure.savefig(path, dpi=120, bbox_inches="tight")


@dataclass
class DeployArguments:
    model_name_or_path: str = field(metadata={"help": "a Mini-BERT sequence classifier folder (model and tokenizer)"})
    test_file: str | None = field(
        default=None,
        metadata={
            "help": "labelled test data, CSV/TSV/JSON/JSONL with text and label columns (default: the Rotten Tomatoes "
            "test split)"
        },
    )
    output: str = field(
        default=str(default_output("deploy")), metadata={"help": "the results JSON; its plot goes beside it"}
    )
    work_dir: str | None = field(
        default=None,
        metadata={"help": "where the exported and quantized models go (default: beside --output, NAME-artifacts/)"},
    )
    rounds: int = 3
    threads: list[int] = field(default_factory=lambda: [1, 2])
    seconds: float = field(default=2.0, metadata={"help": "least time per measurement"})
    paths: list[str] = field(
        default_factory=lambda: list(PATHS.values()),
        metadata={
            "help": "measure only these paths (the plain export and eager Mini-BERT, the ratios' bases, always run); the "
            "full table needs all",
            "choices": list(PATHS.values()),
        },
    )
    measure: str | None = field(default=None, metadata={"help": argparse.SUPPRESS})  # one measurement, as JSON


def test_data(args: DeployArguments, built) -> tuple[str, object]:
    """The name and the rows (text, label) of the labelled test set; a one-line error for a file that cannot be."""
    if args.test_file is None:
        from examples.rotten_tomatoes import load_rotten_tomatoes

        return "Rotten Tomatoes test split", load_rotten_tomatoes()["test"]
    from datasets import load_dataset

    path = Path(args.test_file)
    kind = {".csv": "csv", ".tsv": "csv", ".json": "json", ".jsonl": "json"}.get(path.suffix.lower())
    if kind is None or not path.is_file():
        built.error(f"--test_file {path}: not a CSV/TSV/JSON/JSONL file")
    test = load_dataset(
        kind, data_files=str(path), split="train", **({"delimiter": "\t"} if path.suffix.lower() == ".tsv" else {})
    )
    if not {"text", "label"} <= set(test.column_names):
        built.error(f"--test_file {path} has columns {test.column_names}; it needs text and label")
    return str(path), test


def check_model(model: Path, built) -> dict:
    """Before any export: `model` is a Mini-BERT sequence classifier folder (its config returned); otherwise one
    line (exit 2) saying what it is."""
    config_file = model / "config.json"
    if not config_file.is_file():
        built.error(f"--model_name_or_path {model}: no config.json there (a fine-tuned classifier folder)")
    config = json.loads(config_file.read_text())
    heads = config.get("architectures") or []
    if config.get("model_type") != "minibert" or not any(h.endswith("ForSequenceClassification") for h in heads):
        built.error(
            f"--model_name_or_path {model} is a {config.get('model_type')} {', '.join(heads) or 'model'}, "
            "not a Mini-BERT sequence classifier (`minibert finetune --task sequence-classification`)"
        )
    return config


def check_labels(model: Path, config: dict, test, built) -> None:
    """The model's labels cover the test set's; otherwise one line (exit 2) naming both."""
    labels = sorted(config.get("label2id") or {})
    unknown = sorted(set(map(str, test["label"])) - set(labels))
    if unknown:
        built.error(
            f"{model}'s labels {labels} lack the test data's {unknown}: give --test_file with data labelled as "
            "the model is"
        )


def check_work_dir(model: Path, work: Path, built) -> None:
    """The artifacts in `work` are made once and reused: refuse, in one line, a folder that holds another model's."""
    stamp = work / "source.json"
    weights = model / "model.safetensors"
    source = {"model": str(model.resolve()), "weights_mtime": weights.stat().st_mtime if weights.is_file() else None}
    if stamp.is_file() and json.loads(stamp.read_text()) != source:
        built.error(
            f"--work_dir {work} holds the exports of another model ({json.loads(stamp.read_text())['model']}); "
            "give another --work_dir or remove it"
        )
    work.mkdir(parents=True, exist_ok=True)
    stamp.write_text(json.dumps(source) + "\n")


def main(argv: list[str] | None = None) -> dict | None:
    built = parser(DeployArguments, module=__spec__.name, doc=__doc__)
    (args,) = built.parse_args_into_dataclasses(argv)
    model = Path(args.model_name_or_path)
    output = Path(args.output)
    work = Path(args.work_dir or output.with_name(output.stem + "-artifacts"))
    if args.measure:
        print(json.dumps(measure(args.measure, model, work, args.threads[0], args.seconds)))
        return None
    config = check_model(model, built)
    data_name, test = test_data(args, built)
    check_labels(model, config, test, built)
    check_work_dir(model, work, built)
    paths = {name: kind for name, kind in PATHS.items() if kind in args.paths or name in (REFERENCE, EAGER)}
    prepare(model, work)
    scores = accuracy(model, work, paths, test)
    print("accuracy:", json.dumps(scores), flush=True)  # the slow speed rounds come next
    load = os.getloadavg()
    measured = speed(model, work, args.rounds, args.threads, args.seconds, paths)
    results = {
        "model": str(model),
        "test_data": data_name,
        "load_average_before_after": [load[0], os.getloadavg()[0]],
        "accuracy": scores,
        "speed": summarise(measured, args.threads, paths),
        "measurements": measured,
    }
    output = write_results(output, results, command_line(__spec__.name, argv))
    plot(results, output.with_suffix(".png"))
    print(readme_table(results))
    return results


if __name__ == "__main__":
    main()
