"""Social networks: node classification on one graph, graph classification on graph sets."""
