"""Case families that combine several ops: DAGs, attention blocks, decoders, random graphs."""
