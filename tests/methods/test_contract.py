"""The method contract: declared in the class body, checked at registration, the same whatever the
order of the base classes; a method's ``method_kwargs`` are the fields of the dataclass it declares,
and the others are refused."""

import pytest

from tests._helpers import NEEDS_SOLO

pytest.importorskip("solo.methods", reason=NEEDS_SOLO)

import sys
import types
from dataclasses import dataclass

from solo.methods import METHODS, BaseMethod

import solo_diet
import solo_diet.methods
from solo_diet.core.errors import ConfigError
from solo_diet.core.settings import setting
from solo_diet.methods.contract import (
    DEFAULT_CONTRACT,
    Contract,
    ContractError,
    DeclaredKwargs,
    _add,
    method_contract,
    plugin_methods,
)
from tests._helpers.tiny import tiny_cfg

pytestmark = pytest.mark.solo


@dataclass(frozen=True)
class ProbeKwargs:
    filled: int = setting(1, minimum=0)
    selected: float = 2.0


STRICT = Contract(kwargs=ProbeKwargs, uses_sample_indexes=True)


class DeclaresStrict:
    """A base that only declares a contract (as a mixin would)."""

    contract = STRICT


class BaseFirst(DeclaredKwargs, BaseMethod, DeclaresStrict):
    pass


class ContractFirst(DeclaredKwargs, DeclaresStrict, BaseMethod):
    pass


@pytest.mark.parametrize("method_cls", [BaseFirst, ContractFirst], ids=["base_first", "first"])
def test_base_class_order_does_not_matter(method_cls):
    assert method_contract(method_cls) is STRICT
    model = method_cls(tiny_cfg("probe", {"filled": 3}))
    assert model.hp == ProbeKwargs(filled=3)
    assert dict(model.cfg.method_kwargs) == {"filled": 3, "selected": 2.0}  # for args.json
    for typo in ("filed", "selcted"):
        close = {"filed": "filled", "selcted": "selected"}[typo]
        message = rf"`method_kwargs.{typo}` is not a setting of method `probe`\. Did you mean "
        with pytest.raises(ConfigError, match=message + rf"`method_kwargs.{close}`\?"):
            method_cls(tiny_cfg("probe", {typo: 0}))
    with pytest.raises(ConfigError, match=r"`method_kwargs.filled` must be a non-negative integer"):
        method_cls(tiny_cfg("probe", {"filled": -1}))


def test_registration_leaves_the_class_as_it_is():
    class Declared(BaseFirst):
        contract = STRICT

    before, solo_methods = dict(Declared.__dict__), types.SimpleNamespace(METHODS={})
    assert _add(solo_methods, {"probe": Declared}) == ["probe"]
    assert solo_methods.METHODS["probe"] is Declared and dict(Declared.__dict__) == before


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
        _add(types.SimpleNamespace(METHODS={}), {"undeclared": Undeclared})


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


OURS = sorted(
    name for name, cls in plugin_methods().items() if cls.__module__.startswith("solo_diet.")
)


@pytest.mark.parametrize("name", OURS)
def test_a_method_docstring_names_every_key_it_reads(name):
    """Each of our method classes says in its docstring every ``method_kwargs`` key it reads."""
    import dataclasses

    method_cls = plugin_methods()[name]
    keys = [field.name for field in dataclasses.fields(method_contract(method_cls).kwargs)]
    unnamed = [key for key in keys if f"``{key}``" not in (method_cls.__doc__ or "")]
    assert not unnamed, f"{method_cls.__qualname__}'s docstring does not name {unnamed}"
