"""ONNX in and out: the importer (``importer``) and the ``"onnx"`` target's exporter (``target``).

- ``format``: the facts both directions share (dtype table, opset and IR version, the metadata
  keys of the embedded gradc IR, TensorProto <-> array). Importer and exporter import it and
  never each other.
- importer: ``importer`` (``from_onnx``), ``import_node`` (the converter registry and its
  helpers), ``import_ops``, ``import_resize`` and one ``import_<family>`` per operator family
  (the converters), ``import_shape`` (static shape subgraphs evaluated at import),
  ``import_unit_axis`` (1-D pooling through a unit spatial axis).
- exporter: ``target`` (``to_onnx``, ``build``), ``builder`` (``OnnxGraphBuilder``, which adds
  the ONNX nodes and initializers), ``lower_arith``, ``lower_pooling``, ``lower_resample`` (the
  lowering tables).
"""
