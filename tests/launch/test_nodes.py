"""``num_nodes``: the one-line refusals of ``solo_diet.launch.nodes`` (pretrain, linear, compare),
and one host run as two nodes (``NODE_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) equal to one node of
two devices, through ``solo-diet pretrain``, on the CPU and on two GPUs."""

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import json
import subprocess
import sys
from pathlib import Path

import torch
from omegaconf import OmegaConf

from solo_diet.cli.main import main
from solo_diet.core.errors import ConfigError
from solo_diet.launch.nodes import check_nodes, check_one_node

pytestmark = pytest.mark.solo

REPO = Path(__file__).resolve().parents[2]
PLAIN = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "NODE_RANK": "1"}
SLURM = {"SLURM_NTASKS": "8", "SLURM_JOB_NAME": "train", "SLURM_NNODES": "2"}
TORCHRUN = {"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "4"}
# the precision the DDP equivalence tests use (float64 runs)
FLOAT64_GAP = 1e-10


def cfg(**keys):
    return OmegaConf.create({"devices": [0, 1, 2, 3], "strategy": "ddp", **keys})


@pytest.mark.parametrize("value", [0, -1, "two", True, 1.5])
def test_num_nodes_must_be_a_positive_integer(value):
    with pytest.raises(ConfigError, match=r"^`num_nodes` must be a positive whole number"):
        check_nodes(cfg(num_nodes=value), {})


def test_a_digit_string_becomes_the_number():
    config = cfg(num_nodes="2")
    check_nodes(config, PLAIN)
    assert config.num_nodes == 2


def test_one_node_needs_nothing_and_a_trainer_section_is_named():
    check_nodes(cfg(), {})
    check_nodes(cfg(num_nodes=1), {"NODE_RANK": "0"})
    with pytest.raises(ConfigError, match=r"`trainer.num_nodes=2`.*top level.*\+\+num_nodes=2"):
        check_nodes(cfg(trainer={"num_nodes": 2}), PLAIN)


@pytest.mark.parametrize(
    "environ, nodes, match",
    [
        ({"NODE_RANK": "1"}, 1, r"NODE_RANK=1 but `num_nodes=1`"),
        ({"NODE_RANK": "2"}, 2, r"NODE_RANK=2 but `num_nodes=2`"),
        ({"NODE_RANK": "one"}, 2, r"NODE_RANK='one' must be this machine's number"),
        ({}, 2, r"needs MASTER_ADDR, MASTER_PORT, NODE_RANK on every node"),
        ({"MASTER_ADDR": "a", "NODE_RANK": "0"}, 2, r"needs MASTER_PORT on every node"),
        ({**PLAIN, "MASTER_PORT": "http"}, 2, r"MASTER_PORT='http' must be a port number"),
    ],
)
def test_a_plain_cluster_needs_its_variables(environ, nodes, match):
    with pytest.raises(ConfigError, match=match):
        check_nodes(cfg(num_nodes=nodes), environ)


def test_a_plain_cluster_with_its_variables_passes():
    check_nodes(cfg(num_nodes=2), PLAIN)
    check_nodes(cfg(num_nodes=2, strategy="auto", devices=1), PLAIN)
    renamed = {k: v for k, v in PLAIN.items() if k != "NODE_RANK"} | {"GROUP_RANK": "1"}
    check_nodes(cfg(num_nodes=2), renamed)  # Lightning reads GROUP_RANK when NODE_RANK is unset


@pytest.mark.parametrize(
    "keys, match",
    [
        ({"strategy": "single_device"}, r"needs a strategy that spans processes.*strategy=ddp"),
        ({"devices": "auto"}, r"`devices=auto`: write the devices each node trains on as a count"),
        ({"devices": -1}, r"`devices=-1`"),
    ],
)
def test_several_nodes_refuse_lone_processes_and_unknown_device_counts(keys, match):
    with pytest.raises(ConfigError, match=match):
        check_nodes(cfg(num_nodes=2, **keys), PLAIN)


@pytest.mark.parametrize("devices", ["auto", "-1", 0])
def test_one_node_refuses_a_device_count_solo_learn_would_misread(devices):
    """solo-learn scales the lr by len(devices): `auto` would silently train at 4x the lr."""
    from solo_diet.launch.common import normalize_devices

    with pytest.raises(ConfigError, match=r"^`devices` must be a positive count or a list"):
        normalize_devices(cfg(devices=devices))


@pytest.mark.skipif(torch.cuda.device_count() == 0, reason="counts this machine's GPUs")
def test_more_gpus_per_node_than_the_machine_has_is_refused():
    per_node = torch.cuda.device_count() + 1
    with pytest.raises(ConfigError, match=rf"asks for {per_node} GPUs on each of the 2 nodes"):
        check_nodes(cfg(num_nodes=2, accelerator="gpu", devices=per_node), PLAIN)


@pytest.mark.parametrize(
    "environ, match",
    [
        ({**SLURM, "SLURM_NTASKS_PER_NODE": "4"}, None),
        # Lightning reads SLURM's node id, not NODE_RANK: a stale one does not count
        ({**SLURM, "SLURM_NTASKS_PER_NODE": "4", "NODE_RANK": "5"}, None),
        ({**SLURM, "SLURM_NNODES": "4", "SLURM_NTASKS_PER_NODE": "4"}, r"gave this job 4 nodes"),
        (SLURM, r"needs one task per device: #SBATCH --ntasks-per-node=4"),
        ({**SLURM, "SLURM_NTASKS_PER_NODE": "2"}, r"SLURM starts 2 tasks per node"),
        # an interactive job is no SLURM run for Lightning: the plain variables are needed
        ({**SLURM, "SLURM_JOB_NAME": "bash"}, r"without a scheduler needs MASTER_ADDR"),
        ({**TORCHRUN, "WORLD_SIZE": "8"}, None),
        ({**TORCHRUN, "LOCAL_WORLD_SIZE": "8", "WORLD_SIZE": "16"}, r"torchrun starts 8 per"),
        ({**TORCHRUN, "WORLD_SIZE": "12"}, r"torchrun's world has 12"),
    ],
)
def test_a_schedulers_counts_must_match_num_nodes_and_devices(environ, match):
    if match is None:
        check_nodes(cfg(num_nodes=2), environ)
    else:
        with pytest.raises(ConfigError, match=match):
            check_nodes(cfg(num_nodes=2), environ)


def test_compare_refuses_several_nodes():
    check_one_node(cfg())
    with pytest.raises(ConfigError, match=r"`num_nodes=2`: solo-diet compare .*`solo-diet linear`"):
        check_one_node(cfg(num_nodes=2))


@pytest.mark.parametrize("command", ["pretrain", "linear"])
def test_the_launchers_refuse_a_cluster_without_its_variables_in_one_line(
    command, monkeypatch, capsys, tmp_path
):
    for name in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "GROUP_RANK", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    argv = [command, "--config-path", str(REPO / "scripts" / command / "custom")]
    argv += ["--config-name", "diet", "++num_nodes=2", "devices=1", "accelerator=cpu"]
    assert main(argv + [f"checkpoint.dir={tmp_path}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "`num_nodes=2` without a scheduler needs MASTER_ADDR" in err[0], err


def two_nodes_equal_one_node(
    tmp_path: Path, accelerator: str, resume: list, methods=("sdiet", "diet"), options=()
) -> dict:
    """Run benchmarks/multi_node_equivalence.py (with its ``options``); check what it measured and
    return it."""
    out = tmp_path / "gaps.json"
    script = REPO / "benchmarks" / "multi_node_equivalence.py"
    argv = [sys.executable, str(script), "--accelerator", accelerator, "--float64"]
    argv += ["--methods", *methods, "--resume", *resume, "--json", str(out), *options]
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(out.read_text())
    for method in methods:
        result = results[method]
        assert result["two-node run"] == {"num_nodes": 2, "devices": [0]}
        compared = [result["two nodes vs one node"]]
        compared += [result["resumed vs uninterrupted"]] if method in resume else []
        for gaps in compared:
            assert all(gap <= FLOAT64_GAP for gap in gaps.values()), (method, gaps)
        # the scale: the second epoch moved what the gaps compare
        moved = result["second epoch moved"]
        assert moved["backbone"] > 1e-6 and moved["steps"] == 2, (method, moved)
        if method == "sdiet":
            assert moved["row store rows"] > 1e-6 and moved["row store global_step"] == 2
            assert result["two nodes vs one node"].keys() >= {
                "row store rows",
                "row store exp_avg",
                "row store exp_avg_sq",
                "row store last_step",
            }
    return results


@pytest.mark.slow
def test_two_cpu_nodes_equal_one_node_of_two_processes_and_resume_exactly(tmp_path):
    """Two gloo processes started as nodes 0 and 1 of ``num_nodes=2`` train s-DIET and DIET as one
    node of ``devices=2`` does (float64, 2 epochs of 2 steps); s-DIET's two-node run resumed from
    its epoch-0 checkpoint ends where the uninterrupted one does."""
    two_nodes_equal_one_node(tmp_path, "cpu", resume=["sdiet"])


@pytest.mark.slow
@pytest.mark.parametrize("mode, placement", [("eager", "cpu"), ("lazy", "disk"), ("eager", "gpu")])
def test_two_cpu_nodes_with_sharded_rows_equal_one_unsharded_node_and_resume_after_kill_9(
    tmp_path, mode, placement
):
    """``row_sharding=node`` (each node holds the rows whose index it owns) on two gloo "nodes"
    trains s-DIET as one unsharded node of ``devices=2`` does, to float64 precision, in weights,
    rows, AdamW state and counters across the epoch boundary; a sharded run killed (-9) by both
    nodes at epoch 1's second step and resumed from its epoch-0 checkpoint ends where the
    uninterrupted sharded run does (``gpu`` placement: the table on the training device, here the
    CPU)."""
    options = ["--row-sharding", "node", "--zero-grad-steps", mode, "--row-placement", placement]
    results = two_nodes_equal_one_node(
        tmp_path, "cpu", resume=["sdiet"], methods=["sdiet"], options=[*options, "--kill-at", "3"]
    )
    assert results["sdiet"]["row sharding"] == "node"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_two_gpu_nodes_equal_one_node_of_two_gpus_and_resume_exactly(tmp_path):
    """The same on one 2-GPU host with NCCL: one GPU per node against one node of both GPUs, and
    both methods resumed."""
    two_nodes_equal_one_node(tmp_path, "gpu", resume=["sdiet", "diet"])
