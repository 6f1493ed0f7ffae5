"""Peak memory from liveness, against hand-computed sums.

Every tensor here is Float32 (4, 4) = 64 bytes unless said otherwise.
"""

from __future__ import annotations

import pytest

import distir
from distir.analysis.memory import ALIASED, BY_STRIDES, liveness
from distir.analysis.simulator import simulate

T0 = "Tensor[Float32, (4, 4), 0]"


def peaks(text: str) -> dict[int, int]:
    return simulate(distir.parse(text), "h100-sxm").peak_memory_bytes


def test_chain_frees_each_value_after_its_last_use() -> None:
    # x | +a = 128 | +b = 192, -a | +c = 192, -b
    assert peaks(f"""
func @main(%x: {T0}) {{
  %a = Relu(%x)
  %b = Relu(%a)
  %c = Relu(%b)
  return %c
}}""") == {0: 192}


def test_overlapping_lifetimes() -> None:
    # x 64 | a 128 | b 192 | c 256, then -a -b | d 192, -c
    assert peaks(f"""
func @main(%x: {T0}) {{
  %a = Relu(%x)
  %b = Neg(%x)
  %c = Add(%a, %b)
  %d = Relu(%c)
  return %d
}}""") == {0: 256}


def test_parameters_live_throughout() -> None:
    # Unused parameters still count; y is never freed although it is never used.
    assert peaks(f"""
func @main(%x: {T0}, %y: {T0}) {{
  %a = Relu(%x)
  return %a
}}""") == {0: 192}


def test_unused_result_is_freed_right_away() -> None:
    # x (4, 8) 128 + w (8, 4) 128 + dy (4, 4) 64 = 320; MatMulGrad makes da 128 and dw 128
    # (576), da is unused and freed (448); then Relu(dw) 128 more: 576 again.
    assert peaks("""
func @main(%x: Tensor[Float32, (4, 8), 0], %w: Tensor[Float32, (8, 4), 0],
           %dy: Tensor[Float32, (4, 4), 0]) {
  _, %dw = MatMulGrad(%x, %w, %dy)
  %r = Relu(%dw)
  return %r
}""") == {0: 576}


def test_transferred_value_counts_on_the_receiving_device() -> None:
    # device 0: x 64, a 128 (a dies at the Send); device 1: b 64, c 128 (b dies after c).
    assert peaks(f"""
func @main(%x: {T0}) {{
  %a = Relu(%x)
  %b = Send(%a, device=1)
  %c = Relu(%b)
  return %c
}}""") == {0: 128, 1: 128}


def test_collective_results_on_each_device() -> None:
    # device 0: x 64, s0 128; device 1: y 64, s1 128; afterwards each relu + 64.
    assert peaks(f"""
func @main(%x: {T0}, %y: Tensor[Float32, (4, 4), 1]) {{
  %s0, %s1 = MPIAllreduce(%x, %y)
  %a = Relu(%s0)
  %b = Relu(%s1)
  return %a, %b
}}""") == {0: 192, 1: 192}


CALLEE = """
func @f(%p) {
  %t = Relu(%p)
  %u = Neg(%t)
  return %u
}
"""


def test_argument_dying_at_a_call_is_freed_inside_it() -> None:
    # x 64 | a 128 | in @f: t 192, a dies (128) | u 192, t dies (128) | s 192, u dies.
    assert peaks(CALLEE + f"""
func @main(%x: {T0}) {{
  %a = Relu(%x)
  %r = call @f(%a)
  %s = Add(%r, %x)
  return %s
}}""") == {0: 192}


def test_argument_used_after_a_call_stays_live() -> None:
    # x 64 | a 128 | t 192 | u 256, t dies (192) | s 256, r and a die (128).
    assert peaks(CALLEE + f"""
func @main(%x: {T0}) {{
  %a = Relu(%x)
  %r = call @f(%a)
  %s = Add(%r, %a)
  return %s
}}""") == {0: 256}


def test_repeated_calls_reuse_the_summary_with_the_right_peak() -> None:
    # Each call: the argument dies inside, so memory goes 128 -> 192 -> 128 per call.
    text = CALLEE + f"""
func @main(%x: {T0}) {{
  %a = Relu(%x)
  %b = call @f(%a)
  %c = call @f(%b)
  %d = call @f(%c)
  return %d
}}"""
    sim = simulate(distir.parse(text), "h100-sxm")
    assert sim.peak_memory_bytes == {0: 192}
    assert sim.num_ops == 7


def test_dropped_call_result_is_freed_inside_the_callee() -> None:
    # x 64 | a 128 | in @k: u 192, dropped by the caller so freed at once (128) | v 192,
    # a dies (128) | w 192, v dies (128) | b 192. Were u kept to the end of the call, v
    # would reach 256.
    assert peaks(f"""
func @k(%p) {{
  %u = Relu(%p)
  %v = Neg(%p)
  %w = Exp(%v)
  return %u, %w
}}

func @main(%x: {T0}) {{
  %a = Relu(%x)
  %r, %s = call @k(%a)
  %b = Relu(%s)
  return %b
}}""") == {0: 192}


def test_returned_parameter_is_an_alias_not_new_storage() -> None:
    # x 64 | a 128 | in @g: q 192; b is a itself | d 256; then a (= b) and c die.
    assert peaks(f"""
func @g(%p) {{
  %q = Relu(%p)
  return %p, %q
}}

func @main(%x: {T0}) {{
  %a = Relu(%x)
  %b, %c = call @g(%a)
  %d = Add(%b, %c)
  %e = Relu(%d)
  return %e
}}""") == {0: 256}


def test_callee_temporaries_on_two_devices() -> None:
    # @h moves its argument to device 1 and back: device 1 holds at most m and n (128).
    assert peaks(f"""
func @h(%p) {{
  %m = Send(%p, device=1)
  %n = Relu(%m)
  %o = Send(%n, device=0)
  return %o
}}

func @main(%x: {T0}) {{
  %r = call @h(%x)
  %s = Relu(%r)
  return %s
}}""") == {0: 192, 1: 128}


def test_liveness_facts() -> None:
    m = distir.parse(CALLEE + f"""
func @main(%x: {T0}, %y: {T0}) {{
  %a = Relu(%x)
  %r = call @f(%a)
  %s, %t = Split(%r, axis=0, num_outputs=2)
  return %s
}}""")
    live = liveness(m["main"])
    ops = m["main"].ops
    none = frozenset()

    def facts(fl, op):  # without the op's signature
        return fl.ops[op][1:]

    # x's last use: freed there only if a caller handed it over (never for an entry).
    assert facts(live, ops[0]) == ((), ((0, 0),), (), (), none)
    # A called function's parameter may be a strided view, which an elementwise op's
    # result takes: its records go by layout; an entry's parameters are contiguous.
    assert live.ops[ops[0]][0] == ("Relu", (), 1, BY_STRIDES)
    assert liveness(m["main"], entry=True).ops[ops[0]][0] == ("Relu", (), 1)
    assert live.unused_params == {1}
    assert facts(live, ops[1]) == ((), (), (), (b"\x01", (), ()), none)  # a is handed over to @f
    assert facts(live, ops[2]) == ((0,), (), (1,), (), none)      # r dies, t is never used
    f = liveness(m["f"])
    assert facts(f, m["f"].ops[0]) == ((), ((0, 0),), (), (), none)  # p dies if handed over
    assert f.return_param == (None,) and f.return_dup == (None,)
    assert facts(f, m["f"].ops[1]) == ((0,), (), (), (), none)  # t dies at Neg
    # A caller that drops the result: u is freed right after Neg, inside @f.
    f_drop = liveness(m["f"], drop=frozenset({0}))
    assert facts(f_drop, m["f"].ops[1]) == ((0,), (), (0,), (), none)


@pytest.mark.parametrize("n", [1, 3])
def test_peak_does_not_depend_on_memoization(n: int) -> None:
    body = "\n".join(f"  %a{i + 1} = call @f(%a{i})" for i in range(n))
    text = CALLEE + f"func @main(%a0: {T0}) {{\n{body}\n  return %a{n}\n}}"
    assert peaks(text) == {0: 64 + 128}


def test_reserved_bytes_come_off_the_capacity() -> None:
    """A profile's ``reserved_bytes`` (context, communicator buffers) is memory the tensors
    cannot use: a peak between the usable and the whole capacity is out of memory; the
    field survives the profile's JSON."""
    from dataclasses import replace

    from distir.analysis.hardware import Hardware, load_hardware

    fn = distir.parse(f"""
func @main(%x: {T0}) {{
  %a = Relu(%x)
  return %a
}}""")
    base = load_hardware("h100-sxm")
    tight = replace(base, memory_bytes=150, reserved_bytes=0, workspace_bytes=0)
    assert simulate(fn, tight).fits_in_memory  # peak 128 <= 150
    held = replace(tight, reserved_bytes=40)
    sim = simulate(fn, held)
    assert sim.memory_capacity_bytes == 110 and sim.out_of_memory == (0,)
    assert Hardware.from_json(held.to_json()).reserved_bytes == 40
    assert "reserved_bytes" not in tight.to_json()["device"]


def test_the_libraries_workspaces_are_held_besides_the_tensors() -> None:
    """``Hardware.workspace_bytes`` (cuBLAS's and cuBLASLt's workspaces, blocks of the
    allocator that no value names) is added to every device's peak in ``held_bytes``,
    twice for a step replayed as a CUDA graph (the capture stream holds its own set), and
    decides ``out_of_memory`` with the tensors; the liveness peak stays the tensors'."""
    from dataclasses import replace

    from distir.analysis.hardware import Hardware, load_hardware

    fn = distir.parse(f"""
func @main(%x: {T0}) {{
  %a = Relu(%x)
  return %a
}}""")
    base = replace(load_hardware("h100-sxm"), memory_bytes=1000, reserved_bytes=0,
                   outside_allocator=(), workspace_bytes=400)
    sim = simulate(fn, base)
    assert sim.peak_memory_bytes == {0: 128} and sim.held_bytes == {0: 528}
    assert sim.fits_in_memory
    graph = base.for_cuda_graphs()
    assert graph.workspace_held == 800 and graph.for_cuda_graphs() is graph
    assert simulate(fn, graph).held_bytes == {0: 928}
    assert simulate(fn, replace(graph, memory_bytes=900)).out_of_memory == (0,)
    assert Hardware.from_json(base.to_json()).workspace_bytes == 400
    assert Hardware.from_json(graph.to_json()).workspace_held == 800  # (saved as it was)
    assert load_hardware("h200-sxm").workspace_bytes == 33 << 20  # measured: 32 + 1 MiB


W14 = "Tensor[Float32, (1, 4), 0]"
BIG = "  %big = Concat(%x, %x, %x, %x, axis=0)\n"  # 256 bytes more: shows what is held


def test_a_view_shares_its_input_storage() -> None:
    """The backend computes a ``Reshape`` as a view: it holds no bytes of its own, and its
    input's storage lives until the view's last use. x 64 + the shape 16 + a 64 = 144; the
    view adds nothing (the shape dies: 128); b 64 more: 192, the peak (a and v counted
    apart, as before views were aliases: 256); then a dies and r is 4 bytes."""
    text = f"""
func @main(%x: {T0}) {{
  %s = Constant(value=dense<Int64>[4, 4], device=0)
  %a = Relu(%x)
  %v = Reshape(%a, %s)
  %b = Add(%a, %v)
  %r = ReduceSum(%b, keepdims=0)
  return %r
}}"""
    assert peaks(text) == {0: 192}
    fn = distir.parse(text)
    fn = getattr(fn, "entry", fn)
    reshape = fn.ops[2]
    assert ALIASED in liveness(fn, entry=True, views=True).ops[reshape][0]
    assert ALIASED not in liveness(fn, entry=True).ops[reshape][0]  # (the replay's)
    # In a called function, the parameter may be a strided view, which the reshape copies
    # where no view gives its result: storage of its own.
    assert ALIASED not in liveness(fn, views=True).ops[reshape][0]


def _main(body: str, tail: str = "") -> str:
    """``@main(x, w)`` of ``body`` returning ``%m`` (and ``%big``, made by ``tail``)."""
    return f"""
func @main(%x: {T0}, %w: {W14}) {{
{body}{tail}  return %m{", %big" if tail else ""}
}}"""


def _broadcast(tail: str = "") -> str:
    return _main("""  %s = Constant(value=dense<Int64>[4, 4], device=0)
  %r = Relu(%w)
  %e = Expand(%r, %s)
  %a = Add(%x, %e)
  %b = Mul(%a, %e)
  %m = ReduceSum(%b, keepdims=0)
""", tail)


def test_a_broadcast_view_holds_its_base_storage() -> None:
    """An ``Expand`` is a view of its (16-byte) base: x 64 + w 16 + the shape 16 + r 16 =
    112, the view adds nothing (the shape dies: 96), a and b 64 each: 224 (the view counted
    at its 64 bytes: 272). The base dies with the view's last reader, by its own 16 bytes:
    84 bytes are left (x, w, m), so 256 more make a peak of 340, neither more (a leak) nor
    less (the view's 64 bytes freed)."""
    assert peaks(_broadcast()) == {0: 224}
    assert peaks(_broadcast(BIG)) == {0: 84 + 256}


def _repeated_keys(kv: int) -> str:
    """Keys of ``kv`` key-value heads repeated for 3 query heads each, as Hugging Face's
    ``repeat_kv`` writes it: ``Unsqueeze``, ``Expand``, ``Reshape``."""
    h = 3 * kv
    return f"""
func @main(%k: Tensor[Float32, (2, {kv}, 4, 8), 0], %q: Tensor[Float32, (2, {h}, 4, 8), 0]) {{
  %a = Constant(value=dense<Int64>[2], device=0)
  %s = Constant(value=dense<Int64>[2, {kv}, 3, 4, 8], device=0)
  %t = Constant(value=dense<Int64>[2, {h}, 4, 8], device=0)
  %u = Unsqueeze(%k, %a)
  %e = Expand(%u, %s)
  %r = Reshape(%e, %t)
  %m = Mul(%q, %r)
  %o = ReduceSum(%m, keepdims=0)
  return %o
}}"""


def test_a_reshape_of_a_broadcast_is_a_view_where_strides_give_one() -> None:
    """One key-value head (multi-query attention): the reshape merges the head axis (of
    length 1) with the broadcast one, a view of the keys' storage, as PyTorch makes it: k
    256 + q 768 + m 768 + o 4 = 1796 (a copy of 768 bytes counted before: 2560). Two
    key-value heads (grouped-query): no view merges an axis of stride 128 with one of
    stride 0, so the reshape copies: k 512 + q 1536 + r 1536 + m 1536 = 5120."""
    assert peaks(_repeated_keys(1)) == {0: 1796}
    assert peaks(_repeated_keys(2)) == {0: 5120}


def test_a_reshape_of_a_broadcast_in_a_called_layer_is_checked_there() -> None:
    """The same repeat inside a layer called twice (the liveness is per function, its
    guesses flipped where the layer runs): k 256 + q 768, k2 256 and m1 768 live when the
    second call's product m2 (768) is made: 2816, the inlined program's figure, with no
    copy of the repeated keys (768 more each before)."""
    from distir.ir.inline import inline_calls

    k, q = "Tensor[Float32, (2, 1, 4, 8), 0]", "Tensor[Float32, (2, 3, 4, 8), 0]"
    text = f"""
func @attend(%k: {k}, %q: {q}) {{
  %a = Constant(value=dense<Int64>[2], device=0)
  %s = Constant(value=dense<Int64>[2, 1, 3, 4, 8], device=0)
  %t = Constant(value=dense<Int64>[2, 3, 4, 8], device=0)
  %u = Unsqueeze(%k, %a)
  %e = Expand(%u, %s)
  %r = Reshape(%e, %t)
  %m = Mul(%q, %r)
  return %m
}}

func @main(%k: {k}, %q: {q}) {{
  %k1 = Relu(%k)
  %m1 = call @attend(%k1, %q)
  %k2 = Neg(%k)
  %m2 = call @attend(%k2, %m1)
  %o = ReduceSum(%m2, keepdims=0)
  return %o
}}"""
    assert peaks(text) == {0: 2816}
    m = distir.parse(text)
    assert simulate(inline_calls(m.entry), "h100-sxm").peak_memory_bytes == {0: 2816}


def test_a_broadcast_view_passed_to_a_call_is_freed_by_its_caller() -> None:
    """A broadcast view passed to a call is never handed over (the callee would free its
    64 bytes): x 64 + w 16 + r 16 = 96 after the shape dies, o 64 inside @f: 160, the
    base freed after the call by its 16 bytes; 84 bytes left."""
    callee = f"""
func @f(%p: {T0}, %q: {T0}) {{
  %o = Add(%p, %q)
  return %o
}}
"""

    def main(tail: str = "") -> str:
        return callee + _main("""  %s = Constant(value=dense<Int64>[4, 4], device=0)
  %r = Relu(%w)
  %e = Expand(%r, %s)
  %o = call @f(%x, %e)
  %m = ReduceSum(%o, keepdims=0)
""", tail)

    assert peaks(main()) == {0: 160}
    assert peaks(main(BIG)) == {0: 84 + 256}


def test_a_returned_broadcast_view_holds_its_base_storage() -> None:
    """A callee that returns a broadcast view of its argument: the result is a view of the
    argument's storage (``return_sized``), never handed over, freed by its caller with the
    result's last reader by its own 16 bytes: x 64 + w 16 + r 16, the shape 16 in @g, a 64
    in @main: 160, as inlined (the view counted as a copy of 64 bytes: 208)."""
    from distir.ir.inline import inline_calls
    def main(tail: str = "") -> str:
        return f"""
func @g(%p: {W14}) {{
  %s = Constant(value=dense<Int64>[4, 4], device=0)
  %e = Expand(%p, %s)
  return %e
}}
""" + _main("""  %r = Relu(%w)
  %e = call @g(%r)
  %a = Add(%x, %e)
  %m = ReduceSum(%a, keepdims=0)
""", tail)

    assert peaks(main()) == {0: 160}
    assert simulate(inline_calls(distir.parse(main()).entry),
                    "h100-sxm").peak_memory_bytes == {0: 160}
    assert peaks(main(BIG)) == {0: 84 + 256}


def test_a_kernels_temporary_counts_at_its_op() -> None:
    """``SoftmaxGrad`` holds a temporary the size of its gradient input while it runs
    (``allocator.TRANSIENT_AFTER``): y 64 + dy 64 + the result 64, and 64 more during the
    op: a peak of 256, then 192."""
    assert peaks(f"""
func @main(%y: {T0}, %dy: {T0}) {{
  %g = SoftmaxGrad(%y, %dy, axis=-1)
  return %g
}}""") == {0: 256}


def test_parts_hold_their_whole_storage() -> None:
    """A ``Split``'s parts are views of its input: they hold no bytes of their own, and the
    storage lives until the last use of any part (PyTorch frees a storage with its last
    view). x 64, a 64, b 32, then 256 while p is dead and q not yet read: 416 (each part
    counted on its own, freed at its own last use: 384); c 32 more: 448."""
    text = f"""
func @main(%x: {T0}) {{
  %a = Relu(%x)
  %p, %q = Split(%a, axis=0, num_outputs=2)
  %b = Neg(%p)
{BIG}  %c = Add(%b, %q)
  %m = ReduceSum(%c, keepdims=0)
  return %m, %big
}}"""
    assert peaks(text) == {0: 448}


def test_a_slice_of_negative_steps_is_a_copy() -> None:
    """A ``Slice`` of positive steps is a view (a part); one of negative steps is gathered
    by ``index_select``: a copy. One whose steps another op or a parameter gives is
    guessed a view, which the simulator checks by their value
    (``test_a_slice_of_steps_passed_in_is_checked_by_their_value``)."""
    def slice_sig(steps: str) -> tuple:
        fn = distir.parse(f"""
func @main(%x: {T0}, %k: Tensor[Int64, (1,), 0]) {{
  %s = Constant(value=dense<Int64>[3], device=0)
  %e = Constant(value=dense<Int64>[0], device=0)
  %a = Constant(value=dense<Int64>[0], device=0)
  %n = Constant(value=dense<Int64>[{steps}], device=0)
  %y = Slice(%x, %s, %e, %a, {"%k" if steps == "k" else "%n"})
  %r = Relu(%y)
  return %r
}}""".replace("dense<Int64>[k]", "dense<Int64>[1]"))
        fn = getattr(fn, "entry", fn)
        return liveness(fn, entry=True, views=True).ops[fn.ops[4]][0]

    assert ALIASED in slice_sig("2")
    assert ALIASED not in slice_sig("-1")
    assert ALIASED in slice_sig("k")


@pytest.mark.parametrize("step,peak", [(1, 448), (-1, 416)])
def test_a_slice_of_steps_passed_in_is_checked_by_their_value(step: int, peak: int) -> None:
    """A layer's constants are its parameters: the steps of a ``Slice`` in a called
    function are known where it runs. Steps of 1: a part of a (64 bytes), which @f returns;
    a lives while the part does: x 64 + a 64 + n 32 after the call, big 256, m 32: 448, as
    inlined (the part taken for a copy of 32 bytes and a freed in @f: 416). Steps of -1: a
    copy (32), and a freed at its last use in @f: x 64 + p 32 + n 32 + 256 + 32 = 416."""
    from distir.ir.inline import inline_calls

    i64 = "Tensor[Int64, (1,), 0]"
    start, end = (0, 2) if step > 0 else (3, 1)
    text = f"""
func @f(%y: {T0}, %s: {i64}, %e: {i64}, %x: {i64}, %k: {i64}) {{
  %a = Relu(%y)
  %p = Slice(%a, %s, %e, %x, %k)
  %n = Neg(%p)
  return %p, %n
}}
func @main(%x: {T0}) {{
  %s = Constant(value=dense<Int64>[{start}], device=0)
  %e = Constant(value=dense<Int64>[{end}], device=0)
  %ax = Constant(value=dense<Int64>[0], device=0)
  %k = Constant(value=dense<Int64>[{step}], device=0)
  %p, %n = call @f(%x, %s, %e, %ax, %k)
{BIG}  %m = Mul(%p, %n)
  return %m, %big
}}"""
    assert peaks(text) == {0: peak}
    assert simulate(inline_calls(distir.parse(text).entry),
                    "h100-sxm").peak_memory_bytes == {0: peak}


def _flips(text: str) -> tuple[dict[int, int], set[str]]:
    """The peaks of ``text``'s simulation and the op types whose view or copy the
    simulator found against the liveness's guess."""
    from distir.analysis.simulator import Simulator

    sim = Simulator("h100-sxm")
    s = sim.simulate_function(distir.parse(text))
    return s.peak_memory_bytes, {op.op_type for op in sim.entry_flips}


def test_a_transpose_is_a_view_or_a_copy_by_its_types() -> None:
    """A ``Transpose`` is a view where the backend makes one (``copied_transpose``): of the
    last two axes, rows of aligned bytes. x 64, y 64, r 64: 192, the view adds nothing.
    Rows of 20 bytes (5 floats) are copied: x, y, the copy and r, 60 each: 240, the guess
    (a view: y's type is not known before the run) flipped. One that moves a batch axis
    copies: 256, but for one that moves only axes of 1: a view (the guess flipped), 192.
    Of a value of a declared type, the guess is by the type: right."""
    def main(shape: str, perm: str, typed: bool = False) -> str:
        x = "%x" if typed else "%y"
        return f"""
func @main(%x: Tensor[Float32, {shape}, 0]) {{
  %y = Neg(%x)
  %t = Transpose({x}, perm={perm})
  %r = Relu(%t)
  return %r, %y
}}"""

    assert _flips(main("(4, 4)", "[1, 0]")) == ({0: 192}, set())
    assert _flips(main("(3, 5)", "[1, 0]")) == ({0: 240}, {"Transpose"})
    assert _flips(main("(2, 2, 4)", "[1, 0, 2]")) == ({0: 256}, set())
    assert _flips(main("(1, 4, 4)", "[1, 0, 2]")) == ({0: 192}, {"Transpose"})
    assert _flips(main("(3, 5)", "[1, 0]", typed=True)) == ({0: 240}, set())


def test_a_reshape_of_a_part_is_a_view_where_its_strides_allow() -> None:
    """A reshape whose input may be strided is a view or a copy by the input's strides.
    Of a row-part of a contiguous tensor (a view, as guessed), it holds the whole storage:
    x 64, a 64, c 32, the shape 8 (freed at the view), 256, b 32: 448. Of a column-part
    (rows of 8 bytes 16 apart), no view merges the rows: a copy of 32 bytes, a freed at it
    (the guess flipped): 416."""
    def main(axis: int) -> str:
        return f"""
func @main(%x: {T0}) {{
  %a = Relu(%x)
  %p, %q = Split(%a, axis={axis}, num_outputs=2)
  %c = Neg(%q)
  %s = Constant(value=dense<Int64>[8], device=0)
  %v = Reshape(%p, %s)
{BIG}  %b = Neg(%v)
  %m = ReduceSum(%b, keepdims=0)
  return %m, %big, %c
}}"""

    assert _flips(main(0)) == ({0: 448}, set())
    assert _flips(main(1)) == ({0: 416}, {"Reshape"})


def test_a_part_handed_to_a_call_frees_its_storage_there() -> None:
    """A part whose storage dies at a call is handed over with the rest of its storage's
    bytes: the callee frees them all at the part's last use, as the inlined program does."""
    from distir.ir.inline import inline_calls

    m = distir.parse(f"""
func @f(%p: Tensor[Float32, (2, 4), 0]) {{
  %u = Neg(%p)
  %big = Concat(%u, %u, %u, %u, %u, %u, %u, %u, axis=0)
  %o = Add(%u, %u)
  return %o, %big
}}

func @main(%x: {T0}) {{
  %a = Relu(%x)
  %p, %q = Split(%a, axis=0, num_outputs=2)
  %c = Neg(%q)
  %o, %big = call @f(%p)
  %r = Add(%o, %c)
  return %r, %big
}}""")
    memo = simulate(m, "h100-sxm").peak_memory_bytes
    assert memo == simulate(inline_calls(m.entry), "h100-sxm").peak_memory_bytes
    # x 64, c 32, u 32, big 256, o 32: 416 with a freed at u (held to the end: 480)
    assert memo == {0: 416}


def test_ops_alike_are_flipped_together(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where a guess is wrong, the ops alike after it (the same op of the same chain of
    views: a layer's, in each layer) flip with it: one new liveness, not one per layer."""
    from distir.analysis.simulator import Simulator

    layer = """  %a{i} = Relu(%x{i})
  %p{i}, %q{i} = Split(%a{i}, axis=1, num_outputs=2)
  %s{i} = Constant(value=dense<Int64>[8], device=0)
  %v{i} = Reshape(%p{i}, %s{i})
  %u{i} = Reshape(%q{i}, %s{i})
  %w{i} = Concat(%v{i}, %u{i}, axis=0)
  %t{i} = Constant(value=dense<Int64>[4, 4], device=0)
  %x{j} = Reshape(%w{i}, %t{i})
"""
    body = "".join(layer.format(i=i, j=i + 1) for i in range(4))
    text = f"func @main(%x0: {T0}) {{\n{body}  return %x4\n}}"
    calls = []
    flip = Simulator._flip
    monkeypatch.setattr(Simulator, "_flip", lambda self, op: calls.append(op) or flip(self, op))
    assert _flips(text)[1] == {"Reshape"}
    assert len(calls) == 1


# Measured on an H200 (132 multiprocessors, torch 2.11): what ``torch.sum(x, dim=(0, 1),
# keepdim=True)`` allocated while it ran, beyond x and its result, in MiB to two decimals
# (``grid_search/results/parts_views/call_k/transient_probe.txt``).
STAGED = [((64, 196, 2304), 132.75), ((64, 784, 1152), 132.19), ((16, 512, 3072), 132.00),
          ((16, 512, 768), 48.00), ((8, 512, 768), 24.00), ((128, 3136, 64), 33.00),
          ((64, 3136, 96), 24.75), ((4, 128, 256), 0.00), ((256, 49, 3072), 132.00)]


@pytest.mark.parametrize("shape,mib", STAGED)
def test_a_column_sums_staging_buffer_is_the_measured_one(shape: tuple, mib: float) -> None:
    from distir.analysis.memory import reduce_staging_bytes

    assert round(reduce_staging_bytes(shape, (0, 1), 132) / 2**20, 2) == mib


def test_a_reductions_staging_buffer_counts_while_it_runs() -> None:
    """A column sum of 64 x 196 rows of 2,304 floats (110.25 MiB) on a profile that gives
    its multiprocessors stages 132.75 MiB while it runs, at its op; without them, or for a
    sum over the rows' own elements (a few blocks' partials), nothing."""
    from dataclasses import replace

    from distir.analysis.hardware import load_hardware
    from distir.analysis.memory import reduce_staging_bytes

    def peak(axes: str, hw: object) -> int:
        fn = distir.parse(f"""
func @main(%x: Tensor[Float32, (64, 196, 2304), 0]) {{
  %a = Constant(value=dense<Int64>{axes}, device=0)
  %s = ReduceSum(%x, %a, keepdims=1)
  return %s
}}""")
        return simulate(fn, hw).peak_memory_bytes[0]  # type: ignore[arg-type]

    from distir.analysis.hardware import Hardware

    hw = load_hardware("h200-sxm")
    x = 64 * 196 * 2304 * 4
    assert hw.sm_count == 132 and Hardware.from_json(hw.to_json()).sm_count == 132
    staged = reduce_staging_bytes((64, 196, 2304), (0, 1), 132)
    assert peak("[0, 1]", hw) == x + 16 + 2304 * 4 + staged
    assert peak("[0, 1]", replace(hw, sm_count=0)) == x + 16 + 2304 * 4
    assert reduce_staging_bytes((64, 196, 2304), (2,), 132) < 2**20


def _memoized_and_inlined(text: str) -> tuple[dict[int, int], dict[int, int], dict[int, int]]:
    """Peaks of ``text`` simulated twice by one simulator (the second run starts from the
    flips the first found) and inlined."""
    from distir.analysis.simulator import Simulator
    from distir.ir.inline import inline_calls

    m = distir.parse(text)
    sim = Simulator("h100-sxm")
    first = sim.simulate_function(m).peak_memory_bytes
    again = sim.simulate_function(m).peak_memory_bytes
    return first, again, simulate(inline_calls(m.entry), "h100-sxm").peak_memory_bytes


def test_a_view_by_types_on_the_way_to_a_return_is_a_copy() -> None:
    """A reshape (of a parameter: maybe strided, guessed a copy, found a view) whose result
    a callee returns through another call would make the callee's result its argument's
    storage or not by the flips: it is taken for a copy whatever they are, so that the
    caller's facts hold (a caller once freed the argument twice)."""
    text = f"""
func @id(%q: Tensor[Float32, (16,), 0]) {{
  return %q
}}
func @f(%p: {T0}) {{
  %s = Constant(value=dense<Int64>[16], device=0)
  %r = Reshape(%p, %s)
  %w = call @id(%r)
  return %w
}}
func @main(%x: {T0}) {{
  %a = Relu(%x)
  %w = call @f(%a)
  %b = Neg(%w)
  %c = Neg(%a)
{BIG}  return %b, %c, %big
}}"""
    first, again, inlined = _memoized_and_inlined(text)
    assert first == again == inlined


def test_a_flip_leaves_the_facts_of_the_ops_before_it() -> None:
    """A transpose found a view (its guess a copy: a batch axis of 1 moved) on the way to a
    returned value: flipping it must not turn the reshape that ran before it into a copy
    (its storage was then never freed)."""
    text = f"""
func @f(%x: {T0}) {{
  %a = Relu(%x)
  %q0, %q1 = Split(%a, axis=0, num_outputs=2)
  %c = Neg(%q1)
  %s = Constant(value=dense<Int64>[1, 2, 4], device=0)
  %r = Reshape(%q0, %s)
  %t = Transpose(%r, perm=[1, 0, 2])
  return %t, %c
}}
func @main(%x: {T0}) {{
  %t, %c = call @f(%x)
  %u = Neg(%t)
  %v = Neg(%c)
{BIG}  return %u, %v, %big
}}"""
    first, again, inlined = _memoized_and_inlined(text)
    assert first == again == inlined


def _transposed(body: str) -> str:
    """@f returning ``%t`` and ``%n``, made by ``body`` from a (2, 2, 4) ``%a``, read after
    256 bytes more in @main."""
    x = "Tensor[Float32, (2, 2, 4), 0]"
    return f"""
func @f(%y: {x}) {{
  %a = Relu(%y)
{body}  return %t, %n
}}
func @main(%x: {x}) {{
  %t, %n = call @f(%x)
{BIG}  %u = Neg(%t)
  %v = Neg(%n)
  return %u, %v, %big
}}"""


_RETURNED_VIEWS = {
    "parts_of_one_storage": f"""
func @f(%y: {T0}) {{
  %a = Relu(%y)
  %p, %q = Split(%a, axis=0, num_outputs=2)
  %n = Neg(%p)
  return %p, %q, %n
}}
func @main(%x: {T0}) {{
  %p, %q, %n = call @f(%x)
  %u = Mul(%p, %n)
{BIG}  %v = Neg(%q)
  return %u, %v, %big
}}""",
    "part_handed_to_backward": f"""
func @f(%y: {T0}) {{
  %a = Relu(%y)
  %p, %q = Split(%a, axis=0, num_outputs=2)
  %n = Neg(%q)
  return %p, %n
}}
func @g(%p: Tensor[Float32, (2, 4), 0], %n: Tensor[Float32, (2, 4), 0]) {{
  %w = Concat(%n, %n, %n, %n, %n, %n, %n, %n, axis=0)
  %u = Mul(%p, %n)
  return %w, %u
}}
func @main(%x: {T0}) {{
  %p, %n = call @f(%x)
{BIG}  %w, %u = call @g(%p, %n)
  return %w, %u, %big
}}""",
    "nested_return": f"""
func @f(%y: {T0}) {{
  %a = Relu(%y)
  %p, %q = Split(%a, axis=0, num_outputs=2)
  return %p
}}
func @h(%y: {T0}) {{
  %p = call @f(%y)
  %n = Neg(%p)
  return %p, %n
}}
func @main(%x: {T0}) {{
  %p, %n = call @h(%x)
{BIG}  %u = Mul(%p, %n)
  return %u, %big
}}""",
    "broadcast_of_local": f"""
func @f(%y: Tensor[Float32, (1, 4), 0]) {{
  %s = Constant(value=dense<Int64>[4, 4], device=0)
  %r = Relu(%y)
  %e = Expand(%r, %s)
  %n = Neg(%e)
  return %e, %n
}}
func @main(%x: {T0}, %w: Tensor[Float32, (1, 4), 0]) {{
  %e, %n = call @f(%w)
{BIG}  %u = Mul(%e, %n)
  %v = Add(%u, %x)
  return %v, %big
}}""",
    "transpose_of_a_part": _transposed("""  %p, %q = Split(%a, axis=0, num_outputs=2)
  %t = Transpose(%p, perm=[0, 2, 1])
  %n = Neg(%q)
"""),
    "transpose_copy_of_local": _transposed("""  %t = Transpose(%a, perm=[1, 0, 2])
  %n = Neg(%a)
"""),
}


@pytest.mark.parametrize("name", sorted(_RETURNED_VIEWS))
def test_a_returned_view_holds_its_storage_as_inlined(name: str) -> None:
    """A called function that returns a view of a storage it made (parts of one storage, a
    part its caller hands to another call, one returned on through a second function, a
    broadcast, a transpose of a part, a transposed copy): the storage is held for the
    caller, which frees it with the last of its views, by the storage's bytes
    (``FunctionLiveness.return_sized``, ``CallSummary.held``). The peaks are the inlined
    program's, on a first run and on a run from the flips the first found (the views taken
    for copies of their own bytes, four of them were 32 to 48 bytes off)."""
    first, again, inlined = _memoized_and_inlined(_RETURNED_VIEWS[name])
    assert first == again == inlined
