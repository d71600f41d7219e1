"""The measurements behind the figures the README and the docs quote, each a module run from the repository root:

    python -m benchmarks.NAME --help

Every benchmark parses its options with `HfArgumentParser` over dataclasses (a job's benchmark takes that job's
own dataclasses, so its defaults are the job's) and writes its results through `report.write_results`: JSON with
a `run` block (the command that reproduces it, the date, the CPU, the library versions) beside its numbers. By
default results go under runs/benchmarks/; the committed ones in benchmarks/results/ are written only when
`--output` names them. Their tables are each script's `readme_table(results)`, rendered into the README and the
docs by `tables.py` (docs/benchmarks.md says which command gives which figure). The experiments that chose the
defaults once, and their results, are in lab/.

Shared pieces, one idea a module:

    report.py          the results format and its tables
    arguments.py       how a benchmark takes its options (and passes a job's options through)
    cpu_time.py        CPU and wall-clock minutes of a stage, in this process or a child
    tables.py          the README's and the docs' results tables, rendered from their results files
"""
