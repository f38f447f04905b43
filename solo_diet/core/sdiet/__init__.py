"""s-DIET's parts (s-DIET paper, §5): row head, row store, row optimiser and sampler."""
