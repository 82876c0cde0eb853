"""The contract tests, one module per area of the `Store` contract."""
