"""solo-learn adapters, one short file per method: a class naming itself ``registered_as =
"<name>"`` and declaring its contract is registered by ``contract.register``; ``PLUGIN_FACTORIES``
lists ``"module:function"`` callables that take the registry and return generated classes (SEM
twins)."""

PLUGIN_FACTORIES: list[str] = ["solo_diet.methods.sem:sem_twins"]

# solo-learn's registry first, so that no method module is registered half-built
from solo_diet.core.host import solo_available  # noqa: E402

solo_available()
