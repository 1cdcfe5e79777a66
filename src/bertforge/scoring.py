"""Translation quality as the field reports it, through the `sacrebleu` library (an extra:
`pip install bertforge[translation]`), each score labelled so that nobody mixes them:

- `bleu`: sacreBLEU, cased, on detokenized text with its own 13a tokenizer; its signature says so.
- `chrf`: sacreBLEU's chrF (character n-gram F-score, beta 2).
- `bleu_lc`: BLEU on lowercased text, 13a-tokenized: what the Multi30k literature reports
  (multi-bleu.perl on lowercased, tokenized text), and what CoVe's 38.5 and the fairseq anchors are.
"""

from __future__ import annotations

from .errors import BertforgeError


def load_sacrebleu():
    """The sacrebleu module, or an error saying how to install it."""
    try:
        import sacrebleu
    except ImportError:
        raise BertforgeError("scoring translations needs sacrebleu: pip install 'bertforge[translation]'") from None
    return sacrebleu


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict:
    """Corpus-level scores of `hypotheses` against one reference each, in points (0-100), with the
    signatures that say how each was computed."""
    if len(hypotheses) != len(references):
        raise BertforgeError(f"{len(hypotheses)} translations for {len(references)} references")
    sacrebleu = load_sacrebleu()
    bleu = sacrebleu.metrics.BLEU()
    lower = sacrebleu.metrics.BLEU(lowercase=True)
    chrf = sacrebleu.metrics.CHRF()
    refs = [references]
    scores = {"bleu": bleu.corpus_score(hypotheses, refs).score, "bleu_lc": lower.corpus_score(hypotheses, refs).score,
              "chrf": chrf.corpus_score(hypotheses, refs).score}
    return {**{k: round(v, 2) for k, v in scores.items()},
            "signatures": {"bleu": str(bleu.get_signature()), "bleu_lc": str(lower.get_signature()),
                           "chrf": str(chrf.get_signature())}}


def describe(scores: dict) -> str:
    """The scores in one line per kind, each with its signature."""
    s = scores["signatures"]
    return (f"sacreBLEU {scores['bleu']:.2f}  ({s['bleu']})\n"
            f"BLEU lowercased, tokenized (Multi30k literature's) {scores['bleu_lc']:.2f}  ({s['bleu_lc']})\n"
            f"chrF {scores['chrf']:.2f}  ({s['chrf']})")
