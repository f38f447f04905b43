"""What pretrain, linear and compare share: settings, data paths, callbacks, checkpoints, errors and
the pretraining and linear-probe runs."""
