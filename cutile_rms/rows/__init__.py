"""Row-tile RMSNorm kernels: rows loaded straight into registers with plain (128-bit where the
row allows) loads or gathers, a row held as up to three power-of-two pieces (one padded piece
where the row length is compiled in), any two leading dims of a view read in place (a QK-norm
head view of a fused QKV projection), short unaligned rows on warp-wide lanes, long rows in
chunks, a plan computed from N, the element size and the SM count by rules
(:mod:`cutile_rms.rows.plan`).

The forward runs by default wherever its plan has it (``plan.plan``); the core kernels run the
rest. The backward runs by default where ``plan.backward_by_default`` says (short power-of-two
rows of 128-512 bytes, unaligned rows, static rows whose tiles hold 16 warps an SM, aligned
16-bit rows whose tiles keep 36 KiB in flight: ``plan.aligned_backward_tile``) or
``plan.few_rows`` (at most as many rows as SMs, of 2048 elements or more) and its plan has the row, and
wherever its plan has the row with ``rms_norm(..., mode="rows")``; its blocks
read their next tile before they work on the current one where the registers allow
(``plan.PREFETCH_MAX_BLOCKS``). See bench/NOTES.md, sessions 11-26."""
