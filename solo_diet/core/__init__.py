"""The torch-only floor: usable in any training loop, no solo-learn or Lightning."""
