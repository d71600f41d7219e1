// Classify sentences with transformers.js in Node, from a folder written by
// `minibert export-onnx FOLDER OUT --format transformers.js`:
//
//     node examples/browser/classify.mjs OUT [q8|fp32] < sentences.json     (a JSON list of strings)
//
// Prints one JSON object: {"labels": [...], "logits": [[...], ...]}: the labels from transformers.js'
// text-classification pipeline, the logits from the model class it builds, both as transformers.js loads them.
// The package is `@huggingface/transformers` from npm; TRANSFORMERS_JS may name its entry file instead (the tests
// install it outside this repository's own files).
import { readFileSync } from "node:fs";
import path from "node:path";

const { env, pipeline, AutoTokenizer, AutoModelForSequenceClassification } = await import(
  process.env.TRANSFORMERS_JS ?? "@huggingface/transformers"
);

const [folder, dtype = "fp32"] = process.argv.slice(2);
// Local files only: the model is read from its folder, never fetched from the Hub.
env.allowRemoteModels = false;
env.localModelPath = path.dirname(path.resolve(folder));
const name = path.basename(path.resolve(folder));
const sentences = JSON.parse(readFileSync(0, "utf8"));

const classify = await pipeline("text-classification", name, { dtype });
const labels = (await classify(sentences)).map((result) => result.label);

const tokenizer = await AutoTokenizer.from_pretrained(name);
const model = await AutoModelForSequenceClassification.from_pretrained(name, { dtype });
const { logits } = await model(tokenizer(sentences, { padding: true, truncation: true }));
console.log(JSON.stringify({ labels, logits: logits.tolist() }));
