// Bias add and activation in one pass, forward and backward, as ops/fused.py computes them on
// the plain path. x is seen as (outer, C, inner) with the bias along C. The arithmetic per
// element is the plain path's, in its order (z = x + b; relu: max(z, 0); sigmoid:
// 1 / (exp(min(-z, cap)) + 1); tanh; gelu: z * ((erf(z / sqrt 2) + 1) * 0.5)); gelu's erf is
// CUDA's where the plain path has its own rational approximation, and db is summed in another
// order than xp.sum's. Index arithmetic is 32-bit: the wrappers launch these only for fewer
// than 2**31 elements.

#define SINGA_ACT_IDENTITY 0
#define SINGA_ACT_RELU 1
#define SINGA_ACT_SIGMOID 2
#define SINGA_ACT_TANH 3
#define SINGA_ACT_GELU 4

#define SINGA_ACT_BLOCK 256  // threads per block of the backward: 32 x 8

__device__ __forceinline__ float singa_tanh(float a) { return tanhf(a); }
__device__ __forceinline__ double singa_tanh(double a) { return tanh(a); }
__device__ __forceinline__ float singa_erf(float a) { return erff(a); }
__device__ __forceinline__ double singa_erf(double a) { return erf(a); }

#define SINGA_INV_SQRT2 0.70710678118654757
#define SINGA_INV_SQRT_2PI 0.3989422804014327
#define SINGA_GELU_BOUND 40.0  // gelu's derivative: x^2 stays finite in every dtype

// act(z); cap = log(max of T) - 1 keeps sigmoid's exp finite.
template <typename T> __device__ __forceinline__ T singa_activate(T z, int act, T cap) {
    switch (act) {
        case SINGA_ACT_RELU: return (z > T(0) || z != z) ? z : T(0);  // maximum(z, 0): NaN stays
        case SINGA_ACT_SIGMOID: {
            T u = -z;
            u = u > cap ? cap : u;  // minimum(-z, cap): NaN stays
            return singa_div(T(1), singa_add(singa_exp(u), T(1)));
        }
        case SINGA_ACT_TANH: return singa_tanh(z);
        case SINGA_ACT_GELU: {
            const T cdf = singa_add(singa_erf(singa_mul(z, T(SINGA_INV_SQRT2))), T(1));
            return singa_mul(z, singa_mul(cdf, T(0.5)));
        }
        default: return z;
    }
}

// dz from dy and the saved s: the output y for relu, sigmoid and tanh; the input x for gelu
// (z = x + bias again, rounding as in the forward).
template <typename T> __device__ __forceinline__ T singa_activation_grad(T dy, T s, T bias, int act) {
    switch (act) {
        case SINGA_ACT_RELU: return singa_mul(dy, T(s > T(0)));  // dy * (y > 0)
        case SINGA_ACT_SIGMOID: return singa_mul(singa_mul(singa_sub(T(1), s), s), dy);
        case SINGA_ACT_TANH: return singa_mul(singa_sub(T(1), singa_mul(s, s)), dy);
        case SINGA_ACT_GELU: {
            const T z = singa_add(s, bias);
            const T zc = z < T(-SINGA_GELU_BOUND) ? T(-SINGA_GELU_BOUND)
                                                  : (z > T(SINGA_GELU_BOUND) ? T(SINGA_GELU_BOUND) : z);
            T cdf = singa_add(singa_erf(singa_mul(z, T(SINGA_INV_SQRT2))), T(1));
            cdf = singa_mul(cdf, T(0.5));
            T g = singa_mul(singa_mul(zc, zc), T(-0.5));                // g = zc * zc; g *= -0.5
            g = singa_mul(singa_exp(g), singa_mul(T(SINGA_INV_SQRT_2PI), zc));  // exp; *= zc / sqrt(2 pi)
            return singa_mul(singa_add(g, cdf), dy);                    // g += cdf; g *= dy
        }
        default: return dy;
    }
}

// y = act(x + b[c]), one thread per element.
template <typename T>
__global__ void singa_bias_act_fwd(const T* __restrict__ x, const T* __restrict__ b,
                                   T* __restrict__ y, int act, T cap, int C, unsigned inner,
                                   unsigned n) {
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const unsigned c = (inner == 1 ? i : i / inner) % C;
        y[i] = singa_activate(singa_add(x[i], b[c]), act, cap);
    }
}

// dx (unless null) and db's partial sums, one block of 32 x 8 threads per tile of channels and
// chunk of the batch: blockIdx.x is the tile, blockIdx.y the chunk, whose sums go to
// db[blockIdx.y * C + c] (null: no db). inner == 1 (a Dense layer's (N, C)): a tile is 32
// channels, lane x one channel, lanes y rows chunk * blockIdx.y + y, + 8, ... of it (warps read
// 32 neighbours). inner > 1: a tile is one channel, the 256 threads walk its elements of the
// chunk in memory order. The partial sums are added in a fixed tree: deterministic.
template <typename T>
__global__ void singa_bias_act_bwd(const T* __restrict__ dy, const T* __restrict__ s,
                                   const T* __restrict__ b, T* __restrict__ dx, T* __restrict__ db,
                                   int act, int C, unsigned inner, unsigned outer, unsigned chunk) {
    __shared__ T partial[SINGA_ACT_BLOCK];
    const unsigned t = threadIdx.y * 32 + threadIdx.x;
    T acc = T(0);
    if (inner == 1) {
        const unsigned c = blockIdx.x * 32 + threadIdx.x;
        const unsigned end = min(outer, (blockIdx.y + 1) * chunk);
        if (c < (unsigned)C) {
            const T bias = b[c];
            for (unsigned row = blockIdx.y * chunk + threadIdx.y; row < end; row += 8) {
                const unsigned i = row * C + c;
                const T g = singa_activation_grad(dy[i], s[i], bias, act);
                if (dx != nullptr) dx[i] = g;
                acc = singa_add(acc, g);
            }
        }
    } else {
        const unsigned c = blockIdx.x;
        const T bias = b[c];
        const unsigned end = min(outer * inner, (blockIdx.y + 1) * chunk);
        for (unsigned j = blockIdx.y * chunk + t; j < end; j += SINGA_ACT_BLOCK) {
            const unsigned o = j / inner;
            const unsigned i = (o * C + c) * inner + (j - o * inner);
            const T g = singa_activation_grad(dy[i], s[i], bias, act);
            if (dx != nullptr) dx[i] = g;
            acc = singa_add(acc, g);
        }
    }
    if (db == nullptr) return;  // the same for the whole block
    partial[t] = acc;
    __syncthreads();
    // inner == 1: add the 8 rows of each lane; else all 256 threads' sums
    const unsigned last = inner == 1 ? 32 : 1;
    for (unsigned half = SINGA_ACT_BLOCK / 2; half >= last; half >>= 1) {
        if (t < half) partial[t] = singa_add(partial[t], partial[t + half]);
        __syncthreads();
    }
    if (inner == 1) {
        const unsigned c = blockIdx.x * 32 + t;
        if (t < 32 && c < (unsigned)C) db[blockIdx.y * C + c] = partial[t];
    } else if (t == 0) {
        db[blockIdx.y * C + blockIdx.x] = partial[0];
    }
}

// db[c]: the chunks' partial sums added in chunk order.
template <typename T>
__global__ void singa_bias_grad_sum(const T* __restrict__ partial, T* __restrict__ db, int C,
                                    int chunks) {
    for (unsigned c = blockIdx.x * blockDim.x + threadIdx.x; c < (unsigned)C; c += gridDim.x * blockDim.x) {
        T acc = partial[c];
        for (int k = 1; k < chunks; ++k) acc = singa_add(acc, partial[(unsigned)k * C + c]);
        db[c] = acc;
    }
}
