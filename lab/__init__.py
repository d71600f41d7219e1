"""The lab: the experiments that chose the package's defaults and the measurements no page quotes, their committed
results (results/) and their notebook (README.md, with the history of what was tried and kept). Each is a module
run from the repository root, as the benchmarks are:

    python -m lab.NAME --help

    suite_stopping.py     early stopping replayed on the suite's runs (the default patience)
    suite_windows.py      the suite's BBC topics models reading a whole article in windows (`--doc_stride`)
    suite_tables.py       the notebook's tables of suite runs (step floors, transfer sets, seeds, students, windows)
    general_corpus.py     a broader pretraining corpus for the general student (tried, not kept)
    pretrain_ablation.py  which changes to the default pretraining recipe buy held-out quality
    pretrain_ablation_rows.py  its rows: what each changes from the default recipe
    pretrain_quality.py   `minibert pretrain` against transformers' BertForPreTraining at the same time budget
    pretrain_threads.py   the pretraining run's thread policy on a busy machine
    request_profile.py    where a single request's time goes, by operator
    bench_tokenizer.py    tokenizer throughput against transformers' BERT tokenizers
    local_hub_listing.py  how long the local Hub server takes to list a large repository
    plot_seeds.py         recipes compared over seeds, one figure
    tables.py             the lab notebook's results tables, rendered from results/ (`python -m lab.tables`)

The lab builds on the product (the package, tools/, examples/, benchmarks/), never the other way round
(tests/cross_cutting/test_layout.py). Its tests are in lab/tests/: `python -m pytest lab`, outside the default run.
"""
