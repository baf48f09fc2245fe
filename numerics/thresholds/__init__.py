"""The thresholds ``alpha_c`` (the first change of the global branch) and ``alpha_l`` (the global
minimum's test error crossing the linear baseline's), in one record for every model
(:mod:`.record`), by one locator (:mod:`.locate`) on a scan (:mod:`.scan`), whose root-finding
strategy is deterministic (:mod:`.deterministic`) or noise-aware (:mod:`.noisy`, with
:mod:`.births` and :mod:`.noisy_roots`)."""
