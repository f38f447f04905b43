"""solo-learn adapters: one short file per method, wired into ``solo.methods.METHODS``.

A method of the package is a class of a module ``solo_diet/methods/<name>.py`` that names itself
in its body, ``registered_as = "<name>"``, and declares its contract there
(:mod:`solo_diet.methods.contract`); ``registry.register`` finds it, so adding a method edits no
other file. ``PLUGIN_FACTORIES`` lists ``"module:function"`` callables that take solo-learn's
registry and return generated classes (the ``<name>_sem`` twins). Both are imported lazily by
``registry.register``.
"""

PLUGIN_FACTORIES: list[str] = ["solo_diet.methods.sem:sem_twins"]
