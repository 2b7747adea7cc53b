"""A second "device" on a CPU-only machine, for testing code that must keep every tensor on the
device of the layer it meets (a model spread over GPUs with ``device_map="auto"``).

Inside ``with TwoDevices():`` a tensor may carry a device label (``cuda:0``, ``cuda:1``) while its
values stay real and are computed on the CPU. Every torch call is checked the way CUDA checks
devices: one that mixes tensors of two labels (a plain tensor counts as ``cpu``) raises "Expected
all tensors to be on the same device"; ``.device`` reports the label; ``.to(device)``, ``.cpu()``
and factories such as ``torch.zeros(..., device="cuda:1")`` give labelled tensors. So code
written against real devices runs unchanged and fails where it would fail on two GPUs. It is a
little stricter than CUDA, never looser: indexing a GPU tensor with a CPU index tensor, which CUDA
allows, counts as a mix too.

``place_on(module, device)`` labels a module's parameters and buffers and moves its inputs to
that device on every call, as accelerate's dispatch hooks do for each block of a model loaded
with ``device_map="auto"``.

What it cannot show: CUDA itself (kernels, bf16 numerics, streams, memory) or accelerate's own
hooks; ``benchmarks/gpu_check.py`` runs those on a real GPU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_map

CPU = torch.device("cpu")


class Placed(torch.Tensor):
    """A CPU tensor labelled with the device it stands for (meaningful inside ``TwoDevices``)."""

    place: torch.device
    __torch_function__ = torch._C._disabled_torch_function_impl


def label(tensor: torch.Tensor, place: str | torch.device) -> torch.Tensor:
    place = torch.device(place)
    plain = tensor.as_subclass(torch.Tensor) if isinstance(tensor, Placed) else tensor
    if place.type == "cpu":
        return plain
    out = plain.as_subclass(Placed)
    out.place = place
    return out


def place_of(tensor: torch.Tensor) -> torch.device:
    return tensor.place if isinstance(tensor, Placed) else CPU


def _plain(value: Any) -> Any:
    return value.as_subclass(torch.Tensor) if isinstance(value, Placed) else value


def _device_arg(value: Any) -> torch.device | None:
    if isinstance(value, (str, torch.device)):
        try:
            return torch.device(value)
        except RuntimeError:  # a string that is not a device (e.g. a memory format name)
            return None
    return None


class TwoDevices(TorchFunctionMode):
    """Device labels checked on every torch call (see the module docstring)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if getattr(func, "__self__", None) is torch.Tensor.device:  # the .device property
            return place_of(args[0])
        if func in (torch.Tensor.to, torch.Tensor.cpu, torch.Tensor.cuda):
            return self._move(func, args[0], args[1:], kwargs)
        flat, _ = tree_flatten((args, kwargs))
        # A 0-dim CPU tensor may meet a GPU tensor (CUDA allows it, as a scalar); nothing else may.
        places = {place_of(t) for t in flat if isinstance(t, torch.Tensor) and (isinstance(t, Placed) or t.dim() > 0)}
        target = _device_arg(kwargs.get("device"))
        if target is not None:  # a factory (torch.zeros(..., device=...)), or an op with an out device
            places = {target}
            kwargs = {**kwargs, "device": CPU}
        if len(places) > 1:
            raise RuntimeError(
                f"{getattr(func, '__name__', func)}: Expected all tensors to be on the same device, "
                f"but found at least two devices, {', '.join(sorted(map(str, places)))}!"
            )
        out = func(*tree_map(_plain, args), **tree_map(_plain, kwargs))
        (place,) = places or {CPU}
        return tree_map(lambda t: label(t, place) if isinstance(t, torch.Tensor) else t, out)

    @staticmethod
    def _move(func: Any, tensor: torch.Tensor, rest: tuple, kwargs: dict) -> torch.Tensor:
        """``.to(...)``, ``.cpu()``, ``.cuda()``: the dtype part done for real, the device relabelled."""
        target = {torch.Tensor.cpu: CPU, torch.Tensor.cuda: torch.device("cuda", 0)}.get(func, place_of(tensor))
        for arg in (*rest, kwargs.get("device")):
            if _device_arg(arg) is not None:
                target = _device_arg(arg)
            elif isinstance(arg, torch.Tensor):  # .to(other): other's device and dtype
                target = place_of(arg)
        rest = tuple(_plain(a) for a in rest if _device_arg(a) is None)
        kwargs = {k: v for k, v in kwargs.items() if k != "device"}
        plain = _plain(tensor)
        moved = plain.to(*rest, **kwargs) if func is torch.Tensor.to and (rest or kwargs) else plain
        if moved is plain and target != place_of(tensor):
            moved = plain.clone()  # a real move copies
        return label(moved, target)


def place_on(module: torch.nn.Module, place: str | torch.device) -> torch.nn.Module:
    """Label ``module``'s parameters and buffers with ``place`` and move its inputs there on every call."""
    place = torch.device(place)
    for sub in module.modules():
        for name, param in list(sub._parameters.items()):
            if param is not None:
                sub._parameters[name] = label(param.detach(), place)
        for name, buf in list(sub._buffers.items()):
            if buf is not None:
                sub._buffers[name] = label(buf, place)

    def move_inputs(_module: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        def move(value: Any) -> Any:
            return value.to(place) if isinstance(value, torch.Tensor) else value

        return tree_map(move, args), tree_map(move, kwargs)

    module.register_forward_pre_hook(move_inputs, with_kwargs=True)
    return module
