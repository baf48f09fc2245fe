"""Message passing (GAMP) for the empirical risk of finite instances, and its state evolution
(docs/gamp.md)."""
