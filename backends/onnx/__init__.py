"""ONNX in and out: the importer (``importer``) and the ``"onnx"`` target's exporter (``target``)."""
