"""Swarm (seed 000): co-activation clustering, multi-SSD placement,
load-balanced retrieval, cluster maintenance and cost-effective caching."""
