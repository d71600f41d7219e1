"""Does the prepared corpus (memory-mapped tokens, NSP pairs from offsets) pretrain as well as the in-memory
pipeline before it? The default 4,000-step run of each, scored on each other's held-out pairs.

    python -m lab.prepared_data_quality --before REF                      # both runs, then the scores
    python -m lab.prepared_data_quality --before REF --runs RUN_NOW RUN_BEFORE   # score two finished runs

REF is a git revision of the pipeline before (535bfc7, the last with `build_nsp_dataset` over Python lists); its
tree is exported to a temporary folder and run with the same interpreter. Both runs are `minibert pretrain` with
the defaults (BBC News, its own WordPiece vocabulary, which both versions train alike), one thread each so that
the two can share the machine without changing a number. Each version then builds its held-out pairs for the same
held-out documents (the split is the same) and both models are scored on both: held-out MLM accuracy at 15%
masking, NSP accuracy. The goal (issue 61): within 0.01 of the version before, or better.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.report import ROOT as REPO
from benchmarks.report import command_line, default_output, write_results
from lab.pretrain_threads import export_revision

SCORE = """
import sys, json, torch
from modeling_minibert import MiniBertForPreTraining
from modeling_minibert.training.pretraining.data import (DataCollatorForPreTraining, build_nsp_dataset, load_bbc_news,
    split_documents)
from tokenization import load_tokenizer
torch.set_num_threads(1)
tokenizer = load_tokenizer(sys.argv[1])
_, held_out = split_documents(load_bbc_news(), 0.05, 42)
pairs = build_nsp_dataset(held_out, tokenizer, 64, 43)
rows = [pairs[i] for i in range(len(pairs))]
scores = {}
for name in sys.argv[2:]:
    model = MiniBertForPreTraining.from_pretrained(name).eval()
    collator = DataCollatorForPreTraining(tokenizer, 0.15, seed=43)
    correct = count = nsp = 0
    with torch.no_grad():
        for k in range(0, len(rows), 32):
            batch = collator(rows[k : k + 32])
            out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                        token_type_ids=batch["token_type_ids"])
            masked = batch["labels"] != -100
            correct += int((out.prediction_logits[masked].argmax(-1) == batch["labels"][masked]).sum())
            count += int(masked.sum())
            nsp += int((out.seq_relationship_logits.argmax(-1) == batch["next_sentence_label"]).sum())
    scores[name] = {"eval_mlm_accuracy": correct / count, "eval_nsp_accuracy": nsp / len(rows)}
print(json.dumps({"pairs": len(rows), "scores": scores}))
"""


@dataclass
class QualityArguments:
    before: str = field(default="535bfc7", metadata={"help": "git revision of the pipeline before"})
    runs: list[str] | None = field(default=None, metadata={"help": "two finished runs (now, before) to score instead"})
    output: str = field(default=str(default_output("prepared_data_quality")), metadata={"help": "the results JSON"})


def pretrain(code: Path, out: Path, cache: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(code), MINIBERT_CACHE=str(cache))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "modeling_minibert.cli",
            "pretrain",
            "--output_dir",
            str(out),
            "--num_threads",
            "1",
            "--disable_tqdm",
            "--report_to",
            "none",
        ],
        env=env,
        check=True,
        cwd=code,
    )


def score(code: Path, runs: list[Path]) -> dict:
    """Both models on the held-out pairs that the version at `code` builds (with the first run's tokenizer)."""
    done = subprocess.run(
        [sys.executable, "-c", SCORE, str(runs[0]), *map(str, runs)],
        env=dict(os.environ, PYTHONPATH=str(code)),
        cwd=code,
        capture_output=True,
        text=True,
        check=True,
    )  # -c puts cwd first
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return {"pairs": found["pairs"], "now": found["scores"][str(runs[0])], "before": found["scores"][str(runs[1])]}


def main(argv: list[str] | None = None) -> None:
    (options,) = parser(QualityArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    work = Path(tempfile.mkdtemp(prefix="prepared-quality-"))
    (work / "before").mkdir()
    before_code = export_revision(options.before, work / "before")
    if options.runs:
        runs = [Path(r) for r in options.runs]
    else:
        runs = [work / "now", work / "before-run"]
        pretrain(REPO, runs[0], work / "cache-now")
        pretrain(before_code, runs[1], work / "cache-before")
    results = {
        "before": options.before,
        "runs": [r.name for r in runs],
        "final": {
            name: json.loads((run / "all_results.json").read_text()) for name, run in zip(("now", "before"), runs)
        },
        "on_the_pairs_now": score(REPO, runs),
        "on_the_pairs_before": score(before_code, runs),
    }
    write_results(options.output, results, command_line(__spec__.name, argv))
    print(table(results))


def table(results: dict) -> str:
    rows = [
        "| held-out pairs | pairs | MLM now | MLM before | NSP now | NSP before |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, name in (("on_the_pairs_now", "this version's"), ("on_the_pairs_before", "the version before's")):
        s = results[key]
        rows.append(
            f"| {name} | {s['pairs']:,} | {s['now']['eval_mlm_accuracy']:.3f} | {s['before']['eval_mlm_accuracy']:.3f} "
            f"| {s['now']['eval_nsp_accuracy']:.3f} | {s['before']['eval_nsp_accuracy']:.3f} |"
        )
    return "\n".join(rows)


readme_table = table


if __name__ == "__main__":
    main()
