"""Where a single request's time goes: eager Mini-BERT at batch 1, by operator, beside the compiled path.

A default-size sequence classifier (random weights: the time does not depend on them) answers --requests single
requests of --tokens tokens on one thread. torch.profiler splits eager's time by ATen operator (self time per
request). The same requests timed without the profiler give eager's median; what the operators leave of it is the
time outside them (Python, module calls). The AOTInductor package of the same model
(`modeling_minibert.deployment.compile_model`, where a C++ compiler is at hand) is timed beside it, in --rounds
interleaved rounds.

    python -m lab.request_profile

Writes --output (default runs/benchmarks/request_profile.json); the table is `readme_table()` of the results.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from benchmarks.arguments import parser
from benchmarks.report import default_output, markdown_table, write_results


@dataclass
class ProfileArguments:
    tokens: int = field(
        default=24, metadata={"help": "tokens per request (a Rotten Tomatoes snippet's median is about 24)"}
    )
    requests: int = field(default=300, metadata={"help": "requests per round"})
    rounds: int = field(default=5, metadata={"help": "interleaved timing rounds (median and range)"})
    output: str = field(default=str(default_output("request_profile")), metadata={"help": "the results file (JSON)"})


def by_operator(run, requests: int) -> list[dict]:
    """Each ATen operator's self CPU time per request under torch.profiler, largest first."""
    from torch.profiler import profile

    with profile() as prof:
        for _ in range(requests):
            run()
    rows = [
        {"operator": e.key, "calls": e.count / requests, "ms": e.self_cpu_time_total / 1e3 / requests}
        for e in prof.key_averages()
        if e.self_cpu_time_total > 0
    ]
    return sorted(rows, key=lambda r: -r["ms"])


def main(argv: list[str] | None = None) -> dict:
    from modeling_minibert import MiniBertConfig, MiniBertForSequenceClassification
    from modeling_minibert.deployment.compiled import compile_model, compiler_missing, load_compiled

    (args,) = parser(ProfileArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = MiniBertForSequenceClassification(MiniBertConfig(num_labels=2)).eval()
    ids = torch.randint(5, model.config.vocab_size, (1, args.tokens))
    inputs = (ids, torch.ones_like(ids), torch.zeros_like(ids))

    def eager():
        with torch.inference_mode():
            return model(input_ids=inputs[0], attention_mask=inputs[1], token_type_ids=inputs[2]).logits

    runs = {"eager fp32": eager}
    with tempfile.TemporaryDirectory() as work:
        if compiler_missing() is None:
            model.save_pretrained(Path(work) / "model")
            runner = load_compiled(compile_model(Path(work) / "model", Path(work) / "compiled"))

            def compiled():
                with torch.inference_mode():
                    return runner(*inputs)[0]

            runs["compiled fp32 (AOTInductor)"] = compiled
        for run in runs.values():
            for _ in range(30):  # warm-up
                run()
        operators = by_operator(eager, args.requests)
        per_round = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                start = time.perf_counter()
                for _ in range(args.requests):
                    run()
                per_round[name].append((time.perf_counter() - start) / args.requests * 1e3)
    latency = {
        name: {"median_ms": statistics.median(v), "range_ms": [min(v), max(v)]} for name, v in per_round.items()
    }
    results = {
        "tokens": args.tokens,
        "requests": args.requests,
        "rounds": args.rounds,
        "latency": latency,
        "operators": operators,
    }
    write_results(args.output, results)
    print(readme_table(results))
    print(f"wrote {args.output}")
    return results


def readme_table(results: dict, top: int = 8) -> str:
    """Eager's operators by self time per request (the top ones, the rest summed), the time outside any operator
    (eager's median without the profiler less the operators' sum: Python, module calls), then each path's median.
    Shares are of eager's median."""
    eager = results["latency"]["eager fp32"]["median_ms"]
    operators = results["operators"]
    rest = operators[top:]

    def row(label: str, calls: str, ms: float) -> list[str]:
        return [label, calls, f"{ms:.3f}", f"{ms / eager:.0%}"]

    rows = [row(f"`{r['operator']}`", f"{r['calls']:g}", r["ms"]) for r in operators[:top]]
    rows.append(row("the other operators", f"{sum(r['calls'] for r in rest):g}", sum(r["ms"] for r in rest)))
    rows.append(row("outside any operator (Python, module calls)", "", eager - sum(r["ms"] for r in operators)))
    for name, path in results["latency"].items():
        low, high = path["range_ms"]
        rows.append(
            [
                f"**{name}, whole request**",
                "",
                f"**{path['median_ms']:.3f}** ({low:.3f}–{high:.3f})",
                f"{path['median_ms'] / eager:.0%}",
            ]
        )
    return markdown_table(
        ["where eager's time goes (self time)", "calls per request", "ms per request", "share of eager's"],
        rows,
        "lrrr",
    )


if __name__ == "__main__":
    main()
