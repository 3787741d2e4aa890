"""The module trace: what a traced step observes inside the model (torch), every module's
forward input and output and the gradient autograd produces for each output, in execution
order (:class:`ModuleTrace`, an observer of ``sweep.train.observers.base``), from which
``sweep.analysis.modules`` names the first module that differs. It only looks: hooks
return ``None`` (the output and the gradient go through unchanged) and every value is
copied out of live storage
(``sweep.train.torch_tensors.host_copy``), so a run with them gives the same losses bit for
bit as one without (``tests/integration/test_inside_model.py``).

A tensor is kept as a *summary* (:func:`summarize`), not whole: its dtype, shape,
``absmax``/``mean``/``norm`` (float64), a digest of its float32 values (``sweep.train.digests``), and a *sample*: the
tensor as ``(rows, columns)`` (dim 0 kept, the rest flattened), every row and up to
:data:`SAMPLE_COLUMNS` evenly spaced columns (whole when it has no more columns). Rows are
kept because dim 0 is the batch: with sharded data a rank's rows are a slice of the
standalone copy's (``sweep.analysis.modules``); which columns are kept depends on the columns
alone, so a rank's sample and the standalone copy's hold the same elements of each row, however
many rows each has (like for like).
"""

from __future__ import annotations

from typing import Any, ContextManager, Dict, List, Optional

import numpy as np

from sweep.train.digests import of_bytes
from sweep.train.observers.base import Observer, Step

SAMPLE_COLUMNS = 256  # columns kept per row of a wide tensor (evenly spaced, the same in both copies)
ROOT = "(model)"  # the name of the root module in a module trace


def summarize(tensor: Any) -> Dict[str, Any]:
    """A torch tensor's summary (module docstring; :func:`summarize_values`). Any dtype and
    device; a ``DTensor`` gives its local shard."""
    from sweep.train.torch_tensors import host_copy

    return summarize_values(host_copy(tensor), str(getattr(tensor, "dtype", "")).replace("torch.", ""))


def summarize_values(values: np.ndarray, dtype: str) -> Dict[str, Any]:
    """A tensor's summary (module docstring) from its float32 values ``values`` (any shape)
    and its dtype's name: ``{"dtype": str, "shape": [int], "absmax", "mean", "norm": float,
    "digest": hex of the float32 values, "sample": float32 ndarray (rows, k), "columns": total
    columns or None when whole}``."""
    table = values.reshape(values.shape[0], -1) if values.ndim and values.shape[0] else values.reshape(1, -1)
    sample, columns = table, None
    if table.shape[1] > SAMPLE_COLUMNS:  # the columns alone decide: every copy samples the same elements
        columns = int(table.shape[1])
        sample = table[:, np.linspace(0, columns - 1, SAMPLE_COLUMNS).round().astype(np.int64)]
    wide = values.astype(np.float64)
    return {"dtype": dtype, "shape": [int(n) for n in values.shape],
            "absmax": float(np.max(np.abs(wide))) if wide.size else 0.0,
            "mean": float(np.mean(wide)) if wide.size else 0.0, "norm": float(np.linalg.norm(wide.ravel())),
            "digest": of_bytes(np.ascontiguousarray(values).reshape(-1).view(np.uint8)),
            "sample": np.ascontiguousarray(sample, np.float32), "columns": columns}


def _first_tensor(value: Any, floating: bool = True) -> Any:
    """``sweep.train.torch_tensors.first_floating``: the first (floating) tensor in ``value``."""
    from sweep.train.torch_tensors import first_floating

    return first_floating(value, floating)


class ModuleTrace(Observer):
    """Forward and backward hooks on every sub-module of ``model``, by canonical name
    (``sweep.analysis.trace.canonical_name``; the root is :data:`ROOT`; a wrapper and the
    module it wraps share a name: the outer one is watched).

    As an observer of steps 0 to ``until`` (``begin_step``, then per micro-batch the
    ``forward`` span around the model call; by hand: :meth:`begin_recording` and
    :meth:`forward`), ``steps[-1]`` is ``{"forward": [entry], "backward": [entry]}``. A forward entry
    is appended when a module's forward returns (so children before their parent: the
    execution order): ``{"module", "call": its k-th call in this micro-batch, "micro":
    micro-batch index, "input": summary of the first tensor argument or None,
    "output": summary of the first floating tensor it returns}``. A backward entry is
    appended when autograd produces the gradient of such an output (a tensor hook, in
    autograd's order): ``{"module", "call", "micro", "grad": summary}``. A forward that
    runs outside :meth:`forward` (activation checkpointing's recompute in backward) is
    not recorded again. ``after_backward``: where ``tensors`` (the copy's
    ``TorchTensorTrace``) is given, it is told the step's ``"grad"`` order (``order``), the
    parameters in the order autograd produced their modules' output gradients (the first
    tensor by cause, ``sweep.analysis.trace``). :meth:`remove` takes every hook off."""

    def __init__(self, model: Any, until: int = -1, tensors: Any = None) -> None:
        from sweep.analysis.trace import canonical_name

        self.until, self.tensors = int(until), tensors

        self.steps: List[Dict[str, List[Dict[str, Any]]]] = []
        self._micro = -1
        self._calls: Dict[str, int] = {}
        self._recording = False
        self._handles: List[Any] = []
        self.owners: Dict[str, str] = {}  # parameter canonical name -> its module's canonical name
        seen = set()
        for name, module in model.named_modules():
            canon = canonical_name(name) or ROOT
            if canon in seen:
                continue
            seen.add(canon)
            for pname, _ in module.named_parameters(recurse=False):
                self.owners[canonical_name(f"{name}.{pname}" if name else pname)] = canon
            self._handles.append(module.register_forward_hook(self._hook(canon)))

    def _hook(self, name: str) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            if not self._recording:
                return None
            call = self._calls.get(name, 0)
            self._calls[name] = call + 1
            inp, out = _first_tensor(args, floating=False), _first_tensor(output)
            if out is None:
                return None
            entry = {"module": name, "call": call, "micro": self._micro,
                     "input": summarize(inp) if inp is not None else None, "output": summarize(out)}
            self.steps[-1]["forward"].append(entry)
            if out.requires_grad:
                where = self.steps[-1]["backward"]
                micro = self._micro

                def on_grad(grad: Any) -> None:
                    where.append({"module": name, "call": call, "micro": micro, "grad": summarize(grad)})

                out.register_hook(on_grad)
            return None

        import torch

        # compile=true: dynamo would trace into the hook (its numpy and digest calls, a dict it guards on) and
        # recompile at every call until it gives up, leaving the rows of whatever ran unrecorded; run it eagerly
        return torch.compiler.disable(hook)

    def begin_step(self, step: Step) -> None:
        if step.index <= self.until:
            self.begin_recording()

    def span(self, step: Step, name: str) -> Optional[ContextManager[Any]]:
        return self.forward() if name == "forward" and step.index <= self.until else None

    def after_backward(self, step: Step) -> None:
        if step.index <= self.until and self.tensors is not None:
            self.tensors.order("grad", self.parameter_order())

    def begin_recording(self) -> None:
        """Start a new step's record."""
        self.steps.append({"forward": [], "backward": []})
        self._micro = -1

    def forward(self) -> "ModuleTrace":
        """A context for one micro-batch's forward: only forwards inside it are recorded."""
        return self

    def __enter__(self) -> "ModuleTrace":
        self._micro += 1
        self._calls = {}
        self._recording = True
        return self

    def __exit__(self, *exc: Any) -> None:
        self._recording = False

    def grad_order(self) -> List[str]:
        """The modules in the order autograd produced their outputs' gradients in the last
        step (each once)."""
        return list(dict.fromkeys(e["module"] for e in (self.steps[-1]["backward"] if self.steps else [])))

    def parameter_order(self) -> List[str]:
        """The parameters (canonical names) in the order autograd produced the gradients of
        their modules' outputs in the last recorded step, each module's parameters by name;
        parameters of modules whose output had no gradient follow, by name."""
        by_module: Dict[str, List[str]] = {}
        for param, module in self.owners.items():
            by_module.setdefault(module, []).append(param)
        ordered = [p for module in self.grad_order() for p in sorted(by_module.get(module, []))]
        return ordered + sorted(set(self.owners) - set(ordered))

    def remove(self) -> None:
        """Take every hook off."""
        for handle in self._handles:
            handle.remove()
        self._handles = []


def _mindspore_summary(tensor: Any) -> Dict[str, Any]:
    return summarize_values(tensor.asnumpy().astype(np.float32), str(tensor.dtype).lower())


def _mindspore_first(value: Any, floating: bool = True) -> Any:
    """The first (floating) MindSpore tensor in ``value`` (a tensor, or tuples and lists of them)."""
    from mindspore import Tensor

    if isinstance(value, Tensor):
        return value if not floating or "float" in str(value.dtype).lower() else None
    for item in value if isinstance(value, (tuple, list)) else ():
        found = _mindspore_first(item, floating)
        if found is not None:
            return found
    return None


class MindSporeModuleTrace(ModuleTrace):
    """The module trace of a MindSpore net (PYNATIVE mode), in the record shape of
    :class:`ModuleTrace`: a forward hook on every Cell (``Cell.register_forward_hook``: its
    first tensor argument and its first floating output) and a backward pre-hook
    (``Cell.register_backward_pre_hook``: the gradient of its output, in autograd's order).
    Hooks return ``None``: outputs and gradients go through unchanged. A Cell called several
    times in a micro-batch gets its backward calls numbered from its last forward call back."""

    def __init__(self, net: Any, until: int = -1, tensors: Any = None) -> None:  # noqa: D107
        self.until, self.tensors = int(until), tensors
        self.steps = []
        self._micro = -1
        self._calls: Dict[str, int] = {}
        self._back: Dict[str, int] = {}
        self._recording = self._live = False
        self._handles = []
        self.owners = {}
        from sweep.analysis.trace import canonical_name

        seen = set()
        for name, cell in net.cells_and_names():  # a wrapper and the cell it wraps share a name: the outer one
            canon = canonical_name(name) or ROOT
            if canon in seen:
                continue
            seen.add(canon)
            for pname, _ in cell.parameters_and_names(expand=False):
                full = pname if not name or pname.startswith(name + ".") else f"{name}.{pname}"
                self.owners[canonical_name(full)] = canon
            self._handles.append(cell.register_forward_hook(self._ms_forward(canon)))
            self._handles.append(cell.register_backward_pre_hook(self._ms_backward(canon)))

    def _ms_forward(self, name: str) -> Any:
        def hook(cell: Any, args: Any, output: Any) -> None:
            if not self._recording:
                return None
            out = _mindspore_first(output)
            if out is None:
                return None
            call = self._calls.get(name, 0)
            self._calls[name] = call + 1
            inp = _mindspore_first(args, floating=False)
            self.steps[-1]["forward"].append({"module": name, "call": call, "micro": self._micro,
                                              "input": _mindspore_summary(inp) if inp is not None else None,
                                              "output": _mindspore_summary(out)})
            return None

        return hook

    def _ms_backward(self, name: str) -> Any:
        def hook(cell: Any, grad_output: Any) -> None:
            if not self._live or name not in self._calls:
                return None
            grad = _mindspore_first(grad_output)
            if grad is None:
                return None
            done = self._back.get(name, 0)
            self._back[name] = done + 1
            self.steps[-1]["backward"].append({"module": name, "call": max(self._calls[name] - 1 - done, 0),
                                               "micro": self._micro, "grad": _mindspore_summary(grad)})
            return None

        return hook

    def begin_step(self, step: Step) -> None:
        self._live = step.index <= self.until  # backward hooks fire after the forward span: record this step's only
        super().begin_step(step)

    def __enter__(self) -> "ModuleTrace":
        self._back = {}
        return super().__enter__()
