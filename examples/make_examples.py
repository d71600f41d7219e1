"""Writes the small example inputs that the README's commands read, in the formats users bring their own data in.

    pretraining.txt                            plain text, one document per paragraph block, blank lines between
    sentiment_{train,validation,test}.csv      columns text,label (positive / negative)
    ner_{train,validation}.conll               CoNLL columns: token and BIO entity tag (PER, LOC, ORG)
    qa_{train,validation}.json                 SQuAD 1.1 JSON: extractive question answering

The sentences follow templates, so the files are small, license-free, and learnable in seconds; they show the
formats, not what a real corpus gives. Rerun to regenerate: `python examples/make_examples.py`.
"""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

HERE = Path(__file__).parent

SUBJECTS = ["The film", "This movie", "The story", "The sequel", "The documentary", "The new series", "The play"]
ASPECTS = ["acting", "script", "music", "pacing", "camera work", "dialogue", "ending", "cast"]
GOOD = ["superb", "moving", "clever", "delightful", "gripping", "beautiful", "sharp", "warm"]
BAD = ["dull", "clumsy", "tedious", "lifeless", "muddled", "shallow", "forgettable", "painful"]
SENTIMENT_TEMPLATES = [
    "{subject} is {adj} from start to finish .",
    "The {aspect} is {adj} and the {aspect2} is {adj2} .",
    "{subject} has a {adj} {aspect} .",
    "I found the {aspect} {adj} , and the {aspect2} {adj2} .",
    "Few films this year are as {adj} .",
    "{subject} feels {adj} , with a {adj2} {aspect} .",
]

DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]


PEOPLE = [
    "Ana",
    "Ben",
    "Carla",
    "Dmitri",
    "Elena",
    "Farid",
    "Grace",
    "Hugo",
    "Ines",
    "Jonas",
    "Keiko",
    "Liam",
    "Maya",
    "Nils",
    "Olga",
    "Pedro",
    "Quinn",
    "Rosa",
    "Sami",
    "Tara",
]
PLACES = [
    "Lisbon",
    "Paris",
    "Berlin",
    "Oslo",
    "Madrid",
    "Cairo",
    "Lima",
    "Quito",
    "Dublin",
    "Vienna",
    "New York",
    "Buenos Aires",
    "San Diego",
    "Hong Kong",
    "Cape Town",
]
ORGS = [
    "Acme",
    "Globex",
    "Initech",
    "Umbrella",
    "Stark Industries",
    "Wayne Enterprises",
    "Blue Sky Airlines",
    "Red River Bank",
    "Hooli",
    "Vandelay",
]
TOWNS = ["Alderton", "Brookfield", "Carrow", "Dunmore", "Elmstead", "Fairholm", "Glenbury", "Harwick"]
# Pretraining documents: local news about the towns, and (so that the vocabulary and the model know the words the
# fine-tuning examples are about) about the people, places, companies and films of the other files.
TOPICS = {
    "council": [
        "The council met on {day} to discuss the budget for {town} .",
        "Members voted to spend more on roads and schools .",
        "The mayor of {town} said the plan would take two years .",
        "Residents asked for more buses between {town} and {town2} .",
    ],
    "market": [
        "Shares in the {town} bank rose on {day} .",
        "Analysts said profits were higher than expected .",
        "The company plans to open a new office in {town2} .",
        "Prices for energy and food went up again this month .",
    ],
    "sport": [
        "{town} won the cup final against {town2} on {day} .",
        "The coach praised the team for a strong second half .",
        "More than ten thousand fans watched the match .",
        "The captain said the season had been the best in years .",
    ],
    "business": [
        "{org} will open an office in {place} on {day} .",
        "{person} , who has worked for {org} for ten years , will run it .",
        "{person2} said the company hopes to hire fifty people in {place} .",
        "The new office is the first outside {place2} .",
        "Which company does {person2} work for now ? Still {org} .",
    ],
    "people": [
        "{person} moved from {place} to {place2} last year .",
        "{person} now works for {org} and lives near the river .",
        "On {day} {person2} flew to {place2} to visit {person} .",
        "They said the city was busy but friendly .",
        "Where does {person2} live ? Not far from {place2} .",
    ],
    "films": [
        "The new film starring {person} opened in {place} on {day} .",
        "Critics found the {aspect} {good} and the {aspect2} {good2} .",
        "Others said the {aspect3} was {bad} and the {aspect4} {bad2} .",
        "{person2} , who wrote the script , lives in {place2} .",
    ],
}
FILLERS = [
    "The weather was mild that year .",
    "Nobody expected the results .",
    "It rained for most of the week .",
    "The report was published on Monday .",
    "Prices went up again in the spring .",
]

# NER templates: (text with slots) ; slot -> entity type.
NER_TEMPLATES = [
    "{PER} lives in {LOC} .",
    "{PER} works for {ORG} in {LOC} .",
    "Yesterday {PER} visited {LOC} with {PER2} .",
    "{ORG} opened an office in {LOC} .",
    "The manager of {ORG} is {PER} .",
    "{PER} said the weather in {LOC} was fine .",
    "Nothing happened today .",
]
SLOT_TYPES = {"PER": ("PER", PEOPLE), "PER2": ("PER", PEOPLE), "LOC": ("LOC", PLACES), "ORG": ("ORG", ORGS)}


def ner_sentence(rng: random.Random) -> list[tuple[str, str]]:
    template = rng.choice(NER_TEMPLATES)
    pairs: list[tuple[str, str]] = []
    for word in template.split():
        if word.startswith("{"):
            entity_type, names = SLOT_TYPES[word[1:-1]]
            for k, part in enumerate(rng.choice(names).split()):
                pairs.append((part, ("B-" if k == 0 else "I-") + entity_type))
        else:
            pairs.append((word, "O"))
    return pairs


def write_conll(path: Path, sentences: list[list[tuple[str, str]]]) -> None:
    lines = ["-DOCSTART- O", ""]
    for sentence in sentences:
        lines += [f"{token} {tag}" for token, tag in sentence] + [""]
    path.write_text("\n".join(lines), encoding="utf-8")


def qa_paragraph(rng: random.Random, index: int) -> dict:
    person, colleague = rng.sample(PEOPLE, 2)
    place, org = rng.choice(PLACES), rng.choice(ORGS)
    facts = [f"{person} lives in {place} .", f"{colleague} works for {org} ."]
    sentences = facts + rng.sample(FILLERS, rng.randint(0, 3))
    rng.shuffle(sentences)
    context = " ".join(sentences)
    questions = [
        (f"Where does {person} live ?", place, f"{person} lives in "),
        (f"Which company does {colleague} work for ?", org, f"{colleague} works for "),
    ]
    qas = []
    for q, (question, answer, prefix) in enumerate(questions):
        start = context.index(prefix) + len(prefix)
        assert context[start : start + len(answer)] == answer
        qas.append({"id": f"q{index}-{q}", "question": question, "answers": [{"text": answer, "answer_start": start}]})
    return {"context": context, "qas": qas}


def write_squad(path: Path, paragraphs: list[dict]) -> None:
    document = {"version": "1.1", "data": [{"title": "Templated facts", "paragraphs": paragraphs}]}
    path.write_text(json.dumps(document, indent=1) + "\n", encoding="utf-8")


def sentiment_row(rng: random.Random) -> tuple[str, str]:
    label = rng.choice(["positive", "negative"])
    words = GOOD if label == "positive" else BAD
    adj, adj2 = rng.sample(words, 2)
    aspect, aspect2 = rng.sample(ASPECTS, 2)
    text = rng.choice(SENTIMENT_TEMPLATES).format(
        subject=rng.choice(SUBJECTS), adj=adj, adj2=adj2, aspect=aspect, aspect2=aspect2
    )
    return text, label


def document(rng: random.Random) -> str:
    topic = rng.choice(list(TOPICS))
    slots = dict(zip(("town", "town2"), rng.sample(TOWNS, 2)), day=rng.choice(DAYS), org=rng.choice(ORGS))
    slots |= dict(zip(("person", "person2"), rng.sample(PEOPLE, 2))) | dict(
        zip(("place", "place2"), rng.sample(PLACES, 2))
    )
    slots |= dict(zip(("aspect", "aspect2", "aspect3", "aspect4"), rng.sample(ASPECTS, 4)))
    slots |= dict(zip(("good", "good2"), rng.sample(GOOD, 2))) | dict(zip(("bad", "bad2"), rng.sample(BAD, 2)))
    sentences = [s.format(**slots) for s in TOPICS[topic]]
    rest = sentences[1:]  # the first sentence opens the story; the others come in any order
    rng.shuffle(rest)
    return " ".join(sentences[:1] + rest)


def write_csv(path: Path, rows: list[tuple[str, str]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)


def main() -> None:
    rng = random.Random(0)
    for split, n in (("train", 400), ("validation", 80), ("test", 80)):
        write_csv(HERE / f"sentiment_{split}.csv", [sentiment_row(rng) for _ in range(n)])
    rng = random.Random(0)  # the NER and QA files as first written, under the tests' fixed expectations
    write_conll(HERE / "ner_train.conll", [ner_sentence(rng) for _ in range(300)])
    write_conll(HERE / "ner_validation.conll", [ner_sentence(rng) for _ in range(60)])
    write_squad(HERE / "qa_train.json", [qa_paragraph(rng, i) for i in range(150)])
    write_squad(HERE / "qa_validation.json", [qa_paragraph(rng, 1000 + i) for i in range(30)])
    rng = random.Random(1)
    (HERE / "pretraining.txt").write_text("\n\n".join(document(rng) for _ in range(600)) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
