"""The plan: a ``Spec`` in, its typed jobs out, each with its budget, composed once."""
