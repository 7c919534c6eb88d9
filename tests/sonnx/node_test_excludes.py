"""onnx's node test cases that singa_lite's importer does not pass, each with the reason.

``UNSUPPORTED_TYPES``: the case feeds or produces values of a type singa_lite has no tensor for
(its tensors hold float16/32/64, int32/64 and bool; narrower integers are widened to int64 by the
importer). These are outside what the importer can express, so the pass rate of DESIGN §5's
operators is measured on the other cases.

``EXCLUDES``: cases of supported types that fail, with why. They still count as failures in the
pass rate, and each runs as a strict xfail, so a fix is noticed.
"""

UNSUPPORTED_TYPES = {
    r"FLOAT8|float8|E4M3|E5M2": "float8 element types have no singa_lite dtype",
    r"BFLOAT16|bfloat16|bf16": "bfloat16 has no singa_lite dtype (NumPy has none either)",
    r"U?INT4|_u?int4|U?INT2|_u?int2|FLOAT4|E8M0": "sub-byte element types have no singa_lite dtype",
    r"string": "string tensors have no singa_lite dtype",
    r"^test_identity_(sequence|opt)$": "sequence and optional values are not tensors",
}

EXCLUDES = {
    "test_convtranspose_3d": "singa_lite has no 3-D transposed convolution op",
    "test_lstm_with_peepholes": "singa_lite's LSTM op has no peephole weights",
    "test_training_dropout_default": "random mask: ONNX's data comes from NumPy's global RNG",
    "test_training_dropout_default_mask": "random mask: ONNX's data comes from NumPy's global RNG",
    "test_training_dropout": "random mask: ONNX's data comes from NumPy's global RNG",
    "test_training_dropout_mask": "random mask: ONNX's data comes from NumPy's global RNG",
    "test_causal_conv_with_state_silu_fp16_expanded": "float16 sums in another order than the "
    "reference: 1 float16 ulp (0.16%) beyond the case's rtol of 0.1%",
    "test_resize_tf_crop_and_resize": "ops.resize has no tf_crop_and_resize coordinates",
    "test_resize_tf_crop_and_resize_extrapolation_value": "ops.resize has no tf_crop_and_resize coordinates",
    "test_resize_tf_crop_and_resize_axes_2_3": "ops.resize has no tf_crop_and_resize coordinates",
    "test_resize_tf_crop_and_resize_axes_3_2": "ops.resize has no tf_crop_and_resize coordinates",
    "test_resize_downsample_scales_linear_antialias": "ops.resize has no antialias filter",
    "test_resize_downsample_sizes_linear_antialias": "ops.resize has no antialias filter",
    "test_resize_downsample_scales_cubic_antialias": "ops.resize has no antialias filter",
    "test_resize_downsample_sizes_cubic_antialias": "ops.resize has no antialias filter",
}
