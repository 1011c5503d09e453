"""The op-model framework: live state, kernel specs, the model protocol and registry, the
float32 error analysis (`numerics`) and the q4gsw format math (`q4`). No op content: each op's
model lives in `harness/ops/`. Imports nothing of the harness but itself, and no hypothesis.
"""
