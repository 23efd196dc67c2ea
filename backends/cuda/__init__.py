"""The ``"cuda"`` target: generated CUDA C compiled with NVRTC and launched through the
driver API as one CUDA graph per step (see ``target``)."""
