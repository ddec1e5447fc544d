"""The audit trail: the append-only chained store, checkpoints, the off-box shipper, verify."""
