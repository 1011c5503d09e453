"""Checking a case: opening the runtimes (`backends`, the one module that imports them), the
contract model and float64 reference of a whole graph, the lockstep runner and its oracles,
divergences and their verdicts, coverage, repeatability and shrinking.
"""
