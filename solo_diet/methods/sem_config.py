"""``method_kwargs.sem`` of the ``<name>_sem`` twins: defaults (SEM paper, App. C) and checks."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

import omegaconf

from solo_diet.core.errors import ConfigError
from solo_diet.core.nn.sem import check_temperature
from solo_diet.core.settings import parse_section, setting, write_section


@dataclass(frozen=True)
class SEMKwargs:
    """The ``method_kwargs.sem`` settings (SEM paper defaults, App. C; docs/methods/sem.md):
    ``tau_online`` is tau_p, ``tau_target`` tau'_p (None: ``tau_online``), ``probe`` what the online
    classifier reads (the backbone's e, or SEM at ``probe_tau``, tau_d; 0 = one-hot argmax)."""

    owner: ClassVar[str] = "SEM"
    num_simplices: int = setting(5000, minimum=1, hint="It is L, the number of simplices.")
    simplex_dim: int = setting(
        13, minimum=2, hint="It is V, the size of each simplex (a 1-entry simplex is constant 1)."
    )
    tau_online: float = 1.0
    tau_target: Optional[float] = None
    probe: str = setting("backbone", choices=("backbone", "sem"))
    probe_tau: float = 0.1

    @property
    def width(self) -> int:
        """L*V: the width of the SEM representation, which a twin's projector/head reads."""
        return self.num_simplices * self.simplex_dim

    def checked(self, cfg: omegaconf.DictConfig) -> "SEMKwargs":
        """Finite temperatures, > 0 (``probe_tau`` >= 0); ``tau_target`` filled in."""
        values = dataclasses.asdict(self)
        values["tau_target"] = self.tau_online if self.tau_target is None else self.tau_target
        for key, allow_zero in (("tau_online", False), ("tau_target", False), ("probe_tau", True)):
            try:
                key_name = f"`method_kwargs.sem.{key}`"
                values[key] = check_temperature(values[key], key_name, allow_zero)
            except (TypeError, ValueError) as err:
                raise ConfigError(str(err)) from err
        return SEMKwargs(**values)


def with_sem(kwargs: type) -> type:
    """The kwargs dataclass of a twin: the base method's ``kwargs`` and ``sem``."""

    def checked(self: Any, cfg: omegaconf.DictConfig) -> Any:
        base = getattr(kwargs, "checked", None)
        own = self if base is None else base(self, cfg)
        return dataclasses.replace(own, sem=self.sem.checked(cfg))

    field = dataclasses.field(default_factory=SEMKwargs)
    return dataclasses.make_dataclass(
        f"SEM{kwargs.__name__}",
        [("sem", SEMKwargs, field)],
        bases=(kwargs,),
        namespace={"checked": checked},
        frozen=True,
    )


@dataclass(frozen=True)
class SEMOnlyKwargs:
    """The ``self.hp`` of a solo-learn method's twin: ``sem`` alone (solo-learn reads the rest)."""

    sem: SEMKwargs


def parse_sem_only(cfg: omegaconf.DictConfig) -> SEMOnlyKwargs:
    """A solo-learn method's twin's ``method_kwargs.sem``, parsed, checked and written back."""
    parsed = parse_section(SEMKwargs, cfg, "method_kwargs.sem", SEMKwargs.owner).checked(cfg)
    write_section(cfg, "method_kwargs.sem", parsed)
    return SEMOnlyKwargs(parsed)
