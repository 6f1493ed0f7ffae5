"""The MLP training step of the DistIR paper, written directly in DistIR.

One step of a ``num_layers``-deep MLP on one device: forward (``MatMul`` then ``Relu`` in
every layer), the gradient of the sum-reduced MSE loss (``MSELossGrad``: ``p - y``),
backward (``ReluGrad``, ``MatMulGrad``) and an SGD update (``SGDOptimizer``) of every weight.

Naming scheme (stable: transforms and tests find layers by these names). For layer ``i``
(0-based, ``L = num_layers``):

=============  =====================================================================
``%w{i}``       parameter, the weight of layer i, shape ``(in_i, out_i)``
``%h{i}``       ``MatMul(a{i-1}, w{i})`` (``a{-1}`` is ``%x``)
``%a{i}``       ``Relu(h{i})``; ``%a{L-1}`` is the prediction
``%da{L-1}``    ``MSELossGrad(a{L-1}, y)``, the loss gradient
``%dh{i}``      ``ReluGrad(h{i}, da{i})``
``%da{i-1}``    first result of ``MatMulGrad(a{i-1}, w{i}, dh{i})`` (discarded for i = 0)
``%dw{i}``      second result of that ``MatMulGrad``
``%w{i}_new``   ``SGDOptimizer(w{i}, dw{i}, lr)``
=============  =====================================================================

Parameters are ``%w0 .. %w{L-1}, %x, %y`` in that order; results are ``%w0_new ..
%w{L-1}_new``. Ops are ordered: the forward pass layer by layer, the loss gradient, the
backward pass from the last layer to the first, then the L updates in layer order.
"""

from __future__ import annotations

from dataclasses import dataclass

from distir.errors import ConfigError
from distir.ir.builder import FunctionBuilder
from distir.ir.core import Function, Value
from distir.ir.types import DType, TensorType

__all__ = ["MLPConfig", "mlp"]


@dataclass(frozen=True, slots=True)
class MLPConfig:
    """The sizes of an MLP training step; ``build()`` writes it in DistIR.

    Layer ``i`` maps ``in_i`` to ``out_i`` features: layer 0 reads ``input_dim``, the last
    layer writes ``output_dim``, all others are ``hidden_dim`` wide (a 1-layer MLP maps
    ``input_dim`` straight to ``output_dim``). ``lr`` is the SGD learning rate; every
    parameter is placed on ``device``.
    """

    batch_size: int
    input_dim: int
    hidden_dim: int
    output_dim: int
    num_layers: int
    dtype: DType = DType.Float32
    lr: float = 0.01
    device: int = 0

    def __post_init__(self) -> None:
        for name in ("batch_size", "input_dim", "hidden_dim", "output_dim", "num_layers"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ConfigError(f"MLP {name} must be a positive integer, got {v!r}")
        if not isinstance(self.dtype, DType) or not self.dtype.is_float:
            raise ConfigError(f"MLP dtype must be a floating-point DType, got {self.dtype!r}")
        if not isinstance(self.device, int) or self.device < 0:
            raise ConfigError(f"MLP device must be a non-negative integer, got {self.device!r}")

    def layer_dims(self, i: int) -> tuple[int, int]:
        """``(in_i, out_i)``: the shape of weight ``%w{i}``."""
        if not 0 <= i < self.num_layers:
            raise IndexError(f"layer {i} of a {self.num_layers}-layer MLP")
        d_in = self.input_dim if i == 0 else self.hidden_dim
        d_out = self.output_dim if i == self.num_layers - 1 else self.hidden_dim
        return d_in, d_out

    @property
    def num_params(self) -> int:
        """The number of weight elements (the "1B" of MLP 1B)."""
        return sum(a * b for a, b in map(self.layer_dims, range(self.num_layers)))

    @property
    def weight_bytes(self) -> int:
        """Bytes of all weights in ``dtype``."""
        return self.num_params * self.dtype.itemsize

    def flops(self) -> int:
        """Floating-point operations of one step's matrix products: 2·b·m·n for the forward
        product of every layer and twice that for its two gradients (the first layer's input
        gradient, which is discarded, is counted too)."""
        return 6 * self.batch_size * self.num_params

    def weight_type(self, i: int) -> TensorType:
        return TensorType(self.dtype, self.layer_dims(i), self.device)

    def input_types(self) -> tuple[TensorType, TensorType]:
        """The types of ``%x`` and ``%y``."""
        return (TensorType(self.dtype, (self.batch_size, self.input_dim), self.device),
                TensorType(self.dtype, (self.batch_size, self.output_dim), self.device))

    def build(self, name: str = "main") -> Function:
        """The training step as a DistIR function (see the module docstring for names)."""
        b = FunctionBuilder(name)
        n = self.num_layers
        ws = [b.param(f"w{i}", self.weight_type(i)) for i in range(n)]
        x_t, y_t = self.input_types()
        x = b.param("x", x_t)
        y = b.param("y", y_t)

        hs: list[Value] = []
        acts: list[Value] = [x]  # acts[i] is the input of layer i
        for i, w in enumerate(ws):
            h = b.op("MatMul", acts[i], w, name=f"h{i}")
            hs.append(h)
            acts.append(b.op("Relu", h, name=f"a{i}"))

        da = b.op("MSELossGrad", acts[n], y, name=f"da{n - 1}")
        dws: list[Value] = [x] * n  # placeholders, each overwritten below
        for i in reversed(range(n)):
            dh = b.op("ReluGrad", hs[i], da, name=f"dh{i}")
            da, dws[i] = b.op("MatMulGrad", acts[i], ws[i], dh,
                              name=(f"da{i - 1}" if i > 0 else "_", f"dw{i}"))
        news = [b.op("SGDOptimizer", w, dw, lr=float(self.lr), name=f"w{i}_new")
                for i, (w, dw) in enumerate(zip(ws, dws, strict=True))]
        return b.ret(*news)


def mlp(batch_size: int, input_dim: int, hidden_dim: int, output_dim: int, num_layers: int,
        dtype: DType = DType.Float32, lr: float = 0.01, device: int = 0) -> Function:
    """The MLP training step as a DistIR function: ``MLPConfig(...).build()``.

    Parameters ``%w0 .. %w{L-1}, %x, %y``; results the updated weights ``%w{i}_new``.

    >>> from distir.ir import dumps
    >>> fn = mlp(batch_size=4, input_dim=8, hidden_dim=16, output_dim=2, num_layers=2)
    >>> print(dumps(fn), end="")
    func @main(%w0: Tensor[Float32, (8, 16), 0],
               %w1: Tensor[Float32, (16, 2), 0],
               %x: Tensor[Float32, (4, 8), 0],
               %y: Tensor[Float32, (4, 2), 0]) {
      %h0 = MatMul(%x, %w0)
      %a0 = Relu(%h0)
      %h1 = MatMul(%a0, %w1)
      %a1 = Relu(%h1)
      %da1 = MSELossGrad(%a1, %y)
      %dh1 = ReluGrad(%h1, %da1)
      %da0, %dw1 = MatMulGrad(%a0, %w1, %dh1)
      %dh0 = ReluGrad(%h0, %da0)
      _, %dw0 = MatMulGrad(%x, %w0, %dh0)
      %w0_new = SGDOptimizer(%w0, %dw0, lr=0.01)
      %w1_new = SGDOptimizer(%w1, %dw1, lr=0.01)
      return %w0_new, %w1_new
    }
    """
    return MLPConfig(batch_size, input_dim, hidden_dim, output_dim, num_layers, dtype, lr,
                     device).build()
