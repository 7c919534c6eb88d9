// Softmax cross-entropy against class labels, fused: one block per row of the (N, C) logits
// for the forward, one thread per element for the backward. The arithmetic per element is
// that of ops/loss.py (z = x - max, e = exp(z), p = e / sum(e), loss = log(sum(e)) - z[t]);
// only the order in which a row's exponentials are summed differs from CuPy's sum.

// NaN-propagating maximum (a NaN logit makes the row's loss NaN, as xp.max does).
template <typename T> __device__ __forceinline__ T singa_max_nan(T a, T b) {
    return (b > a || b != b) ? b : a;
}

// The max (or the sum) of v over the block, in the same order every run; every thread gets
// it. blockDim.x is a multiple of 32, at most 1024.
template <typename T, bool MAX>
__device__ __forceinline__ T singa_block_reduce(T v, T* shared) {
    for (int offset = 16; offset > 0; offset >>= 1) {
        const T u = __shfl_xor_sync(0xffffffffu, v, offset);
        v = MAX ? singa_max_nan(v, u) : singa_add(v, u);
    }
    __syncthreads();  // the previous reduction's reads of shared are done
    if ((threadIdx.x & 31) == 0) shared[threadIdx.x >> 5] = v;
    __syncthreads();
    v = shared[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) v = MAX ? singa_max_nan(v, shared[w]) : singa_add(v, shared[w]);
    return v;
}

// p: the row's softmax; loss: log(sum(exp(z))) - z[t] per row, NaN for a label outside
// [0, C) (the op's deferred label check reports it).
template <typename T, typename L>
__global__ void singa_softmax_ce_fwd(const T* __restrict__ x, const L* __restrict__ labels,
                                     T* __restrict__ p, T* __restrict__ loss, int C,
                                     long long rows) {
    __shared__ T shared[32];
    for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* xr = x + row * C;
        T* pr = p + row * C;
        T mx = -singa_inf<T>();
        for (int j = threadIdx.x; j < C; j += blockDim.x) mx = singa_max_nan(mx, xr[j]);
        mx = singa_block_reduce<T, true>(mx, shared);
        T s = T(0);
        for (int j = threadIdx.x; j < C; j += blockDim.x) s = singa_add(s, singa_exp(singa_sub(xr[j], mx)));
        s = singa_block_reduce<T, false>(s, shared);
        for (int j = threadIdx.x; j < C; j += blockDim.x) pr[j] = singa_div(singa_exp(singa_sub(xr[j], mx)), s);
        if (threadIdx.x == 0) {
            const long long t = (long long)labels[row];
            const T zt = (t >= 0 && t < C) ? singa_sub(xr[t], mx) : singa_nan<T>();
            loss[row] = singa_sub(singa_log(s), zt);
        }
    }
}

// dx = p * scale, minus scale at the label, with scale = dy / rows (dy: the loss's one-element
// gradient; the wrapper passes a ready scale and rows = 1 when dy has another dtype).
template <typename T, typename L>
__global__ void singa_softmax_ce_bwd(const T* __restrict__ p, const L* __restrict__ labels,
                                     const T* __restrict__ dy, T rows, T* __restrict__ dx, int C,
                                     long long n) {
    const T scale = singa_div(dy[0], rows);  // (dy / N).astype(p.dtype)
    SINGA_FOR(i, n) {
        const long long row = i / C;
        const T v = singa_mul(p[i], scale);  // dx = p * scale
        dx[i] = (long long)labels[row] == i - row * C ? singa_sub(v, scale) : v;  // dx[n, t] -= scale
    }
}
