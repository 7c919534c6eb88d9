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
    Conv2d,
    GlobalAvgPool2d,
    GlobalMaxPool2d,
    MaxPool1d,
    MaxPool2d,
    Pooling2d,
    SeparableConv2d,
)
from singa_lite.layer.dense import Embedding, Gemm, Linear
from singa_lite.layer.loss import BinaryCrossEntropy, CrossEntropy, MeanSquareError, SoftMaxCrossEntropy
from singa_lite.layer.misc import Add, Cat, Flatten, Gelu, LeakyReLU, ReLU, Reshape, Sigmoid, SoftMax, Tanh
from singa_lite.layer.norm import BatchNorm2d, Dropout, LayerNorm
from singa_lite.layer.rnn import GRU, LSTM, RNN

__all__ = [
    "GRU",
    "LSTM",
    "RNN",
    "Add",
    "AvgPool1d",
    "AvgPool2d",
    "BatchNorm2d",
    "BinaryCrossEntropy",
    "Cat",
    "Conv2d",
    "CrossEntropy",
    "Dropout",
    "Embedding",
    "Flatten",
    "Gelu",
    "Gemm",
    "GlobalAvgPool2d",
    "GlobalMaxPool2d",
    "Layer",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "MaxPool1d",
    "MaxPool2d",
    "MeanSquareError",
    "Pooling2d",
    "ReLU",
    "Reshape",
    "SeparableConv2d",
    "Sigmoid",
    "SoftMax",
    "SoftMaxCrossEntropy",
    "Tanh",
]
