"""Bad inputs, table-driven: each row is one mistake a user makes, given to the CLI or to the Python API.

For every row: the CLI exits with code 2 and prints exactly one line, `minibert CMD: error: ...`, that names the
offending file, field or value (no traceback); the API raises the documented exception type with a one-line
message naming the same; and nothing is written: the test's whole folder (the output path, its hidden
`.partial-*` / `.tmp` / `.saving-*` siblings, the broken input itself) is the same afterwards as before.
A few rows also run as a real `python -m modeling_minibert.cli` process, to prove the exit code and the absence of
a traceback end to end. Rows marked with `seconds` must fail within that time (sizes are checked before memory is
allocated).

Templates in `cli` and `names` are filled from the paths of `Paths`: `{mlm}` (a tiny pretrained-style folder),
`{classifier}`, `{bert}` (transformers' BertForMaskedLM), `{data}` (input files, good and bad), `{broken}` (a
copy of `source` with `breakage` applied), `{out}` (an output folder or file that must not appear), `{onnx}`
(`{out}.onnx`), `{readonly}` (a folder nobody may write to).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import transformers
from fixtures.environment import REPO, clean_env
from fixtures.models import TINY
from fixtures.tree import tree

from modeling_minibert import (
    MiniBertConfig,
    MiniBertForMaskedLM,
    MiniBertForMultipleChoice,
    MiniBertForPreTraining,
    MiniBertForSequenceClassification,
    MiniBertForTokenClassification,
    MiniBertModel,
    cli,
)
from modeling_minibert.utils.cpus import usable_cores
from modeling_minibert.utils.outputs import LOCK_FILE

# ----------------------------------------------------------------------------------------------------------------
# Fixtures: tiny folders and input files, built once per module
# ----------------------------------------------------------------------------------------------------------------

TEXTS = [
    "The company said profits rose sharply in the third quarter.",
    "Shares in the firm fell after the chief executive resigned.",
    "The government said the economy grew faster than expected.",
] * 10

CONLL_GOOD = "EU NNP B-ORG\nrejects VBZ O\nGerman JJ B-MISC\n\nPeter NNP B-PER\nBlackburn NNP I-PER\n"
# The files the issue names, and a few more. A line number in the message is the first line that is wrong.
DATA_FILES: dict[str, bytes] = {
    "corpus.txt": "\n".join(TEXTS).encode(),
    "documents.txt": "\n\n".join(f"{a} {b}\n{c}" for a, b, c in zip(TEXTS, TEXTS[1:], TEXTS[2:])).encode(),
    "empty.txt": b"",
    "blank.txt": b"\n\n   \n",
    "latin1.txt": "caf\xe9 cr\xe8me br\xfbl\xe9e\n".encode("latin-1"),
    "text_then_binary.txt": b"Some text.\n\x00\x01\x02\xff\xfe",
    "one_line.txt": b"word " * 400_000 + b"\n",  # 2 MB without a line break: a dump, not paragraphs
    "utf16.txt": "the company said profits rose\n".encode("utf-16"),
    "good.conll": CONLL_GOOD.encode(),
    "missing_column.conll": CONLL_GOOD.replace("rejects VBZ O", "rejects VBZ").encode(),
    "extra_column.conll": CONLL_GOOD.replace("German JJ B-MISC", "German JJ B-MISC extra").encode(),
    "nul_tag.conll": CONLL_GOOD.replace("B-PER", "B-\x00PER").encode(),
    "classes.csv": b"text,label\n" + b"".join(f"{t},{i % 2}\n".encode() for i, t in enumerate(TEXTS)),
    "latin1.csv": "text,label\ncaf\xe9 cr\xe8me,0\nthe company said,1\n".encode("latin-1"),
    "header_only.csv": b"text,label\n",
    "missing_label.csv": b"text,label\nthe company said,1\nprofits rose,\n",
    "one_class.csv": b"text,label\n" + b"".join(f"{t},1\n".encode() for t in TEXTS),
    "ansi_label.csv": b"text,label\nthe company said,\x1b[31mred\nprofits rose,blue\n",
    "binary.txt": b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe\x00",
    "nul.txt": b"the company said\nprofits\x00rose\n",
    "four_classes.csv": b"text,label\n" + b"".join(f"{t},{'abcd'[i % 4]}\n".encode() for i, t in enumerate(TEXTS)),
    "no_text.csv": b"text,label\nthe company said,LABEL_0\n,LABEL_1\n",
    # The same word, composed (NFC) in the answer and decomposed (NFD) in the context: offsets cannot match.
    "nfd_context.json": json.dumps(
        {
            "data": [
                {
                    "paragraphs": [
                        {
                            "context": "le cafe\u0301 est bon",
                            "qas": [
                                {
                                    "id": "1",
                                    "question": "quoi ?",
                                    "answers": [{"text": "caf\u00e9", "answer_start": 3}],
                                }
                            ],
                        }
                    ]
                }
            ]
        }
    ).encode(),
    "squad.json": json.dumps(
        {
            "data": [
                {
                    "paragraphs": [
                        {
                            "context": "profits rose",
                            "qas": [
                                {
                                    "id": "1",
                                    "question": "what rose?",
                                    "answers": [{"text": "profits", "answer_start": 0}],
                                }
                            ],
                        }
                    ]
                }
            ]
        }
    ).encode(),
    "squad_no_answers.json": json.dumps(
        {
            "data": [
                {
                    "paragraphs": [
                        {"context": "profits rose", "qas": [{"id": "1", "question": "what rose?", "answers": []}]}
                    ]
                }
            ]
        }
    ).encode(),
}


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> SimpleNamespace:
    """Folders and files the rows read (never write): models with a tokenizer trained on a few lines."""
    from transformers import BertConfig, BertForMaskedLM

    from tokenization import train_tokenizer

    root = tmp_path_factory.mktemp("sources")
    tokenizer = train_tokenizer(train_data=TEXTS, vocab_size=120, disable_tqdm=True)
    config = MiniBertConfig(**{**TINY, "vocab_size": len(tokenizer)})
    torch.manual_seed(0)
    folders = {
        "mlm": MiniBertForPreTraining(config),
        "classifier": MiniBertForSequenceClassification(config),
        "bert": BertForMaskedLM(BertConfig(**{**TINY, "vocab_size": len(tokenizer)})),
    }
    for name, model in folders.items():
        model.save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    (root / "data").mkdir()
    for name, content in DATA_FILES.items():
        (root / "data" / name).write_bytes(content)
    made = made_folders(root)
    return SimpleNamespace(**{name: root / name for name in (*folders, *made, "data")})


def made_folders(root: Path) -> tuple[str, ...]:
    """Folders other jobs make from the fixtures' models: a sentence-transformers teacher (`embedder`), an int8
    copy of the classifier (`int8`), and (`graph`) a graph shaped as an export is at its embeddings, built by
    hand (an export takes seconds): Gathers of input_ids and token_type_ids in 120 x 4 and 2 x 4 tables, beside
    a 24-row position table, masked by attention_mask."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from modeling_minibert.deployment.quantization import quantize
    from modeling_minibert.sharing.sentence_transformers_format import write_sentence_transformers_files

    shutil.copytree(root / "mlm", root / "embedder")
    write_sentence_transformers_files(root / "embedder")
    quantize(root / "classifier", root / "int8")
    tables = {
        f"bert.embeddings.{name}.weight": numpy_helper.from_array(
            np.ones((rows, 4), np.float32), f"bert.embeddings.{name}.weight"
        )
        for name, rows in (("word_embeddings", 120), ("position_embeddings", 24), ("token_type_embeddings", 2))
    }
    inputs = [
        helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"])
        for name in ("input_ids", "attention_mask", "token_type_ids")
    ]
    nodes = [
        helper.make_node("Gather", ["bert.embeddings.word_embeddings.weight", "input_ids"], ["words"]),
        helper.make_node("Gather", ["bert.embeddings.token_type_embeddings.weight", "token_type_ids"], ["types"]),
        helper.make_node("Add", ["words", "types"], ["sums"]),
        helper.make_node("Cast", ["attention_mask"], ["mask"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask", "last"], ["mask3"]),
        helper.make_node("Mul", ["sums", "mask3"], ["last_hidden_state"]),
    ]
    last = numpy_helper.from_array(np.array([-1], np.int64), "last")
    output = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", 4])
    graph = helper.make_graph(nodes, "embeddings", inputs, [output], [*tables.values(), last])
    (root / "graph").mkdir()
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), root / "graph" / "model.onnx")
    # A ready serving folder of the PyTorch path, as benchmark-deploy writes one (its measurements left out).
    shutil.copytree(root / "classifier", root / "serving")
    (root / "serving" / "serving.json").write_text(json.dumps({"path": "pytorch-fp32", "threads": None}))
    return ("embedder", "int8", "graph", "serving")


@pytest.fixture(scope="module")
def readonly(tmp_path_factory):
    """A folder that cannot be written, even by root: a read-only tmpfs where mounting is allowed, else a
    chmod 555 folder (enough for other users), else a kernel folder."""
    place = tmp_path_factory.mktemp("readonly")
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(place)], capture_output=True
        ).returncode
        == 0
    )
    if not mounted:
        place.chmod(0o555)
    for candidate in (place, Path("/sys/kernel")):
        try:
            shutil.rmtree(tempfile.mkdtemp(dir=candidate))
        except OSError:
            break
    else:
        pytest.skip("no read-only place on this machine")
    yield candidate
    if mounted:
        subprocess.run(["umount", str(place)], check=True)
    place.chmod(0o755)


class _CurrentStderr:
    """Writes to whatever sys.stderr is when written to (a handler keeps the stream it was given)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


@pytest.fixture(autouse=True)
def _library_logs_to_this_tests_stderr():
    """Libraries (transformers, datasets, torch, ...) give their loggers a handler on the sys.stderr of the moment
    they are imported: in one process running many tests, an earlier test's (closed) capture. Point them at the
    current one, so that what they log is seen (and counted) here, as a user would see it."""
    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in list(logging.Logger.manager.loggerDict))]
    for logger in loggers:
        for handler in logger.handlers:
            if type(handler) is logging.StreamHandler:  # not pytest's own capture handlers (subclasses)
                handler.stream = _CurrentStderr()  # not setStream: it would flush the closed stream
                vars(handler).pop("flush", None)  # transformers binds flush to the stderr of the time
    # As in a fresh process: `minibert fill-mask` quiets transformers for the rest of the process it runs in.
    transformers.logging.set_verbosity(transformers.logging._get_default_logging_level())
    transformers.logging.enable_progress_bar()


# ----------------------------------------------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    id: str
    names: tuple[str, ...]  # what the message must contain (templates)
    cli: tuple[str, ...] | None = None  # argv of `minibert` (templates)
    api: Callable[[SimpleNamespace], object] | None = None  # called with the paths; must raise `error`
    error: type[BaseException] = ValueError  # the API's documented exception type
    source: str | None = None  # a fixture folder copied to {broken}, then broken with `breakage`
    breakage: Callable[[Path], object] | None = None
    seconds: float | None = None  # must fail within this time
    in_subprocess: bool = False  # also run as `python -m modeling_minibert.cli`
    xfail: str | None = None  # a known defect (both ways): strict, so a fix is noticed
    cli_xfail: str | None = None  # a known defect of the command line only


def held_by_a_live_run(job: str) -> Callable[[Path], None]:
    """Empty the folder and lock it for a running `job` (this test process: alive, on this host)."""

    def lock(folder: Path) -> None:
        shutil.rmtree(folder)
        folder.mkdir()
        record = {"pid": os.getpid(), "host": socket.gethostname(), "job": job, "started": "now"}
        (folder / LOCK_FILE).write_text(json.dumps(record))

    return lock


def edit_config(**changes) -> Callable[[Path], None]:
    def breakage(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **changes}))

    return breakage


def write(name: str, content: bytes | str) -> Callable[[Path], None]:
    def breakage(folder: Path) -> None:
        path = folder / name
        path.unlink(missing_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)

    return breakage


def delete(*names: str) -> Callable[[Path], None]:
    def breakage(folder: Path) -> None:
        for name in names:
            (folder / name).unlink()

    return breakage


def link(name: str, target: str, *make: str) -> Callable[[Path], None]:
    """Replace `name` in the folder by a symbolic link to `target` (after creating the files `make`, inside)."""

    def breakage(folder: Path) -> None:
        for made in make:
            (folder / made).parent.mkdir(parents=True, exist_ok=True)
            (folder / made).write_text("secret")
        path = folder / name
        if path.is_file():
            path.unlink()
        path.symlink_to(target)

    return breakage


def truncate(name: str, keep: int) -> Callable[[Path], None]:
    def breakage(folder: Path) -> None:
        (folder / name).write_bytes((folder / name).read_bytes()[:keep])

    return breakage


def replace_by_folder(name: str) -> Callable[[Path], None]:
    def breakage(folder: Path) -> None:
        (folder / name).unlink()
        (folder / name).mkdir()

    return breakage


def bpe_tokenizer(folder: Path) -> None:
    """The same pieces in a BPE tokenizer (RoBERTa's kind): loaded as a generic fast tokenizer, not BERT's."""
    tokenizer = json.loads((folder / "tokenizer.json").read_text())
    tokenizer["model"] = {
        "type": "BPE",
        "dropout": None,
        "unk_token": "[UNK]",
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": False,
        "vocab": tokenizer["model"]["vocab"],
        "merges": [],
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "PreTrainedTokenizerFast"}))


def without_mask_token(folder: Path) -> None:
    (folder / "tokenizer.json").unlink()  # vocab.txt is then the vocabulary
    lines = (folder / "vocab.txt").read_text().splitlines()
    (folder / "vocab.txt").write_text("\n".join(line for line in lines if line != "[MASK]") + "\n")


def fill(p: SimpleNamespace, folder: str = "broken", text: str = "the company said [MASK] rose.", **kwargs):
    from modeling_minibert.deployment.mask_filling import fill_mask

    return fill_mask(getattr(p, folder), text, **kwargs)


def forward(head: type = MiniBertModel, **inputs):
    """A call of a tiny model (the base model, or `head` with 3 labels) on the given tensors (input_ids defaults to
    a 2 x 8 batch)."""
    inputs.setdefault("input_ids", torch.arange(16).reshape(2, 8) + 5)
    return lambda p: head(MiniBertConfig(**TINY, num_labels=3)).eval()(**inputs)


def retype(key: str, dtype: torch.dtype) -> Callable[[Path], None]:
    """Store one weight of the folder's model.safetensors in another dtype (the rest as they are)."""

    def breakage(folder: Path) -> None:
        from safetensors.torch import load_file, save_file

        weights = load_file(folder / "model.safetensors")
        weights[key] = weights[key].to(dtype)
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})

    return breakage


def tokenizer_with(
    extra_tokens: int = 0, fewer_tokens: int = 0, on_mask_id: str | None = None
) -> Callable[[Path], None]:
    """Give the folder a tokenizer of another size, or one that maps the word `on_mask_id` onto [MASK]'s id."""

    def breakage(folder: Path) -> None:
        tokenizer = json.loads((folder / "tokenizer.json").read_text())
        vocab = tokenizer["model"]["vocab"]
        for i in range(extra_tokens):
            vocab[f"extra{i}"] = len(vocab)
        for word in sorted(vocab, key=vocab.get)[len(vocab) - fewer_tokens :]:
            del vocab[word]
        if on_mask_id:
            vocab[on_mask_id] = vocab["[MASK]"]
        (folder / "tokenizer.json").write_text(json.dumps(tokenizer))

    return breakage


def only_a_pickle(folder: Path) -> None:
    """The weights under a pickle's name (the bytes do not matter: a pickle is refused by its name, unread)."""
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")


def factorized_embeddings(folder: Path) -> None:
    """An ELECTRA masked LM of the same shape, its embeddings 16 wide under a 32-wide encoder (embedding_size)."""
    from transformers import ElectraConfig, ElectraForMaskedLM

    for path in folder.glob("*.safetensors"):
        path.unlink()
    ElectraForMaskedLM(ElectraConfig(**{**TINY, "embedding_size": 16})).save_pretrained(folder)


def pickled_dense(folder: Path) -> None:
    """A sentence-transformers Dense module (2_Dense) saved as a pickle, listed in modules.json."""
    (folder / "2_Dense").mkdir()
    (folder / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 32, "out_features": 8, "bias": True}))
    (folder / "2_Dense" / "pytorch_model.bin").write_bytes(b"not really a pickle")
    modules = json.loads((folder / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"})
    (folder / "modules.json").write_text(json.dumps(modules))


def logits_cache(
    columns: int = 2, dtype: torch.dtype = torch.float32, rows: list[int] | None = None
) -> Callable[[Path], None]:
    """A teacher-logits cache (key "k") of three transfer texts with `columns` logits each, as `dtype`."""

    def breakage(folder: Path) -> None:
        from modeling_minibert.training.distillation.teacher import save_logits_cache

        save_logits_cache(folder, "k", {"transfer": [torch.zeros(columns, dtype=dtype)] * 3})
        if rows is not None:  # the per-example counts replaced
            from safetensors.torch import load_file, save_file

            tensors = load_file(folder / "teacher_logits.safetensors")
            save_file({**tensors, "transfer.rows": torch.tensor(rows)}, folder / "teacher_logits.safetensors")

    return breakage


def cached_logits(p: SimpleNamespace):
    """Task distillation's cache read back for a sequence classifier of 2 labels."""
    from modeling_minibert.training.distillation.teacher import load_logits_cache

    return load_logits_cache(p.broken, "k", words_given=False, num_labels=2)


def int8_tensor(key: str, change: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[Path], None]:
    """Replace one tensor of an int8 folder's weights by `change(tensor)`."""

    def breakage(folder: Path) -> None:
        from safetensors.torch import load_file, save_file

        tensors = load_file(folder / "model.int8.safetensors")
        tensors[key] = change(tensors[key].clone()).contiguous()
        save_file(tensors, folder / "model.int8.safetensors", metadata={"format": "pt"})

    return breakage


def set_first(value: float) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda tensor: tensor.index_fill_(0, torch.tensor([0]), value)


QKV_SCALE = "bert.encoder.layer.0.attention.self.qkv.weight_scale"


def load_int8(p: SimpleNamespace):
    from modeling_minibert.deployment.quantization import load_quantized

    return load_quantized(p.broken)


def session_run(ids=None, mask=None, types=None, **shape):
    """`LengthBucketedSession.run` on the hand-built graph (`made_folders`), with a (2, 8) batch by default."""
    import numpy as np

    def run(p: SimpleNamespace):
        from modeling_minibert.deployment.onnx_session import LengthBucketedSession

        given = [np.asarray(a) if a is not None else np.ones((2, 8), np.int64) for a in (ids, mask, types)]
        if types is None:
            given[2] = np.zeros_like(given[2])
        return LengthBucketedSession(p.graph, threads=1).run(*given)

    return run


def ask(p: SimpleNamespace, **options):
    """The question-answering pipeline of a tiny untrained reader (24 positions) with the fixtures' tokenizer."""
    from transformers import AutoTokenizer

    from modeling_minibert import MiniBertForQuestionAnswering
    from modeling_minibert.question_answering_pipeline import QuestionAnsweringPipeline

    reader = MiniBertForQuestionAnswering(MiniBertConfig(**TINY)).eval()
    qa = QuestionAnsweringPipeline(model=reader, tokenizer=AutoTokenizer.from_pretrained(p.mlm))
    return qa(question="who said so?", context="The company said profits rose.", **options)


def float_rows() -> list[Row]:
    """NaN and infinity in every float field of the config, refused by name (`nan <= 0` is False)."""
    from modeling_minibert.configuration_minibert import FLOAT_FIELDS

    return [
        Row(
            f"config-{field}-{value}",
            (f"MiniBertConfig.{field}", "finite", str(value)),
            None,
            lambda p, field=field, value=value: MiniBertConfig(**{field: value}),
        )
        for field in FLOAT_FIELDS
        for value in (float("nan"), float("inf"), float("-inf"))
    ]


def half_mask(value) -> torch.Tensor:
    """A (2, 8) mask whose second row ends in four `value`s."""
    return torch.tensor([[1.0] * 8, [1.0] * 4 + [float(value)] * 4])


def convert(p, src: str = "broken", out: str = "out", **kwargs):
    from modeling_minibert.sharing.bert_format import convert_bert_to_minibert, convert_minibert_to_bert

    to_bert = kwargs.pop("to_bert", False)
    return (convert_minibert_to_bert if to_bert else convert_bert_to_minibert)(
        getattr(p, src), getattr(p, out), **kwargs
    )


def export(p, src: str = "broken", out: str = "onnx", **kwargs):
    from modeling_minibert.deployment.onnx_export import export_onnx

    return export_onnx(getattr(p, src), getattr(p, out), **kwargs)


def quantize_api(p, **kwargs):
    from modeling_minibert.deployment.quantization import quantize

    return quantize(p.broken, p.out, **kwargs)


def deploy(p, model: str = "classifier", texts: str = "classes.csv", out: str = "out", **kwargs):
    from modeling_minibert.deployment.serving_benchmark import benchmark_deploy

    return benchmark_deploy(getattr(p, model), p.data / texts, getattr(p, out), **kwargs)


def serve(p, folder: str = "serving", **kwargs):
    from modeling_minibert.deployment.serving_paths import load_serving

    return load_serving(getattr(p, folder), **kwargs)


def long_texts(p, texts=("a text",), **kwargs):
    """`classify_long_texts` with the fixtures' classifier (24 positions)."""
    from transformers import AutoTokenizer

    from modeling_minibert.deployment import classify_long_texts

    model = MiniBertForSequenceClassification.from_pretrained(p.classifier)
    return classify_long_texts(
        model, AutoTokenizer.from_pretrained(p.classifier), texts if isinstance(texts, str) else list(texts), **kwargs
    )


def unchanged(folder: Path) -> None:
    """The copy of the source, as it is: a folder the row's job reads."""


def serving_json(content: object) -> Callable[[Path], None]:
    return write("serving.json", content if isinstance(content, str) else json.dumps(content))


def deploy_cli(*words: str, model: str = "{classifier}", texts: str = "{data}/classes.csv") -> tuple[str, ...]:
    return ("benchmark-deploy", "--model_name_or_path", model, "--texts_file", texts, "--output_dir", "{out}", *words)


def train_tok(p, *args, **kwargs):
    from tokenization import train_tokenizer

    kwargs.setdefault("output_dir", p.out)
    return train_tokenizer(*args, disable_tqdm=True, **kwargs)


def compile_api(p, **kwargs):
    from modeling_minibert.deployment.compiled import compile_model

    return compile_model(p.broken, p.broken, **kwargs)


def push(p, folder: str = "broken", repo_id: str = "alice/model", **kwargs):
    from modeling_minibert.sharing.push import push_to_hub

    return push_to_hub(getattr(p, folder), repo_id, token="hf_notarealtoken", **kwargs)


def pretrain_api(p, **kwargs):
    from modeling_minibert.training.pretraining import pretrain

    kwargs.setdefault("output_dir", str(p.out))
    kwargs.setdefault("train_file", [str(p.data / "documents.txt")])
    return pretrain(max_steps=2, disable_tqdm=True, report_to="none", **kwargs)


TINY_STUDENT = (
    "hidden_size=32,num_hidden_layers=1,num_attention_heads=2,intermediate_size=64,max_position_embeddings=24"
)
DEEP_STUDENT = TINY_STUDENT.replace("num_hidden_layers=1", "num_hidden_layers=3")  # deeper than {bert}


def pretrain_cli(
    *words: str,
    train: str = "{data}/documents.txt",
    output: str = "{out}",
    model: str | None = None,
    teacher: str | None = None,
) -> tuple[str, ...]:
    """A tiny new model with the fixtures' tokenizer, (`model`) continued pretraining of a folder, or (`teacher`) a
    tiny student distilled from a teacher folder."""
    shape = (
        ("--model_name_or_path", model)
        if model
        else ("--teacher_model_name_or_path", teacher, "--config_overrides", TINY_STUDENT)
        if teacher
        else ("--tokenizer_name", "{mlm}", "--config_overrides", TINY_STUDENT)
    )
    return (
        "pretrain",
        "--train_file",
        train,
        "--output_dir",
        output,
        "--max_steps",
        "2",
        "--disable_tqdm",
        "true",
        *shape,
        "--max_seq_length",
        "24",
        *words,
    )


def distill_api(p, teacher: str = "classifier", train: str = "classes.csv", **kwargs):
    from modeling_minibert.training.distillation.flow import distill

    kwargs.setdefault("output_dir", str(p.out))
    kwargs.setdefault("task", "sequence-classification")
    return distill(
        teacher_model_name_or_path=str(getattr(p, teacher)),
        model_name_or_path=str(p.mlm),
        train_file=str(p.data / train),
        report_to="none",
        show_progress=False,
        **kwargs,
    )


def distill_cli(
    *words: str,
    teacher: str = "{classifier}",
    train: str = "{data}/classes.csv",
    output: str = "{out}",
    task: str = "sequence-classification",
) -> tuple[str, ...]:
    return (
        "distill",
        "--task",
        task,
        "--teacher_model_name_or_path",
        teacher,
        "--model_name_or_path",
        "{mlm}",
        "--train_file",
        train,
        "--output_dir",
        output,
        "--disable_tqdm",
        "true",
        *words,
    )


def tune(p, task: str = "sequence-classification", train: str = "classes.csv", model: str = "mlm", **kwargs):
    from modeling_minibert.training.finetuning import finetune

    kwargs.setdefault("output_dir", p.out)
    return finetune(
        task=task,
        model_name_or_path=getattr(p, model),
        train_file=p.data / train,
        report_to="none",
        disable_tqdm=True,
        **kwargs,
    )


def finetune_cli(
    *words: str, task: str = "sequence-classification", train: str = "{data}/classes.csv", output: str = "{out}"
) -> tuple[str, ...]:
    return (
        "finetune",
        "--task",
        task,
        "--model_name_or_path",
        "{mlm}",
        "--train_file",
        train,
        "--output_dir",
        output,
        "--disable_tqdm",
        "true",
        *words,
    )


MASK = "the company said [MASK] rose."
CORES = len(usable_cores())  # the most threads a run may ask for here
BIG = 10_000_000  # the issue's vocab_size: 3 GB allocated for 21 s before the fix

ROWS: list[Row] = [
    # -- config.json: wrong types, impossible values, not JSON -----------------------------------------------------
    Row(
        "config-hidden_size-a-string",
        ("hidden_size", "'abc'"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertForMaskedLM.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(hidden_size="abc"),
    ),
    Row(
        "config-layers-a-float",
        ("num_hidden_layers", "2.5"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}"),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(num_hidden_layers=2.5),
    ),
    Row(
        "config-layers-a-bool",
        ("num_hidden_layers", "True"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertConfig.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(num_hidden_layers=True),
    ),
    Row(
        "config-negative-vocab",
        ("vocab_size", "-5"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertConfig.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(vocab_size=-5),
    ),
    Row(
        "config-zero-heads",
        ("num_attention_heads", "0"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}"),
        lambda p: MiniBertConfig(num_attention_heads=0),
        source="mlm",
        breakage=edit_config(num_attention_heads=0),
    ),
    Row(
        "config-heads-do-not-divide",
        ("hidden_size (30)", "num_attention_heads (4)"),
        None,
        lambda p: MiniBertConfig(hidden_size=30, num_attention_heads=4),
    ),
    Row(
        "config-unknown-activation",
        ("hidden_act", "'swish2'"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertConfig(hidden_act="swish2"),
        source="mlm",
        breakage=edit_config(hidden_act="swish2"),
    ),
    Row(
        "config-dropout-above-one",
        ("hidden_dropout_prob", "1.5"),
        None,
        lambda p: MiniBertConfig(hidden_dropout_prob=1.5),
    ),
    Row(
        "config-pad-id-outside-vocab",
        ("pad_token_id (120)", "vocab_size=120"),
        None,
        lambda p: MiniBertConfig(vocab_size=120, pad_token_id=120),
    ),
    Row(
        "config-layer-norm-position",
        ("layer_norm_position", "'middle'"),
        None,
        lambda p: MiniBertConfig(layer_norm_position="middle"),
    ),
    *float_rows(),
    Row(
        "config-layer-norm-eps-nan-fill-mask",
        ("layer_norm_eps", "nan"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: fill(p),
        source="mlm",
        breakage=edit_config(layer_norm_eps=float("nan")),
        in_subprocess=True,
    ),
    Row(
        "config-initializer-range-inf-export",
        ("initializer_range", "inf"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}"),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(initializer_range=float("inf")),
    ),
    Row(
        "config-dropout-nan-convert",
        ("hidden_dropout_prob", "nan"),
        ("convert-bert", "--to-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: convert(p, to_bert=True),
        source="mlm",
        breakage=edit_config(hidden_dropout_prob=float("nan")),
    ),
    Row(
        "config-vocab-above-the-limit",
        ("vocab_size=1048577", "limit of 1048576"),
        None,
        lambda p: MiniBertConfig(vocab_size=2**20 + 1),
    ),
    Row("config-num-labels-zero", ("num_labels", "0"), None, lambda p: MiniBertConfig(num_labels=0)),
    Row(
        "config-initializer-range-negative",
        ("initializer_range", "-0.02"),
        None,
        lambda p: MiniBertConfig(initializer_range=-0.02),
    ),
    Row(
        "config-invalid-json",
        ("{broken}/config.json", "not valid JSON", "line 1 column 2"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertForMaskedLM.from_pretrained(p.broken),
        source="mlm",
        breakage=write("config.json", "{oops"),
    ),
    Row(
        "config-empty-file",
        ("{broken}/config.json", "not valid JSON"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}"),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=write("config.json", ""),
    ),
    Row(
        "config-latin1-bytes",
        ("{broken}/config.json", "not valid JSON", "0xe9"),
        ("convert-bert", "--to-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: MiniBertConfig.from_pretrained(p.broken),
        source="mlm",
        breakage=write("config.json", b'{"hidden_act": "g\xe9lu"}'),
    ),
    Row(
        "config-a-json-list",
        ("{broken}/config.json", "JSON object", "list"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertConfig.from_pretrained(p.broken),
        source="mlm",
        breakage=write("config.json", "[1, 2]"),
    ),
    # A BERT folder loads into Mini-BERT (test_convert_bert.py); a model type that is neither is refused.
    Row(
        "config-of-another-model-type",
        ("{broken}", "'roberta'"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}"),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(model_type="roberta"),
    ),
    Row(
        "config-a-folder",
        ("{broken}", "config.json"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: fill(p),
        FileNotFoundError,
        source="mlm",
        breakage=replace_by_folder("config.json"),
    ),
    # -- weights: missing, pickled, truncated, disagreeing with the config ----------------------------------------
    Row(
        "weights-missing",
        ("{broken}", "no model.safetensors"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertForMaskedLM.from_pretrained(p.broken),
        FileNotFoundError,
        source="mlm",
        breakage=delete("model.safetensors"),
    ),
    Row(
        "weights-missing-export",
        ("{broken}", "no model.safetensors"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}"),
        lambda p: export(p),
        FileNotFoundError,
        source="mlm",
        breakage=delete("model.safetensors"),
    ),
    Row(
        "weights-missing-convert",
        ("{broken}", "model.safetensors"),
        ("convert-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: convert(p),
        FileNotFoundError,
        source="bert",
        breakage=delete("model.safetensors"),
    ),
    Row(
        "weights-only-a-pickle",
        ("{broken}", "pytorch_model.bin", "pickle"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=lambda f: (f / "model.safetensors").rename(f / "pytorch_model.bin"),
    ),
    Row(
        "weights-truncated",
        ("{broken}/model.safetensors", "truncated or corrupted"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=truncate("model.safetensors", 3000),
    ),
    Row(
        "weights-empty-file",
        ("{broken}/model.safetensors", "truncated or corrupted"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}"),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=truncate("model.safetensors", 0),
    ),
    Row(
        "weights-truncated-convert",
        ("{broken}/model.safetensors",),
        ("convert-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: convert(p),
        source="bert",
        breakage=truncate("model.safetensors", 3000),
    ),
    Row(
        "config-vocab-10M-fill-mask",
        ("vocab_size=10000000", "limit of 1048576"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertForMaskedLM.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(vocab_size=BIG),
        seconds=3,
        in_subprocess=True,
    ),
    Row(
        "config-vocab-10^12",
        ("vocab_size=1000000000000",),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}"),
        lambda p: MiniBertForPreTraining.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(vocab_size=10**12),
        seconds=3,
    ),
    Row(
        "config-vocab-10M-convert",
        ("vocab_size", "10000000"),
        ("convert-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: convert(p),
        source="bert",
        breakage=edit_config(vocab_size=BIG),
        seconds=3,
    ),
    Row(
        "config-vocab-10M-to-bert",
        ("vocab_size", "10000000"),
        ("convert-bert", "--to-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: convert(p, to_bert=True),
        source="mlm",
        breakage=edit_config(vocab_size=BIG),
        seconds=3,
    ),
    Row(
        "config-hidden-size-disagrees",
        ("hidden_size=64", "hidden_size=32"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(hidden_size=64),
    ),
    Row(
        "config-more-layers-than-weights",
        ("num_hidden_layers=5", "2 layers"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}"),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(num_hidden_layers=5),
    ),
    Row(
        "config-positions-disagree",
        ("max_position_embeddings=512", "max_position_embeddings=24"),
        ("convert-bert", "--to-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(max_position_embeddings=512),
    ),
    Row(
        "config-vocab-at-the-limit-disagrees",
        ("vocab_size=1048576", "vocab_size=120"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertForMaskedLM.from_pretrained(p.broken),
        source="mlm",
        breakage=edit_config(vocab_size=2**20),
        seconds=3,
    ),
    # dtypes are checked like shapes: any parameter stored as integers or bytes is refused, naming it
    Row(
        "weights-embeddings-i32",
        ("{broken}/model.safetensors", "embeddings.word_embeddings.weight as I32", "F32"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: MiniBertForMaskedLM.from_pretrained(p.broken),
        source="mlm",
        breakage=retype("bert.embeddings.word_embeddings.weight", torch.int32),
    ),
    Row(
        "weights-layer-norm-u8",
        ("{broken}/model.safetensors", "encoder.layer.1.output.LayerNorm.weight as U8"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}"),
        lambda p: MiniBertModel.from_pretrained(p.broken),
        source="mlm",
        breakage=retype("bert.encoder.layer.1.output.LayerNorm.weight", torch.uint8),
    ),
    Row(
        "weights-mlm-bias-bool",
        ("{broken}/model.safetensors", "cls.predictions.bias as BOOL"),
        ("convert-bert", "--to-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: convert(p, to_bert=True),
        source="mlm",
        breakage=retype("cls.predictions.bias", torch.bool),
    ),
    Row(
        "weights-classifier-i64",
        ("{broken}/model.safetensors", "classifier.weight as I64"),
        None,
        lambda p: MiniBertForSequenceClassification.from_pretrained(p.broken),
        source="classifier",
        breakage=retype("classifier.weight", torch.int64),
    ),
    # -- model paths -----------------------------------------------------------------------------------------------
    Row(
        "model-path-does-not-exist",
        ("{out}", "does not exist"),
        ("fill-mask", "--model_name_or_path", "{out}", "--text", MASK),
        lambda p: MiniBertModel.from_pretrained(p.out),
        FileNotFoundError,
    ),
    Row(
        "model-path-relative-not-a-repo-id",
        ("no/such/model", "does not exist"),
        ("export-onnx", "--model_name_or_path", "./no/such/model", "--output_dir", "{onnx}"),
        lambda p: MiniBertConfig.from_pretrained("./no/such/model"),
        FileNotFoundError,
    ),
    Row(
        "model-path-is-a-file",
        ("{data}/corpus.txt",),
        ("fill-mask", "--model_name_or_path", "{data}/corpus.txt", "--text", MASK),
        lambda p: fill(SimpleNamespace(broken=p.data / "corpus.txt")),
        FileNotFoundError,
    ),
    Row(
        "model-path-empty-folder",
        ("{broken}", "config.json"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: fill(p),
        FileNotFoundError,
        source="mlm",
        breakage=lambda f: [x.unlink() for x in f.iterdir()],
    ),
    # -- fill-mask -------------------------------------------------------------------------------------------------
    Row(
        "fill-mask-top-k-100000",
        ("top_k=100000", "vocabulary size (120)"),
        ("fill-mask", "--model_name_or_path", "{mlm}", "--text", MASK, "--top_k", "100000"),
        lambda p: fill(p, "mlm", top_k=100000),
    ),
    Row(
        "fill-mask-top-k-zero",
        ("top_k=0",),
        ("fill-mask", "--model_name_or_path", "{mlm}", "--text", MASK, "--top-k", "0"),
        lambda p: fill(p, "mlm", top_k=0),
    ),
    Row(
        "fill-mask-top-k-negative",
        ("top_k=-3",),
        ("fill-mask", "--model_name_or_path", "{mlm}", "--text", MASK, "--top_k=-3"),
        lambda p: fill(p, "mlm", top_k=-3),
    ),
    Row(
        "fill-mask-top-k-not-a-number",
        ("--top_k", "'abc'"),
        ("fill-mask", "--model_name_or_path", "{mlm}", "--text", MASK, "--top_k", "abc"),
    ),
    Row(
        "fill-mask-no-mask-in-text",
        ("[MASK]", "'no mask here'"),
        ("fill-mask", "--model_name_or_path", "{mlm}", "--text", "no mask here"),
        lambda p: fill(p, "mlm", text="no mask here"),
    ),
    Row(
        "fill-mask-vocab-without-mask",
        ("{broken}", "lacks [MASK]"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: fill(p),
        source="mlm",
        breakage=without_mask_token,
    ),
    Row(
        "fill-mask-no-vocabulary-at-all",
        ("{broken}", "no tokenizer vocabulary"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: fill(p),
        FileNotFoundError,
        source="mlm",
        breakage=delete("tokenizer.json", "vocab.txt"),
    ),
    Row(
        "fill-mask-tokenizer-json-broken",
        ("{broken}", "tokenizer.json", "line 1 column 2"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: fill(p),
        source="mlm",
        breakage=write("tokenizer.json", "{oops"),
    ),
    Row(
        "fill-mask-classifier-folder",
        ("{classifier}", "no masked-LM head", "MiniBertForSequenceClassification"),
        ("fill-mask", "--model_name_or_path", "{classifier}", "--text", MASK),
        lambda p: fill(p, "classifier"),
    ),
    Row(
        "fill-mask-text-longer-than-positions",
        ("sequence length", "max_position_embeddings=24"),
        ("fill-mask", "--model_name_or_path", "{mlm}", "--text", MASK + " the company said" * 10),
        lambda p: fill(p, "mlm", text=MASK + " the company said" * 10),
    ),
    Row(
        "fill-mask-tokenizer-larger-than-model",
        ("the tokenizer in {broken}", "122 tokens", "vocab_size=120"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: fill(p),
        source="mlm",
        breakage=tokenizer_with(extra_tokens=2),
    ),
    Row(
        "fill-mask-tokenizer-smaller-than-model",
        ("the tokenizer in {broken}", "117 tokens", "vocab_size=120"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: fill(p),
        source="mlm",
        breakage=tokenizer_with(fewer_tokens=3),
    ),
    Row(
        "fill-mask-token-on-the-mask-id",
        ("the tokenizer in {broken}", "'said'", "[MASK]"),
        ("fill-mask", "--model_name_or_path", "{broken}", "--text", MASK),
        lambda p: fill(p),
        source="mlm",
        breakage=tokenizer_with(on_mask_id="said"),
    ),
    Row(
        "fill-mask-one-text-without-mask",
        ("[MASK]", "'no mask here'"),
        ("fill-mask", "--model_name_or_path", "{mlm}", "--text", MASK, "no mask here"),
        lambda p: fill(p, "mlm", text=[MASK, "no mask here"]),
    ),
    # -- model inputs (API only) -----------------------------------------------------------------------------------
    Row("mask-half", ("attention_mask", "0.5"), None, forward(attention_mask=half_mask(0.5))),
    Row("mask-two", ("attention_mask", "2"), None, forward(attention_mask=half_mask(2).long())),
    Row("mask-additive", ("attention_mask", "-10000"), None, forward(attention_mask=half_mask(-10000))),
    Row("mask-nan", ("attention_mask", "nan"), None, forward(attention_mask=half_mask(float("nan")))),
    Row("mask-wrong-shape", ("attention_mask", "(2, 7)", "(2, 8)"), None, forward(attention_mask=torch.ones(2, 7))),
    Row("ids-beyond-vocab", ("input_ids", "120", "vocab_size=120"), None, forward(input_ids=torch.full((2, 8), 120))),
    Row("ids-negative", ("input_ids", "-1"), None, forward(input_ids=torch.full((2, 8), -1))),
    Row("ids-one-dimensional", ("input_ids", "(8,)"), None, forward(input_ids=torch.ones(8, dtype=torch.long))),
    Row("ids-floats", ("input_ids", "float"), None, forward(input_ids=torch.ones(2, 8))),
    Row(
        "ids-longer-than-positions",
        ("sequence length 30", "max_position_embeddings=24"),
        None,
        forward(input_ids=torch.ones(2, 30, dtype=torch.long)),
    ),
    Row(
        "token-types-beyond-type-vocab",
        ("token_type_ids", "2", "type_vocab_size=2"),
        None,
        forward(token_type_ids=torch.full((2, 8), 2)),
    ),
    Row("ids-a-list", ("input_ids", "torch.Tensor", "list"), None, forward(input_ids=[[5, 6, 7]]), TypeError),
    Row(
        "mask-a-list",
        ("attention_mask", "torch.Tensor", "list"),
        None,
        forward(attention_mask=[[1] * 8] * 2),
        TypeError,
    ),
    Row(
        "ids-empty-batch",
        ("(0, 8)", "the batch is empty"),
        None,
        forward(input_ids=torch.ones(0, 8, dtype=torch.long)),
    ),
    Row(
        "ids-empty-sequences",
        ("(2, 0)", "the sequences are empty"),
        None,
        forward(input_ids=torch.ones(2, 0, dtype=torch.long)),
    ),
    # every kind of tensor in a dtype it cannot be
    Row(
        "ids-uint8",
        ("input_ids", "torch.uint8", "torch.long"),
        None,
        forward(input_ids=torch.ones(2, 8, dtype=torch.uint8)),
    ),
    Row("token-types-floats", ("token_type_ids", "torch.float32"), None, forward(token_type_ids=torch.zeros(2, 8))),
    Row(
        "position-ids-int16",
        ("position_ids", "torch.int16"),
        None,
        forward(position_ids=torch.arange(8, dtype=torch.int16)),
    ),
    Row(
        "embeds-integers",
        ("inputs_embeds", "torch.int64"),
        None,
        forward(input_ids=None, inputs_embeds=torch.ones(2, 8, 32, dtype=torch.long)),
    ),
    Row(
        "embeds-wrong-width",
        ("inputs_embeds", "(2, 8, 16)", "hidden_size=32"),
        None,
        forward(input_ids=None, inputs_embeds=torch.ones(2, 8, 16)),
    ),
    Row(
        "labels-floats-for-tagging",
        ("labels", "torch.float32", "class ids"),
        None,
        forward(MiniBertForTokenClassification, labels=torch.zeros(2, 8)),
    ),
    Row(
        "labels-a-list",
        ("labels", "torch.Tensor", "list"),
        None,
        forward(MiniBertForMaskedLM, labels=[[1] * 8] * 2),
        TypeError,
    ),
    # labels out of range: one line instead of torch's "Target 5 is out of bounds"
    Row(
        "labels-beyond-vocab",
        ("labels contains 120", "vocab_size=120"),
        None,
        forward(MiniBertForMaskedLM, labels=torch.full((2, 8), 120)),
    ),
    Row(
        "labels-beyond-num-labels",
        ("labels contains 5", "num_labels=3"),
        None,
        forward(MiniBertForSequenceClassification, labels=torch.tensor([0, 5])),
    ),
    Row(
        "labels-tags-beyond-num-labels",
        ("labels contains 3", "num_labels=3"),
        None,
        forward(MiniBertForTokenClassification, labels=torch.full((2, 8), 3)),
    ),
    Row(
        "labels-negative-not-ignore-index",
        ("labels contains -1", "-100 marks ignored"),
        None,
        forward(MiniBertForTokenClassification, labels=torch.full((2, 8), -1)),
    ),
    Row(
        "labels-nsp-beyond-two",
        ("next_sentence_label contains 2", "num_classes=2"),
        None,
        forward(MiniBertForPreTraining, next_sentence_label=torch.tensor([0, 2])),
    ),
    Row(
        "labels-choice-beyond-choices",
        ("labels contains 2", "num_choices=2"),
        None,
        forward(MiniBertForMultipleChoice, input_ids=torch.arange(16).reshape(1, 2, 8) + 5, labels=torch.tensor([2])),
    ),
    # -- convert-bert ----------------------------------------------------------------------------------------------
    Row(
        "convert-source-does-not-exist",
        ("{out}", "does not exist"),
        ("convert-bert", "--model_name_or_path", "{out}", "--output_dir", "{onnx}"),
        lambda p: convert(p, "out", "onnx"),
        FileNotFoundError,
    ),
    Row(
        "convert-minibert-without-to-bert",
        ("{mlm}/config.json", "'minibert'", "'bert'"),
        ("convert-bert", "--model_name_or_path", "{mlm}", "--output_dir", "{out}"),
        lambda p: convert(p, "mlm"),
    ),
    Row(
        "convert-into-non-empty-folder",
        ("{classifier}", "not empty"),
        ("convert-bert", "--model_name_or_path", "{bert}", "--output_dir", "{classifier}"),
        lambda p: convert(p, "bert", "classifier"),
        FileExistsError,
    ),
    Row(
        "convert-into-a-file",
        ("{data}/corpus.txt", "not a folder"),
        ("convert-bert", "--model_name_or_path", "{bert}", "--output_dir", "{data}/corpus.txt"),
        lambda p: convert(SimpleNamespace(bert=p.bert, out=p.data / "corpus.txt"), "bert"),
        FileExistsError,
    ),
    Row(
        "convert-into-read-only-place",
        ("cannot write {readonly}/out", "Read-only file system"),
        ("convert-bert", "--model_name_or_path", "{bert}", "--output_dir", "{readonly}/out"),
        lambda p: convert(SimpleNamespace(bert=p.bert, out=p.readonly / "out"), "bert"),
        OSError,
    ),
    Row(
        "convert-link-to-a-file-outside",
        ("{broken}/vocab.txt", "/etc/passwd", "outside"),
        ("convert-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: convert(p),
        source="bert",
        breakage=link("vocab.txt", "/etc/passwd"),
        in_subprocess=True,
    ),
    Row(
        "convert-link-to-a-hidden-file",
        ("{broken}/tokenizer_config.json", ".env"),
        ("convert-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: convert(p),
        source="bert",
        breakage=link("tokenizer_config.json", ".env", ".env"),
    ),
    Row(
        "convert-unknown-architecture",
        ("{broken}/config.json", "'BertForCausalLM'"),
        ("convert-bert", "--model_name_or_path", "{broken}", "--output_dir", "{out}"),
        lambda p: convert(p),
        source="bert",
        breakage=edit_config(architectures=["BertForCausalLM"]),
    ),
    # -- export-onnx -----------------------------------------------------------------------------------------------
    Row(
        "export-to-read-only-place",
        ("cannot write {readonly}/model.onnx",),
        ("export-onnx", "--model_name_or_path", "{mlm}", "--output_dir", "{readonly}/model.onnx"),
        lambda p: export(SimpleNamespace(broken=p.mlm, onnx=p.readonly / "model.onnx")),
        OSError,
        in_subprocess=True,
    ),
    Row(
        "export-to-existing-file",
        ("{data}/corpus.txt", "is not a folder"),
        ("export-onnx", "--model_name_or_path", "{mlm}", "--output_dir", "{data}/corpus.txt"),
        lambda p: export(SimpleNamespace(broken=p.mlm, onnx=p.data / "corpus.txt")),
        FileExistsError,
    ),
    Row(
        "export-into-a-non-empty-folder",
        ("{classifier}", "not empty", "--overwrite_output_dir"),
        ("export-onnx", "--model_name_or_path", "{mlm}", "--output_dir", "{classifier}"),
        lambda p: export(SimpleNamespace(broken=p.mlm, onnx=p.classifier)),
        FileExistsError,
    ),
    Row(
        "export-source-does-not-exist",
        ("{out}", "does not exist"),
        ("export-onnx", "--model_name_or_path", "{out}", "--output_dir", "{onnx}"),
        lambda p: export(p, "out"),
        FileNotFoundError,
    ),
    Row(
        "export-unknown-head",
        ("'BertModel'",),
        ("export-onnx", "--model_name_or_path", "{mlm}", "--output_dir", "{onnx}", "--head", "BertModel"),
        lambda p: export(p, "mlm", head="BertModel"),
    ),
    Row(
        "export-unknown-quantize-mode",
        ("'int4'", "int8"),
        ("export-onnx", "--model_name_or_path", "{mlm}", "--output_dir", "{onnx}", "--quantize", "int4"),
        lambda p: export(p, "mlm", quantize="int4"),
    ),
    Row(
        "export-quantize-without-weights",
        ("{broken}", "no model.safetensors"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{onnx}", "--quantize", "int8"),
        lambda p: export(p, quantize="int8"),
        FileNotFoundError,
        source="mlm",
        breakage=delete("model.safetensors"),
    ),
    Row(
        "export-quantize-to-existing-file",
        ("{data}/corpus.txt", "is not a folder"),
        ("export-onnx", "--model_name_or_path", "{mlm}", "--output_dir", "{data}/corpus.txt", "--quantize", "int8"),
        lambda p: export(SimpleNamespace(broken=p.mlm, onnx=p.data / "corpus.txt"), quantize="int8"),
        FileExistsError,
    ),
    # -- export-onnx --format transformers.js ----------------------------------------------------------------------
    Row(
        "export-tjs-variant-bert-cannot-express",
        ("{broken}/config.json", "layer_norm_position='pre'", "BERT"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{out}", "--format", "transformers.js"),
        lambda p: export(p, out="out", format="transformers.js"),
        source="classifier",
        breakage=edit_config(layer_norm_position="pre"),
    ),
    Row(
        "export-tjs-into-non-empty-folder",
        ("{mlm}", "not empty"),
        (
            "export-onnx",
            "--model_name_or_path",
            "{classifier}",
            "--output_dir",
            "{mlm}",
            "--format",
            "transformers.js",
        ),
        lambda p: export(SimpleNamespace(broken=p.classifier, onnx=p.mlm), format="transformers.js"),
        FileExistsError,
    ),
    Row(
        "export-tjs-unknown-quantize-mode",
        ("'int4'", "int8"),
        (
            "export-onnx",
            "--model_name_or_path",
            "{classifier}",
            "--output_dir",
            "{out}",
            "--format",
            "transformers.js",
            "--quantize",
            "int4",
        ),
        lambda p: export(p, "classifier", "out", format="transformers.js", quantize="int4"),
    ),
    Row(
        "export-tjs-with-optimize",
        ("--optimize", "transformers.js"),
        (
            "export-onnx",
            "--model_name_or_path",
            "{classifier}",
            "--output_dir",
            "{out}",
            "--format",
            "transformers.js",
            "--optimize",
        ),
        lambda p: export(p, "classifier", "out", format="transformers.js", optimize=True),
    ),
    Row(
        "export-unknown-format",
        ("'tfjs'", "transformers.js"),
        ("export-onnx", "--model_name_or_path", "{classifier}", "--output_dir", "{out}", "--format", "tfjs"),
        lambda p: export(p, "classifier", "out", format="tfjs"),
    ),
    # -- minibert benchmark-deploy (modeling_minibert.deployment.serving_benchmark) ----------------------------------------
    Row(
        "benchmark-deploy-blank-texts",
        ("{data}/blank.txt", "holds no text"),
        deploy_cli(texts="{data}/blank.txt"),
        lambda p: deploy(p, texts="blank.txt"),
    ),
    Row(
        "benchmark-deploy-unknown-path",
        ("'tensorrt'", "pytorch-fp32, pytorch-bf16"),
        deploy_cli("--paths", "tensorrt"),
        lambda p: deploy(p, paths=["tensorrt"]),
    ),
    Row(
        "benchmark-deploy-not-a-classifier",
        ("{mlm}", "MiniBertForPreTraining", "serves sequence classifiers"),
        deploy_cli(model="{mlm}"),
        lambda p: deploy(p, "mlm"),
    ),
    Row(
        "benchmark-deploy-threads-beyond-the-cpus",
        ("threads=100000", "CPUs"),
        deploy_cli("--threads", "100000"),
        lambda p: deploy(p, threads=100000),
    ),
    Row(
        "benchmark-deploy-zero-rounds",
        ("rounds=0", "at least 1"),
        deploy_cli("--rounds", "0"),
        lambda p: deploy(p, rounds=0),
    ),
    Row(
        "benchmark-deploy-labels-the-model-lacks",
        ("{data}/classes.csv", "labels the model does not know"),
        deploy_cli("--labelled_file", "{data}/classes.csv"),
        lambda p: deploy(p, labelled_file=p.data / "classes.csv"),
    ),
    # -- int8 in PyTorch (modeling_minibert.deployment.quantization: Python API only) ------------------------------------------
    Row(
        "quantize-without-weights",
        ("{broken}", "no model.safetensors"),
        None,
        lambda p: quantize_api(p),
        FileNotFoundError,
        source="classifier",
        breakage=delete("model.safetensors"),
    ),
    Row(
        "quantize-into-non-empty-folder",
        ("{mlm}", "not empty"),
        None,
        lambda p: quantize_api(SimpleNamespace(broken=p.classifier, out=p.mlm)),
        FileExistsError,
    ),
    Row(
        "quantize-source-does-not-exist",
        ("{out}", "does not exist"),
        None,
        lambda p: quantize_api(SimpleNamespace(broken=p.out, out=p.nowhere)),
        FileNotFoundError,
    ),
    # A saved int8 folder: every tensor's dtype and shape against the config's, and every scale finite and positive,
    # before the model is built (a vocab_size of a million would allocate first).
    Row(
        "int8-config-vocab-1M",
        ("vocab_size=1000000", "vocab_size=120"),
        None,
        load_int8,
        source="int8",
        breakage=edit_config(vocab_size=10**6),
        seconds=3,
    ),
    Row(
        "int8-scale-nan",
        ("{broken}/model.int8.safetensors", QKV_SCALE, "nan", "finite and positive"),
        None,
        load_int8,
        source="int8",
        breakage=int8_tensor(QKV_SCALE, set_first(float("nan"))),
    ),
    Row(
        "int8-scale-zero",
        ("{broken}/model.int8.safetensors", QKV_SCALE, "0.0", "finite and positive"),
        None,
        load_int8,
        source="int8",
        breakage=int8_tensor(QKV_SCALE, set_first(0.0)),
    ),
    Row(
        "int8-scale-negative",
        ("{broken}/model.int8.safetensors", QKV_SCALE, "-1.0"),
        None,
        load_int8,
        source="int8",
        breakage=int8_tensor(QKV_SCALE, set_first(-1.0)),
    ),
    Row(
        "int8-scale-short",
        ("{broken}/model.int8.safetensors", QKV_SCALE, "[10]", "[96]"),
        None,
        load_int8,
        source="int8",
        breakage=int8_tensor(QKV_SCALE, lambda t: t[:10]),
    ),
    Row(
        "int8-weights-as-floats",
        ("{broken}/model.int8.safetensors", "qkv.weight_int8", "F32", "I8"),
        None,
        load_int8,
        source="int8",
        breakage=int8_tensor(QKV_SCALE.replace("scale", "int8"), lambda t: t.float()),
    ),
    Row(
        "int8-zero-points-as-i64",
        ("{broken}/model.int8.safetensors", "qkv.weight_zero_point", "I64", "I32"),
        None,
        load_int8,
        source="int8",
        breakage=int8_tensor(QKV_SCALE.replace("scale", "zero_point"), lambda t: t.long()),
    ),
    Row(
        "int8-layer-norm-as-i32",
        ("{broken}/model.int8.safetensors", "embeddings.LayerNorm.weight", "I32", "F32"),
        None,
        load_int8,
        source="int8",
        breakage=int8_tensor("bert.embeddings.LayerNorm.weight", lambda t: t.int()),
    ),
    Row(
        "int8-layer-norm-shape",
        ("{broken}/model.int8.safetensors", "embeddings.LayerNorm.weight", "[8]", "[32]"),
        None,
        load_int8,
        source="int8",
        breakage=int8_tensor("bert.embeddings.LayerNorm.weight", lambda t: t[:8]),
    ),
    # -- onnxruntime in length buckets (modeling_minibert.deployment.onnx_session: Python API only) ---------------
    Row(
        "session-empty-batch",
        ("input_ids", "(0, 8)", "empty"),
        None,
        session_run(
            torch.zeros(0, 8, dtype=torch.long).numpy(),
            torch.zeros(0, 8, dtype=torch.long).numpy(),
            torch.zeros(0, 8, dtype=torch.long).numpy(),
        ),
    ),
    Row(
        "session-ids-beyond-vocab",
        ("input_ids", "120", "vocab_size=120"),
        None,
        session_run(ids=torch.full((2, 8), 120).numpy()),
    ),
    Row(
        "session-ids-negative",
        ("input_ids", "-1", "vocab_size=120"),
        None,
        session_run(ids=torch.full((2, 8), -1).numpy()),
    ),
    Row(
        "session-token-types-beyond",
        ("token_type_ids", "2", "type_vocab_size=2"),
        None,
        session_run(types=torch.full((2, 8), 2).numpy()),
    ),
    Row(
        "session-longer-than-positions",
        ("30", "max_position_embeddings=24"),
        None,
        session_run(
            torch.ones(2, 30, dtype=torch.long).numpy(),
            torch.ones(2, 30, dtype=torch.long).numpy(),
            torch.zeros(2, 30, dtype=torch.long).numpy(),
        ),
    ),
    Row(
        "session-shapes-differ",
        ("attention_mask", "(2, 7)", "(2, 8)"),
        None,
        session_run(mask=torch.ones(2, 7, dtype=torch.long).numpy()),
    ),
    Row("session-ids-floats", ("input_ids", "float"), None, session_run(ids=torch.ones(2, 8).numpy())),
    # -- train-tokenizer -------------------------------------------------------------------------------------------
    Row(
        "tokenizer-vocab-size-below-minimum",
        ("vocab_size=3", "16"),
        ("train-tokenizer", "--train_file", "{data}/corpus.txt", "--output_dir", "{out}", "--vocab_size", "3"),
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], vocab_size=3),
    ),
    Row(
        "tokenizer-vocab-size-negative",
        ("vocab_size=-100",),
        ("train-tokenizer", "--train_file", "{data}/corpus.txt", "--output_dir", "{out}", "--vocab_size=-100"),
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], vocab_size=-100),
    ),
    Row(
        "tokenizer-vocab-size-above-maximum",
        ("vocab_size=1000000000", "1048576"),
        (
            "train-tokenizer",
            "--train_file",
            "{data}/corpus.txt",
            "--output_dir",
            "{out}",
            "--vocab_size",
            "1000000000",
        ),
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], vocab_size=10**9),
        seconds=5,
        in_subprocess=True,
    ),
    Row(
        "tokenizer-min-frequency-zero",
        ("min_frequency=0",),
        ("train-tokenizer", "--train_file", "{data}/corpus.txt", "--output_dir", "{out}", "--min_frequency", "0"),
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], min_frequency=0),
    ),
    Row(
        "tokenizer-limit-alphabet-zero",
        ("limit_alphabet=0",),
        ("train-tokenizer", "--train_file", "{data}/corpus.txt", "--output_dir", "{out}", "--limit_alphabet", "0"),
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], limit_alphabet=0),
    ),
    Row(
        "tokenizer-model-max-length-one",
        ("model_max_length=1",),
        ("train-tokenizer", "--train_file", "{data}/corpus.txt", "--output_dir", "{out}", "--model_max_length", "1"),
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], model_max_length=1),
    ),
    Row("tokenizer-no-train-file", ("--train_file",), ("train-tokenizer", "--output_dir", "{out}")),
    Row(
        "tokenizer-train-file-missing",
        ("{data}/nope.txt",),
        ("train-tokenizer", "--train_file", "{data}/nope.txt", "--output_dir", "{out}"),
        lambda p: train_tok(p, train_file=[p.data / "nope.txt"]),
        FileNotFoundError,
    ),
    Row(
        "tokenizer-train-file-a-folder",
        ("{data}",),
        ("train-tokenizer", "--train_file", "{data}", "--output_dir", "{out}"),
        lambda p: train_tok(p, train_file=[p.data]),
        FileNotFoundError,
    ),
    Row(
        "tokenizer-empty-file",
        ("{data}/empty.txt", "no text"),
        ("train-tokenizer", "--train_file", "{data}/empty.txt", "--output_dir", "{out}", "--disable_tqdm", "true"),
        lambda p: train_tok(p, train_file=[p.data / "empty.txt"]),
    ),
    Row(
        "tokenizer-blank-lines-only",
        ("{data}/blank.txt", "no text"),
        ("train-tokenizer", "--train_file", "{data}/blank.txt", "--output_dir", "{out}", "--disable_tqdm", "true"),
        lambda p: train_tok(p, train_file=[p.data / "blank.txt"]),
    ),
    Row("tokenizer-no-texts", ("no text",), None, lambda p: train_tok(p, train_data=[])),
    Row(
        "tokenizer-latin1-file",
        ("{data}/latin1.txt", "UTF-8", "0xe9"),
        ("train-tokenizer", "--train_file", "{data}/latin1.txt", "--output_dir", "{out}", "--disable_tqdm", "true"),
        lambda p: train_tok(p, train_file=[p.data / "latin1.txt"]),
    ),
    Row(
        "tokenizer-utf16-file",
        ("{data}/utf16.txt", "UTF-8"),
        ("train-tokenizer", "--train_file", "{data}/utf16.txt", "--output_dir", "{out}", "--disable_tqdm", "true"),
        lambda p: train_tok(p, train_file=[p.data / "utf16.txt"]),
    ),
    Row(
        "tokenizer-output-not-empty",
        ("{mlm}", "not empty"),
        ("train-tokenizer", "--train_file", "{data}/corpus.txt", "--output_dir", "{mlm}"),
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], output_dir=p.mlm),
        FileExistsError,
    ),
    Row(
        "tokenizer-output-a-file",
        ("{data}/corpus.txt", "not a folder"),
        ("train-tokenizer", "--train_file", "{data}/corpus.txt", "--output_dir", "{data}/corpus.txt"),
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], output_dir=p.data / "corpus.txt"),
        FileExistsError,
    ),
    Row(
        "tokenizer-output-read-only",
        ("cannot write {readonly}/tok",),
        (
            "train-tokenizer",
            "--train_file",
            "{data}/corpus.txt",
            "--output_dir",
            "{readonly}/tok",
            "--disable_tqdm",
            "true",
            "--vocab_size",
            "100",
        ),
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], vocab_size=100, output_dir=p.readonly / "tok"),
        OSError,
    ),
    Row(
        "tokenizer-a-text-not-a-string",
        ("text #1", "int"),
        None,
        lambda p: train_tok(p, train_data=["a b c", 7], output_dir=None),
        TypeError,
    ),
    # The Python entry takes the command line's flags as keyword options; the names it had before are refused.
    Row(
        "tokenizer-unknown-option",
        ("'overwrite'", "overwrite_output_dir"),
        None,
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], overwrite=True),
    ),
    Row(
        "tokenizer-texts-as-a-positional-argument",
        ("train_tokenizer()", "positional"),
        None,
        lambda p: train_tok(p, [p.data / "corpus.txt"]),
        TypeError,
    ),
    Row(
        "tokenizer-files-and-texts",
        ("train_file", "train_data", "not both"),
        None,
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], train_data=["a b c"]),
    ),
    Row(
        "tokenizer-texts-one-string",
        ("one str", "train_file"),
        None,
        lambda p: train_tok(p, train_data="a b c"),
        TypeError,
    ),
    # -- push (every check is local: the Hub is never asked) -------------------------------------------------------
    Row(
        "push-repo-id-three-parts",
        ("'a/b/c'",),
        ("push", "--model_name_or_path", "{mlm}", "--hub_model_id", "a/b/c"),
        lambda p: push(p, "mlm", "a/b/c"),
    ),
    Row(
        "push-repo-id-dot-dot",
        ("'alice/..'",),
        ("push", "--model_name_or_path", "{mlm}", "--hub_model_id", "alice/.."),
        lambda p: push(p, "mlm", "alice/.."),
    ),
    Row(
        "push-repo-id-with-space",
        ("'alice/my model'",),
        ("push", "--model_name_or_path", "{mlm}", "--hub_model_id", "alice/my model"),
        lambda p: push(p, "mlm", "alice/my model"),
    ),
    Row(
        "push-pickle-in-folder",
        ("{broken}", "extra.pt", "pickle"),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=write("extra.pt", b"not really a pickle"),
    ),
    Row(
        "push-pickle-weights",
        ("pytorch_model.bin",),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=lambda f: (f / "model.safetensors").rename(f / "pytorch_model.bin"),
    ),
    Row(
        "push-revision-a-commit-id",
        ("revision='" + "a" * 40 + "'",),
        ("push", "--model_name_or_path", "{mlm}", "--hub_model_id", "alice/model", "--revision", "a" * 40),
        lambda p: push(p, "mlm", revision="a" * 40),
    ),
    Row(
        "push-folder-does-not-exist",
        ("{out}",),
        ("push", "--model_name_or_path", "{out}", "--hub_model_id", "alice/model"),
        lambda p: push(p, "out"),
        FileNotFoundError,
    ),
    Row(
        "push-folder-without-config",
        ("{data}", "config.json"),
        ("push", "--model_name_or_path", "{data}", "--hub_model_id", "alice/model"),
        lambda p: push(p, "data"),
        FileNotFoundError,
    ),
    # A link is never followed out of the folder, nor to what is never uploaded (the secret would be published).
    Row(
        "push-link-to-a-file-outside",
        ("{broken}/vocab.txt", "/etc/passwd", "outside"),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=link("vocab.txt", "/etc/passwd"),
    ),
    Row(
        "push-link-to-a-folder-outside",
        ("{broken}/extra", "outside"),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=link("extra", "/etc"),
    ),
    Row(
        "push-link-deep-inside",
        ("{broken}/docs/notes/vocab.txt", "/etc/passwd"),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=link("docs/notes/vocab.txt", "/etc/passwd", "docs/notes/readme.txt"),
    ),
    Row(
        "push-link-to-a-hidden-file",
        ("{broken}/notes.txt", ".git/config"),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=link("notes.txt", ".git/config", ".git/config"),
    ),
    Row(
        "push-link-to-training-state",
        ("{broken}/args.json", "checkpoint-5/training_args.bin"),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=link("args.json", "checkpoint-5/training_args.bin", "checkpoint-5/training_args.bin"),
    ),
    Row(
        "push-link-to-nothing",
        ("{broken}/vocab.txt", "does not exist"),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=link("vocab.txt", "gone.txt"),
    ),
    Row(
        "push-link-loop",
        ("{broken}/notes.txt", "loop"),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=link("notes.txt", "notes.txt"),
    ),
    Row(
        "push-weights-corrupt",
        ("{broken}/model.safetensors", "not a readable safetensors file"),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=write("model.safetensors", b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all}"),
    ),
    Row(
        "push-weights-truncated",
        ("{broken}/model.safetensors", "truncated or corrupted"),
        ("push", "--model_name_or_path", "{broken}", "--hub_model_id", "alice/model"),
        lambda p: push(p),
        source="mlm",
        breakage=truncate("model.safetensors", 200),
        in_subprocess=True,
    ),
    # -- finetune --------------------------------------------------------------------------------------------------
    Row(
        "finetune-into-read-only-folder",
        ("output_dir {readonly}/run", "cannot be written"),
        finetune_cli(output="{readonly}/run"),
        lambda p: tune(p, output_dir=p.readonly / "run"),
        OSError,
        in_subprocess=True,
    ),
    Row(
        "finetune-into-non-empty-folder",
        ("{classifier}", "not empty"),
        finetune_cli(output="{classifier}"),
        lambda p: tune(p, output_dir=p.classifier),
        FileExistsError,
    ),
    Row(
        "finetune-into-a-file",
        ("{data}/corpus.txt", "not a folder"),
        finetune_cli(output="{data}/corpus.txt"),
        lambda p: tune(p, output_dir=p.data / "corpus.txt"),
        FileExistsError,
    ),
    Row("finetune-unknown-task", ("--task", "'summarization'"), finetune_cli(task="summarization")),
    Row("finetune-unknown-task-api", ("'summarization'",), None, lambda p: tune(p, "summarization")),
    Row("finetune-no-task", ("--task",), finetune_cli()[:1] + finetune_cli()[3:]),
    Row(
        "finetune-model-does-not-exist",
        ("{nowhere}",),
        finetune_cli()[:4] + ("{nowhere}",) + finetune_cli()[5:],
        lambda p: tune(p, model="nowhere"),
        FileNotFoundError,
    ),
    Row(
        "finetune-model-without-weights",
        ("{broken}", "model.safetensors"),
        finetune_cli()[:4] + ("{broken}",) + finetune_cli()[5:],
        lambda p: tune(p, model="broken"),
        FileNotFoundError,
        source="mlm",
        breakage=delete("model.safetensors"),
    ),
    Row(
        "finetune-model-config-vocab-2^20",
        ("vocab_size=1048576", "vocab_size=120"),
        finetune_cli()[:4] + ("{broken}",) + finetune_cli()[5:],
        lambda p: tune(p, model="broken"),
        source="mlm",
        breakage=edit_config(vocab_size=2**20),
        seconds=5,
    ),
    Row(
        "finetune-model-config-vocab-10M",
        ("vocab_size=10000000", "limit of 1048576"),
        finetune_cli()[:4] + ("{broken}",) + finetune_cli()[5:],
        lambda p: tune(p, model="broken"),
        source="mlm",
        breakage=edit_config(vocab_size=BIG),
        seconds=5,
    ),
    Row(
        "finetune-train-file-missing",
        ("{data}/nope.csv",),
        finetune_cli(train="{data}/nope.csv"),
        lambda p: tune(p, train="nope.csv"),
        FileNotFoundError,
    ),
    Row(
        "finetune-train-file-empty",
        ("{data}/empty.txt", "empty"),
        finetune_cli(task="token-classification", train="{data}/empty.txt"),
        lambda p: tune(p, "token-classification", "empty.txt"),
    ),
    Row(
        "finetune-csv-header-only",
        ("{data}/header_only.csv", "no rows"),
        finetune_cli(train="{data}/header_only.csv"),
        lambda p: tune(p, train="header_only.csv"),
    ),
    Row(
        "finetune-csv-latin1",
        ("{data}/latin1.csv", "UTF-8"),
        finetune_cli(train="{data}/latin1.csv"),
        lambda p: tune(p, train="latin1.csv"),
    ),
    Row(
        "finetune-csv-missing-label",
        ("{data}/missing_label.csv", "row 2", "'label'"),
        finetune_cli(train="{data}/missing_label.csv"),
        lambda p: tune(p, train="missing_label.csv"),
    ),
    Row(
        "finetune-unknown-text-column",
        ("'review'", "['text', 'label']"),
        finetune_cli("--text_column_name", "review"),
        lambda p: tune(p, text_column_name="review"),
    ),
    Row(
        "finetune-unknown-label-column",
        ("'sentiment'",),
        finetune_cli("--label_column_name", "sentiment"),
        lambda p: tune(p, label_column_name="sentiment"),
    ),
    Row(
        "finetune-labels-not-in-the-data",
        ("'1'", "['0', 'positive']"),
        finetune_cli("--labels", "0,positive"),
        lambda p: tune(p, labels=["0", "positive"]),
    ),
    Row("finetune-duplicate-labels", ("['0', '0']",), None, lambda p: tune(p, labels=["0", "0"])),
    Row(
        "finetune-max-seq-length-above-positions",
        ("max_seq_length=1000", "max_position_embeddings=24"),
        finetune_cli("--max_seq_length", "1000"),
        lambda p: tune(p, max_seq_length=1000),
    ),
    Row(
        "finetune-max-seq-length-zero",
        ("max_seq_length=0",),
        finetune_cli("--max_seq_length", "0"),
        lambda p: tune(p, max_seq_length=0),
    ),
    Row("finetune-unknown-training-option", ("'learning_rte'",), None, lambda p: tune(p, learning_rte=1e-3)),
    Row("finetune-learning-rate-not-a-number", ("--learning_rate", "'fast'"), finetune_cli("--learning_rate", "fast")),
    Row(
        "finetune-learning-rates-without-validation",
        ("learning_rates", "validation data"),
        finetune_cli("--learning_rates", "1e-4", "3e-4"),
        lambda p: tune(p, learning_rates=[1e-4, 3e-4]),
    ),
    Row(
        "finetune-learning-rates-zero",
        ("learning_rates", "0.0", "positive"),
        finetune_cli("--validation_file", "{data}/classes.csv", "--learning_rates", "1e-4", "0"),
        lambda p: tune(p, validation_file=p.data / "classes.csv", learning_rates=[1e-4, 0.0]),
    ),
    Row(
        "finetune-learning-rates-and-learning-rate",
        ("learning_rate (0.001)", "learning_rates ([0.0001])", "not both"),
        finetune_cli("--validation_file", "{data}/classes.csv", "--learning_rates", "1e-4", "--learning_rate", "1e-3"),
        lambda p: tune(p, validation_file=p.data / "classes.csv", learning_rates=[1e-4], learning_rate=1e-3),
    ),
    Row(
        "finetune-learning-rates-resumed",
        ("resume_from_checkpoint", "learning_rates", "again"),
        finetune_cli(
            "--validation_file", "{data}/classes.csv", "--learning_rates", "1e-4", "--resume_from_checkpoint"
        ),
        lambda p: tune(p, validation_file=p.data / "classes.csv", learning_rates=[1e-4], resume_from_checkpoint=True),
    ),
    Row(
        "distill-learning-rates-without-validation",
        ("learning_rates", "validation data"),
        distill_cli("--learning_rates", "1e-4", "3e-4"),
        lambda p: distill_api(p, learning_rates=[1e-4, 3e-4]),
    ),
    Row(
        "distill-embedding-learning-rates",
        ("learning_rates=[0.0001]", "'embedding'", "--learning_rate"),
        distill_cli("--learning_rates", "1e-4", task="embedding", train="{data}/corpus.txt"),
        lambda p: distill_api(p, task="embedding", train="corpus.txt", learning_rates=[1e-4]),
    ),
    Row(
        "finetune-resume-without-checkpoint",
        ("{out}", "checkpoint"),
        finetune_cli("--resume_from_checkpoint"),
        lambda p: tune(p, resume_from_checkpoint=True),
        FileNotFoundError,
    ),
    Row(
        "finetune-conll-missing-column",
        ("{data}/missing_column.conll", "line 2", "3 columns"),
        finetune_cli(task="token-classification", train="{data}/missing_column.conll"),
        lambda p: tune(p, "token-classification", "missing_column.conll"),
    ),
    Row(
        "finetune-conll-extra-column",
        ("{data}/extra_column.conll", "line 3", "'German JJ B-MISC extra'"),
        finetune_cli(task="token-classification", train="{data}/extra_column.conll"),
        lambda p: tune(p, "token-classification", "extra_column.conll"),
    ),
    Row(
        "finetune-conll-nul-in-tag",
        ("{data}/nul_tag.conll", "line 5"),
        finetune_cli(task="token-classification", train="{data}/nul_tag.conll"),
        lambda p: tune(p, "token-classification", "nul_tag.conll"),
    ),
    Row(
        "finetune-conll-latin1",
        ("{data}/latin1.txt", "UTF-8"),
        finetune_cli(task="token-classification", train="{data}/latin1.txt"),
        lambda p: tune(p, "token-classification", "latin1.txt"),
    ),
    Row(
        "finetune-one-class-training-set",
        ("{data}/one_class.csv", "'1'", "at least two labels"),
        finetune_cli(train="{data}/one_class.csv"),
        lambda p: tune(p, train="one_class.csv"),
    ),
    Row(
        "finetune-ansi-escape-label",
        ("{data}/ansi_label.csv", "row 1", "U+001B"),
        finetune_cli(train="{data}/ansi_label.csv"),
        lambda p: tune(p, train="ansi_label.csv"),
    ),
    Row(
        "finetune-qa-nfc-answer-nfd-context",
        ("{data}/nfd_context.json", "'café'", "NFD", "normaliz"),
        finetune_cli(task="question-answering", train="{data}/nfd_context.json"),
        lambda p: tune(p, "question-answering", train="nfd_context.json"),
    ),
    # Concurrency: a second run into a folder a living run holds is refused before it writes anything.
    Row(
        "finetune-into-a-folder-in-use",
        ("{broken}", "in use by another finetune run"),
        finetune_cli(output="{broken}"),
        lambda p: tune(p, output_dir=p.broken),
        FileExistsError,
        source="data",
        breakage=held_by_a_live_run("finetune"),
    ),
    Row(
        "finetune-squad-without-answers",
        ("{data}/squad_no_answers.json", "no answer"),
        finetune_cli(task="question-answering", train="{data}/squad_no_answers.json"),
        lambda p: tune(p, "question-answering", "squad_no_answers.json"),
    ),
    # The question-answering options are checked where they are read, before the output folder or the data.
    Row(
        "finetune-qa-n-best-size-zero",
        ("n_best_size=0", "at least 1"),
        finetune_cli("--n_best_size", "0", task="question-answering", train="{data}/nope.json"),
        lambda p: tune(p, "question-answering", "nope.json", n_best_size=0),
    ),
    Row(
        "finetune-qa-max-answer-length-zero",
        ("max_answer_length=0", "at least 1"),
        finetune_cli("--max_answer_length", "0", task="question-answering", train="{data}/nope.json"),
        lambda p: tune(p, "question-answering", "nope.json", max_answer_length=0),
    ),
    Row(
        "finetune-qa-doc-stride-leaves-no-room",
        ("doc_stride=20", "max_seq_length=24", "at most 19"),
        finetune_cli(
            "--doc_stride", "20", "--max_seq_length", "24", task="question-answering", train="{data}/squad.json"
        ),
        lambda p: tune(p, "question-answering", "squad.json", doc_stride=20, max_seq_length=24),
    ),
    Row(
        "qa-pipeline-doc-stride-above-the-window",
        ("doc_stride=32", "max_seq_len=24", "at most 19"),
        None,
        lambda p: ask(p, max_seq_len=24, doc_stride=32),
    ),
    Row(
        "qa-pipeline-window-above-positions",
        ("max_seq_len=100", "max_position_embeddings=24"),
        None,
        lambda p: ask(p, max_seq_len=100),
    ),
    # -- pretrain (its own table is in tests/training/pretraining/test_pretraining_loop.py; these are the cross-cutting cases) ---------
    Row(
        "pretrain-train-file-missing",
        ("{data}/nope.txt",),
        pretrain_cli(train="{data}/nope.txt"),
        lambda p: pretrain_api(p, train_file=[str(p.data / "nope.txt")]),
        FileNotFoundError,
    ),
    Row(
        "pretrain-train-file-blank",
        ("{data}/blank.txt", "empty"),
        pretrain_cli(train="{data}/blank.txt"),
        lambda p: pretrain_api(p, train_file=[str(p.data / "blank.txt")]),
    ),
    Row(
        "pretrain-train-file-latin1",
        ("{data}/latin1.txt", "UTF-8"),
        pretrain_cli(train="{data}/latin1.txt"),
        lambda p: pretrain_api(p, train_file=[str(p.data / "latin1.txt")]),
    ),
    Row(
        "pretrain-train-file-binary",
        ("{data}/binary.txt", "binary, not text"),
        pretrain_cli(train="{data}/binary.txt"),
        lambda p: pretrain_api(p, train_file=[str(p.data / "binary.txt")]),
    ),
    Row(
        "pretrain-train-file-text-then-binary",
        ("{data}/text_then_binary.txt", "binary, not text"),
        pretrain_cli(train="{data}/text_then_binary.txt"),
        lambda p: pretrain_api(p, train_file=[str(p.data / "text_then_binary.txt")]),
    ),
    Row(
        "pretrain-train-file-line-over-the-limit",
        ("line 1 of", "{data}/one_line.txt", "1,000,000 bytes"),
        pretrain_cli(train="{data}/one_line.txt"),
        lambda p: pretrain_api(p, train_file=[str(p.data / "one_line.txt")]),
    ),
    Row(
        "pretrain-preprocessing-workers-above-the-cores",
        ("preprocessing_num_workers=3000", f"{CORES} CPU cores"),
        pretrain_cli("--preprocessing_num_workers", "3000"),
        lambda p: pretrain_api(p, preprocessing_num_workers=3000),
    ),
    Row(
        "pretrain-train-file-a-folder",
        ("{data}",),
        pretrain_cli(train="{data}"),
        lambda p: pretrain_api(p, train_file=[str(p.data)]),
        FileNotFoundError,
    ),
    Row(
        "pretrain-max-seq-length-above-positions",
        ("max_seq_length=80", "max_position_embeddings=24"),
        pretrain_cli("--max_seq_length", "80"),
    ),
    Row(
        "pretrain-config-overrides-unknown-field",
        ("colour",),
        pretrain_cli("--config_overrides", "colour=3"),
        lambda p: pretrain_api(p, config_overrides="colour=3"),
    ),
    Row(
        "pretrain-config-overrides-not-a-number",
        ("hidden_size",),
        pretrain_cli("--config_overrides", "hidden_size=big"),
        lambda p: pretrain_api(p, config_overrides="hidden_size=big"),
    ),
    Row(
        "pretrain-batch-size-zero",
        ("per_device_train_batch_size", "0"),
        pretrain_cli("--per_device_train_batch_size", "0"),
        lambda p: pretrain_api(p, per_device_train_batch_size=0),
    ),
    Row(
        "pretrain-mlm-probability-above-one",
        ("mlm_probability", "1.5"),
        pretrain_cli("--mlm_probability", "1.5"),
        lambda p: pretrain_api(p, mlm_probability=1.5),
    ),
    Row("pretrain-negative-max-steps", ("max_steps", "-5"), pretrain_cli("--max_steps=-5")),
    Row(
        "pretrain-num-threads-above-the-cores",
        ("num_threads=3000", f"{CORES} CPU cores"),
        pretrain_cli("--num_threads", "3000"),
        lambda p: pretrain_api(p, num_threads=3000),
    ),
    Row(
        "pretrain-model-does-not-exist",
        ("{nowhere}",),
        pretrain_cli(model="{nowhere}"),
        lambda p: pretrain_api(p, model_name_or_path=str(p.nowhere)),
        FileNotFoundError,
    ),
    Row(
        "pretrain-model-config-vocab-10M",
        ("vocab_size=10000000",),
        pretrain_cli(model="{broken}"),
        lambda p: pretrain_api(p, model_name_or_path=str(p.broken), max_seq_length=24),
        source="mlm",
        breakage=edit_config(vocab_size=BIG),
        seconds=5,
    ),
    Row(
        "pretrain-tokenizer-does-not-exist",
        ("{nowhere}",),
        pretrain_cli("--tokenizer_name", "{nowhere}"),
        lambda p: pretrain_api(p, tokenizer_name=str(p.nowhere)),
        FileNotFoundError,
    ),
    Row(
        "pretrain-into-read-only-folder",
        ("{readonly}/run",),
        pretrain_cli(output="{readonly}/run"),
        lambda p: pretrain_api(p, output_dir=str(p.readonly / "run")),
        OSError,
    ),
    Row(
        "pretrain-into-a-file",
        ("{data}/corpus.txt",),
        pretrain_cli(output="{data}/corpus.txt"),
        lambda p: pretrain_api(p, output_dir=str(p.data / "corpus.txt")),
        FileExistsError,
    ),
    Row(
        "pretrain-into-non-empty-folder",
        ("{classifier}",),
        pretrain_cli(output="{classifier}"),
        lambda p: pretrain_api(p, output_dir=str(p.classifier)),
        FileExistsError,
    ),
    # General distillation: refused in one line before the corpus is read (tests/training/pretraining/test_pretraining_general_distillation.py).
    Row(
        "pretrain-teacher-is-a-decoder",
        ("{broken}", "decoder, not an encoder"),
        pretrain_cli(teacher="{broken}"),
        lambda p: pretrain_api(
            p, teacher_model_name_or_path=str(p.broken), config_overrides=TINY_STUDENT, max_seq_length=24
        ),
        source="bert",
        breakage=edit_config(is_decoder=True),
    ),
    Row(
        "pretrain-teacher-tokenizer-not-wordpiece",
        ("{broken}", "BPE, not WordPiece"),
        pretrain_cli(teacher="{broken}"),
        lambda p: pretrain_api(
            p, teacher_model_name_or_path=str(p.broken), config_overrides=TINY_STUDENT, max_seq_length=24
        ),
        source="bert",
        breakage=bpe_tokenizer,
    ),
    Row(
        "pretrain-vocab-larger-than-the-teachers",
        ("vocab_size=8192", "{bert}", "larger than"),
        pretrain_cli("--vocab_size", "8192", teacher="{bert}"),
        lambda p: pretrain_api(
            p,
            teacher_model_name_or_path=str(p.bert),
            vocab_size=8192,
            config_overrides=TINY_STUDENT,
            max_seq_length=24,
        ),
    ),
    Row(
        "pretrain-teacher-precision-unknown",
        ("--teacher_mixed_precision", "'fp16'"),
        pretrain_cli("--teacher_mixed_precision", "fp16", teacher="{bert}"),
    ),
    Row(
        "pretrain-teacher-precision-unknown-api",
        ("teacher_mixed_precision='fp16'",),
        None,
        lambda p: pretrain_api(
            p,
            teacher_model_name_or_path=str(p.bert),
            teacher_mixed_precision="fp16",
            config_overrides=TINY_STUDENT,
            max_seq_length=24,
        ),
    ),
    Row(
        "pretrain-teacher-init-unknown",
        ("--teacher_init", "'weights'"),
        pretrain_cli("--teacher_init", "weights", teacher="{bert}"),
    ),
    Row(
        "pretrain-teacher-init-unknown-api",
        ("teacher_init='weights'",),
        None,
        lambda p: pretrain_api(
            p,
            teacher_model_name_or_path=str(p.bert),
            teacher_init="weights",
            config_overrides=TINY_STUDENT,
            max_seq_length=24,
        ),
    ),
    Row(
        "pretrain-teacher-init-basis-unknown",
        ("--teacher_init_basis", "'queries'"),
        pretrain_cli("--teacher_init_basis", "queries", teacher="{bert}"),
    ),
    Row(
        "pretrain-teacher-init-basis-unknown-api",
        ("teacher_init_basis='queries'",),
        None,
        lambda p: pretrain_api(
            p,
            teacher_model_name_or_path=str(p.bert),
            teacher_init_basis="queries",
            config_overrides=TINY_STUDENT,
            max_seq_length=24,
        ),
    ),
    Row(
        "pretrain-teacher-init-layers-deeper-student",
        ("teacher_init=layers", "num_hidden_layers=3 > 2"),
        pretrain_cli("--teacher_init", "layers", "--config_overrides", DEEP_STUDENT, teacher="{bert}"),
        lambda p: pretrain_api(
            p,
            teacher_model_name_or_path=str(p.bert),
            teacher_init="layers",
            config_overrides=DEEP_STUDENT,
            max_seq_length=24,
        ),
    ),
    Row(
        "pretrain-teacher-with-another-objective",
        ("objective='electra'", "teacher"),
        pretrain_cli("--objective", "electra", teacher="{bert}"),
        lambda p: pretrain_api(
            p,
            teacher_model_name_or_path=str(p.bert),
            objective="electra",
            vocab_size=100,
            config_overrides=TINY_STUDENT,
            max_seq_length=24,
        ),
    ),
    # Every teacher is checked before it is loaded: only safetensors unless asked, its shapes readable by the student.
    Row(
        "pretrain-teacher-only-a-pickle",
        ("teacher_model_name_or_path={broken}", "pytorch_model.bin", "pickle", "allow_pickle"),
        pretrain_cli(teacher="{broken}"),
        lambda p: pretrain_api(
            p, teacher_model_name_or_path=str(p.broken), config_overrides=TINY_STUDENT, max_seq_length=24
        ),
        source="bert",
        breakage=only_a_pickle,
    ),
    Row(
        "pretrain-teacher-tokenizer-larger-than-embeddings",
        ("teacher_model_name_or_path={broken}", "122 tokens", "vocab_size=120"),
        pretrain_cli(teacher="{broken}"),
        lambda p: pretrain_api(
            p, teacher_model_name_or_path=str(p.broken), config_overrides=TINY_STUDENT, max_seq_length=24
        ),
        source="bert",
        breakage=tokenizer_with(extra_tokens=2),
    ),
    Row(
        "pretrain-teacher-factorized-embeddings",
        ("teacher_model_name_or_path={broken}", "embedding_size=16", "hidden_size=32"),
        pretrain_cli(teacher="{broken}"),
        lambda p: pretrain_api(
            p, teacher_model_name_or_path=str(p.broken), config_overrides=TINY_STUDENT, max_seq_length=24
        ),
        source="bert",
        breakage=factorized_embeddings,
    ),
    # -- distill ---------------------------------------------------------------------------------------------------
    Row(
        "distill-temperature-zero",
        ("temperature=0",),
        distill_cli("--temperature", "0"),
        lambda p: distill_api(p, temperature=0),
    ),
    Row("distill-alpha-above-one", ("alpha=1.5",), distill_cli("--alpha", "1.5"), lambda p: distill_api(p, alpha=1.5)),
    Row(
        "distill-teacher-precision-unknown",
        ("--teacher_mixed_precision", "'fp16'"),
        distill_cli("--teacher_mixed_precision", "fp16"),
    ),
    Row(
        "distill-teacher-precision-unknown-api",
        ("teacher_mixed_precision='fp16'",),
        None,
        lambda p: distill_api(p, teacher_mixed_precision="fp16"),
    ),
    Row(
        "distill-student-dropout-one",
        ("student_dropout=1.0",),
        distill_cli("--student_dropout", "1"),
        lambda p: distill_api(p, student_dropout=1.0),
    ),
    Row("distill-unknown-loss", ("--distillation_loss", "'huber'"), distill_cli("--distillation_loss", "huber")),
    Row(
        "distill-temperature-with-mse",
        ("temperature=4.0", "'mse'"),
        distill_cli("--distillation_loss", "mse", "--temperature", "4"),
        lambda p: distill_api(p, distillation_loss="mse", temperature=4.0),
    ),
    Row(
        "distill-word-dropout-one",
        ("word_dropout=1.0",),
        distill_cli("--word_dropout", "1.0"),
        lambda p: distill_api(p, word_dropout=1.0),
    ),
    Row(
        "distill-max-seq-length-two",
        ("max_seq_length=2",),
        distill_cli("--max_seq_length", "2"),
        lambda p: distill_api(p, max_seq_length=2),
    ),
    Row("distill-unknown-task", ("--task", "'summarization'"), distill_cli(task="summarization")),
    Row(
        "distill-transfer-file-missing",
        ("{data}/nope.txt",),
        distill_cli("--transfer_file", "{data}/nope.txt"),
        lambda p: distill_api(p, transfer_file=[str(p.data / "nope.txt")]),
        FileNotFoundError,
    ),
    Row(
        "distill-train-file-missing",
        ("{data}/nope.csv",),
        distill_cli(train="{data}/nope.csv"),
        lambda p: distill_api(p, train="nope.csv"),
        FileNotFoundError,
    ),
    Row(
        "distill-train-file-unknown-format",
        ("{data}/corpus.txt", "'.txt'"),
        distill_cli(train="{data}/corpus.txt"),
        lambda p: distill_api(p, train="corpus.txt"),
    ),
    Row(
        "distill-teacher-does-not-exist",
        ("{nowhere}",),
        distill_cli(teacher="{nowhere}"),
        lambda p: distill_api(p, teacher="nowhere"),
        FileNotFoundError,
    ),
    Row("distill-teacher-labels-differ", ("{classifier}", "LABEL_0", "'0'"), distill_cli(), lambda p: distill_api(p)),
    Row(
        "distill-into-non-empty-folder",
        ("{bert}", "not empty"),
        distill_cli(output="{bert}"),
        lambda p: distill_api(p, output_dir=str(p.bert)),
        FileExistsError,
    ),
    Row(
        "distill-blank-label-cell",
        ("{data}/missing_label.csv", "row 2", "missing label"),
        distill_cli(train="{data}/missing_label.csv"),
        lambda p: distill_api(p, train="missing_label.csv"),
    ),
    Row(
        "distill-one-class-training-set",
        ("{data}/one_class.csv", "at least two labels"),
        distill_cli(train="{data}/one_class.csv"),
        lambda p: distill_api(p, train="one_class.csv"),
    ),
    Row(
        "distill-binary-transfer-file",
        ("{data}/binary.txt", "UTF-8"),
        distill_cli("--transfer_file", "{data}/binary.txt"),
        lambda p: distill_api(p, transfer_file=[str(p.data / "binary.txt")]),
    ),
    Row(
        "distill-task-that-cannot-be-distilled",
        ("'question-answering'", "cannot be distilled"),
        distill_cli(task="question-answering"),
        lambda p: distill_api(p, task="question-answering"),
    ),
    Row(
        "distill-into-a-folder-in-use",
        ("{broken}", "in use by another distill run"),
        distill_cli(output="{broken}"),
        lambda p: distill_api(p, output_dir=str(p.broken)),
        FileExistsError,
        source="data",
        breakage=held_by_a_live_run("distill"),
    ),
    Row(
        "distill-into-read-only-folder",
        ("{readonly}/run", "cannot be written"),
        distill_cli("--finetune_teacher", "true", output="{readonly}/run"),
        lambda p: distill_api(p, finetune_teacher=True, output_dir=str(p.readonly / "run")),
        OSError,
    ),
    Row(
        "distill-embedding-teacher-without-modules-json",
        ("{classifier}", "modules.json"),
        distill_cli(task="embedding", train="{data}/corpus.txt"),
        lambda p: distill_api(p, task="embedding", train="corpus.txt"),
        FileNotFoundError,
    ),
    Row(
        "distill-embedding-csv-train-file",
        ("{data}/classes.csv", ".txt"),
        distill_cli(task="embedding"),
        lambda p: distill_api(p, task="embedding"),
    ),
    Row(
        "distill-embedding-temperature",
        ("temperature=3.0", "'embedding'"),
        distill_cli("--temperature", "3", task="embedding", train="{data}/corpus.txt"),
        lambda p: distill_api(p, task="embedding", train="corpus.txt", temperature=3.0),
    ),
    Row(
        "distill-teacher-only-a-pickle",
        ("teacher_model_name_or_path={broken}", "pytorch_model.bin", "allow_pickle"),
        distill_cli(teacher="{broken}"),
        lambda p: distill_api(p, teacher="broken"),
        source="classifier",
        breakage=only_a_pickle,
    ),
    Row(
        "distill-finetune-teacher-only-a-pickle",
        ("teacher_model_name_or_path={broken}", "pytorch_model.bin", "allow_pickle"),
        distill_cli("--finetune_teacher", "true", teacher="{broken}"),
        lambda p: distill_api(p, teacher="broken", finetune_teacher=True),
        source="bert",
        breakage=only_a_pickle,
    ),
    Row(
        "distill-teacher-tokenizer-larger-than-embeddings",
        ("teacher_model_name_or_path={broken}", "122 tokens", "vocab_size=120"),
        distill_cli(teacher="{broken}"),
        lambda p: distill_api(p, teacher="broken"),
        source="classifier",
        breakage=tokenizer_with(extra_tokens=2),
    ),
    Row(
        "distill-embedding-teacher-only-a-pickle",
        ("teacher_model_name_or_path={broken}", "pytorch_model.bin", "allow_pickle"),
        distill_cli(task="embedding", teacher="{broken}", train="{data}/corpus.txt"),
        lambda p: distill_api(p, teacher="broken", task="embedding", train="corpus.txt"),
        source="embedder",
        breakage=only_a_pickle,
    ),
    Row(
        "distill-embedding-teacher-dense-a-pickle",
        ("teacher_model_name_or_path={broken} (2_Dense)", "pytorch_model.bin", "allow_pickle"),
        distill_cli(task="embedding", teacher="{broken}", train="{data}/corpus.txt"),
        lambda p: distill_api(p, teacher="broken", task="embedding", train="corpus.txt"),
        source="embedder",
        breakage=pickled_dense,
    ),
    Row(
        "distill-embedding-teacher-without-pooling",
        ("{broken}/1_Pooling", "config.json", "Pooling"),
        distill_cli(task="embedding", teacher="{broken}", train="{data}/corpus.txt"),
        lambda p: distill_api(p, teacher="broken", task="embedding", train="corpus.txt"),
        FileNotFoundError,
        source="embedder",
        breakage=lambda f: shutil.rmtree(f / "1_Pooling"),
    ),
    Row(
        "distill-embedding-teacher-tokenizer-larger-than-embeddings",
        ("teacher_model_name_or_path={broken}", "122 tokens", "vocab_size=120"),
        distill_cli(task="embedding", teacher="{broken}", train="{data}/corpus.txt"),
        lambda p: distill_api(p, teacher="broken", task="embedding", train="corpus.txt"),
        source="embedder",
        breakage=tokenizer_with(extra_tokens=2),
    ),
    # The teacher's cached logits are read as what they must be: (N, labels) float32, N the examples' rows.
    Row(
        "distill-cached-logits-extra-column",
        ("{broken}/teacher_logits.safetensors", "transfer.logits", "[3, 3]", "[3, 2]"),
        None,
        cached_logits,
        source="data",
        breakage=logits_cache(columns=3),
    ),
    Row(
        "distill-cached-logits-float64",
        ("{broken}/teacher_logits.safetensors", "transfer.logits", "float64", "float32"),
        None,
        cached_logits,
        source="data",
        breakage=logits_cache(dtype=torch.float64),
    ),
    Row(
        "distill-cached-logits-rows-disagree",
        ("{broken}/teacher_logits.safetensors", "transfer.rows", "[1, 1, 2]"),
        None,
        cached_logits,
        source="data",
        breakage=logits_cache(rows=[1, 1, 2]),
    ),
    # -- every command that writes a folder: never over what it reads or keeps, never over a running job's folder ----
    # (`files.check_output_dir`, the one check every writer makes; `test_every_writer_has_its_folder_rows`).
    Row(
        "export-onnx-over-its-input",
        ("output_dir {broken} is model_name_or_path={broken}", "apart"),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{broken}", "--overwrite_output_dir"),
        lambda p: export(p, out="broken", overwrite_output_dir=True),
        source="mlm",
        breakage=unchanged,
    ),
    Row(
        "export-onnx-inside-its-input",
        ("output_dir {broken}/onnx is inside model_name_or_path={broken}",),
        ("export-onnx", "--model_name_or_path", "{broken}", "--output_dir", "{broken}/onnx"),
        source="mlm",
        breakage=unchanged,
    ),
    Row(
        "export-onnx-tjs-over-its-input",
        ("output_dir {broken} is model_name_or_path={broken}",),
        (
            "export-onnx",
            "--model_name_or_path",
            "{broken}",
            "--output_dir",
            "{broken}",
            "--format",
            "transformers.js",
            "--overwrite_output_dir",
        ),
        lambda p: export(p, out="broken", format="transformers.js", overwrite_output_dir=True),
        source="classifier",
        breakage=unchanged,
    ),
    Row(
        "export-onnx-into-a-running-job",
        ("{broken}", "in use by another finetune run"),
        ("export-onnx", "--model_name_or_path", "{mlm}", "--output_dir", "{broken}", "--overwrite_output_dir"),
        lambda p: export(p, src="mlm", out="broken", overwrite_output_dir=True),
        FileExistsError,
        source="data",
        breakage=held_by_a_live_run("finetune"),
    ),
    Row(
        "benchmark-deploy-over-its-input",
        ("output_dir {broken} is model_name_or_path={broken}",),
        deploy_cli("--overwrite_output_dir", model="{broken}")[:6] + ("{broken}", "--overwrite_output_dir"),
        lambda p: deploy(p, "broken", out="broken", overwrite_output_dir=True),
        source="classifier",
        breakage=unchanged,
    ),
    Row(
        "benchmark-deploy-holds-its-texts",
        ("output_dir {broken} holds texts_file={broken}/corpus.txt",),
        deploy_cli(texts="{broken}/corpus.txt")[:6] + ("{broken}", "--overwrite_output_dir"),
        source="data",
        breakage=unchanged,
    ),
    Row(
        "benchmark-deploy-work-dir-is-the-output",
        ("output_dir {out} is work_dir={out}",),
        deploy_cli("--work_dir", "{out}"),
        lambda p: deploy(p, work_dir=p.out),
    ),
    Row(
        "benchmark-deploy-work-dir-inside-the-output",
        ("output_dir {out} holds work_dir={out}/paths",),
        deploy_cli("--work_dir", "{out}/paths"),
        lambda p: deploy(p, work_dir=p.out / "paths"),
    ),
    Row(
        "benchmark-deploy-output-inside-the-work-dir",
        ("output_dir {out}/ready is inside work_dir={out}",),
        deploy_cli("--work_dir", "{out}")[:6] + ("{out}/ready", "--work_dir", "{out}"),
        lambda p: deploy(SimpleNamespace(**{**vars(p), "ready": p.out / "ready"}), out="ready", work_dir=p.out),
    ),
    Row(
        "benchmark-deploy-into-a-running-job",
        ("{broken}", "in use by another distill run"),
        deploy_cli()[:6] + ("{broken}", "--overwrite_output_dir"),
        lambda p: deploy(p, out="broken", overwrite_output_dir=True),
        FileExistsError,
        source="data",
        breakage=held_by_a_live_run("distill"),
    ),
    Row(
        "convert-bert-over-its-input",
        ("output_dir {broken} is model_name_or_path={broken}",),
        ("convert-bert", "--model_name_or_path", "{broken}", "--output_dir", "{broken}", "--overwrite_output_dir"),
        lambda p: convert(p, out="broken", overwrite_output_dir=True),
        source="bert",
        breakage=unchanged,
    ),
    Row(
        "convert-bert-to-bert-over-its-input",
        ("output_dir {broken} is model_name_or_path={broken}",),
        (
            "convert-bert",
            "--to-bert",
            "--model_name_or_path",
            "{broken}",
            "--output_dir",
            "{broken}",
            "--overwrite_output_dir",
        ),
        lambda p: convert(p, out="broken", to_bert=True, overwrite_output_dir=True),
        source="mlm",
        breakage=unchanged,
    ),
    Row(
        "convert-bert-into-a-running-job",
        ("{broken}", "in use by another pretraining run"),
        ("convert-bert", "--model_name_or_path", "{bert}", "--output_dir", "{broken}", "--overwrite_output_dir"),
        lambda p: convert(p, src="bert", out="broken", overwrite_output_dir=True),
        FileExistsError,
        source="data",
        breakage=held_by_a_live_run("pretraining"),
    ),
    Row(
        "train-tokenizer-over-its-input",
        ("output_dir {broken} holds train_file={broken}/corpus.txt",),
        (
            "train-tokenizer",
            "--train_file",
            "{broken}/corpus.txt",
            "--output_dir",
            "{broken}",
            "--overwrite_output_dir",
        ),
        lambda p: train_tok(p, train_file=[p.broken / "corpus.txt"], output_dir=p.broken, overwrite_output_dir=True),
        source="data",
        breakage=unchanged,
    ),
    Row(
        "train-tokenizer-into-a-running-job",
        ("{broken}", "in use by another finetune run"),
        ("train-tokenizer", "--train_file", "{data}/corpus.txt", "--output_dir", "{broken}", "--overwrite_output_dir"),
        lambda p: train_tok(p, train_file=[p.data / "corpus.txt"], output_dir=p.broken, overwrite_output_dir=True),
        FileExistsError,
        source="data",
        breakage=held_by_a_live_run("finetune"),
    ),
    Row(
        "finetune-over-its-input",
        ("output_dir {broken} is model_name_or_path={broken}",),
        finetune_cli("--overwrite_output_dir", "true", output="{broken}")[:4]
        + ("{broken}",)
        + finetune_cli("--overwrite_output_dir", "true", output="{broken}")[5:],
        lambda p: tune(p, model="broken", output_dir=p.broken, overwrite_output_dir=True),
        source="mlm",
        breakage=unchanged,
    ),
    Row(
        "finetune-holds-its-train-file",
        ("output_dir {broken} holds train_file={broken}/classes.csv",),
        finetune_cli("--overwrite_output_dir", "true", train="{broken}/classes.csv", output="{broken}"),
        lambda p: tune(
            SimpleNamespace(**{**vars(p), "data": p.broken}), output_dir=p.broken, overwrite_output_dir=True
        ),
        source="data",
        breakage=unchanged,
    ),
    Row(
        "finetune-into-a-running-job",
        ("{broken}", "in use by another distill run"),
        finetune_cli("--overwrite_output_dir", "true", output="{broken}"),
        lambda p: tune(p, output_dir=p.broken, overwrite_output_dir=True),
        FileExistsError,
        source="data",
        breakage=held_by_a_live_run("distill"),
    ),
    Row(
        "distill-over-its-input",
        ("output_dir {broken} is teacher_model_name_or_path={broken}",),
        distill_cli("--overwrite_output_dir", "true", teacher="{broken}", output="{broken}"),
        lambda p: distill_api(p, teacher="broken", output_dir=str(p.broken), overwrite_output_dir=True),
        source="classifier",
        breakage=unchanged,
    ),
    Row(
        "distill-into-a-running-job",
        ("{broken}", "in use by another finetune run"),
        distill_cli("--overwrite_output_dir", "true", output="{broken}"),
        lambda p: distill_api(p, output_dir=str(p.broken), overwrite_output_dir=True),
        FileExistsError,
        source="data",
        breakage=held_by_a_live_run("finetune"),
    ),
    Row(
        "pretrain-over-its-input",
        ("output_dir {broken} is model_name_or_path={broken}",),
        pretrain_cli("--overwrite_output_dir", "true", model="{broken}", output="{broken}"),
        lambda p: pretrain_api(
            p, model_name_or_path=str(p.broken), output_dir=str(p.broken), overwrite_output_dir=True, max_seq_length=24
        ),
        source="mlm",
        breakage=unchanged,
    ),
    Row(
        "pretrain-into-a-running-job",
        ("{broken}", "in use by another finetune run"),
        pretrain_cli("--overwrite_output_dir", "true", output="{broken}"),
        lambda p: pretrain_api(p, output_dir=str(p.broken), overwrite_output_dir=True),
        FileExistsError,
        source="data",
        breakage=held_by_a_live_run("finetune"),
    ),
    Row(
        "quantize-over-its-input",
        ("output_dir {broken} is model_name_or_path={broken}",),
        None,
        lambda p: quantize_api(SimpleNamespace(broken=p.broken, out=p.broken), overwrite_output_dir=True),
        source="classifier",
        breakage=unchanged,
    ),
    Row(
        "compile-model-over-its-input",
        ("output_dir {broken} is model_name_or_path={broken}",),
        None,
        lambda p: compile_api(p, overwrite_output_dir=True),
        source="classifier",
        breakage=unchanged,
    ),
    # -- every numeric option finite and bounded, checked before any work; a list where a list is meant -----------
    *[
        Row(
            f"benchmark-deploy-{flag}-{value}",
            (f"{flag}={shown}", bound),
            deploy_cli(f"--{flag}={value}"),
            lambda p, flag=flag, given=given: deploy(p, **{flag: given}),
            seconds=5,
        )
        for flag, value, given, shown, bound in (
            ("seconds", "inf", float("inf"), "inf", "at most 600"),
            ("seconds", "nan", float("nan"), "nan", "at most 600"),
            ("seconds", "-1", -1.0, "-1.0", "at most 600"),
            ("seconds", "1e9", 1e9, "1000000000.0", "at most 600"),
            ("rounds", "1000", 1000, "1000", "at most 100"),
            ("batch_size", "0", 0, "0", "at most 4096"),
            ("batch_size", "100000", 100000, "100000", "at most 4096"),
            ("threads", "-1", -1, "-1", "CPUs"),
            ("threads", "0", 0, "0", "CPUs"),
            ("max_accuracy_drop", "-0.1", -0.1, "-0.1", "at most 1"),
            ("max_accuracy_drop", "nan", float("nan"), "nan", "at most 1"),
            ("min_agreement", "nan", float("nan"), "nan", "at most 1"),
        )
    ],
    Row(
        "benchmark-deploy-binary-texts",
        ("{data}/binary.txt line 1", "not UTF-8 text"),
        deploy_cli(texts="{data}/binary.txt"),
        lambda p: deploy(p, texts="binary.txt"),
    ),
    Row(
        "benchmark-deploy-nul-in-texts",
        ("{data}/nul.txt line 2", "U+0000"),
        deploy_cli(texts="{data}/nul.txt"),
        lambda p: deploy(p, texts="nul.txt"),
    ),
    Row(
        "benchmark-deploy-texts-dev-zero",
        ("/dev/zero line 1", "100,000 characters"),
        deploy_cli(texts="/dev/zero"),
        lambda p: deploy(SimpleNamespace(**{**vars(p), "data": Path("/dev")}), texts="zero"),
        seconds=5,
    ),
    Row(
        "benchmark-deploy-labelled-row-without-text",
        ("{data}/no_text.csv row 2", "no text"),
        deploy_cli("--labelled_file", "{data}/no_text.csv"),
        lambda p: deploy(p, labelled_file=p.data / "no_text.csv"),
    ),
    Row(
        "load-serving-threads-100000", ("threads=100000", "CPUs"), None, lambda p: serve(p, threads=100000), seconds=5
    ),
    Row("load-serving-threads-negative", ("threads=-2", "CPUs"), None, lambda p: serve(p, threads=-2)),
    Row("load-serving-threads-a-string", ("threads='4'", "CPUs"), None, lambda p: serve(p, threads="4")),
    Row(
        "serving-json-threads-100000",
        ("{broken}/serving.json", "threads=100000"),
        None,
        lambda p: serve(p, "broken"),
        source="serving",
        breakage=serving_json({"path": "pytorch-fp32", "threads": 100000}),
        seconds=5,
    ),
    Row(
        "serving-json-threads-negative",
        ("{broken}/serving.json", "threads=-3"),
        None,
        lambda p: serve(p, "broken"),
        source="serving",
        breakage=serving_json({"path": "pytorch-fp32", "threads": -3}),
    ),
    Row(
        "serving-json-without-path",
        ("{broken}/serving.json", '"path"'),
        None,
        lambda p: serve(p, "broken"),
        source="serving",
        breakage=serving_json({"threads": 1}),
    ),
    Row(
        "serving-json-a-list",
        ("{broken}/serving.json", "list"),
        None,
        lambda p: serve(p, "broken"),
        source="serving",
        breakage=serving_json(["pytorch-fp32"]),
    ),
    Row(
        "serving-json-not-json",
        ("{broken}/serving.json", "not valid JSON"),
        None,
        lambda p: serve(p, "broken"),
        source="serving",
        breakage=serving_json("{oops"),
    ),
    Row(
        "serving-one-string-for-texts",
        ("one str", "list of texts"),
        None,
        lambda p: serve(p).scores("a fine film"),
        TypeError,
    ),
    Row(
        "long-texts-one-string",
        ("texts is one str", "list of texts"),
        None,
        lambda p: long_texts(p, "one string"),
        TypeError,
    ),
    Row(
        "long-texts-a-number-among-texts", ("text #1", "int"), None, lambda p: long_texts(p, ["a text", 7]), TypeError
    ),
    *[
        Row(
            f"long-texts-{name}-{value!r}",
            (f"{name}={value!r}", bound),
            None,
            lambda p, name=name, value=value: long_texts(p, **{name: value}),
        )
        for name, value, bound in (
            ("doc_stride", 1.5, "whole number"),
            ("doc_stride", "3", "whole number"),
            ("max_length", 0, "from 3 to 24"),
            ("max_length", 2, "from 3 to 24"),
            ("max_length", -5, "from 3 to 24"),
            ("max_length", 1000, "from 3 to 24"),
            ("batch_size", 0, "at least 1"),
            ("doc_stride", 22, "below 22"),
        )
    ],
    Row(
        "long-texts-a-million-words",
        ("text 1 holds at least", "max_windows=4,096"),
        None,
        lambda p: long_texts(p, ["a text", "the company said profits rose " * 200_000]),
        seconds=5,
    ),
    Row(
        "long-texts-a-stride-of-one-token-a-window",
        ("text 0 holds at least", "advancing by 1", "max_windows=4,096"),
        None,
        lambda p: long_texts(p, ["the company said " * 30_000], doc_stride=21),
        seconds=5,
    ),
    Row(
        "finetune-a-two-label-model-on-four-labels",
        ("{classifier}", "head for 2 labels", "trains 4 (a, b, c, d)"),
        finetune_cli(train="{data}/four_classes.csv")[:4]
        + ("{classifier}",)
        + finetune_cli(train="{data}/four_classes.csv")[5:],
        lambda p: tune(p, model="classifier", train="four_classes.csv"),
    ),
    Row(
        "benchmark-deploy-paths-one-string",
        ("paths='pytorch-int8'", "one str", "a list"),
        None,
        lambda p: deploy(p, paths="pytorch-int8"),
        TypeError,
    ),
    Row(
        "finetune-learning-rates-one-string",
        ("learning_rates='1e-4'", "one str"),
        None,
        lambda p: tune(p, validation_file=p.data / "classes.csv", learning_rates="1e-4"),
        TypeError,
    ),
    Row(
        "distill-transfer-file-one-string",
        ("transfer_file=", "corpus.txt", "one str"),
        None,
        lambda p: distill_api(p, transfer_file=str(p.data / "corpus.txt")),
        TypeError,
    ),
    Row(
        "tokenizer-train-file-a-folder-named",
        ("training file {data} is a folder", "{data}/*.txt"),
        ("train-tokenizer", "--train_file", "{data}", "--output_dir", "{out}"),
        lambda p: train_tok(p, train_file=[p.data]),
        FileNotFoundError,
    ),
    # -- the command line itself -----------------------------------------------------------------------------------
    Row("unknown-command", ("'fine-tune'",), ("fine-tune", "--help")),
]


# ----------------------------------------------------------------------------------------------------------------
# The checks
# ----------------------------------------------------------------------------------------------------------------


def rows_with(attribute: str) -> list:
    def marks(row: Row) -> list:
        reason = row.xfail or (row.cli_xfail if attribute != "api" else None)
        return [pytest.mark.xfail(strict=True, reason=reason)] if reason else []

    return [pytest.param(row, id=row.id, marks=marks(row)) for row in ROWS if getattr(row, attribute)]


def paths_for(row: Row, sources: SimpleNamespace, readonly: Path, tmp_path: Path) -> SimpleNamespace:
    paths = SimpleNamespace(
        **vars(sources),
        readonly=readonly,
        out=tmp_path / "out",
        onnx=tmp_path / "out.onnx",
        broken=tmp_path / "broken",
        nowhere=tmp_path / "nowhere",
    )
    if row.source:
        shutil.copytree(getattr(sources, row.source), paths.broken)
        row.breakage(paths.broken)
    return paths


def fill_in(template: str, paths: SimpleNamespace) -> str:
    return template.format(**{k: str(v) for k, v in vars(paths).items()})


# A tqdm progress bar's frame (datasets shows one while reading a file): progress, not part of the error.
PROGRESS = re.compile(r"[^\r\n]*\[\d\d:\d\d(<[^\]]*)?, *[^\]]*/s\]")


def without_progress_bars(stderr: str) -> str:
    return PROGRESS.sub("", stderr).replace("\r", "")


def check_one_line(message: str, row: Row, paths: SimpleNamespace) -> None:
    assert "Traceback" not in message, message
    message = without_progress_bars(message).lstrip("\n")
    assert "\n" not in message.rstrip("\n"), f"more than one line:\n{message}"
    for name in row.names:
        assert fill_in(name, paths) in message, f"{fill_in(name, paths)!r} not named in: {message}"


@pytest.mark.parametrize("row", rows_with("cli"))
def test_cli_refuses_with_one_line_and_exit_code_2(row, sources, readonly, tmp_path, capsys):
    paths = paths_for(row, sources, readonly, tmp_path)
    argv = [fill_in(word, paths) for word in row.cli]
    before = tree(tmp_path, sources.data, readonly)
    capsys.readouterr()
    start = time.perf_counter()
    code = cli.main(argv)
    elapsed = time.perf_counter() - start
    out, err = capsys.readouterr()
    err = without_progress_bars(err).lstrip("\n")
    assert code == 2, f"exit code {code}; stderr: {err}"
    assert out == ""
    prefix = "minibert:" if argv[0] not in cli.COMMANDS else f"minibert {argv[0]}:"
    assert err.startswith(f"{prefix} error: "), err
    check_one_line(err, row, paths)
    assert tree(tmp_path, sources.data, readonly) == before, "something was written"
    if row.seconds:
        assert elapsed < row.seconds, f"took {elapsed:.1f} s"


@pytest.mark.parametrize("row", rows_with("api"))
def test_api_raises_the_documented_error_with_one_line(row, sources, readonly, tmp_path):
    paths = paths_for(row, sources, readonly, tmp_path)
    before = tree(tmp_path, sources.data, readonly)
    start = time.perf_counter()
    with pytest.raises(row.error) as raised:
        row.api(paths)
    elapsed = time.perf_counter() - start
    check_one_line(str(raised.value), row, paths)
    assert tree(tmp_path, sources.data, readonly) == before, "something was written"
    if row.seconds:
        assert elapsed < row.seconds, f"took {elapsed:.1f} s"


@pytest.mark.slow(seconds=1)  # a process each: not in the quick tier (-m "not slow")
@pytest.mark.parametrize("row", rows_with("in_subprocess"))
def test_a_real_process_exits_2_without_a_traceback(row, sources, readonly, tmp_path):
    paths = paths_for(row, sources, readonly, tmp_path)
    argv = [fill_in(word, paths) for word in row.cli]
    before = tree(tmp_path, sources.data, readonly)
    result = subprocess.run(
        [sys.executable, "-m", "modeling_minibert.cli", *argv],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=clean_env(PYTHONPATH=str(REPO), OMP_NUM_THREADS="1"),
        timeout=120,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stdout == ""
    err = without_progress_bars(result.stderr).lstrip("\n")
    assert err.startswith(f"minibert {argv[0]}: error: "), result.stderr[-3000:]
    check_one_line(err, row, paths)
    assert tree(tmp_path, sources.data, readonly) == before, "something was written"


def test_the_table_covers_every_command():
    """A new command gets rows too."""
    covered = {row.cli[0] for row in ROWS if row.cli}
    assert set(cli.COMMANDS) - covered == set()


def writers() -> list[str]:
    """The commands that write a folder: those with an --output_dir (theirs, or TrainingArguments')."""
    return [
        name
        for name in cli.COMMANDS
        if "--output_dir" in cli.command_line(name).parser(f"minibert {name}")._option_string_actions
    ]


def test_every_writer_has_its_folder_rows():
    """Every command that writes a folder has a row writing over what it reads and one into a running job's folder,
    both with --overwrite_output_dir: a new writer inherits the rule (`files.check_output_dir`)."""
    ids = {row.id for row in ROWS if row.cli}
    assert set(writers()) >= {"export-onnx", "benchmark-deploy", "finetune", "train-tokenizer"}
    missing = [
        f"{name}-{kind}"
        for name in writers()
        for kind in ("over-its-input", "into-a-running-job")
        if f"{name}-{kind}" not in ids
    ]
    assert missing == []


def test_the_folder_and_bounds_rows_can_fail(sources, readonly, tmp_path_factory, monkeypatch):
    """The checks above can fail: a writer that does not keep its output apart from its input overwrites it (the
    row sees the input changed), and a function that does not bound its option fails on it later, in another
    message (the row sees the option unnamed)."""
    from modeling_minibert.deployment import long_texts as windows
    from modeling_minibert.utils import files

    by_id = {row.id: row for row in ROWS}
    monkeypatch.setattr(files, "check_apart", lambda *args, **kwargs: None)
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        test_api_raises_the_documented_error_with_one_line(
            by_id["convert-bert-over-its-input"], sources, readonly, tmp_path_factory.mktemp("writer")
        )
    monkeypatch.setattr(windows, "whole_number", lambda name, value, *bounds: value)
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        test_api_raises_the_documented_error_with_one_line(
            by_id["long-texts-max_length-0"], sources, readonly, tmp_path_factory.mktemp("bounds")
        )
