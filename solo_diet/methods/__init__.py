"""solo-learn adapters: one short file per method (a class with ``registered_as``, a contract)."""

# solo-learn's registry first, so that no method module is registered half-built
from solo_diet.host import solo_available

solo_available()
