"""Row-tile RMSNorm kernels (experimental): rows loaded straight into registers with plain
(128-bit where the row allows) loads, a row held as up to three power-of-two pieces so that no
lane is padding, any two leading dims of a view read in place (a QK-norm head view of a fused
QKV projection), a plan computed from N by rules (:mod:`cutile_rms.experimental.rows.plan`).
Selected with ``rms_norm(..., mode="rows")``; see bench/NOTES.md, session 11."""
