"""Reading DistIR text: ``parse`` (from a string) and ``load`` (from a file)."""

from __future__ import annotations

import os

from distir.errors import ConfigError
from distir.ir.core import Module
from distir.ir.parser import parse_module
from distir.ir.types import TensorType
from distir.ir.verify import verify

__all__ = ["parse", "load", "weights_path", "write_weights"]


def parse(text: str, filename: str = "<string>") -> Module:
    """Parse and verify ``text``; raises ``DistIRError`` with ``file:line:col``."""
    m = parse_module(text, filename)
    verify(m)
    return m


def weights_path(path: str | os.PathLike[str]) -> str:
    """Where the values of a module's large parameters live: ``X.npz`` beside ``X.dir``."""
    base, _ = os.path.splitext(os.fspath(path))
    return base + ".npz"


def write_weights(path: str | os.PathLike[str], arrays: dict[str, object]) -> None:
    """Write ``arrays`` to ``path`` as an uncompressed ``.npz`` that ``load`` reads back (any
    string may be a key: ``np.savez`` would take keys such as ``file`` as its own
    arguments). Written to a temporary file first, so a failure leaves no half file."""
    import zipfile

    import numpy as np

    p = os.fspath(path)
    tmp = p + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as z:
        for name, arr in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asarray(arr), allow_pickle=False)
    os.replace(tmp, p)


def load(path: str | os.PathLike[str]) -> Module:
    """Parse and verify a ``.dir`` file; picks up ``X.npz`` beside ``X.dir`` as the values of
    parameters named in it (imported weights)."""
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{p}: is a directory, not a .dir file") from None
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: not a text file (byte {e.start} is not UTF-8)") from None
    m = parse(text, p)
    wp = weights_path(p)
    if os.path.exists(wp):
        import numpy as np

        with np.load(wp, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
        # .npy has no bfloat16: such arrays come back as raw 2-byte voids, which the
        # parameter's declared type reads back.
        for p_ in m.entry.params:
            a = arrays.get(p_.name or "")
            t = p_.type
            if a is not None and a.dtype.kind == "V" and isinstance(t, TensorType) \
                    and t.dtype.np.itemsize == a.dtype.itemsize:
                arrays[p_.name or ""] = a.view(t.dtype.np)
        m.initializers = arrays
    return m
