"""Pretraining and inference speed on a GPU: Mini-BERT against transformers' BERT of the same config, side by side
in one process, with model-FLOPs utilisation; and a Mini-BERT training step at the seed guide's batch shape.

    python -m benchmarks.gpu_speed                                           # on the GPU: mini and base sizes
    python -m benchmarks.gpu_speed --device cpu --sizes tiny --steps 2       # a smoke run on the CPU

Sizes: `mini` is the pretraining recipe's Mini-BERT (hidden 192, 3 layers, vocabulary 8,192; 64 tokens), `base`
BERT-base (12 x 768, vocabulary 30,522; 128 tokens), `tiny` a toy for smoke runs. Per size, the training batch
fills the card: from --batch_sizes (per size) down, halving after an out-of-memory error, the largest batch that
both implementations train in. Both start from the same weights (BertForPreTraining's, sdpa attention).

- Pretraining: forward, backward and a fused AdamW step on full-length batches with 15% MLM labels and NSP labels,
  float32 weights under bf16 autocast on the GPU (as `minibert pretrain --mixed_precision bf16` trains; float32 on
  the CPU unless --precision says). Tokens/s, and MFU = 6 x parameters x tokens/s / the card's dense bf16 peak
  (PEAK_BF16_FLOPS, by device name; null where the card is not in the table). The same formula for both
  implementations, so the MFU ratio is the speed ratio; it counts every parameter, the word embeddings included
  (which BERT's MLM decoder multiplies at every position and Mini-BERT only at the masked ones).
- Inference: the bare encoders (MiniBertModel, BertModel) in bf16 on mixed-length batches (lengths uniform in
  8..T, padded to T), real (non-pad) tokens/s.
- The 8 x 64 step: a default-size MiniBertForPreTraining training step on a batch of 8 x 64 tokens, the seed guide's
  shape (goal: 1 ms), eager in float32 and bf16 autocast, and compiled with CUDA graphs (`torch.compile(mode=
  "reduce-overhead")`) on the GPU; the median over --step_repeats steps, each synchronised.

Implementations are measured in interleaved rounds (the order alternating), medians over rounds. Writes --output
(default runs/benchmarks/gpu_speed.json) and a PNG beside it.
"""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.bench_model import step_times, sync
from benchmarks.report import command_line, default_output, markdown_table, write_results

SIZES = {
    "tiny": dict(config=dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             intermediate_size=64, max_position_embeddings=32), seq_len=16, batch_size=4),
    "mini": dict(config=dict(vocab_size=8192, hidden_size=192, num_hidden_layers=3, num_attention_heads=4,
                             intermediate_size=768, max_position_embeddings=64), seq_len=64, batch_size=2048),
    "base": dict(config=dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                             intermediate_size=3072, max_position_embeddings=512), seq_len=128, batch_size=512),
}
# Dense (no sparsity) bf16 tensor-core peaks, FLOP/s, from NVIDIA's datasheets (which quote twice these "with
# sparsity"): H100 SXM 989 TFLOPS, H100 NVL 835, H100 PCIe 756, H200 989, A100 312. Matched in this order against
# torch.cuda.get_device_name() ("NVIDIA H100 80GB HBM3" is the SXM card).
PEAK_BF16_FLOPS = (("H100 PCIe", 756e12), ("H100 NVL", 835e12), ("H100", 989e12), ("H200", 989e12), ("A100", 312e12))
PEAK_SOURCE = "NVIDIA datasheets, dense bf16 tensor-core peak (half the quoted 'with sparsity' figure)"
STEP_SHAPE = (8, 64)  # the seed guide's batch shape
STEP_GOAL_MS = 1.0
MLM_PROBABILITY = 0.15
IMPLS = ("transformers", "minibert")


def device_info(device: str) -> dict:
    import torch

    if device != "cuda":
        from benchmarks.report import cpu_model

        return {"name": f"cpu: {cpu_model()}", "peak_bf16_flops": None, "peak_source": None}
    name = torch.cuda.get_device_name()
    peak = next((flops for key, flops in PEAK_BF16_FLOPS if key in name), None)
    properties = torch.cuda.get_device_properties(0)
    return {"name": name, "capability": ".".join(map(str, torch.cuda.get_device_capability())),
            "memory_gib": round(properties.total_memory / 2**30, 1), "cuda": torch.version.cuda,
            "peak_bf16_flops": peak, "peak_source": PEAK_SOURCE if peak else "the card is not in PEAK_BF16_FLOPS"}


def twin_models(size: str, head: str, device: str):
    """transformers' Bert{head} (sdpa) and MiniBert{head} holding the same weights, on `device`, float32."""
    import torch
    import transformers

    import modeling_minibert

    torch.manual_seed(0)
    config = SIZES[size]["config"]
    bert = getattr(transformers, f"Bert{head}")(transformers.BertConfig(**config, attn_implementation="sdpa"))
    mini = getattr(modeling_minibert, f"MiniBert{head}")(modeling_minibert.MiniBertConfig(**config))
    mini.load_state_dict({k: v for k, v in bert.state_dict().items() if k != "cls.predictions.decoder.bias"})
    return {"transformers": bert.to(device), "minibert": mini.to(device)}


def batch(batch_size: int, seq_len: int, vocab_size: int, mixed: bool, device: str, seed: int = 0) -> dict:
    from benchmarks.bench_model import make_batch

    return {k: v.to(device) for k, v in make_batch(batch_size, seq_len, vocab_size, mixed, seed).items()}


def parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights are one parameter, counted once


def training_step(model, inputs: dict, optimizer, autocast):
    def step():
        with autocast():
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def timed(step, device: str, steps: int) -> float:
    """Seconds per step over `steps` steps run back to back (the device's queue kept full)."""
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return (time.perf_counter() - start) / steps


def is_out_of_memory(err: BaseException) -> bool:
    return "out of memory" in str(err).lower()


def fitting_batch(size: str, device: str, start: int, autocast) -> int:
    """The largest batch, from `start` halving, that both implementations train a step in (GPU memory)."""
    import torch

    batch_size = start
    while True:
        try:
            for model in twin_models(size, "ForPreTraining", device).values():
                inputs = batch(batch_size, SIZES[size]["seq_len"], SIZES[size]["config"]["vocab_size"], False, device)
                training_step(model, inputs, torch.optim.AdamW(model.parameters(), fused=device == "cuda"), autocast)()
                del model, inputs
            return batch_size
        except Exception as err:
            if not is_out_of_memory(err) or batch_size == 1:
                raise
            batch_size //= 2
        finally:
            gc.collect()
            if device == "cuda":
                torch.cuda.empty_cache()


def measure_size(size: str, device: str, precision: str, steps: int, rounds: int, batch_size: int, peak) -> list[dict]:
    import torch

    spec = SIZES[size]
    seq_len, vocab_size = spec["seq_len"], spec["config"]["vocab_size"]
    bf16 = precision == "bf16"
    autocast = (lambda: torch.autocast(device, dtype=torch.bfloat16)) if bf16 else (lambda: torch.autocast(device, enabled=False))
    if device == "cuda":
        batch_size = fitting_batch(size, device, batch_size, autocast)
    rows = []
    # Training: both implementations in memory at once, interleaved rounds.
    models = twin_models(size, "ForPreTraining", device)
    inputs = batch(batch_size, seq_len, vocab_size, False, device)
    tokens = int(inputs["attention_mask"].sum())
    steps_of = {impl: training_step(m.train(), inputs, torch.optim.AdamW(m.parameters(), lr=1e-4, fused=device == "cuda"), autocast)
                for impl, m in models.items()}
    for step in steps_of.values():
        timed(step, device, 2)  # warm-up: kernels, allocator, AdamW state
    seconds = {impl: [] for impl in IMPLS}
    for r in range(rounds):
        for impl in (IMPLS if r % 2 == 0 else IMPLS[::-1]):
            seconds[impl].append(timed(steps_of[impl], device, steps))
    for impl in IMPLS:
        n = parameters(models[impl])
        rate = tokens / statistics.median(seconds[impl])
        rows.append(dict(size=size, mode="training", impl=impl, batch_size=batch_size, seq_len=seq_len, precision=precision,
                         parameters=n, tokens_per_second=rate, step_seconds=statistics.median(seconds[impl]),
                         mfu=6 * n * rate / peak if peak else None, rounds=[tokens / s for s in seconds[impl]]))
    del models, steps_of, inputs
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()

    # Inference: the bare encoders, in the precision's dtype, on mixed-length batches.
    models = {impl: m.eval().to(torch.bfloat16 if bf16 else torch.float32) for impl, m in twin_models(size, "Model", device).items()}
    inputs = batch(batch_size, seq_len, vocab_size, True, device, seed=1)
    features = {k: inputs[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    real_tokens = int(inputs["attention_mask"].sum())

    def forward(model):
        def step():
            with torch.inference_mode():
                model(**features)
        return step

    seconds = {impl: [] for impl in IMPLS}
    for impl in IMPLS:
        timed(forward(models[impl]), device, 2)
    for r in range(rounds):
        for impl in (IMPLS if r % 2 == 0 else IMPLS[::-1]):
            seconds[impl].append(timed(forward(models[impl]), device, steps))
    for impl in IMPLS:
        rows.append(dict(size=size, mode="inference", impl=impl, batch_size=batch_size, seq_len=seq_len, precision=precision,
                         parameters=parameters(models[impl]), tokens_per_second=real_tokens / statistics.median(seconds[impl]),
                         step_seconds=statistics.median(seconds[impl]), mfu=None, rounds=[real_tokens / s for s in seconds[impl]]))
    del models
    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
    return rows


def step_8x64(device: str, repeats: int, compile_step: bool, size: str = "mini") -> dict:
    """A Mini-BERT training step (default size: `mini`) on an 8 x 64 batch: median milliseconds, each step
    synchronised."""
    import torch

    import modeling_minibert

    config = modeling_minibert.MiniBertConfig(**dict(SIZES[size]["config"], max_position_embeddings=STEP_SHAPE[1]))
    inputs = batch(*STEP_SHAPE, config.vocab_size, False, device, seed=2)
    variants = {"float32 eager": (False, False), "bf16 autocast eager": (True, False)}
    if compile_step:
        variants["bf16 autocast, torch.compile reduce-overhead"] = (True, True)
    results = {}
    for name, (bf16, compiled) in variants.items():
        torch.manual_seed(0)
        model = modeling_minibert.MiniBertForPreTraining(config).to(device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
        forward = torch.compile(model, mode="reduce-overhead") if compiled else model
        autocast = (lambda: torch.autocast(device, dtype=torch.bfloat16)) if bf16 else (lambda: torch.autocast(device, enabled=False))
        step = training_step(forward, inputs, optimizer, autocast)
        try:
            for _ in range(5 if compiled else 2):  # compiled: recordings of the CUDA graphs
                step()
            results[name] = round(1000 * statistics.median(step_times(step, repeats, device)), 3)
        except Exception as err:  # a variant that fails (compile on an old stack) is reported, not fatal
            results[name] = f"failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
    measured = [v for v in results.values() if isinstance(v, float)]
    return {"shape": list(STEP_SHAPE), "size": size, "variants_milliseconds": results, "milliseconds": min(measured) if measured else None,
            "goal_milliseconds": STEP_GOAL_MS}


def readme_table(results: dict) -> str:
    rows = {(r["size"], r["mode"], r["impl"]): r for r in results["rows"]}
    lines = []
    for (size, mode, impl), row in rows.items():
        if impl != "minibert":
            continue
        ref = rows[size, mode, "transformers"]
        mfu = lambda r: f"{100 * r['mfu']:.1f}%" if r["mfu"] is not None else "–"  # noqa: E731
        lines.append([size, mode, f"{row['batch_size']} x {row['seq_len']}", f"{ref['tokens_per_second']:,.0f}",
                      f"{row['tokens_per_second']:,.0f}", f"**{row['tokens_per_second'] / ref['tokens_per_second']:.2f}**",
                      mfu(ref), mfu(row)])
    header = ["size", "mode", "batch", "transformers tokens/s", "Mini-BERT tokens/s", "×", "MFU transformers", "MFU Mini-BERT"]
    return markdown_table(header, lines, "lllrrrrr")


def plot(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    rows = results["rows"]
    cases = list(dict.fromkeys((r["size"], r["mode"]) for r in rows))
    figure = Figure(figsize=(max(5, 2.2 * len(cases)), 3.6))
    axis = figure.add_subplot()
    width = 0.38
    for k, impl in enumerate(IMPLS):
        values = [next(r["tokens_per_second"] for r in rows if (r["size"], r["mode"], r["impl"]) == (*case, impl)) for case in cases]
        axis.bar([i + (k - 0.5) * width for i in range(len(cases))], values, width, label=impl)
    axis.set_xticks(range(len(cases)), [f"{size}\n{mode}" for size, mode in cases])
    axis.set_yscale("log")
    axis.set_ylabel("tokens/s")
    axis.set_title(results["device"]["name"][:60], fontsize=9)
    axis.grid(alpha=0.3, axis="y")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


@dataclass
class GpuSpeedArguments:
    device: str | None = field(default=None, metadata={"help": "cuda or cpu; unset: cuda where there is one"})
    sizes: list[str] = field(default_factory=lambda: ["mini", "base"], metadata={"choices": list(SIZES)})
    batch_sizes: list[int] | None = field(default=None, metadata={"help": "the largest training batch to try, per size "
                                                                  "(unset: each size's own, halved until it fits)"})
    precision: str | None = field(default=None, metadata={"choices": ["bf16", "fp32"],
                                                          "help": "unset: bf16 on the GPU, fp32 on the CPU"})
    steps: int = field(default=20, metadata={"help": "timed steps per measurement"})
    rounds: int = field(default=3, metadata={"help": "measurements of each implementation, interleaved"})
    step_repeats: int = field(default=50, metadata={"help": "timed 8 x 64 steps"})
    step_size: str = field(default="mini", metadata={"choices": list(SIZES), "help": "the model of the 8 x 64 step "
                                                                                  "(tiny: a smoke run)"})
    compile_step: bool | None = field(default=None, metadata={"help": "also time the 8 x 64 step compiled with CUDA "
                                                             "graphs (unset: on the GPU only)"})
    output: str = field(default=str(default_output("gpu_speed")), metadata={"help": "the results JSON (a PNG beside it)"})


def main(argv: list[str] | None = None) -> dict:
    (args,) = parser(GpuSpeedArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("python -m benchmarks.gpu_speed: error: --device cuda, but torch sees no CUDA device")
    precision = args.precision or ("bf16" if device == "cuda" else "fp32")
    if args.batch_sizes is not None and len(args.batch_sizes) != len(args.sizes):
        raise SystemExit(f"python -m benchmarks.gpu_speed: error: --batch_sizes gives {len(args.batch_sizes)} value(s) "
                         f"for {len(args.sizes)} size(s)")
    torch.set_flush_denormal(True)  # as `minibert pretrain` does on the CPU; no effect on the GPU
    info = device_info(device)
    print(f"device: {info['name']}; bf16 peak: {info['peak_bf16_flops'] or 'unknown'}; precision {precision}", flush=True)
    rows = []
    for k, size in enumerate(args.sizes):
        start = args.batch_sizes[k] if args.batch_sizes else SIZES[size]["batch_size"]
        rows += measure_size(size, device, precision, args.steps, args.rounds, start, info["peak_bf16_flops"])
        print(readme_table({"rows": rows}), flush=True)
    compile_step = args.compile_step if args.compile_step is not None else device == "cuda"
    step = step_8x64(device, args.step_repeats, compile_step, args.step_size)
    print(f"Mini-BERT training step at 8 x 64: {step['variants_milliseconds']} (goal: {STEP_GOAL_MS} ms)", flush=True)
    results = {"device": info, "precision": precision, "steps": args.steps, "rounds": args.rounds, "rows": rows,
               "step_8x64": step}
    output = write_results(args.output, results, command_line(__spec__.name, argv))
    print(readme_table(results))
    try:
        plot(results, output.with_suffix(".png"))
        print(f"wrote {output} and {output.with_suffix('.png')}")
    except ImportError as err:  # a GPU machine without matplotlib: the numbers are what matters
        print(f"wrote {output} (no figure: {err})")
    return results


if __name__ == "__main__":
    main()
