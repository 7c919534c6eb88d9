// Max and average pooling over up to three spatial axes, forward and backward, as ops/pool.py
// computes them. Pools of fewer axes come padded to three with leading axes of size 1, kernel
// 1, stride 1, no padding. Coordinates: input cell z of axis a is padded cell z + pad_a; the
// window at output o covers padded cells o * s_a + i * dil_a, i < k_a. Cells outside the input
// are the padding (-inf for max, 0 for average), including those past the end padding that a
// ceil-mode window reaches. Taps are visited in ops/pool.py's order (axis 0 outermost), so
// sums round as there and the max pool's argmax is the first maximum in that order.
// Backward kernels gather (one thread per input cell, windows in tap order): no atomics, so
// the result is deterministic and rounds as the op-by-op tap loop does.

#define SINGA_WINDOW_PARAMS                                                                  \
    int size0, int size1, int size2, int out0, int out1, int out2, int k0, int k1, int k2,  \
        int s0, int s1, int s2, int pad0, int pad1, int pad2, int dil0, int dil1, int dil2

// The output window whose tap i covers input cell z on one axis, or -1.
__device__ __forceinline__ int singa_window_of(int z, int i, int s, int pad, int dil, int out) {
    const int q = z + pad - i * dil;
    if (q < 0) return -1;
    const int o = q / s;
    return (o * s == q && o < out) ? o : -1;
}

// Cells of window o on one axis inside [lo, hi) (padded coordinates): AvgPool's divisor.
__device__ __forceinline__ int singa_count(int o, int k, int s, int dil, int lo, int hi) {
    int n = 0;
    for (int i = 0; i < k; ++i) {
        const int cell = o * s + i * dil;
        n += cell >= lo && cell < hi;
    }
    return n;
}

// 1 / cells counted, divided axis by axis as AvgPool._inverse_counts does on the host.
template <typename T>
__device__ __forceinline__ T singa_inverse_count(int o0, int o1, int o2, int k0, int k1, int k2,
                                                 int s0, int s1, int s2, int dil0, int dil1,
                                                 int dil2, int lo0, int lo1, int lo2, int hi0,
                                                 int hi1, int hi2) {
    T scale = T(1);
    scale = singa_div(scale, T(singa_count(o0, k0, s0, dil0, lo0, hi0)));
    scale = singa_div(scale, T(singa_count(o1, k1, s1, dil1, lo1, hi1)));
    return singa_div(scale, T(singa_count(o2, k2, s2, dil2, lo2, hi2)));
}

// y: max of each window; arg (null in inference): its tap, the first maximum. A NaN in the
// window makes y NaN and leaves arg at the maximum before it, as the op-by-op loop does.
template <typename T, typename A>
__global__ void singa_max_pool_fwd(const T* __restrict__ x, T* __restrict__ y,
                                   A* __restrict__ arg, long long planes, SINGA_WINDOW_PARAMS) {
    const long long in_plane = (long long)size0 * size1 * size2;
    const long long out_plane = (long long)out0 * out1 * out2;
    SINGA_FOR(o, planes * out_plane) {
        const SingaCell cell = singa_cell_of(o, out0, out1, out2);
        const long long c = cell.plane;
        const int o0 = cell.i0, o1 = cell.i1, o2 = cell.i2;
        const T* xc = x + c * in_plane;
        T best = -singa_inf<T>();
        int best_tap = 0, tap = 0;
        for (int i0 = 0; i0 < k0; ++i0) {
            const int z0 = o0 * s0 - pad0 + i0 * dil0;
            const bool in0 = z0 >= 0 && z0 < size0;
            for (int i1 = 0; i1 < k1; ++i1) {
                const int z1 = o1 * s1 - pad1 + i1 * dil1;
                const bool in1 = in0 && z1 >= 0 && z1 < size1;
                for (int i2 = 0; i2 < k2; ++i2, ++tap) {
                    const int z2 = o2 * s2 - pad2 + i2 * dil2;
                    const T v = (in1 && z2 >= 0 && z2 < size2)
                                    ? xc[((long long)z0 * size1 + z1) * size2 + z2]
                                    : -singa_inf<T>();
                    if (v > best) {  // a strict maximum: ties keep the earlier tap
                        best = v;
                        best_tap = tap;
                    } else if (v != v) {
                        best = v;  // maximum() propagates NaN
                    }
                }
            }
        }
        y[o] = best;
        if (arg != nullptr) arg[o] = (A)best_tap;
    }
}

// dx of each input cell: dy * (arg == tap) over the windows covering it, in tap order, added
// to zero where windows overlap, stored (a cell is in one window at most) where they do not.
template <typename T, typename A>
__global__ void singa_max_pool_bwd(const T* __restrict__ dy, const A* __restrict__ arg,
                                   T* __restrict__ dx, int overlap, long long planes,
                                   SINGA_WINDOW_PARAMS) {
    const long long in_plane = (long long)size0 * size1 * size2;
    const long long out_plane = (long long)out0 * out1 * out2;
    SINGA_FOR(e, planes * in_plane) {
        const SingaCell cell = singa_cell_of(e, size0, size1, size2);
        const long long c = cell.plane;
        const int z0 = cell.i0, z1 = cell.i1, z2 = cell.i2;
        const T* dyc = dy + c * out_plane;
        const A* ac = arg + c * out_plane;
        T acc = T(0);
        int tap = 0;
        for (int i0 = 0; i0 < k0; ++i0) {
            const int w0 = singa_window_of(z0, i0, s0, pad0, dil0, out0);
            for (int i1 = 0; i1 < k1; ++i1) {
                const int w1 = singa_window_of(z1, i1, s1, pad1, dil1, out1);
                for (int i2 = 0; i2 < k2; ++i2, ++tap) {
                    const int w2 = singa_window_of(z2, i2, s2, pad2, dil2, out2);
                    if (w0 < 0 || w1 < 0 || w2 < 0) continue;
                    const long long w = ((long long)w0 * out1 + w1) * out2 + w2;
                    const T v = singa_mul(dyc[w], T(ac[w] == tap));
                    acc = overlap ? singa_add(acc, v) : v;
                }
            }
        }
        dx[e] = acc;
    }
}

// Window sums in tap order (padding adds 0), times 1 / cells counted. Counted cells lie in
// [lo_a, hi_a) of each axis (padded coordinates): the whole padded input with
// count_include_pad, the input alone without.
template <typename T>
__global__ void singa_avg_pool_fwd(const T* __restrict__ x, T* __restrict__ y, long long planes,
                                   SINGA_WINDOW_PARAMS, int lo0, int lo1, int lo2, int hi0,
                                   int hi1, int hi2) {
    const long long in_plane = (long long)size0 * size1 * size2;
    const long long out_plane = (long long)out0 * out1 * out2;
    SINGA_FOR(o, planes * out_plane) {
        const SingaCell cell = singa_cell_of(o, out0, out1, out2);
        const long long c = cell.plane;
        const int o0 = cell.i0, o1 = cell.i1, o2 = cell.i2;
        const T* xc = x + c * in_plane;
        T acc = T(0);
        bool first = true;
        for (int i0 = 0; i0 < k0; ++i0) {
            const int z0 = o0 * s0 - pad0 + i0 * dil0;
            const bool in0 = z0 >= 0 && z0 < size0;
            for (int i1 = 0; i1 < k1; ++i1) {
                const int z1 = o1 * s1 - pad1 + i1 * dil1;
                const bool in1 = in0 && z1 >= 0 && z1 < size1;
                for (int i2 = 0; i2 < k2; ++i2) {
                    const int z2 = o2 * s2 - pad2 + i2 * dil2;
                    const T v = (in1 && z2 >= 0 && z2 < size2)
                                    ? xc[((long long)z0 * size1 + z1) * size2 + z2]
                                    : T(0);
                    acc = first ? v : singa_add(acc, v);  // y = tap 0; y += tap
                    first = false;
                }
            }
        }
        const T scale = singa_inverse_count<T>(o0, o1, o2, k0, k1, k2, s0, s1, s2, dil0, dil1,
                                               dil2, lo0, lo1, lo2, hi0, hi1, hi2);
        y[o] = singa_mul(acc, scale);
    }
}

// dx of each input cell: the sum of dy * (1 / cells counted) over the windows covering it, in
// tap order, from zero.
template <typename T>
__global__ void singa_avg_pool_bwd(const T* __restrict__ dy, T* __restrict__ dx, long long planes,
                                   SINGA_WINDOW_PARAMS, int lo0, int lo1, int lo2, int hi0,
                                   int hi1, int hi2) {
    const long long in_plane = (long long)size0 * size1 * size2;
    const long long out_plane = (long long)out0 * out1 * out2;
    SINGA_FOR(e, planes * in_plane) {
        const SingaCell cell = singa_cell_of(e, size0, size1, size2);
        const long long c = cell.plane;
        const int z0 = cell.i0, z1 = cell.i1, z2 = cell.i2;
        const T* dyc = dy + c * out_plane;
        T acc = T(0);
        for (int i0 = 0; i0 < k0; ++i0) {
            const int w0 = singa_window_of(z0, i0, s0, pad0, dil0, out0);
            for (int i1 = 0; i1 < k1; ++i1) {
                const int w1 = singa_window_of(z1, i1, s1, pad1, dil1, out1);
                for (int i2 = 0; i2 < k2; ++i2) {
                    const int w2 = singa_window_of(z2, i2, s2, pad2, dil2, out2);
                    if (w0 < 0 || w1 < 0 || w2 < 0) continue;
                    const T scale = singa_inverse_count<T>(w0, w1, w2, k0, k1, k2, s0, s1, s2,
                                                           dil0, dil1, dil2, lo0, lo1, lo2,
                                                           hi0, hi1, hi2);
                    const long long w = ((long long)w0 * out1 + w1) * out2 + w2;
                    acc = singa_add(acc, singa_mul(dyc[w], scale));
                }
            }
        }
        dx[e] = acc;
    }
}
