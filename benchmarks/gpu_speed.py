"""Pretraining and inference speed on a GPU: Mini-BERT against transformers' BERT of the same config, side by side
in one process, with model-FLOPs utilisation; and a Mini-BERT training step at the seed guide's batch shape.

    python -m benchmarks.gpu_speed                                           # on the GPU: mini and base sizes
    python -m benchmarks.gpu_speed --device cpu --sizes tiny --steps 2       # a smoke run on the CPU
    python -m benchmarks.gpu_speed --parts compile --append                  # add the compiled step to the file

Sizes: `mini` is the pretraining recipe's Mini-BERT (hidden 192, 3 layers, vocabulary 8,192; 64 tokens), `base`
BERT-base (12 x 768, vocabulary 30,522; 128 tokens), `tiny` a toy for smoke runs. Per size, the training batch
fills the card: from --batch_sizes (per size) down, halving after an out-of-memory error, the largest batch that
both implementations train in. Both start from the same weights (BertForPreTraining's, sdpa attention).

Parts (--parts), each written to --output as soon as it ends (a part that fails or is killed leaves the others'):
- training: forward, backward and a fused AdamW step with 15% MLM labels and NSP labels, on full-length batches
  and on mixed-length ones (lengths uniform in 8..T, padded to T: Mini-BERT's unpadded encoder at work), float32
  weights under bf16 autocast on the GPU (as `minibert pretrain --mixed_precision bf16` trains; float32 on the CPU
  unless --precision says). Mini-BERT gets its batches as the collator gives them (`plan_batch`: no host sync in
  its step), BERT the plain tensors. Real (non-pad) tokens/s, and MFU: the FLOPs the step needs
  (`bench_model.useful_flops`: the encoder on real tokens, attention within each sequence, the MLM head on the
  labelled tokens, x3 for the backward; the same count for both implementations, so the MFU ratio is the speed
  ratio) per second, over the card's datasheet dense bf16 peak (PEAK_BF16_FLOPS, by device name; null where the card
  is not in the table) and over the bf16 matmul rate measured on it at the start (an 8192^3 product).
- inference: the bare encoders (MiniBertModel, BertModel) in bf16 on mixed-length batches, real tokens/s and MFU.
- step: a default-size MiniBertForPreTraining training step on a batch of 8 x 64 tokens, the seed guide's shape
  (goal: 1 ms), eager in float32 and bf16 autocast; the median over --step_repeats steps, each synchronised.
- compile: the same step compiled in one graph (`fullgraph=True`) with CUDA graphs (`mode="reduce-overhead"`;
  --compile_backend for another backend), kept for last: the riskiest and the slowest to build.

Implementations are measured in interleaved rounds (the order alternating), medians over rounds. Writes --output
(default runs/benchmarks/gpu_speed.json) and a PNG beside it; --append adds the parts to an existing file.
"""

from __future__ import annotations

import gc
import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.bench_model import step_times, sync
from benchmarks.report import command_line, default_output, markdown_table, write_results

SIZES = {
    "tiny": dict(
        config=dict(
            vocab_size=120,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=32,
        ),
        seq_len=16,
        batch_size=4,
    ),
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
        batch_size=2048,
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
        batch_size=512,
    ),
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

    from benchmarks.bench_model import matmul_flops_per_second

    measured = matmul_flops_per_second(device)  # the rate the useful FLOPs are also divided by
    if device != "cuda":
        from benchmarks.report import cpu_model

        return {
            "name": f"cpu: {cpu_model()}",
            "peak_bf16_flops": None,
            "peak_source": None,
            "measured_matmul_flops": measured,
        }
    name = torch.cuda.get_device_name()
    peak = next((flops for key, flops in PEAK_BF16_FLOPS if key in name), None)
    properties = torch.cuda.get_device_properties(0)
    return {
        "name": name,
        "capability": ".".join(map(str, torch.cuda.get_device_capability())),
        "memory_gib": round(properties.total_memory / 2**30, 1),
        "cuda": torch.version.cuda,
        "gpus": torch.cuda.device_count(),
        "peak_bf16_flops": peak,
        "peak_source": PEAK_SOURCE if peak else "the card is not in PEAK_BF16_FLOPS",
        "measured_matmul_flops": measured,
    }


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


def host_batch(batch_size: int, seq_len: int, vocab_size: int, mixed: bool, seed: int = 0) -> dict:
    from benchmarks.bench_model import make_batch

    return make_batch(batch_size, seq_len, vocab_size, mixed, seed)


def inputs_for(impl: str, batch: dict, device: str, features: tuple[str, ...] | None = None) -> dict:
    """What `impl` is given on `device`: Mini-BERT the batch as its collator gives it (`plan_batch`, made on the
    host), BERT the plain tensors; only `features` when given."""
    from modeling_minibert.modeling_minibert import plan_batch

    batch = {k: v for k, v in batch.items() if features is None or k in features}
    if impl == "minibert":
        batch = plan_batch(batch, MLM_PROBABILITY if "labels" in batch else None)
    return {k: v.to(device) for k, v in batch.items()}


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


def autocast_for(device: str, precision: str):
    import torch

    if precision == "bf16":
        return lambda: torch.autocast(device, dtype=torch.bfloat16)
    return lambda: torch.autocast(device, enabled=False)


def free_memory(device: str) -> None:
    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()


def fitting_batch(size: str, device: str, start: int, autocast) -> int:
    """The largest batch, from `start` halving, that both implementations train a step in (GPU memory)."""
    import torch

    batch_size = start
    while True:
        try:
            for impl, model in twin_models(size, "ForPreTraining", device).items():
                cpu = host_batch(batch_size, SIZES[size]["seq_len"], SIZES[size]["config"]["vocab_size"], False)
                inputs = inputs_for(impl, cpu, device)
                training_step(model, inputs, torch.optim.AdamW(model.parameters(), fused=device == "cuda"), autocast)()
                del model, inputs
            return batch_size
        except Exception as err:
            if not is_out_of_memory(err) or batch_size == 1:
                raise
            batch_size //= 2
        finally:
            free_memory(device)


def row(
    size: str,
    mode: str,
    mixed: bool,
    impl: str,
    batch_size: int,
    precision: str,
    model,
    seconds: list[float],
    tokens: int,
    flops: float,
    info: dict,
) -> dict:
    """One measured case: medians over the rounds, and MFU over the datasheet and the measured peaks."""
    step = statistics.median(seconds)
    peak, measured = info["peak_bf16_flops"], info["measured_matmul_flops"]
    return dict(
        size=size,
        mode=mode,
        batch="mixed" if mixed else "full",
        impl=impl,
        batch_size=batch_size,
        seq_len=SIZES[size]["seq_len"],
        precision=precision,
        parameters=parameters(model),
        tokens_per_second=tokens / step,
        step_seconds=step,
        useful_flops=flops,
        mfu=flops / step / peak if peak else None,
        mfu_measured_peak=flops / step / measured,
        rounds=[tokens / s for s in seconds],
    )


def interleaved(steps_of: dict, device: str, steps: int, rounds: int) -> dict[str, list[float]]:
    """Seconds per step of each implementation, `rounds` times, the order alternating."""
    for step in steps_of.values():
        timed(step, device, 2)  # warm-up: kernels, allocator, AdamW state
    seconds = {impl: [] for impl in IMPLS}
    for r in range(rounds):
        for impl in IMPLS if r % 2 == 0 else IMPLS[::-1]:
            seconds[impl].append(timed(steps_of[impl], device, steps))
    return seconds


def measure_training(
    size: str, device: str, precision: str, steps: int, rounds: int, batch_size: int, info: dict
) -> list[dict]:
    """Training tokens/s and MFU of both implementations, on full-length and on mixed-length batches."""
    import torch

    from benchmarks.bench_model import useful_flops

    spec = SIZES[size]
    rows = []
    for mixed in (False, True):
        models = twin_models(size, "ForPreTraining", device)
        cpu = host_batch(batch_size, spec["seq_len"], spec["config"]["vocab_size"], mixed)
        steps_of = {
            impl: training_step(
                m.train(),
                inputs_for(impl, cpu, device),
                torch.optim.AdamW(m.parameters(), lr=1e-4, fused=device == "cuda"),
                autocast_for(device, precision),
            )
            for impl, m in models.items()
        }
        seconds = interleaved(steps_of, device, steps, rounds)
        tokens, flops = int(cpu["attention_mask"].sum()), useful_flops(spec["config"], cpu, training=True)
        rows += [
            row(size, "training", mixed, impl, batch_size, precision, models[impl], seconds[impl], tokens, flops, info)
            for impl in IMPLS
        ]
        del models, steps_of
        free_memory(device)
    return rows


def measure_inference(
    size: str, device: str, precision: str, steps: int, rounds: int, batch_size: int, info: dict
) -> list[dict]:
    """The bare encoders, in the precision's dtype, on mixed-length batches."""
    import torch

    from benchmarks.bench_model import useful_flops

    spec = SIZES[size]
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    models = {impl: m.eval().to(dtype) for impl, m in twin_models(size, "Model", device).items()}
    cpu = host_batch(batch_size, spec["seq_len"], spec["config"]["vocab_size"], True, seed=1)

    def forward(model, inputs):
        def step():
            with torch.inference_mode():
                model(**inputs)

        return step

    features = ("input_ids", "attention_mask", "token_type_ids")
    steps_of = {impl: forward(models[impl], inputs_for(impl, cpu, device, features)) for impl in IMPLS}
    seconds = interleaved(steps_of, device, steps, rounds)
    tokens, flops = int(cpu["attention_mask"].sum()), useful_flops(spec["config"], cpu, training=False)
    rows = [
        row(size, "inference", True, impl, batch_size, precision, models[impl], seconds[impl], tokens, flops, info)
        for impl in IMPLS
    ]
    del models, steps_of
    free_memory(device)
    return rows


def step_8x64(device: str, repeats: int, compiled: bool, size: str = "mini", backend: str = "inductor") -> dict:
    """A Mini-BERT training step (default size: `mini`) on an 8 x 64 batch, as the collator gives it: median
    milliseconds per variant, each step synchronised. compiled: the one-graph CUDA-graphs variant only."""
    import torch

    import modeling_minibert

    config = modeling_minibert.MiniBertConfig(**dict(SIZES[size]["config"], max_position_embeddings=STEP_SHAPE[1]))
    inputs = inputs_for("minibert", host_batch(*STEP_SHAPE, config.vocab_size, False, seed=2), device)
    if compiled:
        mode = "reduce-overhead" if backend == "inductor" and device == "cuda" else None
        variants = {
            f"bf16 autocast, torch.compile {mode or backend} (one graph)": (True, dict(backend=backend, mode=mode))
        }
    else:
        variants = {"float32 eager": (False, None), "bf16 autocast eager": (True, None)}
    results = {}
    for name, (bf16, compile_options) in variants.items():
        torch.manual_seed(0)
        model = modeling_minibert.MiniBertForPreTraining(config).to(device).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
        forward = torch.compile(model, fullgraph=True, **compile_options) if compile_options else model
        step = training_step(forward, inputs, optimizer, autocast_for(device, "bf16" if bf16 else "fp32"))
        try:
            for _ in range(5 if compile_options else 2):  # compiled: recordings of the CUDA graphs
                step()
            results[name] = round(1000 * statistics.median(step_times(step, repeats, device)), 3)
        except Exception as err:  # a variant that fails (compile on an old stack) is reported, not fatal
            results[name] = f"failed: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]
    return results


def step_summary(variants: dict, size: str) -> dict:
    measured = [v for v in variants.values() if isinstance(v, float)]
    return {
        "shape": list(STEP_SHAPE),
        "size": size,
        "variants_milliseconds": variants,
        "milliseconds": min(measured) if measured else None,
        "goal_milliseconds": STEP_GOAL_MS,
    }


def readme_table(results: dict) -> str:
    rows = {(r["size"], r["mode"], r.get("batch", "full"), r["impl"]): r for r in results["rows"]}
    lines = []
    mfu = lambda r, key: f"{100 * r[key]:.1f}%" if r.get(key) is not None else "–"  # noqa: E731
    for (size, mode, batch, impl), row in rows.items():
        if impl != "minibert":
            continue
        ref = rows[size, mode, batch, "transformers"]
        lines.append(
            [
                size,
                mode,
                f"{batch} {row['batch_size']} x {row['seq_len']}",
                f"{ref['tokens_per_second']:,.0f}",
                f"{row['tokens_per_second']:,.0f}",
                f"**{row['tokens_per_second'] / ref['tokens_per_second']:.2f}**",
                f"{mfu(ref, 'mfu')} / {mfu(ref, 'mfu_measured_peak')}",
                f"{mfu(row, 'mfu')} / {mfu(row, 'mfu_measured_peak')}",
            ]
        )
    header = [
        "size",
        "mode",
        "batch",
        "transformers tokens/s",
        "Mini-BERT tokens/s",
        "×",
        "MFU transformers (datasheet / measured peak)",
        "MFU Mini-BERT (datasheet / measured peak)",
    ]
    return markdown_table(header, lines, "lllrrrrr")


def plot(results: dict, path: Path) -> None:
    from matplotlib.figure import Figure

    rows = results["rows"]
    cases = list(dict.fromkeys((r["size"], r["mode"], r.get("batch", "full")) for r in rows))
    figure = Figure(figsize=(max(5, 2.2 * len(cases)), 3.6))
    axis = figure.add_subplot()
    width = 0.38
    for k, impl in enumerate(IMPLS):
        values = [
            next(
                r["tokens_per_second"]
                for r in rows
                if (r["size"], r["mode"], r.get("batch", "full"), r["impl"]) == (*case, impl)
            )
            for case in cases
        ]
        axis.bar([i + (k - 0.5) * width for i in range(len(cases))], values, width, label=impl)
    axis.set_xticks(range(len(cases)), [f"{size}\n{mode}\n{batch}" for size, mode, batch in cases])
    axis.set_yscale("log")
    axis.set_ylabel("tokens/s")
    axis.set_title(results["device"]["name"][:60], fontsize=9)
    axis.grid(alpha=0.3, axis="y")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=110)


PARTS = ("training", "inference", "step", "compile")


@dataclass
class GpuSpeedArguments:
    device: str | None = field(default=None, metadata={"help": "cuda or cpu; unset: cuda where there is one"})
    sizes: list[str] = field(default_factory=lambda: ["mini", "base"], metadata={"choices": list(SIZES)})
    parts: list[str] = field(
        default_factory=lambda: ["training", "inference", "step"],
        metadata={
            "choices": list(PARTS),
            "help": "what to measure, in this order (compile: the 8 x 64 step in one graph)",
        },
    )
    batch_sizes: list[int] | None = field(
        default=None,
        metadata={
            "help": "the largest training batch to try, per size (unset: each size's own, halved until it fits)"
        },
    )
    precision: str | None = field(
        default=None, metadata={"choices": ["bf16", "fp32"], "help": "unset: bf16 on the GPU, fp32 on the CPU"}
    )
    steps: int = field(default=20, metadata={"help": "timed steps per measurement"})
    rounds: int = field(default=3, metadata={"help": "measurements of each implementation, interleaved"})
    step_repeats: int = field(default=50, metadata={"help": "timed 8 x 64 steps"})
    step_size: str = field(
        default="mini", metadata={"choices": list(SIZES), "help": "the model of the 8 x 64 step (tiny: a smoke run)"}
    )
    compile_backend: str = field(
        default="inductor",
        metadata={"help": "torch.compile's backend for the compile part (inductor with CUDA graphs on the GPU)"},
    )
    append: bool = field(
        default=False, metadata={"help": "add to --output's results (same device) instead of starting anew"}
    )
    output: str = field(
        default=str(default_output("gpu_speed")), metadata={"help": "the results JSON (a PNG beside it)"}
    )


def main(argv: list[str] | None = None) -> dict:
    (args,) = parser(GpuSpeedArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("python -m benchmarks.gpu_speed: error: --device cuda, but torch sees no CUDA device")
    precision = args.precision or ("bf16" if device == "cuda" else "fp32")
    if args.batch_sizes is not None and len(args.batch_sizes) != len(args.sizes):
        raise SystemExit(
            f"python -m benchmarks.gpu_speed: error: --batch_sizes gives {len(args.batch_sizes)} value(s) "
            f"for {len(args.sizes)} size(s)"
        )
    torch.set_flush_denormal(True)  # as `minibert pretrain` does on the CPU; no effect on the GPU
    output, command = Path(args.output), command_line(__spec__.name, argv)
    results = json.loads(output.read_text()) if args.append and output.is_file() else None
    if results is None:
        results = {
            "device": device_info(device),
            "precision": precision,
            "steps": args.steps,
            "rounds": args.rounds,
            "rows": [],
            "step_8x64": step_summary({}, args.step_size),
        }
    info = results["device"]
    print(
        f"device: {info['name']}; bf16 peak: {info['peak_bf16_flops'] or 'unknown'}; measured matmul "
        f"{info['measured_matmul_flops'] / 1e12:.1f} TFLOP/s; precision {precision}",
        flush=True,
    )

    def save(part: str) -> None:  # after each part: what a later part breaks or a time limit cuts is kept
        results.setdefault("parts_done", []).append(part)
        write_results(output, results, command)  # an appended file keeps its first run block
        print(f"{part}: written to {output}", flush=True)

    for part in args.parts:
        if part in ("training", "inference"):
            measure = measure_training if part == "training" else measure_inference
            for k, size in enumerate(args.sizes):
                batch_size = args.batch_sizes[k] if args.batch_sizes else SIZES[size]["batch_size"]
                if device == "cuda":
                    batch_size = fitting_batch(size, device, batch_size, autocast_for(device, precision))
                results["rows"] += measure(size, device, precision, args.steps, args.rounds, batch_size, info)
                save(f"{part} {size}")
                print(readme_table(results), flush=True)
        else:
            variants = step_8x64(device, args.step_repeats, part == "compile", args.step_size, args.compile_backend)
            results["step_8x64"] = step_summary(
                {**results["step_8x64"]["variants_milliseconds"], **variants}, args.step_size
            )
            save(part)
            print(
                f"Mini-BERT training step at 8 x 64: {results['step_8x64']['variants_milliseconds']} "
                f"(goal: {STEP_GOAL_MS} ms)",
                flush=True,
            )
    try:
        if results["rows"]:
            plot(results, output.with_suffix(".png"))
            print(f"wrote {output.with_suffix('.png')}")
    except ImportError as err:  # a GPU machine without matplotlib: the numbers are what matters
        print(f"no figure: {err}")
    return results


if __name__ == "__main__":
    main()
