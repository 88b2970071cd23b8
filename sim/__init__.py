"""kvtier simulator: a discrete-event model of multi-tier KV-cache movement."""
