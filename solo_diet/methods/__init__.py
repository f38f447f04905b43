"""solo-learn adapters: one short file per method, wired into ``solo.methods.METHODS``.

``PLUGIN_METHODS`` maps a method name to ``"module:Class"``; ``PLUGIN_FACTORIES`` lists
``"module:function"`` callables that take solo-learn's registry and return generated classes
(e.g. the ``<name>_sem`` twins). Both are imported lazily by ``registry.register``.
"""

PLUGIN_METHODS: dict[str, str] = {
    "diet": "solo_diet.methods.diet:DIET",
    "sdiet": "solo_diet.methods.sdiet:SDIET",
    "cplearn": "solo_diet.methods.cplearn:CPLearn",
    "diet_cf": "solo_diet.methods.diet_cf:DIETCF",
    "graph_vicreg": "solo_diet.methods.graph_vicreg:GraphVICReg",
}

PLUGIN_FACTORIES: list[str] = ["solo_diet.methods.sem:sem_twins"]
