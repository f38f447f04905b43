"""``solo-diet`` command line: methods | pretrain | linear | data | solo-script | demo | compare |
configs. Exit status: 0 done, 2 a user error (one line; ``--debug``: the traceback), 130 Ctrl-C,
143 SIGTERM, 1 a full disk or a bug."""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from solo_diet.core.errors import ConfigError

if TYPE_CHECKING:
    from omegaconf import DictConfig


def _hydra_args(parser: argparse.ArgumentParser) -> None:
    folder = "directory of the YAML (relative to the current directory)"
    parser.add_argument("--config-path", required=True, help=folder)
    parser.add_argument("--config-name", required=True, help="YAML file name (.yaml optional)")
    overrides = "Hydra overrides, e.g. max_epochs=10 ++wandb.enabled=False"
    parser.add_argument("overrides", nargs="*", help=overrides)


def _cmd_methods(_: argparse.Namespace) -> None:
    import solo.methods

    import solo_diet

    solo_diet.register()
    for name, cls in sorted(solo.methods.METHODS.items()):
        package = cls.__module__.partition(".")[0]  # a package of one's own: its own name
        origin = {"solo": "solo-learn", "solo_diet": "solo-diet"}.get(package, package)
        print(f"{name:<24} {origin:<10} {cls.__module__}.{cls.__qualname__}")


# The checkpoint keys each command loads
CHECKPOINT_KEYS = {
    "pretrain": ("resume_from_checkpoint",),
    "linear": ("pretrained_feature_extractor", "resume_from_checkpoint"),
}


def checked_cfg(args: argparse.Namespace) -> DictConfig:
    """The command's config, checked before torch, Lightning and solo-learn load."""
    from omegaconf import OmegaConf

    from solo_diet.core.atomic import check_archive_sizes
    from solo_diet.core.settings import unknown_method_hint
    from solo_diet.host import declared_method_names, require_solo
    from solo_diet.launch.common import check_launch_cfg, compose_cfg

    names = declared_method_names()
    if names is None:  # no solo-learn (or none readable): its install message comes first
        require_solo()
    cfg = compose_cfg(args.config_path, args.config_name, args.overrides)
    check_launch_cfg(cfg)
    method = OmegaConf.select(cfg, "method")
    if args.command == "pretrain" and names is not None and method not in names:
        raise ConfigError(f"unknown `method: {method}`; {unknown_method_hint(method, names)}")
    for key in CHECKPOINT_KEYS[args.command]:  # a zip bomb is refused before torch loads
        path = OmegaConf.select(cfg, key)
        try:
            if path not in (None, "None"):
                check_archive_sizes(str(path))
        except ConfigError as err:
            raise ConfigError(f"`{key}`: {err}") from None
    require_solo()  # imports solo-learn, torch with it
    return cfg


def _cmd_pretrain(args: argparse.Namespace) -> None:
    cfg = checked_cfg(args)
    from solo_diet.launch.pretrain import run_pretrain

    ckpt = run_pretrain(cfg)
    if ckpt:  # run_pretrain returns only after a completed fit; an interrupted one raises
        print(f"last checkpoint: {ckpt}")


def _cmd_linear(args: argparse.Namespace) -> None:
    cfg = checked_cfg(args)
    from solo_diet.launch.linear import run_linear

    metrics = run_linear(cfg)
    if "val_acc1" in metrics:
        print(
            f"linear probe top-1 on the {cfg.get('probe', 'backbone')} representation: "
            f"{metrics['val_acc1']:.2f}%"
        )


def _cmd_data(args: argparse.Namespace) -> None:
    from solo_diet.cli.data import write_dataset

    root = write_dataset(args.name, args.directory, limit=args.limit)
    print(f"wrote {args.name} to {root} (train/ and val/ ImageFolders)")


def _cmd_demo(args: argparse.Namespace) -> None:
    from solo_diet.cli.demo import run_demo

    run_demo(args.method, args.epochs, args.workdir, args.accelerator, args.data_format)


def _cmd_compare(args: argparse.Namespace) -> Optional[int]:
    """Exit status 1 with one line when jobs failed; the workers start before solo-learn and the
    other heavy imports (10 to 16 s on an H200 host), which then run beside theirs."""
    import contextlib

    from solo_diet.compare.run.sharing import fleet_of
    from solo_diet.compare.spec.load import load_spec
    from solo_diet.host import declared_method_names, require_solo

    if declared_method_names() is None:  # no solo-learn (or none readable): its message first
        require_solo()
    spec = load_spec(args.spec, args.overrides)
    started = contextlib.nullcontext() if args.report_only else fleet_of(spec, start_workers=True)
    with started as fleet:
        require_solo()
        from solo_diet.compare.run.runner import run_spec

        results = run_spec(args.spec, args.overrides, args.report_only, loaded=spec, fleet=fleet)
    if not results.ok:
        print(f"solo-diet compare: {results.failure_message()}", file=sys.stderr)
        return 1
    print(f"report: {results.report}")


# `solo-diet configs DIR`: the shipped launch configs (package data; `scripts/` and
# `benchmarks/compare/` link there) copied into DIR, each folder ready for --config-path
SHIPPED = Path(__file__).resolve().parent.parent / "configs"
DATASET_CHOICES = ("cifar", "imagenet-100", "custom")


def _cmd_configs(args: argparse.Namespace) -> None:
    """Copy the shipped configs (of ``--dataset``, else all) into DIR."""
    root = Path(args.directory).expanduser().resolve()
    datasets = DATASET_CHOICES if args.dataset is None else (args.dataset,)
    folders = [Path(stage) / name for name in datasets for stage in ("pretrain", "linear")]
    if args.dataset in (None, "custom"):
        folders.append(Path("compare"))
    sources = sorted(p for f in folders for p in (SHIPPED / f).rglob("*.yaml"))
    copies = [(src, root / src.relative_to(SHIPPED)) for src in sources]
    if not copies:
        raise FileNotFoundError(
            f"no shipped configs in {SHIPPED}: the solo-diet installation is incomplete."
        )
    changed = [
        dst for src, dst in copies if dst.exists() and not filecmp.cmp(src, dst, shallow=False)
    ]
    if changed and not args.force:
        raise ConfigError(
            f"{len(changed)} config(s) in {root} differ from the shipped ones (e.g. {changed[0]}): "
            "pass --force to overwrite them, or choose another directory."
        )
    for src, dst in copies:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
    for folder in folders:
        print(f"wrote {root / folder}")
    example = f"--config-path {root / folders[0]} --config-name diet.yaml ..."
    print(f"use e.g.: solo-diet pretrain {example}")


def _cmd_solo_script(args: argparse.Namespace) -> None:
    from solo_diet.cli.solo_script import run_solo_script

    run_solo_script(args.script, args.script_args)


# What to do after an interruption that left no checkpoint to name.
RESUME_ADVICE = {
    "compare": "run the same command again: finished runs are reused and an interrupted run "
    "resumes from its last epoch checkpoint."
}
# Commands that import solo-learn themselves, if at all
SOLO_LATE = ("data", "configs", "pretrain", "linear", "compare")
DEBUG_HELP = "show tracebacks (also SOLO_DIET_DEBUG=1)"


# Each subcommand's --help ends with a command that works on a CPU
CPU = "accelerator=cpu devices=1 precision=32 data.num_workers=2"
DATA = "++data.train_path=data/am/train ++data.val_path=data/am/val"
EXAMPLES = {
    "methods": "solo-diet methods",
    "pretrain": f"""solo-diet configs cfg && solo-diet data animal-mnist data/am --limit 400
  solo-diet pretrain --config-path cfg/compare/configs --config-name diet.yaml \\
      {DATA} \\
      {CPU} \\
      backbone.kwargs.width=32 optimizer.batch_size=32 max_epochs=1 ++limit_train_batches=4
It ends with `last checkpoint: checkpoints/diet/<version>/<name>-ep=0.ckpt`; the same command
again resumes an interrupted run (auto_resume.enabled). On a GPU, leave out the overrides after
the data paths.""",
    "linear": f"""solo-diet linear --config-path cfg/compare/configs --config-name linear.yaml \\
      "pretrained_feature_extractor='checkpoints/diet/<version>/<name>-ep=0.ckpt'" \\
      {DATA} \\
      {CPU} optimizer.batch_size=32 max_epochs=1
pretrained_feature_extractor is the .ckpt that `solo-diet pretrain` printed; the backbone is rebuilt
from the args.json next to it. The inner quotes are Hydra's: the file name holds `=`.""",
    "data": "solo-diet data animal-mnist data/am --limit 400   # data/am/train, data/am/val",
    "demo": "solo-diet demo --accelerator cpu --workdir solo-diet-demo",
    "configs": "solo-diet configs cfg  # writes cfg/pretrain/, cfg/linear/ and cfg/compare/",
    "compare": """solo-diet configs cfg && solo-diet data animal-mnist data/am --limit 400
  solo-diet compare cfg/compare/animal_mnist.yaml data.root=data/am output_dir=am-compare \\
      'only=[diet,simclr]' 'seeds=[0]' \\
      budget.max_epochs=1 budget.batch_size=16 budget.limit_train_batches=2 \\
      'trainer=[accelerator=cpu,precision=32,data.num_workers=0]' \\
      'linear.overrides=[max_epochs=1,++limit_train_batches=2,optimizer.batch_size=16]'
only=[...] runs just those runs (or reference rows), seeds=[...] just those seeds, and
trainer=[...] overrides every job's pretraining and probe (on a CPU: accelerator=cpu and
precision=32). The same command again reuses finished jobs and resumes an interrupted one.""",
}


def _command(sub: argparse._SubParsersAction, name: str, func, **kwargs) -> argparse.ArgumentParser:
    """The subcommand ``name``, run by ``func``, with its ``help``, example and ``--debug``."""
    kwargs.setdefault("description", kwargs["help"])
    parser = sub.add_parser(
        name,
        epilog=f"example:\n  {EXAMPLES[name]}" if name in EXAMPLES else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        **kwargs,
    )
    parser.set_defaults(func=func)
    parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    return parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="solo-diet", description=__doc__.replace("``", "'"))
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    methods_help = "list every registered method: name, origin (solo-learn, solo-diet, a package)"
    _command(sub, "methods", _cmd_methods, help=methods_help)
    from_yaml = "from a solo-learn-style YAML (a Hydra config folder and name, then overrides)"
    _hydra_args(_command(sub, "pretrain", _cmd_pretrain, help=f"pretrain {from_yaml}"))
    linear_help = f"offline linear probe of a pretrained backbone {from_yaml}"
    _hydra_args(_command(sub, "linear", _cmd_linear, help=linear_help))

    from solo_diet.cli import solo_script
    from solo_diet.cli.data import DATASETS

    data_help = "write an offline dataset as a solo-learn custom ImageFolder"
    data = _command(sub, "data", _cmd_data, help=data_help)
    data.add_argument("name", choices=sorted(DATASETS), help="the dataset to write")
    data.add_argument("directory", help="where to write train/ and val/ (created if missing)")
    data.add_argument("--limit", type=int, help="keep at most this many training images")

    script_help = "run solo-learn's main_knn.py or main_umap.py with plugin methods registered"
    doc = solo_script.__doc__.replace("``", "`")
    script = _command(sub, "solo-script", _cmd_solo_script, help=script_help, description=doc)
    where = "path of main_knn.py or main_umap.py in a solo-learn checkout"
    script.add_argument("script", help=where)
    remainder = script.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    remainder.required = False  # argparse marks every REMAINDER positional required

    demo_help = "data -> pretraining -> offline linear probe vs a random-init backbone, raw pixels"
    demo = _command(sub, "demo", _cmd_demo, help=demo_help)
    method = "a method with a shipped demo config (default: diet)"
    demo.add_argument("--method", default="diet", help=method)
    demo.add_argument("--epochs", type=int, help="pretraining epochs (default: per device)")
    workdir = "where the data, checkpoints and logs go (default: ./solo-diet-demo)"
    demo.add_argument("--workdir", default="solo-diet-demo", help=workdir)
    auto_gpu = "auto: the GPU when torch sees one, else the CPU"
    demo.add_argument(
        "--accelerator", choices=["auto", "cpu", "gpu"], default="auto", help=auto_gpu
    )
    formats = ["auto", "gpu", "image_folder"]
    auto_format = "auto: gpu (the tensor data path, GPU or CPU); image_folder: solo-learn's loader"
    demo.add_argument("--data-format", choices=formats, default="auto", help=auto_format)

    compare_help = "pretrain and evaluate several methods side by side from a spec YAML"
    compare = _command(sub, "compare", _cmd_compare, help=compare_help)
    compare.add_argument("spec", help="comparison spec (docs/compare.md)")
    # a default, or argparse names the optional list as required too
    spec_overrides = "spec overrides, e.g. budget.max_epochs=2 output_dir=out"
    compare.add_argument("overrides", nargs="*", default=[], help=spec_overrides)
    report_only = "run nothing: rewrite the report from the jobs' result.json files in output_dir"
    compare.add_argument("--report-only", action="store_true", help=report_only)

    configs_help = "write the shipped pretrain/linear/compare YAMLs into DIR (--config-path)"
    configs = _command(sub, "configs", _cmd_configs, help=configs_help)
    configs.add_argument("directory", help="where to write them (created if missing)")
    configs.add_argument("--dataset", choices=DATASET_CHOICES, help="only this dataset's configs")
    configs.add_argument("--force", action="store_true", help="overwrite files that differ")
    return parser


def _run(args: argparse.Namespace) -> int:
    if args.command not in SOLO_LATE:
        from solo_diet.host import require_solo

        require_solo()
    return args.func(args) or 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    from solo_diet.host import quiet_run_noise
    from solo_diet.launch.errors import run_guarded

    args = build_parser().parse_args(argv)
    quiet_run_noise()
    advice = RESUME_ADVICE.get(args.command, "")
    return run_guarded(args.command, lambda: _run(args), args.debug, advice)


if __name__ == "__main__":
    sys.exit(main())
