""":class:`CapturedAugmentation`: a transform replayed as CUDA graphs, one per input shape."""

from __future__ import annotations

from collections.abc import Callable

import torch


class CapturedAugmentation:
    """Replays a CUDA graph of ``transform(images, generator)``, one per input shape and inference
    mode, captured on its first call after warm-up calls (docs/data-path.md, *CUDA graphs*). The
    outputs are copied out of the graph. Capturing leaves the generator's state as it found it, so
    replay ``k`` after a seed draws what eager call ``k`` draws. CPU batches run ``transform``."""

    def __init__(self, transform: Callable, generator: torch.Generator, warmup: int = 3) -> None:
        self.transform, self.generator, self.warmup = transform, generator, warmup
        self._graphs: dict[tuple, tuple] = {}

    @property
    def num_graphs(self) -> int:
        return len(self._graphs)

    def __call__(self, images: torch.Tensor, generator: torch.Generator | None = None):
        if generator is not None and generator is not self.generator:
            raise ValueError("a captured augmentation draws from the generator it was built with")
        if images.device.type != "cuda":
            return self.transform(images, self.generator)
        key = (tuple(images.shape), images.dtype, images.device, torch.is_inference_mode_enabled())
        if key not in self._graphs:
            self._graphs[key] = self._capture(images)
        graph, static_input, static_output = self._graphs[key]
        static_input.copy_(images)
        graph.replay()
        if isinstance(static_output, torch.Tensor):
            return static_output.clone()
        return [view.clone() for view in static_output]

    def _capture(self, images: torch.Tensor) -> tuple:
        device = images.device
        state = self.generator.get_state()  # the warm-up calls advance it; restored below
        static_input = images.clone()
        with torch.cuda.device(device):
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                for _ in range(self.warmup):
                    self.transform(static_input, self.generator)
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            graph.register_generator_state(self.generator)
            # thread_local: other threads (a pinned loader's copier) may use CUDA meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                static_output = self.transform(static_input, self.generator)
        self.generator.set_state(state)
        return graph, static_input, static_output
