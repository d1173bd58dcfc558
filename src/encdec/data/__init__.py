"""The data layer: corpus readers, tokenized shards, batches and training objectives."""
