"""How good static word vectors are, by the two tests everyone quotes, scored as gensim scores them.

- Word similarity (WordSim-353 and the like: `word1<TAB>word2<TAB>human score`, `#` comments):
  Spearman's rho between the vectors' cosines and the human scores, over the pairs whose two words
  have vectors (`KeyedVectors.evaluate_word_pairs`, case-insensitive).
- Analogies (Mikolov et al.'s `questions-words.txt`: `: section` lines, then `a b c d`): the word
  nearest to b - a + c by cosine among the `restrict` most frequent words, a, b and c excluded, must
  be d (3CosAdd, `KeyedVectors.evaluate_word_analogies`); questions with a word outside those
  `restrict` are skipped and counted.
Words are matched case-insensitively; vectors are listed most frequent first.
"""

from __future__ import annotations

import numpy as np

from .errors import BertforgeError


def read_pairs(path: str) -> list[tuple[str, str, float]]:
    """(word1, word2, score) from a tab-separated similarity file."""
    pairs = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.rstrip("\n").split("\t")
            try:
                pairs.append((fields[0], fields[1], float(fields[2])))
            except (IndexError, ValueError):
                raise BertforgeError(f"{path}:{number}: expected word1<TAB>word2<TAB>score") from None
    return pairs


def read_questions(path: str) -> list[tuple[str, list[tuple[str, str, str, str]]]]:
    """[(section, [(a, b, c, d), ...]), ...] from an analogy file."""
    sections = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.startswith(":"):
                sections.append((line[1:].strip(), []))
                continue
            words = line.split()
            if not words:
                continue
            if len(words) != 4 or not sections:
                raise BertforgeError(f"{path}:{number}: expected ': section' or four words")
            sections[-1][1].append(tuple(words))
    return sections


def _index(words: list[str], limit: int | None = None) -> dict[str, int]:
    """Uppercased word -> row, the most frequent row winning among words that differ in case."""
    rows = range(len(words) if limit is None else min(limit, len(words)))
    return {words[r].upper(): r for r in reversed(rows)}


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def word_similarity(words: list[str], vectors: np.ndarray, pairs: list[tuple[str, str, float]],
                    restrict: int = 300000) -> dict:
    """Spearman's rho of cosine against the human scores over the pairs whose words are among the
    `restrict` most frequent (gensim's default); the share left out."""
    index, unit = _index(words, restrict), _unit(vectors)
    ours, human = [], []
    for a, b, score in pairs:
        if a.upper() in index and b.upper() in index:
            ours.append(float(unit[index[a.upper()]] @ unit[index[b.upper()]]))
            human.append(score)
    if len(ours) < 2:
        raise BertforgeError(f"only {len(ours)} of {len(pairs)} word pairs have vectors")
    return {"spearman": _spearman(np.array(ours), np.array(human)), "pairs": len(ours),
            "oov_share": round(1 - len(ours) / len(pairs), 4)}


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(_ranks(a), _ranks(b))[0, 1])


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks from 1, tied values given their mean rank (as scipy's rankdata)."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]]))
    ends = np.concatenate([starts[1:], [len(values)]])
    ranks = np.empty(len(values))
    ranks[order] = np.repeat((starts + 1 + ends) / 2, ends - starts)  # a run holds ranks starts+1 .. ends
    return ranks


def analogies(words: list[str], vectors: np.ndarray, sections, restrict: int = 30000,
              batch: int = 512) -> dict:
    """3CosAdd accuracy per section and in all (`correct / answered`), and the questions skipped.
    As gensim: a candidate spelled as a, b or c in another case is passed over too, and the answer
    counts in any case."""
    index = _index(words, restrict)
    kept = min(restrict, len(words))
    unit = _unit(np.asarray(vectors)[:kept])
    forms = np.unique([w.upper() for w in words[:kept]], return_inverse=True)[1]  # one id per uppercased form
    result, correct_all, answered_all, skipped = {}, 0, 0, 0
    for name, questions in sections:
        rows = [[index[w.upper()] for w in q] for q in questions if all(w.upper() in index for w in q)]
        skipped += len(questions) - len(rows)
        correct = 0
        for at in range(0, len(rows), batch):
            q = np.array(rows[at:at + batch])
            sims = (unit[q[:, 1]] - unit[q[:, 0]] + unit[q[:, 2]]) @ unit.T  # (Q, words)
            asked = forms[q[:, :3]]  # (Q, 3)
            sims[(forms[None, :, None] == asked[:, None, :]).any(-1)] = -np.inf
            correct += int((forms[sims.argmax(1)] == forms[q[:, 3]]).sum())
        result[name] = {"correct": correct, "answered": len(rows)}
        correct_all, answered_all = correct_all + correct, answered_all + len(rows)
    return {"accuracy": correct_all / answered_all if answered_all else 0.0, "answered": answered_all,
            "skipped": skipped, "sections": result}
