"""The thresholds ``alpha_c`` (the first change of the global branch) and ``alpha_l`` (the global
minimum's test error crossing the linear baseline's), in one record for every model
(:mod:`.record`): Newton's method on the paper's two competing branches with the line quadrature
(:mod:`.newton_pair`), or every change of the global branch located on a scan (:mod:`.scan_changes`)."""
