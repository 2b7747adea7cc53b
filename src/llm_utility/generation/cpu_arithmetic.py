"""The arithmetic a transformers model runs in on a CPU, chosen from the CPU's flags, and the linear
layers that make them: int8 (``Int8RowLinear``) and bfloat16 with weights packed once
(``PackedBfloat16Linear``); a decoding step's products in fixed blocks of rows (``StepRows``), a
float32 output layer's slice by slice of its vocabulary (``VocabularySlices``).

What multiplies fastest depends on the CPU (docs/performance.md, "The CPU engine"): with AMX,
bfloat16 tiles; on AVX-512 with VNNI and on AVX2 alone, int8 through fbgemm (on AVX2, bfloat16 is
5x *slower* than float32). ``resolve_dtype`` turns ``llms.<name>.dtype`` into one of them,
deterministically: the same machine always runs the same arithmetic, so it gives the same numbers,
and the arithmetic is part of every generation-store key.

``Int8RowLinear`` is int8 that keeps a call's output independent of its batch. PyTorch's dynamic
quantization takes one activation scale for the whole input tensor, so a row's result depends on
which other rows (prompts, padding) share it. Here each row is scaled by its own largest magnitude
first and quantized on one fixed grid over [-1, 1], so each row is quantized on its own, the integer
products are exact, and every row's output is bitwise the same alone or in any batch.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import time
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

# The arithmetics a transformers model runs in, by their names in llms.<name>.dtype.
DTYPES = ("float32", "bfloat16", "float16", "int8")
log = logging.getLogger(__name__)

# Bump when Int8RowLinear's or ShortlistHead's numerics change: it is part of the store key of every int8 call.
INT8_RECIPE = "int8-row-act-channel-weight-fbgemm-16-outliers-float32-head-int8-shortlist-float64-argmax-v4"


# The flags that decide the arithmetic, by our names, and as torch.cpu.get_capabilities names them
# (cpuinfo's: avx512_f, fma3).
TORCH_FLAG_NAMES = {
    "amx_bf16": "amx_bf16",
    "amx_int8": "amx_int8",
    "avx512_bf16": "avx512_bf16",
    "avx512_vnni": "avx512_vnni",
    "avx512f": "avx512_f",
    "avx2": "avx2",
    "fma": "fma3",
}


def cpu_flags() -> dict[str, bool]:
    """The CPU capabilities that decide the arithmetic: the CPU's own (``torch.cpu.get_capabilities``,
    torch >= 2.8; older releases report none, so float32 is chosen), less what torch's kernels were
    told not to use. ``ATEN_CPU_CAPABILITY=avx2`` caps ATen's kernels at AVX2, and
    ``ONEDNN_MAX_CPU_ISA=AVX2`` takes bfloat16 (and AMX) away from oneDNN: the arithmetic follows
    the kernels that will run, and with ``FBGEMM_ENABLE_INSTRUCTIONS=AVX2`` and
    ``MKL_ENABLE_INSTRUCTIONS=AVX2`` too, an AVX-512 machine runs what an AVX2-only one runs
    (``benchmarks/cpu_engine.py --emulate avx2``)."""
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    found = capabilities() if capabilities is not None else {}
    flags = {name: bool(found.get(torch_name)) for name, torch_name in TORCH_FLAG_NAMES.items()}
    aten = torch.backends.cpu.get_cpu_capability()  # "AVX512", "AVX2", "DEFAULT", ... (capped by the env)
    if aten in ("AVX2", "DEFAULT", "NO AVX"):
        flags.update({name: False for name in flags if name.startswith(("avx512", "amx"))})
    if aten in ("DEFAULT", "NO AVX"):
        flags["avx2"] = False
    if not bfloat16_packing_supported():  # oneDNN has no bfloat16 here, or was capped below it
        flags["amx_bf16"] = flags["avx512_bf16"] = False
    onednn_cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if onednn_cap != "ALL" and "AMX" not in onednn_cap:  # e.g. AVX512_CORE_BF16: AVX-512 BF16, no AMX
        flags["amx_bf16"] = flags["amx_int8"] = False
    return flags


def has_fbgemm() -> bool:
    """Whether this torch build has fbgemm, the x86 int8 kernels."""
    return "fbgemm" in torch.backends.quantized.supported_engines


def int8_supported() -> bool:
    """Whether this CPU runs fbgemm's int8 kernels (x86 with AVX2 or better)."""
    flags = cpu_flags()
    return has_fbgemm() and (flags["avx2"] or flags["avx512f"])


def native_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AMX or AVX-512 BF16, through oneDNN's packed
    weights); elsewhere bfloat16 is emulated, slower than float32."""
    flags = cpu_flags()
    return flags["amx_bf16"] or flags["avx512_bf16"]


def resolve_dtype(requested: str | None, cuda: bool) -> str:
    """The arithmetic a transformers model runs in.

    - an explicit ``float32``, ``bfloat16``, ``float16`` or ``int8``: that one (int8 only on a CPU
      with fbgemm);
    - ``null``: float32 on a CPU, bfloat16 on CUDA (the conservative default);
    - ``auto``: bfloat16 on CUDA; on a CPU, the fastest arithmetic that meets the fidelity floor,
      i.e. is at least as close to float32 as plain bfloat16, the GPU's arithmetic
      (docs/performance.md, "The fidelity floor"): bfloat16 where the CPU multiplies it natively,
      float32 elsewhere. int8 is faster on AVX2 and on AVX-512 without AMX, but below the floor: on
      real demo prompts it changes about twice as many greedy answers as bfloat16, so ``auto``
      never picks it; a config may still ask for it.
    """
    if requested == "int8":
        if cuda:
            raise ValueError("dtype int8 is a CPU arithmetic (fbgemm); on a GPU use bfloat16 or auto")
        if not int8_supported():
            raise ValueError("dtype int8 needs an x86 CPU with AVX2 (fbgemm); use float32 or auto here")
        return "int8"
    if requested not in (None, "auto"):
        if requested not in DTYPES:
            raise ValueError(f"unknown dtype {requested!r}; expected one of {DTYPES}, auto or null")
        return requested
    if cuda:
        return "bfloat16"
    if requested == "auto" and native_bfloat16():
        return "bfloat16"
    return "float32"


def torch_dtype(dtype: str) -> torch.dtype:
    """The dtype the weights are loaded in: int8 models load in float32 and are converted after."""
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int8": torch.float32}[
        dtype
    ]


# Input channels per linear layer kept in float32: the ones with the largest activations on the
# calibration text. Small LLMs have a few channels whose activations are tens of times the others';
# scaled per row together with them, the rest would keep only a few of their 7 bits (LLM.int8()'s
# observation). With 16 such channels per layer the next-token distributions of the demo models
# moved 5-7x less from float32's (mean KL on real demo prompts; docs/performance.md).
OUTLIER_CHANNELS = 16
# A fixed text to find those channels on: they are systematic (the same whatever the input), and a
# fixed text keeps the choice, and so every output, deterministic.
CALIBRATION_TEXT = (
    "The Republic of Chile is a country in the western part of South America. Its capital and largest "
    "city is Santiago, and its official language is Spanish. Question: What is the currency of Japan? "
    "Answer: The yen. The mountain range that runs along the border is the Andes, and the Atacama Desert "
    "in the north is one of the driest places on Earth. Population: 19 million people (2020 census). "
    "Calling code +56, internet domain .cl."
)


# fbgemm's activation grid of Int8RowLinear: codes around zero point 64, one per 2/127, so that a
# row scaled into [-1, 1] takes codes 0..128. A code times an int8 weight, two of them summed,
# stays below AVX2's 16-bit pair sums' limit (2 x 128 x 127 < 32767).
_ROW_GRID_SCALE, _ROW_GRID_ZERO = 2.0 / 127, 64


class Int8RowLinear(nn.Module):
    """``nn.Linear`` in int8 (weights per output channel, activations per row, through fbgemm), with
    a few outlier input channels in float32.

    Each input row x, its outlier channels zeroed, is divided by m, its largest magnitude, into
    [-1, 1]; fbgemm quantizes it on one fixed grid (``_ROW_GRID_SCALE``), multiplies in integers
    and dequantizes, and the result is multiplied back by m. The outlier channels' weights are zero
    in the int8 matrix and multiply the unscaled values in float32.
    """

    def __init__(self, linear: nn.Linear, outliers: torch.Tensor | None = None) -> None:
        super().__init__()
        weight = linear.weight.detach().to(torch.float32)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        outliers = torch.zeros(0, dtype=torch.long) if outliers is None else outliers.to(torch.long).sort().values
        self.register_buffer("_outliers", outliers, persistent=False)
        self.register_buffer("_outlier_weight", weight[:, outliers].t().contiguous(), persistent=False)
        inliers = torch.ones(self.in_features)
        inliers[outliers] = 0.0
        self.register_buffer("_inliers", inliers, persistent=False)
        weight = weight * inliers
        scales = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12)
        integers = torch.round(weight / scales[:, None]).clamp_(-127, 127).to(torch.int8)
        zeros = torch.zeros(self.out_features, dtype=torch.int64)
        with warnings.catch_warnings():
            # torch 2.13 marks its quantized tensor types deprecated (pytorch issue 184982, in favour
            # of torchao); fbgemm's packed linear is still what runs int8 fastest here. torch is
            # pinned (constraints-cpu.txt), so this stays until a pin moves.
            warnings.filterwarnings("ignore", message=".*quantized.*", category=UserWarning)
            qweight = torch._make_per_channel_quantized_tensor(integers, scales.to(torch.float64), zeros, 0)
        self._packed = torch.ops.quantized.linear_prepack(qweight, None)
        bias = None if linear.bias is None else linear.bias.detach().to(torch.float32).clone()
        self.register_buffer("bias", bias, persistent=False)

    def forward(self, x: torch.Tensor, outlier_rows: int | None = None, whole_blocks: bool = False) -> torch.Tensor:
        """``x``'s product; ``outlier_rows``: the float32 product of the outlier channels in blocks
        of that many rows (``StepRows``), the int8 one of every row at once; ``whole_blocks``: the
        last block too is exactly ``outlier_rows`` rows, zero-padded (a decoding step's)."""
        shape = x.shape
        rows = x.reshape(-1, self.in_features).to(torch.float32)
        has_outliers = self._outliers.numel() > 0
        inliers = rows * self._inliers if has_outliers else rows
        magnitude = inliers.abs().amax(dim=1, keepdim=True).clamp_(min=torch.finfo(torch.float32).tiny)
        # |x| <= m, so x / m is in [-1, 1], rounded or not: no clamp needed.
        scaled = inliers.div_(magnitude) if has_outliers else inliers / magnitude
        out = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32(
            scaled, _ROW_GRID_SCALE, _ROW_GRID_ZERO, self._packed
        ).mul_(magnitude)
        if has_outliers:
            values = rows.index_select(1, self._outliers)
            if outlier_rows is None:
                out.addmm_(values, self._outlier_weight)
            else:
                n = rows.shape[0]
                padding = -n % outlier_rows if whole_blocks else 0
                if padding:  # the padding's rows of the int8 product are zeros, as a zero row's is
                    out = torch.cat([out, out.new_zeros(padding, self.out_features)])
                    values = torch.cat([values, values.new_zeros(padding, values.shape[1])])
                # The whole blocks in one batched product (each block its own 16-row product, bitwise
                # the same as alone; 25-45% less time than a product per block), a last partial one alone.
                total = n + padding
                whole = total - total % outlier_rows
                if whole:
                    blocks = whole // outlier_rows
                    out[:whole].view(blocks, outlier_rows, -1).baddbmm_(
                        values[:whole].view(blocks, outlier_rows, -1),
                        self._outlier_weight.expand(blocks, -1, -1),
                    )
                if whole < n:
                    out[whole:].addmm_(values[whole:], self._outlier_weight)
                out = out[:n]
        if self.bias is not None:
            out.add_(self.bias)
        return out.reshape(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, int8 rows x int8 channels, "
            f"{self._outliers.numel()} float32 outlier channels"
        )


@torch.inference_mode()
def outlier_channels(
    model: nn.Module, calibration_ids: list[int], k: int = OUTLIER_CHANNELS
) -> dict[str, torch.Tensor]:
    """Per ``nn.Linear`` inside the layers (by module name; not the output layer, which stays
    float32), the ``k`` input channels with the largest magnitude over one float32 forward pass of
    ``calibration_ids``. The pass keeps the logits of the last position only."""
    peaks: dict[str, torch.Tensor] = {}
    hooks = []
    head = model.get_output_embeddings()

    def record(name: str, x: torch.Tensor) -> None:
        x = x.detach().reshape(-1, x.shape[-1]).abs().amax(dim=0).float()
        peaks[name] = torch.maximum(peaks[name], x) if name in peaks else x

    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module is not head:
            hooks.append(module.register_forward_hook(lambda m, inputs, out, name=name: record(name, inputs[0])))
    try:
        device = model.get_input_embeddings().weight.device
        model(input_ids=torch.tensor([calibration_ids], device=device), use_cache=False, logits_to_keep=1)
    finally:
        for hook in hooks:
            hook.remove()
    return {name: peak.topk(min(k, peak.numel())).indices.cpu() for name, peak in peaks.items()}


# Layers of a transformers decoder layer that read the same input: multiplied as one int8 product.
SHARED_INPUT_LAYERS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))


class SharedInputLinears(nn.Module):
    """Linear layers that read the same input (a layer's q, k and v projections; its gate and up
    projections) as one ``Int8RowLinear`` over their weights' rows side by side, so the input is
    scaled and quantized once and multiplied in one product.

    Each layer's output is bitwise the one it has alone: the input's codes are the same (the
    layers' outlier channels are, since they are found on this same input), the integer sums are
    exact, and each output channel is dequantized with its own weight scale. transformers calls the
    layers one after the other on the same tensor; the first computes the product, the others take
    their columns of it (``SharedInputPart``).
    """

    def __init__(self, linear: Int8RowLinear, widths: list[int]) -> None:
        super().__init__()
        self.linear = linear  # fix_step_rows wraps it in StepRows, as any int8 layer
        ends = list(itertools.accumulate(widths))
        self.columns = [(end - width, end) for width, end in zip(widths, ends, strict=True)]
        self._memo: tuple[torch.Tensor, torch.Tensor, set[int]] | None = None

    def output(self, x: torch.Tensor, part: int) -> torch.Tensor:
        memo = self._memo
        if memo is None or memo[0] is not x or part not in memo[2]:
            memo = (x, self.linear(x), set(range(len(self.columns))))
        _, out, left = memo
        left.discard(part)
        self._memo = memo if left else None  # dropped once every layer has its columns
        start, end = self.columns[part]
        return out[..., start:end].contiguous()


class SharedInputPart(nn.Module):
    """One layer of a ``SharedInputLinears``: its output columns of the shared product."""

    def __init__(self, shared: SharedInputLinears, part: int) -> None:
        super().__init__()
        self._shared = (shared,)  # a tuple: not a submodule of its own, the parent holds it once
        self.part = part
        self.in_features = shared.linear.in_features
        start, end = shared.columns[part]
        self.out_features = end - start

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._shared[0].output(x, self.part)

    def extra_repr(self) -> str:
        start, end = self._shared[0].columns[self.part]
        return f"in_features={self.in_features}, columns {start}:{end} of a shared int8 product"


def _share_input(module: nn.Module, names: tuple[str, ...], outliers: dict[str, torch.Tensor], prefix: str) -> int:
    """Replace ``module``'s layers ``names`` by one ``SharedInputLinears`` when they can be (plain
    linear layers of one input width, the same outlier channels, all or none with a bias)."""
    layers = [getattr(module, name, None) for name in names]
    if not all(isinstance(layer, nn.Linear) for layer in layers):
        return 0
    found = [outliers.get(f"{prefix}{name}") for name in names]
    same_outliers = all(f is None for f in found) or (
        all(f is not None for f in found) and all(torch.equal(f.sort().values, found[0].sort().values) for f in found)
    )
    biases = [layer.bias is not None for layer in layers]
    if len({layer.in_features for layer in layers}) != 1 or not same_outliers or len(set(biases)) != 1:
        return 0
    # skip_init: the weights are copied in below, so no random initialization first (0.3 s a model).
    width = sum(layer.out_features for layer in layers)
    joined = nn.utils.skip_init(nn.Linear, layers[0].in_features, width, bias=biases[0])
    with torch.no_grad():
        joined.weight.copy_(torch.cat([layer.weight.detach().float() for layer in layers]))
        if biases[0]:
            joined.bias.copy_(torch.cat([layer.bias.detach().float() for layer in layers]))
    shared = SharedInputLinears(Int8RowLinear(joined, found[0]), [layer.out_features for layer in layers])
    setattr(module, "shared_" + "_".join(names), shared)
    for part, name in enumerate(names):
        setattr(module, name, SharedInputPart(shared, part))
    return len(names)


def quantize_linears(model: nn.Module, calibration_ids: list[int] | None = None, k: int = OUTLIER_CHANNELS) -> int:
    """Replace every ``nn.Linear`` of ``model`` but the output layer by ``Int8RowLinear``, in
    place, each with its ``k`` outlier channels found on ``calibration_ids`` (None: no outlier
    channels); returns how many. Layers that read the same input (``SHARED_INPUT_LAYERS``) become
    one ``SharedInputLinears``.

    The embeddings and the output layer stay float32: the output layer's logits are what every
    score reads, and greedy decoding takes their exact largest (``ShortlistHead``)."""
    head = model.get_output_embeddings()
    outliers = outlier_channels(model, calibration_ids, k) if calibration_ids and k else {}
    replaced = 0
    for parent_name, module in list(model.named_modules()):
        prefix = f"{parent_name}." if parent_name else ""
        for names in SHARED_INPUT_LAYERS:
            replaced += _share_input(module, names, outliers, prefix)
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear) and child is not head:
                setattr(module, name, Int8RowLinear(child, outliers.get(prefix + name)))
                replaced += 1
    return replaced


# Bump when PackedBfloat16Linear's numerics change: it is part of the store key of every bfloat16 call on a CPU.
BFLOAT16_RECIPE = "onednn-prepacked-weights-v1"


def bfloat16_packing_supported() -> bool:
    """Whether oneDNN here multiplies bfloat16 with weights packed ahead (AVX-512 BF16 or AMX)."""
    try:
        return torch.backends.mkldnn.is_available() and bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


class PackedBfloat16Linear(nn.Module):
    """``nn.Linear`` in bfloat16 whose weight is reordered once into oneDNN's blocked layout.

    ``F.linear`` in bfloat16 reorders the weight into that layout again at every product: 1.7-1.9x
    the time of the product itself for a decoding step's 16 rows, 1.1-1.25x for a prompt's few hundred
    (SmolLM2's and Gemma 3's layer shapes, one thread, an AMX CPU; docs/performance.md, "The CPU engine").
    The product is the same oneDNN kernel on the same operands. The original layer stays reachable
    as ``weight`` (an output layer's is tied to the embeddings), so the packed copy adds one matrix.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        if linear.weight.dtype != torch.bfloat16:
            raise TypeError(f"PackedBfloat16Linear takes a bfloat16 layer, not {linear.weight.dtype}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.register_buffer(
            "_packed", torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), None), persistent=False
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self._packed, self.bias, "none", [], "")

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bfloat16, oneDNN-packed"


def pack_bfloat16_linears(model: nn.Module) -> int:
    """Replace every bfloat16 ``nn.Linear`` of ``model`` (the output layer included) by
    ``PackedBfloat16Linear``, in place; returns how many."""
    replaced = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if type(child) is nn.Linear and child.weight.dtype == torch.bfloat16:
                setattr(module, name, PackedBfloat16Linear(child))
                replaced += 1
    return replaced


# Rows per product of a decoding step (``StepRows``).
STEP_ROWS = 16


class StepRows(nn.Module):
    """A linear layer (``nn.Linear`` or ``Int8RowLinear``) whose decoding steps multiply in blocks
    of exactly ``STEP_ROWS`` rows, zero-padded, so that a row's result does not depend on the other
    rows of its step.

    CPU GEMM libraries pick their kernel by the number of rows, and kernels round differently:
    oneDNN's bfloat16 GEMM changes a row's output when 48 or more rows share the product (up to 0.25
    in Gemma 3's logits, measured on an AMX CPU), and float32 GEMMs (the output layer, int8's outlier
    channels) move by an ulp. With every step's product exactly ``STEP_ROWS`` rows the kernel is
    always the same one, and each row's result is bitwise the same whatever shares its block. An
    int8 layer's integer product is exact and quantizes each row alone, so its step is one product
    of every row (the weights read once) and only its float32 outlier channels go in blocks. A
    prompt's own tokens (a prefill: one row of several tokens) stay one product: the same prompt
    always makes the same product; in int8 their outlier channels also go in blocks of ``rows``
    positions, so that a prefill after a reused prefix of whole blocks makes the same products.
    """

    def __init__(self, linear: nn.Module, rows: int = STEP_ROWS) -> None:
        super().__init__()
        self.linear, self.rows = linear, rows
        self.in_features, self.out_features = linear.in_features, linear.out_features

    @property
    def weight(self) -> torch.Tensor:  # what transformers reads of an output layer (tied weights, vocabulary)
        return self.linear.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() < 3 or x.shape[-2] != 1:  # a prompt's tokens
            if isinstance(self.linear, Int8RowLinear):
                # float32 outlier channels in blocks counted from the prompt's first position: the
                # same products with or without a reused prefix (hf_engine.PREFILL_ROWS)
                return self.linear(x, outlier_rows=self.rows)
            return self.linear(x)
        rows = x.reshape(-1, self.in_features)
        n = rows.shape[0]
        if isinstance(self.linear, Int8RowLinear):
            # Its integer products are exact and each row is quantized alone: one product of the
            # step's own rows reads the weights once (fbgemm's time for 1-4 rows is about half its
            # time for 16), and only the float32 outlier channels go in blocks of exactly 16 rows.
            out = self.linear(rows, outlier_rows=self.rows, whole_blocks=True)
            return out.reshape(*x.shape[:-1], self.out_features)
        padding = -n % self.rows
        if padding:
            rows = torch.cat([rows, rows.new_zeros(padding, self.in_features)])
        if isinstance(self.linear, VocabularySlices):
            out = self.linear.blocks(list(rows.split(self.rows)))
        else:
            out = torch.cat([self.linear(block) for block in rows.split(self.rows)])
        return out[:n].reshape(*x.shape[:-1], self.out_features)


# Bytes of an output layer's weights per slice (``VocabularySlices``): about a core's L2 cache.
SLICE_BYTES = 2 << 20


class VocabularySlices(nn.Module):
    """A float32 output layer multiplied in slices of its rows, each slice by every block of a
    decoding step while it is in the cache.

    In float32 (the float32 and int8 arithmetics) Gemma 3's 262k x 640 output layer is 670 MB, read
    from memory at each product: ``StepRows`` multiplies a step of 64 rows in four blocks, so the
    whole matrix was read four times. Slice by slice it is read once: a 64-row step's output layer
    took 346 against 672 ms, a 16-row one 131 against 157 (one thread, an AVX-512 CPU; 467 against
    716 and the same at 16 rows with AVX2 alone; docs/performance.md, "The CPU engine"). Each
    slice's product of a block is one fixed product whatever the other blocks are, so a row's logits
    stay bitwise the same alone and in any step. bfloat16's packed output layer is half the bytes
    and gained nothing from slices (oneDNN's product of 16 rows was 9 ms slower in slices), so it
    stays whole.
    """

    def __init__(self, linear: nn.Linear, slice_bytes: int | None = None) -> None:
        super().__init__()
        slice_bytes = slice_bytes or SLICE_BYTES
        if type(linear) is not nn.Linear or linear.weight.dtype != torch.float32:
            raise TypeError(f"VocabularySlices takes a float32 nn.Linear, not {linear!r}")
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias  # tied embeddings, the vocabulary
        step = max(1, slice_bytes // (self.in_features * linear.weight.element_size()))
        # Row slices of a row-major matrix are views: no weight is copied.
        self._bounds = [(a, min(a + step, self.out_features)) for a in range(0, self.out_features, step)]

    def blocks(self, blocks: list[torch.Tensor]) -> torch.Tensor:
        """The products of ``blocks`` (2-d), stacked: each slice multiplies every block in turn."""
        weight = self.weight.detach()
        bias = None if self.bias is None else self.bias.detach()
        out = blocks[0].new_empty(sum(block.shape[0] for block in blocks), self.out_features)
        for a, b in self._bounds:
            top = 0
            for block in blocks:
                part = nn.functional.linear(block, weight[a:b], None if bias is None else bias[a:b])
                out[top : top + block.shape[0], a:b] = part
                top += block.shape[0]
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks([x.reshape(-1, self.in_features)]).reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, slices={len(self._bounds)}"


def fix_step_rows(model: nn.Module, rows: int = STEP_ROWS) -> int:
    """Wrap every linear layer of ``model`` (float32, bfloat16 or int8, the output layer included)
    in ``StepRows``, in place, a float32 output layer in ``VocabularySlices`` first; returns how many."""
    head = model.get_output_embeddings()
    replaced = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Linear | Int8RowLinear | PackedBfloat16Linear):
                if child is head and type(child) is nn.Linear and child.weight.dtype == torch.float32:
                    child = VocabularySlices(child)
                setattr(module, name, StepRows(child, rows))
                replaced += 1
    return replaced


def output_vocabulary(model: Any) -> int:
    """Rows of the output layer (the vocabulary), whatever its type."""
    head = model.get_output_embeddings()
    rows = getattr(head, "out_features", None)
    return int(rows) if rows is not None else int(head.weight.shape[0])


# fbgemm's activation grid: codes 0..127 (7 bits, so that AVX2's 16-bit pair sums cannot
# saturate) around zero point 64, a code per 1/64. A value k/64 with k an integer in [-64, 63] is a
# code exactly, so the product of such values is known exactly.
_GRID_SCALE, _GRID_ZERO, _GRID_STEPS = 2.0**-6, 64, 64
_FLOAT32_UNIT = 2.0**-24  # float32's unit roundoff
_FLOAT64_UNIT = 2.0**-53


def _on_grid(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each row of ``x`` (float32) as ``m * k / 64`` plus a remainder: ``m`` a power of two per row
    with every ``|x| / m < 63/64``, ``k`` integers in [-63, 63]. Returns (k / 64, m, remainder), all
    exact: dividing by a power of two is exact, ``k * m / 64`` has a few bits, and the remainder
    is a multiple of the unit of x's last place smaller than 2**24 of them."""
    peak = x.abs().amax(dim=1, keepdim=True).double() * (_GRID_STEPS / (_GRID_STEPS - 1))
    _, exponent = torch.frexp(peak)  # peak = f * 2**exponent, f in [0.5, 1): 2**exponent > peak
    m = torch.where(peak > 0, torch.ldexp(torch.ones_like(peak), exponent), torch.ones_like(peak)).float()
    codes = torch.round(x / m * _GRID_STEPS) / _GRID_STEPS
    return codes, m, x - codes * m


# Int8 weights per packed slice of ShortlistHead (Gemma 3's output layer: 8,192 tokens a slice).
_SHORTLIST_SLICE_BYTES = 5 << 20


class ShortlistHead(nn.Module):
    """A float32 output layer whose greedy steps find each row's largest logit from an int8 product
    and a proven bound on its error, computing exactly only the tokens the bound cannot rule out.

    Outside ``argmax_only`` it is the float32 layer it wraps (``StepRows`` over
    ``VocabularySlices``): every score reads exact logits. Inside, a decoding step's logits are
    ``-inf`` but at each row's largest logit, which is the largest of the logits computed in
    float64 from the float32 weights and hidden state (the first on a tie, as ``argmax``):

    1. the row x is split exactly into two rows on fbgemm's int8 grid and a small remainder
       (``_on_grid`` twice), and one int8 product (int8 weights per output channel) gives
       approximate logits z' whose integer sums are exact;
    2. every logit is within beta of z', beta = ||x|| max||W_v - W^_v|| + ||remainder|| max||W^_v||
       plus float32's rounding of z' and float64's of the exact logits (Cauchy-Schwarz, per row);
    3. a token whose z' is below max z' - 2 beta is below the largest logit, so only the others
       (a few to a few hundred of Gemma 3's 262k) are computed in float64, from the float32 weights.

    Each step reads 2 bytes per weight of int8 rows instead of 4 of float32 ones, and the result
    depends on the row alone: its int8 rows and bound are the row's, and its shortlist's logits a
    product of that row. Gemma 3's output layer: 14 against 46 ms for one row, 53 against 151 for
    16 (one thread, AVX-512; docs/performance.md, "The CPU engine"). The int8 weights are built on
    the first greedy step (1.6-1.9 s for Gemma 3 on a Zen 4 EPYC), so a job that only scores never
    pays for them.
    """

    def __init__(self, layer: StepRows) -> None:
        super().__init__()
        if not isinstance(layer.linear, VocabularySlices):
            raise TypeError(f"ShortlistHead takes a float32 output layer in slices, not {layer!r}")
        self.layer = layer
        self.in_features, self.out_features = layer.in_features, layer.out_features
        self.argmax_only = False
        self._packed: Any = None
        self._bound: dict[str, float] = {}

    @property
    def weight(self) -> torch.Tensor:  # what transformers reads of an output layer (tied weights, vocabulary)
        return self.layer.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.argmax_only or x.dim() < 3 or x.shape[-2] != 1:
            return self.layer(x)
        return self.greedy_logits(x.reshape(-1, self.in_features)).reshape(*x.shape[:-1], self.out_features)

    @torch.inference_mode()
    def prepare(self) -> None:
        """The int8 weights, packed for fbgemm in slices of tokens, and the weight norms of the bound.

        In slices (``_SHORTLIST_SLICE_BYTES`` of int8 weights each), each quantized and packed at
        once: fbgemm packs Gemma 3's 262k rows in 0.8-1.0 s against 2.2-2.9 s whole, and
        multiplies up to 32 rows by them as fast or faster. A logit's integer sum is exact and
        dequantized with its own token's scale, so the slices' products are bitwise the whole one's."""
        if self._packed is not None:
            return
        started = time.perf_counter()
        weight = self.layer.linear.weight.detach()
        if self.layer.linear.bias is not None:
            raise ValueError("ShortlistHead takes an output layer without a bias")
        scales = (weight.abs().amax(dim=1) / 127).clamp_(min=torch.finfo(torch.float32).tiny)
        inverse = 1 / scales
        error = torch.empty(weight.shape[0])
        packed = []
        step = max(1, _SHORTLIST_SLICE_BYTES // weight.shape[1])
        for a in range(0, weight.shape[0], step):
            b = min(a + step, weight.shape[0])
            rounded = torch.round(weight[a:b] * inverse[a:b, None]).clamp_(-127, 127)
            integers = rounded.to(torch.int8)
            error[a:b] = torch.linalg.vector_norm(rounded.mul_(scales[a:b, None]).sub_(weight[a:b]), dim=1)
            zeros = torch.zeros(b - a, dtype=torch.int64)
            with warnings.catch_warnings():  # torch 2.13's deprecation of quantized tensors: see Int8RowLinear
                warnings.filterwarnings("ignore", message=".*quantized.*", category=UserWarning)
                qweight = torch._make_per_channel_quantized_tensor(integers, scales[a:b].double(), zeros, 0)
                packed.append(torch.ops.quantized.linear_prepack(qweight, None))
        self._packed = packed
        # e_v >= ||W_v - W^_v||: float32's rounding of W^_v (at most u |W^_vi| an entry) and of the
        # norm's sum (a relative (d + 2) u) added.
        d = weight.shape[1]
        error.add_(scales * (127 * d**0.5 * _FLOAT32_UNIT)).mul_(1 + (d + 4) * _FLOAT32_UNIT)
        self._error = error
        norm = float(weight.norm(dim=1).double().max()) * (1 + 1e-6)
        self._bound = {
            "int8_norm": norm + float(error.max()),  # max_v ||W^_v||, by the triangle inequality
            "float_norm": norm,  # max_v ||W_v||
            "int8_peak": 127 * float(scales.max()),  # max |W^_vi|
        }
        log.info("output layer in int8 for greedy steps in %.1f s", time.perf_counter() - started)

    def bounds(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """For rows ``x`` (rows, in_features): float32 (low, high) of (rows, vocabulary) and float64
        c of (rows,) such that each logit computed in float64 lies in [low - c, high + c]."""
        self.prepare()
        rows, d = x.shape
        x = x.float()
        high, m_high, rest = _on_grid(x)
        low, m_low, remainder = _on_grid(rest)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*quantized.*", category=UserWarning)
            grid = torch.cat([high, low])
            product = torch.ops.quantized.linear_with_input_q_dq_qweight_dq_output_fp32
            out = torch.cat([product(grid, _GRID_SCALE, _GRID_ZERO, part) for part in self._packed], dim=1)
        approx = out[:rows].mul_(m_high).add_(out[rows:].mul_(m_low))  # z'
        # |z_v - z'_v| <= ||x|| e_v + c: e_v >= ||W_v - W^_v|| per token, c for the remainder and roundings.
        b = self._bound
        norm = x.double().norm(dim=1) * (1 + 1e-6)
        spread = torch.mul(self._error, norm.float()[:, None] * (1 + 4 * _FLOAT32_UNIT))  # >= ||x|| e_v
        low_end = approx - spread
        high_end = approx.add_(spread)
        gamma = d * _FLOAT64_UNIT / (1 - d * _FLOAT64_UNIT)
        grid_mass = (high * m_high).abs().sum(1).double() + (low * m_low).abs().sum(1).double()
        c = (
            remainder.double().norm(dim=1) * b["int8_norm"]  # the remainder's product, left out
            + 2 * gamma * norm * b["float_norm"]  # float64's rounding of the exact logits
            + 4 * _FLOAT32_UNIT * grid_mass * b["int8_peak"]  # float32's of z'
            + 4
            * _FLOAT32_UNIT
            * (high_end.abs().amax(dim=1).double() + low_end.abs().amax(dim=1).double())  # z' -+ spread
        ) * (1 + 1e-6)
        return low_end, high_end, c

    def greedy_logits(self, x: torch.Tensor) -> torch.Tensor:
        """(rows, vocabulary) logits, -inf but at each row's largest (see the class)."""
        low_end, high_end, c = self.bounds(x)
        rows = x.shape[0]
        x64 = x.double()
        threshold = low_end.amax(dim=1).double() - 2 * c
        below = threshold.float()  # rounded down, so that no token the bound keeps is dropped
        below = torch.where(below.double() > threshold, torch.nextafter(below, torch.tensor(-torch.inf)), below)
        kept = (high_end >= below[:, None]).nonzero()
        weight = self.layer.linear.weight.detach()
        logits = high_end.fill_(-torch.inf)
        for r, tokens in enumerate(kept[:, 1].split(torch.bincount(kept[:, 0], minlength=rows).tolist())):
            # Products then a sum per token, not a matrix-vector product: BLAS kernels may round a
            # token's dot product by its position in the shortlist (twin tokens then differ in the
            # last bit on AMD's Zen 4), a reduction per token rounds each the same way. In parts, so
            # that a flat row (a wide shortlist) never copies the whole matrix.
            exact = torch.cat([(weight[part].double() * x64[r]).sum(dim=1) for part in tokens.split(1 << 14)])
            best = int(exact.argmax())  # the first on a tie: tokens are in order
            logits[r, tokens[best]] = float(exact[best])
        return logits

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 shortlist, float64 argmax"


def shortlist_output_layer(model: nn.Module) -> bool:
    """Wrap ``model``'s output layer, a float32 one in ``StepRows`` over ``VocabularySlices``
    (``fix_step_rows``), in ``ShortlistHead``, in place; returns whether it was."""
    head = model.get_output_embeddings()
    if not (isinstance(head, StepRows) and isinstance(head.linear, VocabularySlices)) or head.linear.bias is not None:
        return False
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if child is head:
                setattr(module, name, ShortlistHead(head))
                return True
    return False


@contextlib.contextmanager
def argmax_only(model: nn.Module) -> Iterator[None]:
    """Within, ``model``'s decoding steps may return logits that are right about each row's largest
    only (``ShortlistHead``): for greedy decoding, never for scores."""
    head = model.get_output_embeddings()
    if not isinstance(head, ShortlistHead):
        yield
        return
    head.argmax_only = True
    try:
        yield
    finally:
        head.argmax_only = False
