import cuda.tile as ct

@ct.kernel
def k1(a, T: ct.Constant[int]):
    t = ct.load(a, (ct.bid(0),), (T,))
    ct.store(a, (ct.bid(0),), t)

@ct.kernel
def k2(a, b, T: ct.Constant[int]):
    t = ct.load(a, (ct.bid(0),), (T,))
    ct.store(b, (ct.bid(0),), t)

@ct.kernel
def k4(a, b, c, d, T: ct.Constant[int]):
    t = ct.load(a, (ct.bid(0),), (T,)) + ct.load(b, (ct.bid(0),), (T,)) + ct.load(c, (ct.bid(0),), (T,))
    ct.store(d, (ct.bid(0),), t)

@ct.kernel
def k4c(a, b, c, d, e, f, T: ct.Constant[int], U: ct.Constant[int], V: ct.Constant[int], W: ct.Constant[bool], X: ct.Constant[bool]):
    t = ct.load(a, (ct.bid(0),), (T,)) + ct.load(b, (ct.bid(0),), (T,)) + ct.load(c, (ct.bid(0),), (T,))
    ct.store(d, (ct.bid(0),), t * e + f)
