"""Analysis: plots and reports drawn from kvtier's Parquet results."""
