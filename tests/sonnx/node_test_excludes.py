"""onnx's node test cases that singa_lite's importer does not pass, each with the reason.

``UNSUPPORTED_TYPES``: the case feeds or produces values that are not numeric tensors, sequences
or optionals of them (strings), outside what the importer can express, so the pass rate of DESIGN §5's
operators is measured on the other cases. (Tensors hold every integer type ONNX has from int8
to uint64; the types they lack are held in a wider one: int4/int2 as int8, uint4/uint2 as uint8,
bfloat16, float8 and float4 as float32.)

``EXCLUDES``: cases of supported types that fail, with why. They still count as failures in the
pass rate, and each runs as a strict xfail, so a fix is noticed.
"""

UNSUPPORTED_TYPES = {
    r"string": "string tensors have no singa_lite dtype",
}

EXCLUDES = {
    "test_training_dropout_default": "random mask: ONNX's data comes from NumPy's global RNG",
    "test_training_dropout_default_mask": "random mask: ONNX's data comes from NumPy's global RNG",
    "test_training_dropout": "random mask: ONNX's data comes from NumPy's global RNG",
    "test_training_dropout_mask": "random mask: ONNX's data comes from NumPy's global RNG",
    "test_causal_conv_with_state_silu_fp16_expanded": "float16 sums in another order than the "
    "reference: 1 float16 ulp (0.16%) beyond the case's rtol of 0.1%",
}
# bfloat16 and the float8s are held as float32: a whole graph in bfloat16 computes its
# intermediates in float32, where onnx's reference rounds each of them to bfloat16 (these
# are multi-node "expanded" cases, outside the DESIGN pass rate).
EXCLUDES.update(
    {
        f"test_attention_{case}_bf16_expanded": "bfloat16 intermediates are computed in float32; "
        "the reference rounds each to bfloat16"
        for case in ("3d_causal", "4d_attn_mask_causal", "4d_causal", "4d_causal_padded_kv", "4d_padded_kv")
    }
)
# The Attention node itself (not only its expanded form): singa_lite computes the scores,
# softmax and weighted sum of bfloat16 inputs in float32 and rounds once, where the reference
# rounds each stage to bfloat16 (1 bfloat16 ulp apart, over the cases' rtol of 0.1%).
EXCLUDES.update(
    {
        f"test_attention_{case}_bf16": "bfloat16 intermediates are computed in float32; the reference "
        "rounds each to bfloat16"
        for case in ("3d_causal", "4d_attn_mask_causal", "4d_causal", "4d_causal_padded_kv", "4d_padded_kv")
    }
)
# CastLike takes its type from its second input, which is held as float32 when it is a
# float8: the result is rounded to float8 values only where the graph output is (by
# SingaBackend), without ONNX's saturation.
EXCLUDES.update(
    {
        f"test_castlike_{src}_to_{dst}": "CastLike to a float8 sees its model tensor held as "
        "float32, so it does not saturate"
        for src in ("FLOAT", "FLOAT16")
        for dst in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")
    }
)
# Random generators: onnx draws the expected values from NumPy's global, unseeded generator
# when the cases are built, so no implementation reproduces them (onnxruntime excludes them
# too). A few of the 10 draws may match by chance, so these run as non-strict xfails.
RANDOM_VALUES = {
    f"test_bernoulli{case}": "random values: onnx's come from NumPy's global generator"
    for case in ("", "_double", "_seed", "_expanded", "_double_expanded", "_seed_expanded")
}
EXCLUDES.update(RANDOM_VALUES)

# On CUDA only (tools/gpu_run/onnx_node_cuda.py): expected values that carry NumPy's own float32
# roundings. test_dft_inverse's output is exact integers and zeros plus pocketfft's float32 noise
# (1.9e-7 where the exact value is 0, under an atol of 1e-7): NumPy reproduces it bit for bit,
# cuFFT's float32 transform (and an exact float64 one) rounds elsewhere by the same order.
CUDA_EXCLUDES = {
    name: "expected values carry NumPy's float32 FFT rounding (1.9e-7 at exact zeros, atol 1e-7)"
    for name in ("test_dft_inverse", "test_dft_inverse_opset19")
}
