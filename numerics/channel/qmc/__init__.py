"""The general model's channel side by randomised quasi-Monte Carlo (docs/numerics.md, the section
"The general model: QMC integrator"): nodes (:mod:`.nodes`), the rule (:mod:`.rule`), the channel
estimate (:mod:`.channel`), its optional pre-integration along one normal (:mod:`.preintegration`),
the test error (:mod:`.test_error`) and the precision presets (:mod:`.precision`)."""
