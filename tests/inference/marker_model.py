"""A model whose unpickling runs code: it writes a marker file, as a malicious pickle could do anything.

Logged with ``code_paths=[this file]`` so Spark Python workers can import it when it is allowed.
"""

from __future__ import annotations

import os
from typing import Any

import torch


class MarkerMLP(torch.nn.Module):
    """A working classifier that appends ``unpickled in <pid>`` to ``self.marker`` when unpickled."""

    def __init__(self, n_features: int, n_classes: int, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.net = torch.nn.Sequential(
            torch.nn.Linear(n_features, 16), torch.nn.ReLU(), torch.nn.Linear(16, n_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def __setstate__(self, state: dict[str, Any]) -> None:
        with open(state["marker"], "a", encoding="utf-8") as fh:
            fh.write(f"unpickled in {os.getpid()}\n")
        super().__setstate__(state)
