// im2col and col2im of the training convolutions: ops/conv.py (2-D, its transposed conv and
// Conv1d) and ops/conv_general.py (1-D to 3-D). Convolutions of fewer than three spatial axes
// come padded to three with leading axes of size 1, kernel 1, stride 1, no padding, as the pool
// kernels take them. Input cell z of axis a is tap i of window o when
// z = o * s_a - pad_a + i * dil_a; cells outside the input are the zero padding.
//
// The column matrix of G groups of cg channels has K = cg * taps entries per window and one
// window per row index r = (image, o0, o1, o2), R = batch * windows of them:
//   flags 0 (ops/conv.py):                      (G, R, K), K ordered (tap, channel)
//   SINGA_COLS_K_MAJOR | SINGA_COLS_CHANNEL_FIRST  (G, K, R), K ordered (channel, tap)
//                       (ops/conv_general.py)
// col2im takes the (G, K, R) form of either order. Index arithmetic is 32-bit: the wrappers
// launch these only for arrays of fewer than 2**31 elements.

#define SINGA_COLS_K_MAJOR 1        // (G, K, R) rather than (G, R, K)
#define SINGA_COLS_CHANNEL_FIRST 2  // K ordered (channel, tap) rather than (tap, channel)

#define SINGA_CONV_PARAMS                                                                    \
    int size0, int size1, int size2, int out0, int out1, int out2, int k0, int k1, int k2,  \
        int s0, int s1, int s2, int pad0, int pad1, int pad2, int dil0, int dil1, int dil2

// A grid-stride loop over [0, n) in 32-bit arithmetic (n < 2**31: the step cannot wrap).
#define SINGA_FOR32(i, n)                                                                \
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

// The window whose tap i covers input cell z on one axis, or -1. Most strides are 1.
__device__ __forceinline__ int singa_conv_window(int z, int i, int s, int pad, int dil, int out) {
    const int q = z + pad - i * dil;
    if (q < 0) return -1;
    const int o = s == 1 ? q : q / s;
    return (o * s == q && o < out) ? o : -1;
}

// col[e] for every entry e of the column matrix, in its memory order (coalesced stores); each
// a copy of one input cell or a zero of the padding, so the matrix is bitwise the strided-view
// copy it replaces.
template <typename T>
__global__ void singa_im2col(const T* __restrict__ x, T* __restrict__ col, int flags, int groups,
                             int cg, int batch, SINGA_CONV_PARAMS) {
    const unsigned taps = k0 * k1 * k2;
    const unsigned K = cg * taps;
    const unsigned windows = out0 * out1 * out2;
    const unsigned R = batch * windows;
    const unsigned plane = size0 * size1 * size2;
    const unsigned channels = groups * cg;
    SINGA_FOR32(e, groups * K * R) {
        unsigned g, k, r;
        if (flags & SINGA_COLS_K_MAJOR) {
            r = e % R;
            k = (e / R) % K;
            g = e / R / K;
        } else {
            k = e % K;
            r = (e / K) % R;
            g = e / K / R;
        }
        unsigned c, tap;
        if (flags & SINGA_COLS_CHANNEL_FIRST) {
            c = k / taps;
            tap = k % taps;
        } else {
            c = k % cg;
            tap = k / cg;
        }
        const int i2 = tap % k2, i1 = (tap / k2) % k1, i0 = tap / k2 / k1;
        const unsigned w = r % windows, image = r / windows;
        const int o2 = w % out2, o1 = (w / out2) % out1, o0 = w / out2 / out1;
        const int z0 = o0 * s0 - pad0 + i0 * dil0;
        const int z1 = o1 * s1 - pad1 + i1 * dil1;
        const int z2 = o2 * s2 - pad2 + i2 * dil2;
        T v = T(0);
        if (z0 >= 0 && z0 < size0 && z1 >= 0 && z1 < size1 && z2 >= 0 && z2 < size2) {
            v = x[(image * channels + g * cg + c) * plane + (z0 * size1 + z1) * size2 + z2];
        }
        col[e] = v;
    }
}

// The adjoint of im2col as a gather: each input cell x[n, c, z] (NCHW order, coalesced stores)
// is the sum of the column entries of the windows that read it, added to zero in tap order
// (axis 0 outermost): the order in which the plain path's loop over taps adds one strided view
// per tap into a zero array, so every sum rounds as there. No atomics: deterministic. Cells of
// the (cropped) output no window reads are zero.
template <typename T>
__global__ void singa_col2im(const T* __restrict__ col, T* __restrict__ x, int flags, int groups,
                             int cg, int batch, SINGA_CONV_PARAMS) {
    const unsigned taps = k0 * k1 * k2;
    const unsigned K = cg * taps;
    const unsigned windows = out0 * out1 * out2;
    const unsigned R = batch * windows;
    const unsigned plane = size0 * size1 * size2;
    const unsigned channels = groups * cg;
    const bool channel_first = flags & SINGA_COLS_CHANNEL_FIRST;
    SINGA_FOR32(e, batch * channels * plane) {
        const unsigned cell = e % plane, ch = (e / plane) % channels, image = e / plane / channels;
        const int z2 = cell % size2, z1 = (cell / size2) % size1, z0 = cell / size2 / size1;
        const unsigned g = ch / cg, c = ch % cg;
        const T* cols = col + g * K * R + image * windows;  // group g, image's first window
        T acc = T(0);
        unsigned tap = 0;
        for (int i0 = 0; i0 < k0; ++i0) {
            const int w0 = singa_conv_window(z0, i0, s0, pad0, dil0, out0);
            for (int i1 = 0; i1 < k1; ++i1) {
                const int w1 = singa_conv_window(z1, i1, s1, pad1, dil1, out1);
                for (int i2 = 0; i2 < k2; ++i2, ++tap) {
                    const int w2 = singa_conv_window(z2, i2, s2, pad2, dil2, out2);
                    if (w0 < 0 || w1 < 0 || w2 < 0) continue;
                    const unsigned k = channel_first ? c * taps + tap : tap * cg + c;
                    acc = singa_add(acc, cols[k * R + (w0 * out1 + w1) * out2 + w2]);
                }
            }
        }
        x[e] = acc;
    }
}
