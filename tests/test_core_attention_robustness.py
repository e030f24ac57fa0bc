"""Core attention robustness: second derivatives, torch.compile, non-finite inputs, detached
weights and values with their own channel count, on every edge-attention backend."""
from __future__ import annotations

import pytest
import torch

from graphattn import GraphSelfAttention
from graphattn.ops import extension
from graphattn.nn.block import GraphTransformerBlock
from graphattn.functional import dense_attention, edge_attention
from graphattn.testing import dense_mask_and_bias


# ------------------------------------------------------------------ 1. second derivatives


# ------------------------------------------------------------------ 2. torch.compile


# ------------------------------------------------------------------ 3. non-finite inputs


# ------------------------------------------------------------------ 4. detached weights


# ------------------------------------------------------------------ 5. values of C' channels
