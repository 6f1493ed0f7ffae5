"""Local workers are fresh interpreters: ``distir.run`` works from a plain script (the
README's Python block, run as ``python file.py``), ``python -c`` and standard input, with no
``if __name__ == "__main__":`` guard; programs reach the workers as DistIR text, which must
carry everything the lowering reads."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

import distir
from distir.analysis.projection import Projection, project
from distir.ir.core import Function

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ALLREDUCE = """
func @main(%x: Tensor[Float32, (4,), 0], %y: Tensor[Float32, (4,), 1]) {
  %a, %b = MPIAllreduce(%x, %y)
  return %a, %b
}
"""


def python(args: list[str], cwd: str, *, stdin: str | None = None, timeout: float = 300,
           ) -> subprocess.CompletedProcess[str]:
    """Run this interpreter as a user would, with this checkout's ``distir`` importable."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                else "")
    return subprocess.run([sys.executable, *args], cwd=cwd, input=stdin, capture_output=True,
                          text=True, timeout=timeout, env=env)


def readme_python_block() -> str:
    """The first ```python block under the README's '## Python' heading, unchanged."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    start = text.index("\n## Python\n")
    end = text.find("\n## ", start + 1)
    m = re.search(r"```python\n(.*?)```", text[start:end if end >= 0 else None], re.S)
    assert m is not None, "README.md has no ```python block under '## Python'"
    return m.group(1)


# ---- whole programs, started the ways users start them ---------------------------------


def test_readme_python_block_runs_as_a_script(tmp_path: object) -> None:
    # The block reads examples/mlp_step.dir and writes trace.json, relative to its working
    # directory: it runs unchanged in a temporary directory holding a copy of examples/.
    work = str(tmp_path)
    shutil.copytree(os.path.join(ROOT, "examples"), os.path.join(work, "examples"))
    script = os.path.join(work, "readme_block.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(readme_python_block())
    r = python([script], work)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and "BackendError" not in r.stderr, r.stderr[-3000:]
    # Printed once, not once per worker: a latency and a peak per device, then the text
    # of the distributed program (a second copy would define its functions twice).
    first, rest = r.stdout.split("\n", 1)
    latency, peaks = first.split(" ", 1)
    assert float(latency) > 0 and peaks.startswith("{0: ")
    assert r.stdout.count(peaks) == 1
    prog = distir.parse(rest)
    assert len(prog.entry.ops) > 0
    assert os.path.getsize(os.path.join(work, "trace.json")) > 0


def test_python_c_and_standard_input(tmp_path: object) -> None:
    code = (
        "import numpy as np, distir\n"
        f"fn = distir.parse({ALLREDUCE!r}).entry\n"
        "x, y = np.arange(4, dtype=np.float32), np.full(4, 10, np.float32)\n"
        "r = distir.run(fn, [x, y], backend='gloo', steps=1, warmup=0)\n"
        "print('sums', *r.outputs[0].tolist(), *r.outputs[1].tolist())\n"
    )
    want = "sums 10.0 11.0 12.0 13.0 10.0 11.0 12.0 13.0"
    for args, stdin in ((["-c", code], None), (["-"], code)):
        r = python(args, str(tmp_path), stdin=stdin)
        assert r.returncode == 0, r.stderr[-3000:]
        assert r.stdout.splitlines() == [want], r.stdout
        assert "Traceback" not in r.stderr, r.stderr[-3000:]


KILLED = r"""
import time
import distir
from distir.backend import Session

s = Session(2, "gloo", timeout_s=60)
s.start()
print(" ".join(map(str, s.pids)), s.session_dir, flush=True)
time.sleep(600)
"""


def test_workers_exit_when_the_launcher_is_killed(tmp_path: object) -> None:
    from tests.backend.test_failures import all_gone

    script = os.path.join(str(tmp_path), "killed.py")
    with open(script, "w", encoding="utf-8") as f:
        f.write(KILLED)
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, script], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=str(tmp_path))
    try:
        *words, session_dir = proc.stdout.readline().split()  # type: ignore[union-attr]
        pids = [int(p) for p in words]
        assert len(pids) == 2 and os.path.isdir(session_dir)
        proc.send_signal(signal.SIGKILL)  # no chance to stop its workers itself
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert all_gone(pids, within=15.0)
    assert not os.path.exists(session_dir)  # the workers removed what the launcher left


def test_a_worker_cannot_be_started_by_hand() -> None:
    r = subprocess.run([sys.executable, "-m", "distir.backend.worker_process"],
                       capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2 and "started by distir.backend.Session" in r.stderr
    assert "Traceback" not in r.stderr


def test_programs_travel_pickled_where_lark_is_missing(tmp_path: object,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Text where the workers can parse it; pickled IR where their Python has no ``lark``
    (a ``lark`` that fails to import comes first on their path here)."""
    from distir.analysis import execute, random_inputs
    from distir.backend import Session

    fn = distir.load(os.path.join(ROOT, "examples", "mlp_step_pp2.dir")).entry
    ins = random_inputs(fn, seed=2)
    want = execute(fn, ins)
    fake = os.path.join(str(tmp_path), "nolark")
    os.makedirs(os.path.join(fake, "lark"))
    with open(os.path.join(fake, "lark", "__init__.py"), "w") as f:
        f.write("raise ImportError('lark is not installed here')\n")
    for path, fmt in ((None, "text"), (fake, "pickle")):
        if path is not None:
            monkeypatch.setenv("PYTHONPATH", path)
        with Session(2, "gloo", timeout_s=60) as s:
            res = s.run(fn, ins, steps=1, warmup=0)
            assert s.program_format == fmt
        for g, w in zip(res.outputs, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)


# ---- what travels: per-rank programs as text -------------------------------------------


def same_program(a: Function, b: Function) -> None:
    """``b`` is ``a`` up to value names: types, devices, attributes (dense ones too), the
    dataflow and the results-free and discarded results."""
    assert a.name == b.name
    index: dict[int, int] = {}
    for i, (p, q) in enumerate(zip(a.params, b.params, strict=True)):
        assert p.type == q.type
        index[id(p)] = index[id(q)] = i
    n = len(a.params)
    for oa, ob in zip(a.ops, b.ops, strict=True):
        assert oa.op_type == ob.op_type
        assert set(oa.attrs) == set(ob.attrs)
        for k, v in oa.attrs.items():
            w = ob.attrs[k]
            if hasattr(v, "array"):
                np.testing.assert_array_equal(v.array, w.array)
                assert v.array.dtype == w.array.dtype
            else:
                assert v == w and type(v) is type(w), (oa.op_type, k, v, w)
        assert [index.get(id(v), -1) if v is not None else None for v in oa.inputs] == \
            [index.get(id(v), -2) if v is not None else None for v in ob.inputs]
        for va, vb in zip(oa.outputs, ob.outputs, strict=True):
            assert va.type == vb.type and (va.name == "_") == (vb.name == "_")
            index[id(va)] = index[id(vb)] = n
            n += 1
    assert [index[id(v)] for v in a.returns] == [index[id(v)] for v in b.returns]


def projections() -> list[tuple[str, Projection]]:
    from tests.backend.test_run import PERMUTED

    out = [(name, project(distir.load(os.path.join(ROOT, "examples", name)).entry))
           for name in ("mlp_step.dir", "mlp_step_dp2.dir", "mlp_step_pp2.dir",
                        "gpt2_reshape.dir")]
    out.append(("every collective", project(distir.parse(PERMUTED).entry)))
    try:
        from distir.models import gpt2
        from distir.transforms import dtp
    except ImportError:
        return out
    g = gpt2(n_layer=1, d_model=16, n_head=2, vocab_size=32, seq_len=8, batch_size=4)
    g = g.entry if isinstance(g, distir.Module) else g
    out.append(("gpt2 D2T2", project(dtp(g, dp=2, tp=2, pp=1, microbatches=1))))
    out.append(("gpt2 P2K2", project(dtp(g, dp=1, tp=1, pp=2, microbatches=2))))
    return out


def test_rank_programs_travel_as_text_intact() -> None:
    from distir.backend.launch import make_tasks
    from distir.backend.wire import task_from_message, task_message

    seen = {"no results": False, "typed discard": False, "dense": False}
    for name, proj in projections():
        ins = [np.zeros(t.shape, t.dtype.np) for t in proj.param_types]  # type: ignore[attr-defined]
        for task in make_tasks(proj, ins, steps=2, warmup=1, want_outputs=True,
                               memory_limit=1 << 20, seed=3, profile="/tmp/p",
                               profile_marks=False, cuda_graph=True):
            msg = task_message(task)
            assert isinstance(msg[1], str)  # the program is text
            back = task_from_message(msg)
            same_program(task.program.fn, back.program.fn)
            assert back.program.device == task.program.device
            assert back.program.param_index == task.program.param_index
            assert back.program.return_index == task.program.return_index
            assert (back.name, back.groups, back.steps, back.warmup, back.want_outputs,
                    back.memory_limit, back.seed, back.profile, back.profile_marks,
                    back.cuda_graph) == (task.name, task.groups, 2, 1, True, 1 << 20, 3,
                                         "/tmp/p", False, True), name
            assert len(back.inputs or ()) == len(task.program.fn.params)
            for op in task.program.fn.ops:
                seen["no results"] |= not op.outputs
                seen["typed discard"] |= any(v.name == "_" and v.type is not None
                                             for v in op.outputs)
                seen["dense"] |= any(hasattr(v, "array") for v in op.attrs.values())
    assert all(seen.values()), seen  # the cases that the text had to learn to carry


def test_inputs_of_one_value_travel_as_that_value() -> None:
    """A large input of one repeated value (an optimizer's zero moments, a norm's ones)
    travels as the value and is made on the device; others, and small ones, travel whole;
    neither is compiled in as a known operand."""
    import torch

    from distir.backend.lowering import known_inputs
    from distir.backend.wire import FILL_MIN_ELEMENTS, task_from_message, task_message
    from distir.backend.worker import Filled, RankTask, to_torch

    proj = dict(projections())
    name, p = next(iter(proj.items()))
    prog = p.programs[0]
    n = FILL_MIN_ELEMENTS
    ins = [np.zeros((n,), np.float32), np.full((2, n), 3, np.int64),
           np.arange(n, dtype=np.float32), np.ones((4,), np.float32),
           np.full((n,), np.nan, np.float32)]
    task = RankTask(name, prog, p.groups, ins, 1, 0, False, None, 0)
    for text in (True, False):
        back = task_from_message(task_message(task, text=text))
        got = back.inputs
        assert got is not None and [type(a).__name__ for a in got] == \
            ["Filled", "Filled", "ndarray", "ndarray", "ndarray"]
        for a, b in zip(ins, got, strict=True):
            t = to_torch(b, torch.device("cpu"))
            assert t.dtype == torch.from_numpy(a).dtype and t.is_contiguous()
            np.testing.assert_array_equal(t.numpy(), a)
        assert not any(isinstance(got[i], Filled) for i in known_inputs(got))


def test_results_free_and_typed_discards_print_and_parse() -> None:
    proj = project(distir.load(os.path.join(ROOT, "examples", "mlp_step_pp2.dir")).entry)
    text = distir.dumps(proj.programs[0].fn)
    assert re.search(r"^  \(\) = Send\(%w3, ", text, re.M)
    assert re.search(r"^  _: Tensor\[Float32, \(4, 24\), 0\], %dw1", text, re.M)
    from distir.ir.parser import parse_module

    assert distir.dumps(parse_module(text)) == text
    # In a user's program a statement without results is still an error, with a place.
    bad = "func @f(%x: Tensor[Float32, (4,), 0]) {\n  () = Relu(%x)\n  return %x\n}\n"
    with pytest.raises(distir.DistIRError, match=r":2:8: error: Relu here gives 1 result, 0"):
        distir.parse(bad)

