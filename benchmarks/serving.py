r"""Every serving path of a classifier measured on this machine (`minibert benchmark-deploy`), as committed results.

The BBC headlines classifier (five topics; benchmarks/bbc_titles.py fine-tunes it from the default pretraining),
its 419 test headlines as the requests, one thread:

    minibert pretrain
    python -m benchmarks.bbc_titles --model_name_or_path minibert-pretrained --output_dir runs/bbc-titles-model
    python -m benchmarks.serving --model_name_or_path runs/bbc-titles-model \
        --labelled_file runs/bbc-titles/test.csv --threads 1 --output benchmarks/results/serving_bbc_titles.json

The requests are the labelled file's texts unless --texts_file names others. Writes --output (default
runs/benchmarks/serving.json) with the run block, the plot beside it (.png), and the chosen path's ready folder in
--output_dir (default: runs/benchmarks/NAME-serving/). The table is `readme_table()` of the results.
"""

from __future__ import annotations

import csv
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parse, parser, take
from benchmarks.report import RUNS, command_line, cpu_kind, default_output, markdown_table, write_results
from modeling_minibert.deployment.serving_benchmark import (
    PLOT_FILE,
    BenchmarkDeployArguments,
    benchmark_deploy,
    markdown,
)


@dataclass(kw_only=True)
class ServingBenchmarkArguments(BenchmarkDeployArguments):
    texts_file: str | None = field(
        default=None, metadata={"help": "request texts, one per line (default: the texts of --labelled_file)"}
    )
    output_dir: str | None = field(
        default=None,
        metadata={
            "help": "the chosen path's ready folder (default: runs/benchmarks/NAME-serving/, NAME the results file's)"
        },
    )
    output: str = field(default=str(default_output("serving")), metadata={"help": "the results file (JSON)"})


def readme_table(results: dict) -> str:
    serving = results["serving"]
    return markdown(serving["table"], serving["path"])


# bench_deploy's names of the eager path and of a path that is not Mini-BERT's (the one users would otherwise run)
DEPLOY_EAGER, DEPLOY_OTHERS = "Mini-BERT fp32 (eager)", ("transformers BERT (sdpa)",)


def which_path_table(*results: dict) -> str:
    """One row per CPU, from `serving` results and from benchmarks/bench_deploy.py's (one thread): eager fp32's
    batch-1 median, the fastest path at batch 1 and on mixed batches, each with its ratio to eager fp32. A serving
    run counts only the paths whose predictions hold (agreement with fp32 >= 0.99, the picker's default)."""
    rows = []
    for result in results:
        if "serving" in result:
            serving = result["serving"]
            table = {name: row for name, row in serving["table"].items() if row["agreement"] >= 0.99}
            eager, requests = "pytorch-fp32", "BBC headlines (serving)"
            latency = {name: row["p50_ms"] for name, row in table.items()}
            throughput = {name: row["tokens_per_second"] for name, row in table.items()}
        else:
            speed = [row for row in result["speed"] if row["threads"] == 1 and row["path"] not in DEPLOY_OTHERS]
            eager, requests = DEPLOY_EAGER, "Rotten Tomatoes (bench_deploy)"
            latency = {row["path"]: row["latency_p50_ms"] for row in speed}
            throughput = {row["path"]: row["mixed_tokens_per_second"] for row in speed}
        fastest, busiest = min(latency, key=latency.get), max(throughput, key=throughput.get)
        rows.append(
            [
                cpu_kind(result["run"]["cpu"]),
                requests,
                f"{latency[eager]:.2f}",
                f"{fastest} {latency[fastest]:.2f} ({latency[eager] / latency[fastest]:.1f}×)",
                f"{busiest} ({throughput[busiest] / throughput[eager]:.2f}×)",
            ]
        )
    header = [
        "CPU",
        "requests",
        "eager fp32 batch 1 p50 (ms)",
        "fastest at batch 1: p50 ms (× eager)",
        "fastest on mixed batches (× eager's tokens/s)",
    ]
    return markdown_table(header, rows, "llrll")


def main(argv: list[str] | None = None) -> dict:
    args = take(
        ServingBenchmarkArguments, parse(parser(ServingBenchmarkArguments, module=__spec__.name, doc=__doc__), argv)
    )
    output = Path(args.output)
    options = {k: v for k, v in vars(args).items() if k != "output"}
    options["output_dir"] = args.output_dir or str(RUNS / f"{output.stem}-serving")
    options["overwrite_output_dir"] = True
    with tempfile.TemporaryDirectory() as work:
        if args.texts_file is None:
            if args.labelled_file is None:
                raise SystemExit("give --texts_file or --labelled_file")
            with open(args.labelled_file, encoding="utf-8", newline="") as file:
                texts = [row["text"] for row in csv.DictReader(file)]
            options["texts_file"] = str(Path(work) / "texts.txt")
            Path(options["texts_file"]).write_text("\n".join(texts) + "\n", encoding="utf-8")
        info = benchmark_deploy(**options)
    info["texts_file"] = args.texts_file or f"the texts of {args.labelled_file}"
    results = {"serving": info}
    written = write_results(output, results, command_line(__spec__.name, argv))
    shutil.copy2(Path(options["output_dir"]) / PLOT_FILE, written.with_suffix(".png"))
    print(f"wrote {written}")
    return results


if __name__ == "__main__":
    main()
