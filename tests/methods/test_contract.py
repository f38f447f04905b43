"""The method contract: declared in the class body, checked at registration, the same whatever the
order of the base classes; every ``method_kwargs`` key a method reads is recorded, whoever reads
it, and the others are refused."""

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import sys
from dataclasses import replace

import omegaconf
from omegaconf import DictConfig, OmegaConf
from solo.methods import METHODS, BaseMethod
from solo.utils.misc import omegaconf_select

import solo_diet
import solo_diet.methods
from solo_diet.config import ConfigError, fill_default
from solo_diet.methods.contract import (
    DEFAULT_CONTRACT,
    Contract,
    ContractError,
    method_contract,
    registered_class,
)
from solo_diet.methods.recording import recorded_reads
from solo_diet.methods.registry import plugin_methods
from tests._helpers.tiny import tiny_cfg

pytestmark = pytest.mark.solo

STRICT = Contract(strict_method_kwargs=True, uses_sample_indexes=True)


class DeclaresStrict:
    """A base that only declares a contract (as a mixin would)."""

    contract = STRICT


def read_three_ways(cfg: omegaconf.DictConfig) -> omegaconf.DictConfig:
    """Reads ``filled`` through fill_default, ``selected`` through solo-learn's omegaconf_select
    and ``got`` through ``DictConfig.get``; none of the last two gets a default written."""
    cfg = BaseMethod.add_and_assert_specific_cfg(cfg)
    fill_default(cfg, "method_kwargs.filled", 1)
    omegaconf_select(cfg, "method_kwargs.selected", 2)
    cfg.method_kwargs.get("got")
    return cfg


class BaseFirst(BaseMethod, DeclaresStrict):
    add_and_assert_specific_cfg = staticmethod(read_three_ways)


class ContractFirst(DeclaresStrict, BaseMethod):
    add_and_assert_specific_cfg = staticmethod(read_three_ways)


@pytest.mark.parametrize("method_cls", [BaseFirst, ContractFirst], ids=["base_first", "first"])
def test_base_class_order_does_not_matter(method_cls):
    registered_class(method_cls, plugin=False)
    assert method_contract(method_cls) is STRICT
    given = {"filled": 3, "selected": 4, "got": 5}
    model = method_cls(tiny_cfg("probe", given))
    assert dict(model.cfg.method_kwargs) == given
    for typo in ("filed", "selcted"):
        close = {"filed": "filled", "selcted": "selected"}[typo]
        message = rf"`method_kwargs.{typo}` is not a setting of method `probe`\. Did you mean "
        with pytest.raises(ConfigError, match=message + rf"`method_kwargs.{close}`\?"):
            method_cls(tiny_cfg("probe", {**given, typo: 0}))


def test_the_recording_view_is_a_plain_config_again_afterwards():
    cfg = tiny_cfg("probe", {"sem": {"num_simplices": 2}})
    with recorded_reads(cfg) as reads:
        omegaconf_select(cfg, "method_kwargs.sem.num_simplices")
        OmegaConf.select(cfg, "data.num_classes")
        _ = "absent" in cfg.method_kwargs
    assert {"method_kwargs.sem.num_simplices", "data.num_classes", "method_kwargs.absent"} <= reads
    assert "method_kwargs.sem.simplex_dim" not in reads
    for node in (cfg, cfg.method_kwargs, cfg.method_kwargs.sem, cfg.data):
        assert type(node) is DictConfig
        assert set(node.__dict__) == {"_metadata", "_parent", "_flags_cache", "_content"}


def test_registration_is_idempotent_and_a_non_strict_subclass_is_not_checked():
    registered_class(BaseFirst, plugin=False)
    wrapped = BaseFirst.__dict__["add_and_assert_specific_cfg"]
    assert registered_class(BaseFirst, plugin=False) is BaseFirst
    assert BaseFirst.__dict__["add_and_assert_specific_cfg"] is wrapped

    class Lenient(BaseFirst):
        contract = replace(STRICT, strict_method_kwargs=False)

    Lenient(tiny_cfg("probe", {"anything": 1}))


def test_two_different_inherited_contracts_are_refused_until_the_class_declares_one():
    class DeclaresOther:
        contract = Contract(views=1)

    class Ambiguous(DeclaresStrict, DeclaresOther, BaseMethod):
        pass

    with pytest.raises(ContractError, match="inherits different contracts from DeclaresStrict"):
        method_contract(Ambiguous)

    class Decided(DeclaresOther, DeclaresStrict, BaseMethod):
        contract = STRICT

    assert method_contract(Decided) is STRICT


def test_solo_learns_methods_get_the_default_and_malformed_declarations_are_refused():
    assert method_contract(METHODS["simclr"]) is DEFAULT_CONTRACT
    with pytest.raises(ContractError, match="Contract.views must be a positive integer"):
        Contract(views=0)
    with pytest.raises(ContractError, match="Contract.uses_sample_indexes must be True or False"):
        Contract(uses_sample_indexes=1)

    class NotAContract(BaseMethod):
        contract = {"uses_sample_indexes": True}

    with pytest.raises(ContractError, match="must be a solo_diet.methods.contract.Contract"):
        method_contract(NotAContract)


def test_registering_a_plugin_class_without_its_own_contract_is_refused():
    class Undeclared(ContractFirst):
        registered_as = "undeclared"

    with pytest.raises(ContractError, match="declares no method contract: add the class"):
        registered_class(Undeclared, plugin=True)


def test_a_method_file_in_the_package_is_registered_by_its_name(tmp_path, monkeypatch):
    """The only registration step: a module of solo_diet/methods (here a temporary folder on its
    path) whose class says ``registered_as``; two classes under one name are refused."""
    source = (
        "from solo.methods.base import BaseMethod\n"
        "from solo_diet.methods.contract import Contract\n\n\n"
        "class Probe(BaseMethod):\n"
        "    registered_as = 'probe_method'\n"
        "    contract = Contract(views=1)\n"
    )
    (tmp_path / "probe_method.py").write_text(source)
    monkeypatch.setattr(solo_diet.methods, "__path__", [*solo_diet.methods.__path__, str(tmp_path)])
    try:
        found = plugin_methods()
        assert found["probe_method"].__module__ == "solo_diet.methods.probe_method"
        assert method_contract(found["probe_method"]).views == 1
        (tmp_path / "probe_twice.py").write_text(source.replace("Probe(", "Again("))
        with pytest.raises(ContractError, match="two plugin methods are registered as"):
            plugin_methods()
    finally:
        for module in ("probe_method", "probe_twice"):
            sys.modules.pop(f"solo_diet.methods.{module}", None)


def test_every_plugin_method_and_twin_declares_its_contract_in_its_body():
    names = solo_diet.register()
    for name in names:
        assert isinstance(METHODS[name].__dict__.get("contract"), Contract), name
