"""solo-learn adapters: one short file per method, wired into ``solo.methods.METHODS``: a class
of ``solo_diet/methods/<name>.py`` naming itself ``registered_as = "<name>"`` and declaring its
contract (:mod:`solo_diet.methods.contract`) is found by ``contract.register``. ``PLUGIN_FACTORIES``
lists ``"module:function"`` callables that take solo-learn's registry and return generated classes
(the ``<name>_sem`` twins).
"""

PLUGIN_FACTORIES: list[str] = ["solo_diet.methods.sem:sem_twins"]

# solo-learn's registry first: importing it registers every plugin method, each module whole,
# before the method module a caller named runs, so that module is never found half-built.
from solo_diet._host import solo_available  # noqa: E402

solo_available()
