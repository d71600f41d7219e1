"""Sharing: a trained folder handed on.

folder.py        what a folder holds and what of it is published: an allow-list of the files a model
                 repository consists of (never training state, links out of it, or the token)
model_card.py    the model card of a job's folder (huggingface_hub's ModelCard), with its results
bert_format.py   `convert_bert`: transformers' BERT folders <-> Mini-BERT folders, weights exact both ways,
                 loaded back by their users (transformers, SentenceTransformer) before they are called done
sentence_transformers_format.py   the files that make a folder a `SentenceTransformer(folder)`, and the mean
                 pooling they declare
push.py          `push_to_hub`: a folder to the Hugging Face Hub, as it is or in BERT format

from modeling_minibert.sharing import push_to_hub, convert_bert
"""

from modeling_minibert.utils.lazy import lazy_face

__getattr__, __all__ = lazy_face(
    __name__,
    {
        "push": ("push_to_hub",),
        "bert_format": ("convert_bert", "convert_bert_to_minibert", "convert_minibert_to_bert"),
        "model_card": ("write_model_card",),
    },
)
