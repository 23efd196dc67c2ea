"""The ``"numpy"`` target: a generated, stand-alone NumPy module per graph (see ``target``)."""
