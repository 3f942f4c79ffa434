"""How the pre-training step is compiled. ``--compile`` (the default on a GPU) wraps the model the loop calls in
``torch.compile`` with dynamic shapes, from the start, after DDP (as PyTorch's DDP + compile guide does), so that a
ramp's next stage compiles nothing; checkpoints and evaluation use the plain model.

On one GPU, for a plain masked LM (its labelled positions come from the host: ``masking.mlm_inputs``), the compiled
step also replays its kernels as CUDA graphs (``mode="reduce-overhead"``). The profile of modernbert-small's compiled
step on an H200 showed why: its kernels ran 16.8 ms of a 37.3 ms step (45%), 575 launches a step; the host launching
them was the rest. A graph replays one shape, so the labelled positions are padded to a multiple of
:data:`POSITIONS_MULTIPLE` (the loss ignores the padding) and the batches share a few shapes. Several processes (DDP)
and the objectives whose models select their own labels keep the plain compile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

POSITIONS_MULTIPLE = 512  # the labelled positions' count, padded up to a multiple of it where the step is graphed


@dataclass(frozen=True)
class CompiledStep:
    """What the loop calls (``model``), whether its kernels replay as CUDA graphs, and how the run says it."""

    model: Any
    graphed: bool = False
    said: str = ""

    @property
    def pad_to(self) -> int:
        """``masking.mlm_inputs``' padding of the labelled positions: a graphed step's multiple, else none."""
        return POSITIONS_MULTIPLE if self.graphed else 0

    def begin(self) -> None:
        """Before each forward: the previous step's graph outputs are no longer read (CUDA graph trees reuse their
        memory on the next replay)."""
        if self.graphed:
            import torch  # the recipe imports torch when the run starts, not for -h

            torch.compiler.cudagraph_mark_step_begin()


def compile_step(cfg, ctx, model, plain_mlm: bool) -> CompiledStep:
    """``model`` (the DDP wrapper, or the model) compiled as ``cfg.compile`` says (None: on a GPU), graphed where one
    GPU trains a plain masked LM (``plain_mlm``: its forward takes ``masked_positions``)."""
    compiled = cfg.compile if cfg.compile is not None else ctx.device.type == "cuda"
    if not compiled:
        return CompiledStep(model)
    import torch  # as in begin()

    graphed = ctx.device.type == "cuda" and not ctx.distributed and plain_mlm
    mode = "reduce-overhead" if graphed else None
    return CompiledStep(
        torch.compile(model, dynamic=True, mode=mode), graphed, ", compiled" + (" (CUDA graphs)" if graphed else "")
    )
