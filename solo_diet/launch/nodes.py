"""Runs over several machines (docs/multi-node.md): set-ups that would hang, refused in one line."""

from __future__ import annotations

import os
from typing import Mapping, Optional

from omegaconf import DictConfig, ListConfig, OmegaConf

from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import device_count

# what a plain cluster (no scheduler) sets on every node, for Lightning's LightningEnvironment
PLAIN_CLUSTER_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK")
# strategies that span processes, so also nodes ("auto" becomes "ddp" with num_nodes > 1)
MULTI_PROCESS_STRATEGIES = ("ddp", "fsdp", "deepspeed")
DOCS = "docs/multi-node.md"


def num_nodes(cfg: DictConfig) -> int:
    """``cfg.num_nodes`` (default 1), checked: a positive whole number."""
    value = OmegaConf.select(cfg, "num_nodes", default=1)
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"`num_nodes` must be a positive whole number, got {value!r}.")
    return value


def scheduler(environ: Mapping[str, str]) -> str:
    """The cluster environment Lightning reads: torchrun, slurm, lsf, mpi or plain."""
    if all(k in environ for k in ("RANK", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")):
        return "torchrun"
    if "SLURM_NTASKS" in environ and environ.get("SLURM_JOB_NAME") not in ("bash", "interactive"):
        return "slurm"
    if environ is os.environ:  # LSF's and MPI's detection read the process's own environment
        from lightning.fabric.plugins.environments import LSFEnvironment, MPIEnvironment

        if LSFEnvironment.detect():
            return "lsf"
        if MPIEnvironment.detect():
            return "mpi"
    return "plain"


def check_nodes(cfg: DictConfig, environ: Optional[Mapping[str, str]] = None) -> None:
    """Refuse what would hang a run over several nodes or split it into lone runs."""
    environ = os.environ if environ is None else environ
    nested = OmegaConf.select(cfg, "trainer.num_nodes", default=None)
    if nested is not None:
        raise ConfigError(
            f"`trainer.num_nodes={nested}`: num_nodes goes at the top level: ++num_nodes={nested}."
        )
    nodes = num_nodes(cfg)
    if "num_nodes" in cfg:
        cfg.num_nodes = nodes  # a digit string as the number solo-learn multiplies the lr by
    if nodes == 1 and _node_rank(environ) is None:
        return  # nothing to check (nor Lightning's cluster detection to import: about 5 s)
    where = scheduler(environ)
    node_rank = _node_rank(environ) if where == "plain" else None
    if node_rank is not None and node_rank >= nodes:
        raise ConfigError(
            f"NODE_RANK={node_rank} but `num_nodes={nodes}`: set ++num_nodes=<number of machines> "
            f"on every node, and NODE_RANK from 0 to num_nodes - 1 ({DOCS})."
        )
    if nodes == 1:
        return
    per_node = _check_strategy_and_devices(cfg, nodes)
    if where == "plain":
        _check_plain_cluster(nodes, environ)
    elif where == "slurm":
        _check_slurm(nodes, per_node, environ)
    elif where == "torchrun":
        _check_torchrun(nodes, per_node, environ)


def _node_rank(environ: Mapping[str, str]) -> Optional[int]:
    """``NODE_RANK`` (else ``GROUP_RANK``) when set, checked."""
    name = "NODE_RANK" if "NODE_RANK" in environ else "GROUP_RANK"
    value = environ.get(name)
    if value is None:
        return None
    if not value.strip().isdigit():
        raise ConfigError(f"{name}={value!r} must be this machine's number, 0 to num_nodes - 1.")
    return int(value)


def _check_strategy_and_devices(cfg: DictConfig, nodes: int) -> int:
    """A strategy that spans processes and a count of devices per node (returned)."""
    strategy = str(OmegaConf.select(cfg, "strategy", default="auto"))
    if strategy not in ("auto", "None") and not strategy.startswith(MULTI_PROCESS_STRATEGIES):
        raise ConfigError(
            f"`num_nodes={nodes}` needs a strategy that spans processes, got "
            f"`strategy={strategy}` (each node would train alone): use strategy=ddp."
        )
    # the processes per node: ``devices``' length (normalize_devices made a count a list) or count
    per_node = OmegaConf.select(cfg, "devices", default=1)
    if isinstance(per_node, (list, ListConfig)):
        per_node = len(per_node)
    if not (isinstance(per_node, int) and per_node > 0):  # `auto` or -1
        raise ConfigError(
            f"`num_nodes={nodes}` with `devices={OmegaConf.select(cfg, 'devices')}`: write the "
            "devices each node trains on as a count (devices=8), the same on every node."
        )
    accelerator = str(OmegaConf.select(cfg, "accelerator", default="auto")).lower()
    if accelerator in ("gpu", "cuda"):
        import torch

        have = torch.cuda.device_count()
        if 0 < have < per_node:
            raise ConfigError(
                f"`devices` asks for {per_node} GPUs on each of the {nodes} nodes, but this "
                f"machine has {have}: set devices={have} (the GPUs of one node)."
            )
    return per_node


def _check_plain_cluster(nodes: int, environ: Mapping[str, str]) -> None:
    """No scheduler: every node needs the main node's address and port and its own number."""
    given = {*environ, *(["NODE_RANK"] if "GROUP_RANK" in environ else [])}
    missing = [name for name in PLAIN_CLUSTER_VARIABLES if name not in given]
    if missing:
        raise ConfigError(
            f"`num_nodes={nodes}` without a scheduler needs {', '.join(missing)} on every node: "
            "MASTER_ADDR=<node 0's address> MASTER_PORT=<a free port> NODE_RANK=<0..num_nodes-1> "
            f"solo-diet pretrain ... (under SLURM, start it with srun; {DOCS})."
        )
    port = environ["MASTER_PORT"]
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"MASTER_PORT={port!r} must be a port number (1-65535) free on node 0.")


def _check_slurm(nodes: int, per_node: int, environ: Mapping[str, str]) -> None:
    """``srun``: its node count and tasks per node must be ``num_nodes`` and ``devices``."""
    slurm_nodes = environ.get("SLURM_NNODES")
    if slurm_nodes is not None and slurm_nodes.isdigit() and int(slurm_nodes) != nodes:
        raise ConfigError(
            f"`num_nodes={nodes}`, but SLURM gave this job {slurm_nodes} nodes (--nodes): set "
            f"++num_nodes={slurm_nodes} or #SBATCH --nodes={nodes}."
        )
    tasks = environ.get("SLURM_NTASKS_PER_NODE")
    if tasks is None:
        raise ConfigError(
            f"`num_nodes={nodes}` under SLURM needs one task per device: #SBATCH "
            f"--ntasks-per-node={per_node} (not --ntasks), and srun to start them ({DOCS})."
        )
    if tasks.isdigit() and int(tasks) != per_node:
        raise ConfigError(
            f"`devices` gives {per_node} processes per node, SLURM starts {tasks} tasks per node: "
            f"set devices={tasks} or #SBATCH --ntasks-per-node={per_node}."
        )


def _check_torchrun(nodes: int, per_node: int, environ: Mapping[str, str]) -> None:
    """torchrun's processes per node and world size must match ``devices`` and ``num_nodes``."""
    local, world = environ.get("LOCAL_WORLD_SIZE"), environ.get("WORLD_SIZE")
    if local is not None and local.isdigit() and int(local) != per_node:
        raise ConfigError(
            f"`devices` gives {per_node} processes per node, but torchrun starts {local} per node "
            f"(--nproc-per-node): set devices={local}."
        )
    if world is not None and world.isdigit() and int(world) != nodes * per_node:
        raise ConfigError(
            f"`num_nodes={nodes}` x {per_node} devices is {nodes * per_node} processes, but "
            f"torchrun's world has {world} (--nnodes): make them agree."
        )


def check_one_node(cfg: DictConfig) -> None:
    """Refuse ``num_nodes > 1`` for ``solo-diet compare``, and a ``devices`` solo-learn misreads."""
    device_count(cfg)
    nodes = num_nodes(cfg)
    if nodes > 1:
        raise ConfigError(
            f"`num_nodes={nodes}`: solo-diet compare runs on one machine; train over several with "
            f"`solo-diet pretrain` on each ({DOCS}), then probe with `solo-diet linear`."
        )
