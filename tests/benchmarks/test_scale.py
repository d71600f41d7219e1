"""The scale benchmark (benchmarks/scale.py): its corpora are documents of the shipped text at the size asked, and
its tables read the results as written (the version before beside this one, the costs on paper from the rates)."""

from __future__ import annotations

from benchmarks import scale


def test_a_corpus_is_blank_line_separated_articles_to_the_size_asked(tmp_path):
    path = scale.make_corpus(tmp_path / "corpus.txt", 0.2)
    text = path.read_text(encoding="utf-8")
    assert 0.2e6 <= len(text.encode()) < 0.2e6 + 20_000  # stops within the article that reaches the size
    documents = [d for d in text.split("\n\n") if d.strip()]
    assert len(documents) > 20 and all("\n\n" not in d for d in documents)
    assert scale.make_corpus(tmp_path / "again.txt", 0.2).read_text(encoding="utf-8") == text  # seeded


def prepare(mb_per_second: float, bytes_: int) -> dict:
    return {"mb_per_second": mb_per_second, "seconds": bytes_ / 1e6 / mb_per_second, "peak_rss_mb": 500.0}


def first_step(seconds: float, *pss: float, peak: float = 600.0) -> dict:
    return {"seconds": seconds, "peak_rss_mb": peak, "processes": [{"Pss": p} for p in pss]}


RESULTS = {
    "run": {
        "cpu": "AMD EPYC 9R14 96-Core Processor (family 25 model 17; avx2, avx512f, avx512_vnni, avx512_bf16)",
        "cpu_count": 2,
    },
    "cold": {"mb_per_second": 2.5},
    "baseline": [
        {
            "megabytes": 5,
            "first_step": first_step(105.0, 1400.0, peak=1590.0),
            "loader": {"real_tokens_per_second": 166_000},
        }
    ],
    "sizes": [
        {
            "megabytes": 500,
            "bytes": 500_000_000,
            "tokens": 115_000_000,
            "prepare_1": [prepare(5.0, 500_000_000), prepare(6.0, 500_000_000)],
            "prepare_2": [prepare(10.0, 500_000_000), prepare(11.0, 500_000_000)],
            "first_step_unprepared": first_step(90.0, 400.0),
            "first_step_prepared": first_step(6.0, 400.0),
            "first_step_2_processes": first_step(8.0, 600.0, 580.0),
            "loader": {"real_tokens_per_second": 2_000_000},
        }
    ],
}


def test_the_table_puts_the_version_before_beside_this_one_and_names_the_cpu():
    before, now, machine = (
        [c.strip() for c in line.split("|")[1:-1]] for line in scale.readme_table(RESULTS).splitlines()[2:]
    )
    assert before == ["5 MB, version before", "1.59", "", "", "105", "", "", "0.17M"]
    # medians: 5.5 MB/s on 1 process, 10.5 on 2; the second process's PSS; the largest peak of the runs
    assert now == ["500 MB", "0.60", "5.5", "1.91x", "90", "6", "0.58", "2.00M"]
    assert machine[:2] == ["measured on", "AMD EPYC 9R14 96-Core 25/17: AVX-512 BF16, AVX-512 VNNI, 2 cores"]


def test_the_costs_on_paper_follow_from_the_measured_rates():
    header, _, one, four = scale.cost_table(RESULTS).splitlines()
    tokens = 16_000 / 500 * 115e6  # BERT's corpus in this corpus's tokens a byte
    assert (
        f"an epoch ({tokens / 1e9:.1f}B tokens), minutes" in header
        and "BERT's schedule (131B tokens), hours" in header
    )
    cells = [c.strip() for c in one.split("|")[1:-1]]
    # 96 cores at 5.5 MB/s (repeated text) to 2.5 MB/s (new text); 8 GPUs at 1M tokens/s; 1M / 2M loader tokens/s
    assert cells == [
        "1 node: 8 GPUs, 96 cores",
        f"{16_000 / (5.5 * 96) / 60:.1f} to {16_000 / (2.5 * 96) / 60:.1f}",
        f"{tokens / 8e6 / 60:.1f}",
        f"{1e6 * 256 * 512 / 8e6 / 3600:.1f}",
        "0.5",
    ]
    assert [c.strip() for c in four.split("|")[1:-1]][3] == f"{1e6 * 256 * 512 / 32e6 / 3600:.1f}"
