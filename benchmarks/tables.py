"""The results tables of the README and the docs pages, each rendered from its committed results files.

A line `<!-- results: FILE [FILE ...] RENDERER -->` in a document (tools/readme.py reads them) is followed by the
table RENDERER makes of those files. RENDERER is `NAME` (or `benchmarks/NAME`) for `readme_table(results)` of the
benchmark module `benchmarks.NAME`, and `NAME:FUNCTION` for another function of it, given one argument per file
(the README's headline table is `benchmarks/tables:headline_table`). Only benchmarks' modules render the product's
tables; the lab notebook's are lab/tables.py's. After a benchmark run:

    python -m benchmarks.tables      # every results table of the README and the docs pages, rendered again
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from tools.readme import REPO, ResultTable, refresh, result_tables, runnable_documents


def renderer(name: str) -> Callable[..., str]:
    """The function a marker's RENDERER names, from its benchmark module."""
    path, _, function = name.partition(":")
    folder, _, module = path.rpartition("/")
    if folder not in ("", __package__):
        raise ValueError(
            f"results renderer {name!r}: the README's and the docs' tables are rendered by {__package__}/ "
            "modules (NAME or benchmarks/NAME[:FUNCTION])"
        )
    return getattr(importlib.import_module(f"{__package__}.{module}"), function or "readme_table")


def rendered(table: ResultTable) -> str:
    """The table `table`'s renderer makes of its results files."""
    return renderer(table.renderer)(*table.results())


# ---------------------------------------------------------------------------------------------------------------
# The README's headline table: one row per claim, each number from its results file


def _times(ratio: float, digits: int = 1) -> str:
    return f"**{ratio:.{digits}f}×**"


def headline_table(distillation: dict, embeddings: dict, speed: dict) -> str:
    """The README's results: the recipe's distilled student against its teacher and TF-IDF on Rotten Tomatoes
    (`benchmarks.distill_rotten_tomatoes`), the distilled sentence embedder against its teacher
    (`benchmarks.embeddings`), and Mini-BERT against transformers' BERT with the same weights
    (`benchmarks.bench_model`)."""
    systems = distillation["systems"]
    student, teacher, tfidf = systems["Mini-BERT distilled"], systems["teacher fine-tuned"], systems["TF-IDF + LR"]
    rows = embeddings["rows"]
    embedder, embedding_teacher = rows["Mini-BERT distilled"], rows["teacher all-MiniLM-L6-v2"]
    short_teacher = rows["teacher, cut to 64 tokens"]
    by_key = {(r["mode"], r["batch"], r["impl"]): r for r in speed["rows"] if r["size"] == "mini"}

    def accuracy(system: dict) -> str:
        return f"{system['test']['accuracy']:.3f}"

    def parameters(system: dict) -> str:
        return f"{system['throughput']['parameters'] / 1e6:.1f}M parameters"

    lines = [
        "| measured | Mini-BERT | compared with |",
        "| --- | ---: | --- |",
        f"| Rotten Tomatoes sentiment, test accuracy | **{accuracy(student)}** ({parameters(student)}) | teacher "
        f"all-MiniLM-L6-v2 fine-tuned: {accuracy(teacher)} ({parameters(teacher)}); TF-IDF + logistic regression: "
        f"{accuracy(tfidf)} |",
        f"| the same, inference examples/s on one thread | **{student['throughput']['examples_per_second']:,.0f}** "
        f"| teacher: {teacher['throughput']['examples_per_second']:,.0f} ({_times(distillation['student_speedup'])}) |",
        f"| sentence embeddings, BBC News title → body retrieval, MRR | **{embedder['mrr']:.3f}** | teacher "
        f"all-MiniLM-L6-v2: {embedding_teacher['mrr']:.3f} ({embedder['mrr'] / embedding_teacher['mrr']:.1%} of it) |",
        f"| the same, sentences/s on one thread | **{embedder['sentences_per_s']:,.0f}** | teacher cut to 64 tokens: "
        f"{short_teacher['sentences_per_s']:,.1f} ({_times(embedder['sentences_per_s'] / short_teacher['sentences_per_s'])}) |",
    ]
    for mode, what, bert in (
        ("inference", "inference", "BertModel"),
        ("training", "pretraining steps", "BertForPreTraining"),
    ):
        mini, base = by_key[(mode, "mixed", "minibert")], by_key[(mode, "mixed", "transformers")]
        lines.append(
            f"| {what} on mixed-length batches, real tokens/s on {speed['threads']} threads "
            f"| **{mini['tokens_per_second']:,.0f}** | transformers' {bert} (sdpa), same config and weights: "
            f"{base['tokens_per_second']:,.0f} ({_times(mini['speedup'], 2)}) |"
        )
    return "\n".join(lines)


def main() -> None:
    for document in runnable_documents():
        document.write_text(refresh(document.read_text(encoding="utf-8"), rendered), encoding="utf-8")
        print(
            f"refreshed {len(result_tables(document.read_text(encoding='utf-8')))} result tables in "
            f"{document.relative_to(REPO)}"
        )


if __name__ == "__main__":
    main()
