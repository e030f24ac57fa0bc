"""Mini-batching of large graphs: METIS-style partitions and neighbour sampling."""
