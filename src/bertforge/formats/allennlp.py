"""AllenNLP's ELMo format, both ways: `options.json` + `weights.hdf5` as allenai/bilm-tf's
`dump_weights` writes them and AllenNLP's `elmo.py` reads them, so that ELMo models trained
elsewhere load here and ours load there.

The weights are TensorFlow's, and four of its conventions differ from ours (which are AllenNLP's
PyTorch modules'); AllenNLP converts them on loading, and so do we, both ways:
- an LSTM's gates are packed input, new cell, forget, output, its input and recurrent weights in
  one matrix `W_0` (I + H, 4C), input rows first; ours are input, forget, cell, output, in two
  matrices (4C, I) and (4C, H);
- TensorFlow's LSTMCell adds 1 to the forget gate's bias as it runs: the stored bias is ours - 1;
- a highway layer's gate in the file (`W_carry`, `b_carry`) says how much of the transform is
  taken; ours says how much of the input is carried, so its weights and bias are the file's negated;
- the character embedding has no row for padding positions: row i of the file is our id i + 1.
Matrices are stored (in, out); ours are (out, in). bilm-tf leaves the softmax out of the file. We
write ours under bilm-tf's own names (`softmax/W` (V, P), `softmax/b`) with the words as
`vocab.txt` (`<S>`, `</S>`, `<UNK>`, then one per line, bilm-tf's vocabulary file), and read them
when present. Reading an HDF5 file runs no code from it.
"""

from __future__ import annotations

import io
import json
import os

import numpy as np
import torch

from ..families.elmo.config import ELMoConfig
from ..errors import BertforgeError
from ..paths import check_apart

OPTIONS, WEIGHTS, VOCAB = "options.json", "weights.hdf5", "vocab.txt"
FILE_SPECIALS = ("<S>", "</S>", "<UNK>")  # bilm-tf's first three words
ALLENNLP_CHARACTERS = 50  # ELMoCharacterMapper's fixed word length, whatever options.json says
MASKED = -1e4  # softmax bias of our words the file has no row for (padding, the field mark): never predicted


def _h5py():
    try:
        import h5py
    except ImportError:
        raise BertforgeError("AllenNLP's ELMo format needs h5py: pip install 'bertforge[allennlp]'") from None
    return h5py


def _swap_gates(matrix: np.ndarray, cells: int) -> np.ndarray:
    """Input, forget, cell, output <-> input, cell, forget, output along axis 0 (its own inverse)."""
    out = matrix.copy()
    out[cells:2 * cells], out[2 * cells:3 * cells] = matrix[2 * cells:3 * cells], matrix[cells:2 * cells]
    return out


def _lstm(direction: int, layer: int) -> str:
    return f"RNN_{direction}/RNN/MultiRNNCell/Cell{layer}/LSTMCell"


def file_arrays(state: dict[str, torch.Tensor], config: ELMoConfig) -> dict[str, np.ndarray]:
    """Our state dict (an ELMoLanguageModel's, `backbone.` prefixed) -> the file's datasets.

    Both maps here use the module's own names, as `state_dict()` and `load_state` see them; the
    `bert.` of our own files is `native`'s business alone."""
    s = {k: v.detach().cpu().float().numpy() for k, v in state.items()}
    width, cells = sum(n for _, n in config.filters), config.cell_size
    out = {"char_embed": s["backbone.embeddings.embedding.weight"][1:]}
    for i in range(len(config.filters)):
        out[f"CNN/W_cnn_{i}"] = s[f"backbone.embeddings.convs.{i}.weight"].transpose(2, 1, 0)[None]
        out[f"CNN/b_cnn_{i}"] = s[f"backbone.embeddings.convs.{i}.bias"]
    for k in range(config.n_highway):
        weight, bias = s[f"backbone.embeddings.highways.{k}.weight"], s[f"backbone.embeddings.highways.{k}.bias"]
        out[f"CNN_high_{k}/W_transform"], out[f"CNN_high_{k}/b_transform"] = weight[:width].T, bias[:width]
        out[f"CNN_high_{k}/W_carry"], out[f"CNN_high_{k}/b_carry"] = -weight[width:].T, -bias[width:]
    out["CNN_proj/W_proj"] = s["backbone.embeddings.projection.weight"].T
    out["CNN_proj/b_proj"] = s["backbone.embeddings.projection.bias"]
    for d, stack in enumerate(("forward_layers", "backward_layers")):
        for layer in range(config.n_layers):
            ours = f"backbone.{stack}.{layer}."
            packed = np.concatenate([s[ours + "input_linearity.weight"], s[ours + "state_linearity.weight"]], axis=1)
            bias = _swap_gates(s[ours + "state_linearity.bias"], cells)
            bias[2 * cells:3 * cells] -= 1.0
            out[_lstm(d, layer) + "/W_0"] = _swap_gates(packed, cells).T
            out[_lstm(d, layer) + "/B"] = bias
            out[_lstm(d, layer) + "/W_P_0"] = s[ours + "state_projection.weight"].T
    rows = [2, 3, 0, *range(5, config.vocab_size)]  # file rows: <S>, </S>, <UNK>, then our words after our specials
    out["softmax/W"], out["softmax/b"] = s["softmax.weight"][rows], s["softmax.bias"][rows]
    return out


def state_of(arrays: dict[str, np.ndarray], config: ELMoConfig, rows: list[int] | None = None) -> dict:
    """The file's datasets (checked against `expected_shapes`) -> our state dict. `rows[i]` is our
    word id of the file's softmax row i; without a softmax in the file, ours predicts nothing (zero
    weights, every word equally likely)."""
    a, cells = arrays, config.cell_size
    s = {"backbone.embeddings.embedding.weight": np.concatenate([np.zeros_like(a["char_embed"][:1]), a["char_embed"]])}
    for i in range(len(config.filters)):
        s[f"backbone.embeddings.convs.{i}.weight"] = a[f"CNN/W_cnn_{i}"][0].transpose(2, 1, 0)
        s[f"backbone.embeddings.convs.{i}.bias"] = a[f"CNN/b_cnn_{i}"]
    for k in range(config.n_highway):
        h = f"CNN_high_{k}/"
        s[f"backbone.embeddings.highways.{k}.weight"] = np.concatenate([a[h + "W_transform"].T, -a[h + "W_carry"].T])
        s[f"backbone.embeddings.highways.{k}.bias"] = np.concatenate([a[h + "b_transform"], -a[h + "b_carry"]])
    s["backbone.embeddings.projection.weight"] = a["CNN_proj/W_proj"].T
    s["backbone.embeddings.projection.bias"] = a["CNN_proj/b_proj"]
    for d, stack in enumerate(("forward_layers", "backward_layers")):
        for layer in range(config.n_layers):
            ours, theirs = f"backbone.{stack}.{layer}.", _lstm(d, layer)
            packed = _swap_gates(a[theirs + "/W_0"].T, cells)
            bias = a[theirs + "/B"].copy()
            bias[2 * cells:3 * cells] += 1.0
            s[ours + "input_linearity.weight"] = packed[:, :config.projection_dim]
            s[ours + "state_linearity.weight"] = packed[:, config.projection_dim:]
            s[ours + "state_linearity.bias"] = _swap_gates(bias, cells)
            s[ours + "state_projection.weight"] = a[theirs + "/W_P_0"].T
    weight = np.zeros((config.vocab_size, config.projection_dim), np.float32)
    bias = np.zeros(config.vocab_size, np.float32)
    if "softmax/W" in a:
        weight[rows], bias[rows] = a["softmax/W"], a["softmax/b"]
        bias[[1, 4]] = MASKED
    s["softmax.weight"], s["softmax.bias"] = weight, bias
    return {k: torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32)) for k, v in s.items()}


def expected_shapes(config: ELMoConfig, softmax_words: int | None) -> dict[str, tuple]:
    """Every dataset of the file and its shape for `config` (the softmax's if `softmax_words`)."""
    e, p, c = config.char_embedding_dim, config.projection_dim, config.cell_size
    width = sum(n for _, n in config.filters)
    shapes = {"char_embed": (261, e), "CNN_proj/W_proj": (width, p), "CNN_proj/b_proj": (p,)}
    for i, (w, n) in enumerate(config.filters):
        shapes[f"CNN/W_cnn_{i}"], shapes[f"CNN/b_cnn_{i}"] = (1, w, e, n), (n,)
    for k in range(config.n_highway):
        for part in ("transform", "carry"):
            shapes[f"CNN_high_{k}/W_{part}"], shapes[f"CNN_high_{k}/b_{part}"] = (width, width), (width,)
    for d in range(2):
        for layer in range(config.n_layers):
            shapes[_lstm(d, layer) + "/W_0"], shapes[_lstm(d, layer) + "/B"] = (2 * p, 4 * c), (4 * c,)
            shapes[_lstm(d, layer) + "/W_P_0"] = (c, p)
    if softmax_words:
        shapes["softmax/W"], shapes["softmax/b"] = (softmax_words, p), (softmax_words,)
    return shapes


def options_of(config: ELMoConfig, softmax_words: int | None) -> dict:
    options = {"bidirectional": True, "dropout": config.dropout,
               "lstm": {"use_skip_connections": True, "projection_dim": config.projection_dim,
                        "cell_clip": config.cell_clip, "proj_clip": config.proj_clip, "dim": config.cell_size,
                        "n_layers": config.n_layers},
               "char_cnn": {"activation": config.activation, "filters": [list(f) for f in config.filters],
                            "n_highway": config.n_highway, "embedding": {"dim": config.char_embedding_dim},
                            "n_characters": 262, "max_characters_per_token": config.max_characters_per_token}}
    if softmax_words:
        options["n_tokens_vocab"] = softmax_words
    return options


def config_of(options, path: str, vocab_size: int) -> ELMoConfig:
    """An `options.json`'s settings as our config, naming the first key that is missing or unsupported."""
    def get(*keys):
        value = options
        for key in keys:
            if not isinstance(value, dict) or key not in value:
                raise BertforgeError(f"{path}: no {'.'.join(keys)} (an ELMo options file has lstm and char_cnn)")
            value = value[key]
        return value

    if not isinstance(options, dict) or "char_cnn" not in options:
        raise BertforgeError(f"{path}: no char_cnn; only ELMo models that read characters are supported")
    if get("lstm", "use_skip_connections") is not True:
        raise BertforgeError(f"{path}: lstm.use_skip_connections is not true; this ELMo always has the residual "
                             "connection between its layers")
    if options.get("bidirectional", True) is not True:
        raise BertforgeError(f"{path}: bidirectional is not true; an ELMo biLM reads both ways")
    try:
        return ELMoConfig(vocab_size=vocab_size, max_characters_per_token=get("char_cnn", "max_characters_per_token"),
                          char_embedding_dim=get("char_cnn", "embedding", "dim"), filters=get("char_cnn", "filters"),
                          n_highway=get("char_cnn", "n_highway"), activation=get("char_cnn", "activation"),
                          projection_dim=get("lstm", "projection_dim"), cell_size=get("lstm", "dim"),
                          n_layers=get("lstm", "n_layers"), cell_clip=get("lstm", "cell_clip"),
                          proj_clip=get("lstm", "proj_clip"), dropout=options.get("dropout", 0.1))
    except BertforgeError as e:
        raise BertforgeError(f"{path}: {e}") from None


def read_vocab(path: str) -> tuple[list[str], list[int]]:
    """bilm-tf's vocabulary file (a word per line; `<S>`, `</S>` and `<UNK>` anywhere, as bilm-tf
    finds them by name) -> (our word list: our five specials, then its other words in its order;
    our id of each of its lines, the order of its softmax rows)."""
    from ..data.words import BOS, EOS, SPECIALS, UNK

    try:
        with open(path, encoding="utf-8") as f:
            lines = [line.rstrip("\n") for line in f]
    except (OSError, UnicodeDecodeError) as e:
        raise BertforgeError(f"{path}: cannot read ({e})") from None
    ours = {"<S>": BOS, "</S>": EOS, "<UNK>": UNK}
    seen = {}
    for number, word in enumerate(lines, 1):
        if not word or word != word.strip() or word in SPECIALS:
            raise BertforgeError(f"{path}, line {number}: {word!r} cannot be a word here")
        if word in seen:
            raise BertforgeError(f"{path}, line {number}: {word!r} again (first on line {seen[word]})")
        seen[word] = number
    missing = [w for w in FILE_SPECIALS if w not in seen]
    if missing:
        raise BertforgeError(f"{path}: no {', '.join(missing)} (bilm-tf's vocabulary has <S>, </S> and <UNK>)")
    words = list(SPECIALS) + [w for w in lines if w not in ours]
    index = {w: i for i, w in enumerate(words)}
    return words, [index[ours.get(w, w)] for w in lines]


def export_allennlp(model_dir: str, out: str) -> dict:
    """Write the ELMo checkpoint in `model_dir` as `out`/options.json, weights.hdf5 and vocab.txt."""
    from ..atomic import atomic_directory, check_space, remove_leftovers
    from ..checkpoint import read_config
    from ..data.words import WordVocab
    from ..families.elmo.model import ELMoLanguageModel
    from . import native

    check_apart(out, model_dir)
    _h5py()  # before the work, when it is missing
    config = native.check_native(read_config(model_dir), model_dir)
    if config.model_type != "elmo":
        raise BertforgeError(f"{model_dir}: a {config.model_type} checkpoint; AllenNLP's format holds ELMo models")
    if config.architectures != ["ELMoLanguageModel"]:
        raise BertforgeError(f"{model_dir}: a fine-tuned {config.architectures[0]}; AllenNLP's format holds the "
                             "biLM itself (export the language model it was fine-tuned from)")
    if config.max_characters_per_token != ALLENNLP_CHARACTERS:
        raise BertforgeError(f"{model_dir}: reads {config.max_characters_per_token} characters per word; AllenNLP's "
                             f"character mapper always gives {ALLENNLP_CHARACTERS}")
    model = native.load_model(ELMoLanguageModel, model_dir, config=config)
    vocab = WordVocab.from_pretrained(model_dir)
    words = config.vocab_size - 2  # the file has no padding word or field mark
    arrays = file_arrays(model.state_dict(), config)
    weights = hdf5_bytes(arrays)
    remove_leftovers(out)  # what a killed export left
    check_space(out, len(weights) + (1 << 20))  # and a MiB for options.json and vocab.txt
    with atomic_directory(out) as tmp:
        with open(os.path.join(tmp, OPTIONS), "w", encoding="utf-8") as f:
            json.dump(options_of(config, words), f, indent=1)
        with open(os.path.join(tmp, WEIGHTS), "wb") as f:
            f.write(weights)
        with open(os.path.join(tmp, VOCAB), "w", encoding="utf-8") as f:
            f.writelines(w + "\n" for w in [*FILE_SPECIALS, *vocab.words[5:]])
    return {"datasets": len(arrays), "words": words}


def hdf5_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """The HDF5 file of `arrays` (float32 datasets), built in memory: HDF5's library crashes the
    whole process when a write to disk fails (a full disk), where Python's own write raises an
    error that leaves the previous export in place."""
    h5py = _h5py()
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        for name, array in arrays.items():
            f.create_dataset(name, data=array.astype(np.float32))
    return buffer.getvalue()


def import_allennlp(options_path: str, weights_path: str, out: str, vocab_path: str | None = None) -> dict:
    """An AllenNLP ELMo (`options_path`, `weights_path`, and bilm-tf's vocabulary file if its softmax
    is to be used) -> a bertforge ELMo directory `out`."""
    from ..atomic import atomic_directory, remove_leftovers
    from ..config.base import _read_json
    from ..data.words import SPECIALS, WordVocab
    from ..families.elmo.model import ELMoLanguageModel
    from . import native
    from .tensors import check_finite, load_state

    check_apart(out, options_path, weights_path, vocab_path)
    h5py = _h5py()
    options = _read_json(options_path)
    words, rows = read_vocab(vocab_path) if vocab_path else (None, None)
    try:
        f = h5py.File(weights_path, "r")
    except (OSError, ValueError) as e:
        raise BertforgeError(f"{weights_path}: cannot be read as HDF5 ({e})") from None
    with f:
        refuse_links_out(f, weights_path)
        softmax_words = f["softmax/W"].shape[0] if isinstance(f.get("softmax/W"), h5py.Dataset) else None
        if softmax_words and words is None:
            raise BertforgeError(f"{weights_path}: holds a softmax over {softmax_words:,} words; give its vocabulary "
                                 "(bilm-tf's vocab.txt) with --vocab")
        if words is not None and softmax_words and len(words) - 2 != softmax_words:
            raise BertforgeError(f"{vocab_path}: {len(words) - 2:,} words, but the softmax in {weights_path} has "
                                 f"{softmax_words:,}")
        config = config_of(options, options_path, len(words) if words else 5)
        expected = expected_shapes(config, softmax_words)
        check_datasets(f, expected, config, weights_path, options_path)
        arrays = {name: f[name][...] for name in expected}
    check_finite({name: torch.from_numpy(array) for name, array in arrays.items()}, weights_path)
    model = ELMoLanguageModel(config)
    load_state(model, state_of(arrays, config, rows), weights_path)
    vocab = WordVocab(words or list(SPECIALS), lowercase=False, characters=config.max_characters_per_token)
    remove_leftovers(out)  # what a killed import left
    with atomic_directory(out) as tmp:
        native.write(model, tmp, vocab)
    return {"config": config, "softmax": bool(softmax_words)}


def refuse_links_out(f, path: str) -> None:
    """Refuse a file whose data lives elsewhere: an external link, a dataset stored in external raw
    files, or a virtual dataset mapping other files. Reading would open whatever files they name."""
    h5py = _h5py()
    found = []

    def visit(name, link):
        if isinstance(link, h5py.ExternalLink):
            found.append(f"{name} links to {link.filename}")
        elif isinstance(link, h5py.HardLink):
            node = f.get(name)
            if isinstance(node, h5py.Dataset) and (node.external or node.is_virtual):
                found.append(f"{name} is stored in other files")

    f.visititems_links(visit)
    if found:
        raise BertforgeError(f"{path}: refused: {found[0]}; a weights file must hold its own data")


MAX_COMPRESSION = 100  # float weights hardly compress (gzip: under 2x); a dataset claiming more is mostly unwritten


def check_datasets(f, expected: dict[str, tuple], config: ELMoConfig, path: str, options_path: str) -> None:
    """Every dataset `expected` is in the file, of that shape, floating point, and holds the bytes
    its shape declares: a small file may declare terabytes of data never written (read as zeros),
    which reading would allocate. Checked before any of it is read."""
    h5py = _h5py()
    problems = []
    for name, shape in expected.items():
        node = f.get(name)
        if not isinstance(node, h5py.Dataset):
            problems.append(f"{name} (missing)")
        elif tuple(node.shape) != shape:
            problems.append(f"{name} {node.shape} (expected {shape})")
        elif node.dtype.kind != "f":
            problems.append(f"{name} holds {node.dtype} (expected floating point numbers)")
    if "CNN_proj/W_proj" not in f and sum(n for _, n in config.filters) == config.projection_dim:
        problems.insert(0, "no CNN_proj (bilm-tf leaves the projection out when the filters add up to "
                           "projection_dim; this ELMo always has one)")
    if problems:
        raise BertforgeError(f"{path}: does not match {options_path}: " + "; ".join(problems[:6])
                             + (f" and {len(problems) - 6} more" if len(problems) > 6 else ""))
    for name in expected:
        node = f[name]
        declared, stored = node.size * node.dtype.itemsize, node.id.get_storage_size()
        filtered = node.id.get_create_plist().get_nfilters() > 0
        if declared > stored * (MAX_COMPRESSION if filtered else 1):
            raise BertforgeError(f"{path}: {name} declares {node.shape} ({declared:,} bytes) but the file holds "
                                 f"{stored:,} bytes of it; refused before allocating it")
