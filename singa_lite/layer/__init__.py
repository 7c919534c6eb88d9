"""Layers (SINGA's ``singa.layer``): lazily built, named by attribute path.

>>> import numpy as np
>>> from singa_lite import layer, tensor
>>> fc = layer.Linear(4)
>>> y = fc(tensor.from_numpy(np.ones((2, 3), np.float32)))
>>> sorted(fc.get_params()), y.shape
(['W', 'b'], (2, 4))
"""

from singa_lite.layer.base import Layer
from singa_lite.layer.conv import (
    AvgPool1d,
    AvgPool2d,
    Conv1d,
    Conv2d,
    ConvTranspose2d,
    GlobalAvgPool2d,
    GlobalMaxPool2d,
    MaxPool1d,
    MaxPool2d,
    Pooling2d,
    SeparableConv2d,
    Upsample,
)
from singa_lite.layer.dense import Embedding, Gemm, Linear
from singa_lite.layer.loss import BinaryCrossEntropy, CrossEntropy, MeanSquareError, SoftMaxCrossEntropy
from singa_lite.layer.misc import Add, Cat, Flatten, Gelu, LeakyReLU, ReLU, Reshape, Sigmoid, SoftMax, Tanh
from singa_lite.layer.norm import BatchNorm1d, BatchNorm2d, Dropout, GroupNorm, LayerNorm, RMSNorm
from singa_lite.layer.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEmbedding,
)
from singa_lite.layer.rnn import GRU, LSTM, RNN
from singa_lite.layer.transformer import MultiHeadAttention, TransformerDecoderLayer, TransformerEncoderLayer

__all__ = [
    "GRU",
    "LSTM",
    "RNN",
    "Add",
    "AvgPool1d",
    "AvgPool2d",
    "BatchNorm1d",
    "BatchNorm2d",
    "BinaryCrossEntropy",
    "Cat",
    "Conv1d",
    "Conv2d",
    "ConvTranspose2d",
    "CrossEntropy",
    "Dropout",
    "Embedding",
    "Flatten",
    "Gelu",
    "Gemm",
    "GlobalAvgPool2d",
    "GlobalMaxPool2d",
    "GroupNorm",
    "Layer",
    "LayerNorm",
    "LeakyReLU",
    "LearnedPositionalEmbedding",
    "Linear",
    "MaxPool1d",
    "MaxPool2d",
    "MeanSquareError",
    "MultiHeadAttention",
    "Pooling2d",
    "RMSNorm",
    "ReLU",
    "Reshape",
    "RotaryEmbedding",
    "SeparableConv2d",
    "Sigmoid",
    "SinusoidalPositionalEmbedding",
    "SoftMax",
    "SoftMaxCrossEntropy",
    "Tanh",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
    "Upsample",
]
