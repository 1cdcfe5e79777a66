"""On-disk formats: the Hugging Face key maps."""
