"""solo-learn adapters, one short file per method (a class with ``registered_as`` and a contract);
``PLUGIN_FACTORIES``: ``"module:function"``s taking the registry, returning classes (SEM twins)."""

PLUGIN_FACTORIES: list[str] = ["solo_diet.methods.sem:sem_twins"]

# solo-learn's registry first, so that no method module is registered half-built
from solo_diet.core.host import solo_available  # noqa: E402

solo_available()
