"""Engine (free to change): the model's fast paths: the fused attention kernel's branch, packed
rows, batches without padding, recorded CUDA graphs, batched decoding, the model's FLOPs."""
