"""Row-tile RMSNorm kernels: rows loaded straight into registers with plain (128-bit where the
row allows) loads, a row held as up to three power-of-two pieces so that no lane is padding, any
two leading dims of a view read in place (a QK-norm head view of a fused QKV projection), a plan
computed from N by rules (:mod:`cutile_rms.rows.plan`).

The forward runs by default wherever its plan has it (``plan.plan``: rows of at most 18432
elements, 16-bit rows a multiple of 16 elements long); the core kernels run the rest. The
backward runs by default on short power-of-two rows of 128-512 bytes (``plan.backward_by_default``:
QK-norm head dims, where it beats the core backward by up to 1.33x and reads a fused QKV view in
place) and wherever its plan has the row with ``rms_norm(..., mode="rows")``. See
bench/NOTES.md, sessions 11-14."""
