"""kvtier traces: request and access traces (readers, generators, formats)."""
