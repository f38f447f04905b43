"""What pretrain, linear and compare share: settings, data paths, checkpoints, errors, runs."""
