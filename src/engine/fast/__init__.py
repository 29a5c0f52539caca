"""Engine (free to change): the model's fast paths: the fused attention kernel's branch, a
batch's rows in groups by length, batches without padding, recorded CUDA graphs, batched
decoding, the model's FLOPs."""
