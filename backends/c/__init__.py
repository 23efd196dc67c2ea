"""The ``"c"`` target: generated C compiled in-process and loaded with ctypes (see ``target``)."""
