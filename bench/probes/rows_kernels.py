"""Probe kernels (session 11): row tiles through plain or TMA loads, rows held as up to three
power-of-two pieces, one loop form that serves a persistent grid and one block per row tile."""

import cuda.tile as ct

ZERO = ct.PaddingMode.ZERO


@ct.function
def _ld(a, i, j, TM: ct.Constant[int], W: ct.Constant[int], CHECK: ct.Constant[bool], TMA: ct.Constant[bool]):
    if CHECK:
        return ct.load(a, (i, j), (TM, W), padding_mode=ZERO, allow_tma=TMA)
    else:
        return ct.load(a, (i, j), (TM, W), check_bounds=False, allow_tma=TMA)


@ct.function
def _st(a, i, j, t, CHECK: ct.Constant[bool], TMA: ct.Constant[bool]):
    ct.store(a, (i, j), t, check_bounds=CHECK, allow_tma=TMA)


@ct.function
def _wrow(w, j, offset, W: ct.Constant[int], HAS_WEIGHT: ct.Constant[bool], CHECK: ct.Constant[bool]):
    if HAS_WEIGHT:
        if CHECK:
            wt = ct.load(w, (j,), (W,), padding_mode=ZERO, allow_tma=False)
        else:
            wt = ct.load(w, (j,), (W,), check_bounds=False, allow_tma=False)
        return ct.reshape(ct.astype(wt, ct.float32) + offset, (1, W))
    else:
        return ct.full((1, W), 1.0, dtype=ct.float32)


@ct.function
def _sq(t):
    f = ct.astype(t, ct.float32)
    return ct.sum(f * f, axis=1, keepdims=True)


@ct.function
def _norm(xt, rstd, wp, y_dtype, LLAMA: ct.Constant[bool]):
    if LLAMA:
        xhat = ct.astype(ct.astype(ct.astype(xt, ct.float32) * rstd, xt.dtype), ct.float32)
    else:
        xhat = ct.astype(xt, ct.float32) * rstd
    return ct.astype(xhat * wp, y_dtype)


@ct.kernel
def fwd_rows(x, w, y, rstd_out, eps, offset,
             TM: ct.Constant[int], W0: ct.Constant[int], W1: ct.Constant[int], W2: ct.Constant[int],
             LLAMA: ct.Constant[bool], HAS_WEIGHT: ct.Constant[bool], STORE_RSTD: ct.Constant[bool],
             CM: ct.Constant[bool], CN: ct.Constant[bool], TMA: ct.Constant[bool]):  # fmt: skip
    n = x.shape[1]
    C0 = CM or (CN and W1 == 0)
    C1 = CM or (CN and W2 == 0)
    C2 = CM or CN
    j1 = W0 // max(W1, 1)
    j2 = (W0 + W1) // max(W2, 1)
    w0 = _wrow(w, 0, offset, W0, HAS_WEIGHT, CN and W1 == 0)
    if W1 > 0:
        w1 = _wrow(w, j1, offset, W1, HAS_WEIGHT, CN and W2 == 0)
    if W2 > 0:
        w2 = _wrow(w, j2, offset, W2, HAS_WEIGHT, CN)
    for i in range(ct.bid(0), ct.cdiv(x.shape[0], TM), ct.num_blocks(0)):
        x0 = _ld(x, i, 0, TM, W0, C0, TMA)
        ss = _sq(x0)
        if W1 > 0:
            x1 = _ld(x, i, j1, TM, W1, C1, TMA)
            ss = ss + _sq(x1)
        if W2 > 0:
            x2 = _ld(x, i, j2, TM, W2, C2, TMA)
            ss = ss + _sq(x2)
        rstd = ct.rsqrt(ss / n + eps)
        _st(y, i, 0, _norm(x0, rstd, w0, y.dtype, LLAMA), C0, False)
        if W1 > 0:
            _st(y, i, j1, _norm(x1, rstd, w1, y.dtype, LLAMA), C1, False)
        if W2 > 0:
            _st(y, i, j2, _norm(x2, rstd, w2, y.dtype, LLAMA), C2, False)
        if STORE_RSTD:
            ct.store(rstd_out, (i,), ct.reshape(rstd, (TM,)), check_bounds=CM, allow_tma=False)


@ct.function
def _bwd_piece(x, dy, i, j, rstd, wp, TM: ct.Constant[int], W: ct.Constant[int], CHECK: ct.Constant[bool],
               TMA: ct.Constant[bool]):  # fmt: skip
    xf = ct.astype(_ld(x, i, j, TM, W, CHECK, TMA), ct.float32)
    dyf = ct.astype(_ld(dy, i, j, TM, W, CHECK, TMA), ct.float32)
    xhat = xf * rstd
    wdy = dyf * wp
    return xhat, dyf, wdy, ct.sum(wdy * xhat, axis=1, keepdims=True)


@ct.function
def _dw(dyf, xhat, x_dtype, ROUND: ct.Constant[bool]):
    if ROUND:
        return ct.sum(dyf * ct.astype(ct.astype(xhat, x_dtype), ct.float32), axis=0, keepdims=True)
    else:
        return ct.sum(dyf * xhat, axis=0, keepdims=True)


@ct.kernel
def bwd_rows(x, dy, w, rstd_in, dx, dw_partial, offset,
             TM: ct.Constant[int], W0: ct.Constant[int], W1: ct.Constant[int], W2: ct.Constant[int],
             HAS_WEIGHT: ct.Constant[bool], ROUND: ct.Constant[bool],
             CM: ct.Constant[bool], CN: ct.Constant[bool], TMA: ct.Constant[bool]):  # fmt: skip
    n = x.shape[1]
    C0 = CM or (CN and W1 == 0)
    C1 = CM or (CN and W2 == 0)
    C2 = CM or CN
    j1 = W0 // max(W1, 1)
    j2 = (W0 + W1) // max(W2, 1)
    w0 = _wrow(w, 0, offset, W0, HAS_WEIGHT, CN and W1 == 0)
    a0 = ct.zeros((1, W0), dtype=ct.float32)
    if W1 > 0:
        w1 = _wrow(w, j1, offset, W1, HAS_WEIGHT, CN and W2 == 0)
        a1 = ct.zeros((1, W1), dtype=ct.float32)
    if W2 > 0:
        w2 = _wrow(w, j2, offset, W2, HAS_WEIGHT, CN)
        a2 = ct.zeros((1, W2), dtype=ct.float32)
    for i in range(ct.bid(0), ct.cdiv(x.shape[0], TM), ct.num_blocks(0)):
        if CM:
            rstd = ct.reshape(ct.load(rstd_in, (i,), (TM,), padding_mode=ZERO, allow_tma=False), (TM, 1))
        else:
            rstd = ct.reshape(ct.load(rstd_in, (i,), (TM,), check_bounds=False, allow_tma=False), (TM, 1))
        xh0, dy0, wdy0, c = _bwd_piece(x, dy, i, 0, rstd, w0, TM, W0, C0, TMA)
        if W1 > 0:
            xh1, dy1, wdy1, c1 = _bwd_piece(x, dy, i, j1, rstd, w1, TM, W1, C1, TMA)
            c = c + c1
        if W2 > 0:
            xh2, dy2, wdy2, c2 = _bwd_piece(x, dy, i, j2, rstd, w2, TM, W2, C2, TMA)
            c = c + c2
        c = c / n
        _st(dx, i, 0, ct.astype((wdy0 - xh0 * c) * rstd, dx.dtype), C0, False)
        if HAS_WEIGHT:
            a0 += _dw(dy0, xh0, x.dtype, ROUND)
        if W1 > 0:
            _st(dx, i, j1, ct.astype((wdy1 - xh1 * c) * rstd, dx.dtype), C1, False)
            if HAS_WEIGHT:
                a1 += _dw(dy1, xh1, x.dtype, ROUND)
        if W2 > 0:
            _st(dx, i, j2, ct.astype((wdy2 - xh2 * c) * rstd, dx.dtype), C2, False)
            if HAS_WEIGHT:
                a2 += _dw(dy2, xh2, x.dtype, ROUND)
    if HAS_WEIGHT:
        ct.store(dw_partial, (ct.bid(0), 0), a0, check_bounds=CN and W1 == 0, allow_tma=False)
        if W1 > 0:
            ct.store(dw_partial, (ct.bid(0), j1), a1, check_bounds=CN and W2 == 0, allow_tma=False)
        if W2 > 0:
            ct.store(dw_partial, (ct.bid(0), j2), a2, check_bounds=CN, allow_tma=False)
