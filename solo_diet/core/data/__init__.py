"""Batched GPU data path: augmentations and solo-learn's pipelines (torch only)."""

# the datasets solo-learn reads: image folders, and the arrays torchvision downloads
FOLDER_DATASETS = ("custom", "imagenet", "imagenet100")
ARRAY_DATASETS = ("cifar10", "cifar100", "stl10")
DATASETS = FOLDER_DATASETS + ARRAY_DATASETS
