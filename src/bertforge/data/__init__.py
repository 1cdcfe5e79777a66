"""The pretraining data path: corpus -> shards -> instances -> masking -> batches."""
