"""The caching allocator's model (``distir.analysis.allocator``): best fit, splitting,
growth at the end, merging, views sharing their base's block, the loss's temporary."""

from __future__ import annotations

import distir
from distir.analysis.allocator import (
    LARGE_PAGE,
    SMALL_REQUEST,
    VIEW_OPS,
    _Segment,
    allocator_reserve,
    replay,
)
from distir.analysis.projection import project

MIB = 1 << 20


def test_view_ops_are_the_backends() -> None:
    from distir.backend.lowering import LOWERINGS, load_lowerings

    load_lowerings()
    assert VIEW_OPS == {t for t, r in LOWERINGS.rules.items() if r.view}


def test_fragmented_free_space_grows_the_segment() -> None:
    seg = _Segment(LARGE_PAGE, SMALL_REQUEST + 1)
    a = seg.alloc(8 * MIB)
    assert seg.mapped == 20 * MIB and a.addr == 0
    b = seg.alloc(8 * MIB)
    assert b.addr == 8 * MIB and seg.mapped == 20 * MIB
    seg.release(a)  # free: [0, 8) and [16, 20)
    assert seg.free == [(4 * MIB, 16 * MIB), (8 * MIB, 0)]
    c = seg.alloc(10 * MIB)  # no free block holds 10 MiB: the end grows by one page
    assert c.addr == 16 * MIB and seg.mapped == 40 * MIB
    assert seg.free == [(8 * MIB, 0), (14 * MIB, 26 * MIB)]
    d = seg.alloc(6 * MIB)  # the smallest block that holds it
    assert d.addr == 0
    seg.release(d)
    seg.release(b)  # merges with the free block before it: [0, 16)
    assert (16 * MIB, 0) in seg.free
    e = seg.alloc(16 * MIB)
    assert e.addr == 0 and seg.mapped == 40 * MIB
    seg.release(c)
    seg.release(e)  # everything free again, in one block; pages stay mapped
    assert seg.free == [(40 * MIB, 0)] and seg.mapped == 40 * MIB


def test_small_remainders_stay_in_the_block() -> None:
    seg = _Segment(LARGE_PAGE, SMALL_REQUEST + 1)
    a = seg.alloc(19 * MIB)  # 1 MiB left: not split off
    assert a.size == 20 * MIB and seg.free == []


def _program(body: str) -> distir.ir.core.Function:
    fn = distir.parse(body).entry
    return project(fn).programs[0].fn


def test_a_view_holds_its_base_and_the_loss_its_temporary() -> None:
    # 4 MiB values: a's block lives while its view p does, though the model frees a at
    # the Split; the loss holds a temporary the size of its logits.
    fn = _program("""func @main(%x: Tensor[Float32, (1024, 1024), 0],
                                %y: Tensor[Int64, (1024,), 0]) {
  %a = Relu(%x)
  %p, %q = Split(%a, axis=0, num_outputs=2)
  %b = Neg(%x)
  %c = Relu(%p)
  %l = SoftmaxCrossEntropyLoss(%b, %y)
  return %c, %l
}""")
    trace: list[tuple[int, int]] = []
    r = replay(fn, trace)
    x, y = 4 * MIB, 8 * 1024
    assert trace[1][0] == x + y + x          # after the Split: x, y and a's block
    assert trace[2][0] == x + y + 2 * x      # b
    assert trace[3][0] == x + y + x + x // 2  # c: p dies, and a's block with it
    # The peak: the loss's temporary (as large as b) and its result, beside x, y, b, c.
    assert r.allocated_bytes == x + y + x + x // 2 + x + 512
    assert r.reserved_bytes >= r.allocated_bytes
    assert r.reserved_bytes % (2 * MIB) == 0


def test_reserve_of_every_device_of_a_distributed_step() -> None:
    from distir.models import mlp
    from distir.transforms import dtp

    fn = dtp(mlp(batch_size=16, input_dim=64, hidden_dim=64, output_dim=8, num_layers=4),
             pp=2, microbatches=2)
    res = allocator_reserve(fn)
    sim = distir.simulate(fn)
    assert set(res) == {0, 1}
    for d, r in res.items():
        assert 0 < r.allocated_bytes <= r.reserved_bytes
        # views hold no bytes of their own: never more than the liveness peak, rounded
        assert r.allocated_bytes <= sim.peak_memory_bytes[d] + 512 * 64


def test_outside_the_allocator_by_communicators() -> None:
    """``outside_allocator``: a rank of a world of one, of a larger world, and each further
    communicator; without it, the constant ``reserved_bytes``. It survives the JSON, and a
    malformed one is refused in one line."""
    from dataclasses import replace

    import pytest

    from distir.analysis.hardware import Hardware, load_hardware
    from distir.errors import ConfigError

    base = replace(load_hardware("h100-sxm"), reserved_bytes=3000, outside_allocator=())
    assert base.reserved_for(4, 2) == 3000
    hw = replace(base, outside_allocator=(1200, 1500, 500))
    assert (hw.reserved_for(1, 0), hw.reserved_for(2, 0), hw.reserved_for(4, 2)) == \
        (1200, 1500, 2500)
    assert Hardware.from_json(hw.to_json()).outside_allocator == (1200, 1500, 500)
    assert "outside_allocator" not in base.to_json()["device"]
    bad = hw.to_json()
    bad["device"]["outside_allocator"] = {"single": 1}
    with pytest.raises(ConfigError, match=r"^error: <profile>: device.outside_allocator needs"):
        Hardware.from_json(bad)


def test_near_capacity_counts_each_ranks_communicators() -> None:
    """Within ``NEAR_CAPACITY`` of the capacity, each device's reserve, plus the margin,
    against the card less what its communicators hold; farther away, no verdict."""
    from dataclasses import replace

    from distir.analysis.allocator import MARGIN, near_capacity
    from distir.analysis.hardware import load_hardware
    from distir.models import mlp
    from distir.transforms import dtp

    fn = dtp(mlp(batch_size=16, input_dim=64, hidden_dim=64, output_dim=8, num_layers=4),
             dp=2, pp=2, microbatches=2)
    res = allocator_reserve(fn)
    groups = project(fn).groups  # the backend's communicators, besides the world's
    per = 1 << 16
    # Each device's room: the card less the world's and its own communicators.
    outside = {d: per + per * sum(d in g for g in groups) for d in res}
    for mem, fits in ((256 * MIB, True), (max(r.reserved_bytes + outside[d] for d, r in
                                                 res.items()), False)):
        hw = replace(load_hardware("h100-sxm"), memory_bytes=mem, reserved_bytes=mem // 2,
                     outside_allocator=(per, per, per))
        near = {0: hw.usable_memory_bytes}  # liveness peaks near the capacity
        v = near_capacity(fn, near, hw, world_size=4)
        assert v is not None and v.fits == fits  # the second leaves no margin
        assert v.capacity == hw.memory_bytes - outside[v.device]
        assert v.fits == all(r.reserved_bytes <= (mem - outside[d]) * (1 - MARGIN)
                             for d, r in res.items())
    assert near_capacity(fn, {0: 1}, hw, world_size=4) is None  # far below
    over = near_capacity(fn, {0: mem}, hw, world_size=4)  # over any rank's room
    assert over is not None and not over.fits and not over.replayed
    lim = 200 * MIB  # an allocator capped below the card: the cap is the room
    big = replace(hw, memory_bytes=256 * MIB, reserved_bytes=128 * MIB)
    capped = near_capacity(fn, {0: lim}, big, world_size=4, limit=lim)
    assert capped is not None and capped.capacity == lim and capped.replayed and capped.fits


def test_the_end_block_serves_last() -> None:
    """The free block at the segment's end can grow, so best fit takes any other free
    block that holds a request first (as PyTorch's expandable segments do: replayed on a
    real allocator history, all 1,455 placements of its large pool matched)."""
    seg = _Segment(LARGE_PAGE, 512)
    a = seg.alloc(16 * MIB)
    b = seg.alloc(2 * MIB)  # [16, 18); the end block [18, 20) stays free
    seg.release(a)          # free: [0, 16) and the end block (2 MiB)
    c = seg.alloc(2 * MIB)  # fits the end block exactly, yet goes to [0, 16)
    assert c.addr == 0 and seg.mapped == 20 * MIB
    d = seg.alloc(20 * MIB)  # nothing else holds it: the end block grows
    assert d.addr == 18 * MIB and seg.mapped == 40 * MIB
    del b


def test_replica_programs_count_each_group_once() -> None:
    """``dtp_replica``'s program names its replica group on every all-reduce: the rank
    joins it once, as in ``dtp``'s program; every near device must fit, not only one."""
    from dataclasses import replace

    from distir.analysis.allocator import near_capacity
    from distir.analysis.hardware import load_hardware
    from distir.models import mlp
    from distir.transforms import dtp, dtp_replica

    seq = mlp(batch_size=16, input_dim=64, hidden_dim=64, output_dim=8, num_layers=4)
    full = dtp(seq, dp=2, pp=2, microbatches=2)
    one = dtp_replica(seq, dp=2, pp=2, microbatches=2)
    per = 1 << 20
    hw = replace(load_hardware("h100-sxm"), memory_bytes=64 * per, reserved_bytes=3 * per,
                 outside_allocator=(per, per, per))
    near = {d: hw.usable_memory_bytes for d in range(4)}
    a = near_capacity(full, near, hw, world_size=4)
    b = near_capacity(one, near, hw, world_size=4)
    assert a is not None and b is not None
    assert (a.device, a.capacity, a.fits) == (b.device, b.capacity, b.fits)
    assert a.capacity >= 64 * per - 4 * per  # the world's and at most 3 more


def test_a_derived_reserved_bytes_replaces_the_model(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from distir.analysis.hardware import load_hardware

    p = tmp_path / "mine.json"
    p.write_text(json.dumps({"format": "distir-hardware/1", "base": "h100-sxm", "name": "mine",
                             "device": {"reserved_bytes": 8 << 30}}))
    hw = load_hardware(str(p))
    assert hw.outside_allocator == () and hw.reserved_for(4, 3) == 8 << 30


def test_a_program_with_calls_is_refused_in_one_line() -> None:
    import pytest

    from distir.errors import SimulationError

    m = distir.parse("""func @f(%p: Tensor[Float32, (4,), 0]) {
  %q = Relu(%p)
  return %q
}

func @main(%x: Tensor[Float32, (4,), 0]) {
  %y = call @f(%x)
  return %y
}""")
    with pytest.raises(SimulationError, match=r"^error: @main calls @f: the allocator"):
        replay(m["main"])
    assert allocator_reserve(m["main"])[0].reserved_bytes == 2 * MIB  # projected: flat


def test_a_transpose_moving_a_batch_axis_is_a_copy() -> None:
    # The backend makes a transpose that moves a batch axis contiguous (one block of its
    # own); a transpose of the last two axes stays a view of its base.
    fn = _program("""func @main(%x: Tensor[Float32, (4, 256, 1024), 0]) {
  %a = Relu(%x)
  %t = Transpose(%a, perm=[1, 0, 2])
  %u = Transpose(%a, perm=[0, 2, 1])
  %b = Relu(%t)
  %c = Relu(%u)
  return %b, %c
}""")
    trace: list[tuple[int, int]] = []
    replay(fn, trace)
    x = 4 * MIB
    assert trace[1][0] == 3 * x  # x, a and t's copy
    assert trace[2][0] == 3 * x  # u: a view of a


def test_the_backend_copies_exactly_those_transposes() -> None:
    import torch

    from distir.backend.lowering import compile_program

    fn = _program("""func @main(%x: Tensor[Float32, (2, 3, 4, 8), 0]) {
  %t = Transpose(%x, perm=[0, 2, 1, 3])
  %u = Transpose(%x, perm=[0, 1, 3, 2])
  return %t, %u
}""")
    x = torch.randn(2, 3, 4, 8)
    c = compile_program(project(fn).programs[0], torch.device("cpu"))
    (t,) = c.steps[0].kernel(x)
    (u,) = c.steps[1].kernel(x)
    assert t.is_contiguous() and torch.equal(t, x.permute(0, 2, 1, 3))
    assert not u.is_contiguous() and u.data_ptr() == x.data_ptr()
    # a 2-D transpose of unaligned rows (5 floats: 20 bytes) is copied, of aligned ones not
    fn = _program("""func @main(%a: Tensor[Float32, (8, 5), 0], %b: Tensor[Float32, (8, 8), 0]) {
  %t = Transpose(%a)
  %u = Transpose(%b)
  return %t, %u
}""")
    a, b = torch.randn(8, 5), torch.randn(8, 8)
    c = compile_program(project(fn).programs[0], torch.device("cpu"))
    (t,) = c.steps[0].kernel(a)
    (u,) = c.steps[1].kernel(b)
    assert t.is_contiguous() and torch.equal(t, a.T)
    assert u.data_ptr() == b.data_ptr()


def test_free_pages_are_unmapped_only_when_none_of_a_live_block_touches_them() -> None:
    seg = _Segment(LARGE_PAGE, 512)
    a = seg.alloc(30 * MIB)  # pages 0 and 1
    seg.hold(a)
    b = seg.alloc(30 * MIB)  # pages 1 and 2
    seg.hold(b)
    assert seg.mapped_bytes == 60 * MIB == seg.mapped
    seg.drop(a)
    seg.release(a)
    seg.unmap_free()  # page 0 is free; page 1 holds the start of b
    assert seg.pages == {1, 2} and seg.mapped_bytes == 40 * MIB
    c = seg.alloc(10 * MIB)  # best fit: the free block [0, 30), whose page 0 is unmapped
    assert c.addr == 0 and seg.unmapped_bytes(c) == 20 * MIB


_RELEASE = """func @main(%x: Tensor[Float32, (1024, 10240), 0]) {
  %a = Neg(%x)
  %c = Concat(%a, %a, axis=0)
  %d = Concat(%c, %x, axis=0)
  return %d
}"""


def test_a_request_over_the_limit_unmaps_the_free_pages_and_retries() -> None:
    # 40 MiB blocks: x [0, 40), a [40, 80), c [80, 160); a dies, its pages 2 and 3 stay
    # mapped; d (120 MiB) fits no free block and grows the segment to 280 MiB.
    fn = _program(_RELEASE)
    assert replay(fn).reserved_bytes == 280 * MIB
    r = replay(fn, limit=240 * MIB)  # enough once a's two pages are unmapped
    assert not r.out_of_memory and r.reserved_bytes == 240 * MIB
    r = replay(fn, limit=230 * MIB)  # not even then
    assert r.out_of_memory and r.reserved_bytes == 240 * MIB


def test_softmax_grad_holds_a_temporary_after_its_result() -> None:
    fn = _program("""func @main(%y: Tensor[Float32, (1024, 1024), 0],
                                %dy: Tensor[Float32, (1024, 1024), 0]) {
  %g = SoftmaxGrad(%y, %dy, axis=-1)
  %h = Neg(%g)
  return %h
}""")
    trace: list[tuple[int, int]] = []
    r = replay(fn, trace)
    x = 4 * MIB
    assert r.allocated_bytes == 4 * x  # y, dy, g and the product of dy and y
    assert trace[0][0] <= 3 * x  # freed within the op


def test_a_reductions_staging_buffer_is_replayed_where_the_profile_gives_its_sms() -> None:
    """A column sum of 64 x 196 rows of 2,304 floats stages 132.75 MiB while it runs on a
    device of 132 multiprocessors (``memory.reduce_staging_bytes``), freed within the op;
    the replay allocates it where ``sm_count`` is given."""
    from distir.analysis.memory import reduce_staging_bytes

    fn = _program("""func @main(%x: Tensor[Float32, (64, 196, 2304), 0]) {
  %a = Constant(value=dense<Int64>[0, 1], device=0)
  %s = ReduceSum(%x, %a, keepdims=1)
  %t = Neg(%s)
  return %t
}""")
    staged = reduce_staging_bytes((64, 196, 2304), (0, 1), 132)
    assert staged == 139_198_976  # (132.75 MiB, its semaphores 512 bytes more)
    trace: list[tuple[int, int]] = []
    x = 64 * 196 * 2304 * 4
    with_sms = replay(fn, trace, sm_count=132)
    # x, the axes (a 512-byte block), the sum and the buffer; then the buffer freed
    assert with_sms.allocated_bytes == x + 512 + 2304 * 4 + staged
    assert replay(fn).allocated_bytes == x + 2 * 2304 * 4  # (the sum and its negation)
    assert trace[1][0] == x + 2304 * 4  # (after the op: the axes freed, the sum kept)


def _repeat_kv(kv: int) -> str:
    """Keys of ``kv`` heads repeated for 3 query heads each (``repeat_kv``: ``Unsqueeze``,
    ``Expand``, ``Reshape``), then a transpose of the last two axes merged by a reshape."""
    h = 3 * kv
    return f"""func @main(%k: Tensor[Float32, (2, {kv}, 512, 256), 0]) {{
  %a = Constant(value=dense<Int64>[2], device=0)
  %s = Constant(value=dense<Int64>[2, {kv}, 3, 512, 256], device=0)
  %t = Constant(value=dense<Int64>[2, {h}, 512, 256], device=0)
  %f = Constant(value=dense<Int64>[2, {h}, 131072], device=0)
  %r0 = Relu(%k)
  %u = Unsqueeze(%r0, %a)
  %e = Expand(%u, %s)
  %r = Reshape(%e, %t)
  %m = Relu(%r)
  %p = Transpose(%m, perm=[0, 1, 3, 2])
  %q = Reshape(%p, %f)
  %o = ReduceMax(%q, keepdims=0)
  return %o
}}"""


def test_a_reshape_is_a_view_only_where_the_strides_give_one() -> None:
    """As the simulator's liveness finds them: the keys of one head repeated are a view of
    its storage, of two heads a copy (no view merges a broadcast axis with another); the
    reshape merging the last two axes of a transposed view copies. One head (1 MiB): k,
    m (3 MiB, held by its transposed view) and q's copy: 7 MiB (5 with q a view). Two
    heads: k 2 + m 6 + q's copy 6: 14 MiB (10 with both reshapes views). The replay's
    peak is the liveness peak, but for its 512-byte rounding."""
    for kv, mib in ((1, 7), (2, 14)):
        fn = _program(_repeat_kv(kv))
        r = replay(fn)
        assert mib * MIB <= r.allocated_bytes <= mib * MIB + 512 * 8
        assert abs(r.allocated_bytes - distir.simulate(fn).peak_memory_bytes[0]) <= 512 * 8


def test_a_reshape_of_a_stepped_slice_copies() -> None:
    """Every other row and column of a (4, 64, 64, 32) tensor (2 MiB), merged with the
    channels: its rows are 2 x 32 elements apart, so no view merges them and PyTorch
    copies (0.5 MiB); the slice's storage is freed at the reshape. x 2 + big 4 + the
    copy 0.5 + o 0.5: 7 MiB (8.5 with the reshape a view, a held until o)."""
    x = "Tensor[Float32, (4, 64, 64, 32), 0]"
    fn = _program(f"""func @main(%x: {x}) {{
  %a = Relu(%x)
  %s = Constant(value=dense<Int64>[0, 0], device=0)
  %e = Constant(value=dense<Int64>[64, 64], device=0)
  %ax = Constant(value=dense<Int64>[1, 2], device=0)
  %k = Constant(value=dense<Int64>[2, 2], device=0)
  %p = Slice(%a, %s, %e, %ax, %k)
  %t = Constant(value=dense<Int64>[4, 32, 1024], device=0)
  %r = Reshape(%p, %t)
  %big = Concat(%x, %x, axis=0)
  %o = Neg(%r)
  return %o, %big
}}""")
    assert 7 * MIB <= replay(fn).allocated_bytes <= 7 * MIB + 512 * 16
