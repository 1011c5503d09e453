"""Case generation building blocks: `Case`, `GraphBuilder`, Hypothesis strategies for live
shapes and data (`blocks`), the random-graph framework (`graphgen`) and the case-family
registry (`families`). Ops and multi-op families build on these; nothing here knows an op.
"""
