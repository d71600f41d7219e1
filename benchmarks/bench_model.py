"""Mini-BERT against transformers' BERT: same config, same weights, same batches.

Reports inference (`BertModel` vs `MiniBertModel`) and training-step (`BertForPreTraining` vs
`MiniBertForPreTraining`: forward, backward, AdamW step) throughput in real (non-pad) tokens per second, on
mixed-length batches (lengths uniform in 8..T) and full-length batches (training: fused AdamW, denormals
flushed, for both), at the Mini-BERT config (T=64, batch 64)
and at BERT-base size (T=128, batch 32); the peak memory a step adds; the ratio to transformers; and the share
of this machine's measured matmul FLOP/s that the useful work reaches. On CUDA (when present) it runs in bf16.

Each measurement runs in its own process so that peak memory is that run's alone, and the implementations are
measured in interleaved rounds: the table gives medians across rounds and the range of the per-round ratios
(a shared 2-core machine drifts by 20% or more between minutes).

    python -m benchmarks.bench_model                 # everything: a table, and runs/benchmarks/model.json
    python -m benchmarks.bench_model --sizes mini    # the Mini-BERT config only
    python -m benchmarks.bench_model --compile       # also torch.compile'd transformers and Mini-BERT

The Speed table is `readme_table()` of the committed benchmarks/results/model.json (`--output` writes there).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from benchmarks.arguments import parser
from benchmarks.report import ROOT, command_line, default_output, markdown_table, write_results

SIZES = {
    "mini": dict(
        config=dict(
            vocab_size=8192,
            hidden_size=192,
            num_hidden_layers=3,
            num_attention_heads=4,
            intermediate_size=768,
            max_position_embeddings=64,
        ),
        seq_len=64,
        batch_size=64,
    ),
    "base": dict(
        config=dict(
            vocab_size=30522,
            hidden_size=768,
            num_hidden_layers=12,
            num_attention_heads=12,
            intermediate_size=3072,
            max_position_embeddings=512,
        ),
        seq_len=128,
        batch_size=32,
    ),
}
MLM_PROBABILITY = 0.15


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def reset_peak_rss() -> None:
    """Start the kernel's peak-RSS record (VmHWM) afresh, so that building the models (Mini-BERT is built next to
    a BERT whose weights it copies) does not count as the steps' peak. Linux >= 4.0."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        kilobytes = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    return kilobytes * 1024


def make_batch(batch_size: int, seq_len: int, vocab_size: int, mixed: bool, seed: int = 0) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    if mixed:
        lengths = torch.randint(8, seq_len + 1, (batch_size,), generator=g)
    else:
        lengths = torch.full((batch_size,), seq_len)
    mask = (torch.arange(seq_len)[None] < lengths[:, None]).long()
    ids = torch.randint(5, vocab_size, (batch_size, seq_len), generator=g) * mask
    types = (torch.arange(seq_len)[None] >= (lengths // 2)[:, None]).long() * mask
    picked = (torch.rand(ids.shape, generator=g) < MLM_PROBABILITY) & mask.bool()
    labels = torch.where(picked, ids, -100)
    nsp = torch.randint(0, 2, (batch_size,), generator=g)
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=types, labels=labels, next_sentence_label=nsp)


def useful_flops(config: dict, batch: dict, training: bool) -> float:
    """FLOPs the task needs: the encoder on real tokens (attention within each sequence), and in training the
    MLM head on labelled tokens; x3 for forward + backward. Counted the same for both implementations."""
    h, i, n_layers, v = (
        config["hidden_size"],
        config["intermediate_size"],
        config["num_hidden_layers"],
        config["vocab_size"],
    )
    lengths = batch["attention_mask"].sum(1).double()
    tokens = float(lengths.sum())
    dense = 2 * tokens * n_layers * (4 * h * h + 2 * h * i)
    attention = 2 * 2 * n_layers * h * float((lengths**2).sum())
    flops = dense + attention
    if training:
        masked = float((batch["labels"] != -100).sum())
        flops = 3 * (flops + 2 * masked * (h * h + h * v))
    return flops


def matmul_flops_per_second(device: str) -> float:
    import torch

    n = 8192 if device == "cuda" else 1024  # on a GPU, a product large enough to reach the card's peak
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(5):
        sync(device)
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        sync(device)
        best = min(best, (time.perf_counter() - start) / 10)
    return 2 * n**3 / best


def step_times(step, repeats: int, device: str) -> list[float]:
    """Seconds of each of `repeats` calls of `step`, the device synchronised around each (CUDA runs ahead)."""
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        step()
        sync(device)
        times.append(time.perf_counter() - start)
    return times


def sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def measure(impl: str, size: str, mode: str, mixed: bool, device: str, steps: int, compile_model: bool) -> dict:
    """One measurement, in this process: tokens/s, peak memory added by the steps, useful FLOP/s."""
    import torch
    import transformers

    import modeling_minibert

    # Squared tiny gradients in AdamW's second moment become denormal floats, which x86 CPUs process 10-100x
    # slower; flushing them is standard for CPU training and applies to both implementations alike.
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    spec = SIZES[size]
    head = "Model" if mode == "inference" else "ForPreTraining"
    bert = getattr(transformers, f"Bert{head}")(transformers.BertConfig(**spec["config"], attn_implementation="sdpa"))
    if impl == "transformers":
        model = bert
    else:
        model = getattr(modeling_minibert, f"MiniBert{head}")(modeling_minibert.MiniBertConfig(**spec["config"]))
        model.load_state_dict({k: v for k, v in bert.state_dict().items() if k != "cls.predictions.decoder.bias"})
        del bert
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model.to(device=device, dtype=dtype)
    if compile_model:
        model = torch.compile(model)
    batch = make_batch(spec["batch_size"], spec["seq_len"], spec["config"]["vocab_size"], mixed)
    batch = {k: v.to(device) for k, v in batch.items()}
    real_tokens = int(batch["attention_mask"].sum())

    if mode == "inference":
        model.eval()
        inputs = {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}

        def step():
            with torch.inference_mode():
                model(**inputs)
    else:
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)  # one kernel, CPU and CUDA

        def step():
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        gc.collect()
        base = rss_bytes()
        reset_peak_rss()
    warmup = 3 if compile_model else 2 if size == "mini" else 1
    for _ in range(warmup):
        step()
    times = step_times(step, steps, device)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() - base
    else:
        peak = peak_rss_bytes() - base
    seconds = sorted(times)[len(times) // 2]  # the median step: robust to a stray slow one
    return dict(
        tokens_per_second=real_tokens / seconds,
        step_seconds=seconds,
        peak_memory_mb=max(peak, 0) / 2**20,
        useful_flops_per_second=useful_flops(spec["config"], batch, mode == "training") / seconds,
    )


def run_in_subprocess(**kwargs) -> dict:
    args = [sys.executable, "-m", __spec__.name, "--one", json.dumps(kwargs)]
    result = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"measurement {kwargs} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


@dataclass
class ModelSpeedArguments:
    sizes: list[str] = field(default_factory=lambda: list(SIZES), metadata={"choices": list(SIZES)})
    modes: list[str] = field(
        default_factory=lambda: ["inference", "training"], metadata={"choices": ["inference", "training"]}
    )
    steps: int = field(default=7, metadata={"help": "timed steps per measurement (median; halved for base)"})
    rounds: int = field(default=3, metadata={"help": "measurements of each implementation, interleaved"})
    compile: bool = field(default=False, metadata={"help": "also measure torch.compile'd transformers and Mini-BERT"})
    output: str = field(default=str(default_output("model")), metadata={"help": "the results JSON"})
    one: str | None = field(default=None, metadata={"help": argparse.SUPPRESS})  # one measurement, as JSON


def main(argv: list[str] | None = None) -> None:
    (args,) = parser(ModelSpeedArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    if args.one:
        print(json.dumps(measure(**json.loads(args.one))))
        return

    import torch
    from tqdm import tqdm

    device = "cuda" if torch.cuda.is_available() else "cpu"
    peak_matmul = matmul_flops_per_second(device)
    impls = ["transformers", "minibert"] + (["transformers+compile", "minibert+compile"] if args.compile else [])
    cases = [(s, m, mixed) for s in args.sizes for m in args.modes for mixed in (True, False)]
    # Rounds interleave the implementations (alternating which goes first), so that a slow spell of a shared
    # machine lands on both; ratios are taken within a round, then the median across rounds is reported.
    jobs = [
        (case, r, impl)
        for case in cases
        for r in range(args.rounds)
        for impl in (impls if r % 2 == 0 else impls[::-1])
    ]
    measured = {}
    for (size, mode, mixed), r, impl in tqdm(jobs, desc="measuring", unit="run"):
        steps = args.steps if size == "mini" else max(3, args.steps // 2)
        measured[size, mode, mixed, r, impl] = run_in_subprocess(
            impl=impl.split("+")[0],
            size=size,
            mode=mode,
            mixed=mixed,
            device=device,
            steps=steps,
            compile_model=impl.endswith("+compile"),
        )
    rows = summarise(measured, cases, impls, args.rounds, peak_matmul)
    print(
        f"device: {device}, threads: {torch.get_num_threads()}, matmul peak: {peak_matmul / 1e9:.1f} GFLOP/s, "
        f"medians of {args.rounds} interleaved rounds"
    )
    print(text_table(rows))
    output = write_results(
        args.output,
        dict(
            device=device,
            threads=torch.get_num_threads(),
            matmul_flops_per_second=peak_matmul,
            rounds=args.rounds,
            rows=rows,
        ),
        command_line(__spec__.name, argv),
    )
    print(f"wrote {output}")


def summarise(measured: dict, cases: list, impls: list[str], rounds: int, peak_matmul: float) -> list[dict]:
    """Per case and implementation: medians across rounds, and the per-round ratios to transformers."""
    rows = []
    for size, mode, mixed in cases:
        for impl in impls:
            runs = [measured[size, mode, mixed, r, impl] for r in range(rounds)]
            refs = [measured[size, mode, mixed, r, "transformers"] for r in range(rounds)]
            speedups = [run["tokens_per_second"] / ref["tokens_per_second"] for run, ref in zip(runs, refs)]
            median = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            # Compiled Mini-BERT is also compared with compiled transformers, like with like.
            like = "transformers+compile" if impl == "minibert+compile" else "transformers"
            likes = [measured[size, mode, mixed, r, like] for r in range(rounds)]
            like_speedups = [run["tokens_per_second"] / ref["tokens_per_second"] for run, ref in zip(runs, likes)]
            rows.append(
                dict(
                    size=size,
                    mode=mode,
                    batch="mixed" if mixed else "full",
                    impl=impl,
                    **median,
                    speedup=statistics.median(speedups),
                    speedup_range=[min(speedups), max(speedups)],
                    speedup_like_for_like=statistics.median(like_speedups),
                    speedup_like_for_like_range=[min(like_speedups), max(like_speedups)],
                    memory_ratio=median["peak_memory_mb"]
                    / max(statistics.median(r["peak_memory_mb"] for r in refs), 1e-9),
                    matmul_share=median["useful_flops_per_second"] / peak_matmul,
                    rounds=runs,
                )
            )
    return rows


def text_table(rows: list[dict]) -> str:
    lines = [
        f"{'size':5} {'mode':9} {'batch':5} {'impl':17} {'tokens/s':>10} {'x HF':>6} {'range':>11} "
        f"{'peak MB':>8} {'mem x':>6} {'matmul %':>8}"
    ]
    for r in rows:
        low, high = r["speedup_range"]
        lines.append(
            f"{r['size']:5} {r['mode']:9} {r['batch']:5} {r['impl']:17} {r['tokens_per_second']:10.0f} "
            f"{r['speedup']:6.2f} {low:5.2f}-{high:<5.2f} {r['peak_memory_mb']:8.0f} {r['memory_ratio']:6.2f} "
            f"{100 * r['matmul_share']:7.1f}%"
        )
    return "\n".join(lines)


def readme_table(results: dict) -> str:
    """The README's Speed table: per size, mode and batch, transformers and Mini-BERT tokens/s with the ratio and
    its range across rounds; with --compile, the ratio of compiled Mini-BERT to compiled transformers."""
    rows = {(r["size"], r["mode"], r["batch"], r["impl"]): r for r in results["rows"]}
    compiled = any(impl == "minibert+compile" for *_, impl in rows)
    header = [
        "size",
        "mode",
        "batch",
        "transformers tokens/s",
        "Mini-BERT tokens/s",
        "× (range)",
        "peak memory ×",
        "matmul FLOP/s share",
    ]
    if compiled:
        header += ["compiled × compiled transformers (range)"]
    lines = []
    for (size, mode, batch, impl), row in rows.items():
        if impl != "minibert":
            continue
        ref = rows[size, mode, batch, "transformers"]
        low, high = row["speedup_range"]
        cells = [
            size,
            mode,
            batch,
            f"{ref['tokens_per_second']:,.0f}",
            f"{row['tokens_per_second']:,.0f}",
            f"**{row['speedup']:.2f}** ({low:.2f}–{high:.2f})",
            f"{row['memory_ratio']:.2f}",
            f"{100 * row['matmul_share']:.1f}%",
        ]
        if compiled:
            c = rows[size, mode, batch, "minibert+compile"]
            low, high = c["speedup_like_for_like_range"]
            cells.append(f"{c['speedup_like_for_like']:.2f} ({low:.2f}–{high:.2f})")
        lines.append(cells)
    return markdown_table(header, lines, "lllrrrrr" + ("r" if compiled else ""))


if __name__ == "__main__":
    main()
