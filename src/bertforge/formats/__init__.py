"""On-disk formats: transformers' (hf.py, through each family's layout), bertforge's own (native.py),
MarianMT's, CoVe's, AllenNLP's, word vectors."""
